// Reading a task's YAML file into a Task: each key lm-eval's TaskConfig has (and gpueval's
// dataset keys) checked and typed, in the order whose first error a user sees, and the
// config results.json shows. Loading the documents is in task.cpp.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <yaml-cpp/yaml.h>

#include "common/file_io.h"
#include "common/strict_json.h"
#include "common/yaml_json.h"
#include "gpueval/error.h"
#include "gpueval/filters.h"
#include "gpueval/process_docs.h"
#include "gpueval/task.h"
#include "tasks/metric_table.h"

namespace gpueval {
namespace {

// lm-eval's TaskConfig fields in declaration order: the order results.json "configs" uses.
const std::vector<std::string>& task_config_order() {
  static const std::vector<std::string> kOrder = {
      "task", "task_alias", "tag", "custom_dataset", "dataset_path", "dataset_name", "dataset_kwargs", "training_split",
      "validation_split", "test_split", "fewshot_split", "process_docs", "doc_to_text", "doc_to_target", "doc_to_image",
      "doc_to_audio", "unsafe_code", "doc_to_choice", "process_results", "use_prompt", "description",
      "target_delimiter", "fewshot_delimiter", "fewshot_config", "num_fewshot", "metric_list", "output_type",
      "generation_kwargs", "repeats", "filter_list", "should_decontaminate", "doc_to_decontamination_query",
      "gen_prefix", "metadata",
      // gpueval's dataset keys (task.h), after lm-eval's.
      "dataset_kind", "column_names", "data_root", "fewshot_path", "document_range"};
  return kOrder;
}

// TaskConfig keys that change what lm-eval computes and that gpueval does not implement yet:
// rejected, so a task never silently scores differently from lm-eval.
const std::set<std::string>& unsupported_keys() {
  static const std::set<std::string> kKeys = {"custom_dataset", "doc_to_image", "doc_to_audio", "process_results",
                                              "use_prompt",     "gen_prefix",   "group",        "class"};
  return kKeys;
}

// Keys that only describe the task (dataset splits and names matter to Hugging Face datasets,
// not to a local JSONL file): kept in the config as written.
const std::set<std::string>& descriptive_keys() {
  static const std::set<std::string> kKeys = {
      "task_alias",       "tag",        "dataset_name",  "dataset_kwargs",       "training_split",
      "validation_split", "test_split", "fewshot_split", "should_decontaminate", "doc_to_decontamination_query",
      "metadata"};
  return kKeys;
}

std::string scalar_string(const YAML::Node& value, const std::string& key, const std::string& where) {
  if (!value.IsScalar()) fail(where, "{} must be a string", key);
  const std::string& tag = value.Tag();
  if (tag != "?" && tag != "!" && tag != "tag:yaml.org,2002:str") {
    fail(where, "{}: tag '{}' is not supported (gpueval runs no Python)", key, tag);
  }
  return value.Scalar();
}

// One task file's top-level keys, each known, supported and there once but not yet typed, and
// the config results.json shows, filled in any order as keys are read.
// A task file's top-level keys. `include: FILE` (lm-eval's; FILE relative to the including
// file) reads FILE's keys first and lets this file's override them, as lm-eval merges them;
// an error in an included value names the file and line it was written on.
class TaskYaml {
 public:
  explicit TaskYaml(const std::string& yaml_path) : path_(yaml_path) { root_ = read(yaml_path, 0); }

  const std::string& path() const { return path_; }
  const YAML::Node& root() const { return root_; }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  const YAML::Node& at(const std::string& key) const { return values_.at(key); }
  std::string where(const YAML::Node& node) const {
    for (const auto& [root, file] : included_) {
      if (holds(root, node)) return yaml_where(file, node);
    }
    return yaml_where(path_, node);
  }
  std::string where_of(const std::string& key) const { return where(at(key)); }
  void require(const std::string& key) const {
    if (!has(key)) fail(path_, "missing required key '{}'", key);
  }
  std::string string(const std::string& key) const { return scalar_string(at(key), key, where_of(key)); }
  nlohmann::ordered_json json(const YAML::Node& node) const { return yaml_to_json(node, path_); }
  nlohmann::ordered_json& config() { return config_; }

 private:
  static constexpr int kMaxIncludeDepth = 8;

  // Reads `file`'s keys into values_ over those already there (an included file's), after the
  // keys of the file it includes.
  YAML::Node read(const std::string& file, int depth) {
    const std::string text = io::read_file(file, uint64_t{1} << 24);
    YAML::Node root = parse_yaml(text, file);
    if (!root.IsMap()) fail(file, "a task file must be a YAML mapping of keys to values");
    if (depth > 0) included_.emplace_back(root, file);
    const auto& order = task_config_order();
    std::set<std::string> seen;
    for (const auto& entry : root) {
      const std::string at = yaml_where(file, entry.first);
      if (!entry.first.IsScalar()) fail(at, "keys must be plain text");
      const std::string key = entry.first.Scalar();
      if (!seen.insert(key).second) fail(at, "duplicate key '{}'", key);
      if (key == "include") {
        if (!entry.second.IsScalar() || entry.second.Scalar().empty())
          fail(yaml_where(file, entry.second), "include must name a task file");
        if (depth >= kMaxIncludeDepth) fail(at, "includes nested more than {} deep", kMaxIncludeDepth);
        const std::string& name = entry.second.Scalar();
        const std::string base = name.front() == '/' ? name : io::dir_of(file) + "/" + name;
        if (!io::path_exists(base)) fail(yaml_where(file, entry.second), "included task file {} does not exist", base);
        read(base, depth + 1);
        continue;
      }
      if (unsupported_keys().count(key)) fail(at, "key '{}' is not supported yet", key);
      if (std::find(order.begin(), order.end(), key) == order.end()) {
        fail(at,
             "unknown key {} (lm-evaluation-harness task keys: task, dataset_path, output_type, doc_to_text, "
             "doc_to_target, doc_to_choice, target_delimiter, description, metric_list, generation_kwargs, ...)",
             quote_untrusted(key));
      }
    }
    for (const auto& entry : root) {
      if (entry.first.Scalar() != "include") values_[entry.first.Scalar()] = entry.second;
    }
    return root;
  }

  // Whether `node` is `tree` or inside it.
  static bool holds(const YAML::Node& tree, const YAML::Node& node) {
    if (tree.is(node)) return true;
    if (tree.IsMap()) {
      for (const auto& entry : tree) {
        if (holds(entry.first, node) || holds(entry.second, node)) return true;
      }
    } else if (tree.IsSequence()) {
      for (const auto& item : tree) {
        if (holds(item, node)) return true;
      }
    }
    return false;
  }

  std::string path_;
  YAML::Node root_;
  std::map<std::string, YAML::Node> values_;
  std::vector<std::pair<YAML::Node, std::string>> included_;  // the included files' roots and paths
  nlohmann::ordered_json config_;
};

// data_root: the directory the run set for it; without one, the YAML file's own directory.
std::string read_data_dir(TaskYaml& yaml, const TaskLoadOptions& options) {
  if (!yaml.has("data_root")) return io::dir_of(yaml.path());
  const std::string root = yaml.string("data_root");
  yaml.config()["data_root"] = root;
  const auto it = options.data_roots.find(root);
  if (it == options.data_roots.end()) {
    fail("data root '" + root + "'", "not set (set it with --data {}=PATH or the run config's data: {{{}: PATH}})",
         root, root);
  }
  if (!io::is_directory(it->second)) {
    fail("data root '" + root + "'",
         "{} is not a directory (set it with --data {}=PATH or the run config's "
         "data: {{{}: PATH}})",
         it->second, root, root);
  }
  return it->second;
}

Task::DatasetKind read_dataset_kind(const YAML::Node& node, const std::string& where) {
  const std::string kind = scalar_string(node, "dataset_kind", where);
  if (kind == "jsonl") return Task::DatasetKind::kJsonl;
  if (kind == "csv") return Task::DatasetKind::kCsv;
  if (kind == "hellaswag_text") return Task::DatasetKind::kHellaswagText;
  if (kind == "text") return Task::DatasetKind::kText;
  fail(where, "dataset_kind must be jsonl, csv, hellaswag_text or text, got '{}'", kind);
}

// The task's dataset_kind: that of dataset_path and fewshot_path unless a candidate says otherwise.
Task::DatasetKind read_default_dataset_kind(TaskYaml& yaml) {
  if (!yaml.has("dataset_kind")) return Task::DatasetKind::kJsonl;
  const Task::DatasetKind kind = read_dataset_kind(yaml.at("dataset_kind"), yaml.where_of("dataset_kind"));
  yaml.config()["dataset_kind"] = yaml.at("dataset_kind").Scalar();
  return kind;
}

struct DataFile {
  std::string path;  // as written in the task file
  Task::DatasetKind kind = Task::DatasetKind::kJsonl;
};

std::string in_dir(const std::string& dir, const std::string& path) {
  return !path.empty() && path[0] == '/' ? path : dir + "/" + path;
}

// One entry of a dataset_path or fewshot_path list: a path, or {path: FILE, dataset_kind: KIND}.
DataFile read_candidate(const TaskYaml& yaml, const std::string& key, const YAML::Node& item,
                        Task::DatasetKind default_kind) {
  const std::string where = yaml.where(item);
  DataFile candidate{"", default_kind};
  if (!item.IsMap()) {
    candidate.path = scalar_string(item, key + " entry", where);
    return candidate;
  }
  for (const auto& entry : item) {
    const std::string field = entry.first.IsScalar() ? entry.first.Scalar() : "";
    if (field == "path") {
      candidate.path = scalar_string(entry.second, key + " path", where);
    } else if (field == "dataset_kind") {
      candidate.kind = read_dataset_kind(entry.second, where);
    } else {
      fail(where, "a {} candidate takes path and dataset_kind, not '{}'", key, field);
    }
  }
  if (candidate.path.empty()) fail(where, "a {} candidate needs a path", key);
  return candidate;
}

// dataset_path or fewshot_path, resolved in `dir`: a path, or a list of candidates of which the
// first that exists is used. The result's path is the full one.
DataFile read_data_file(TaskYaml& yaml, const std::string& key, const std::string& dir,
                        Task::DatasetKind default_kind) {
  const YAML::Node& node = yaml.at(key);
  if (!node.IsSequence()) {
    const std::string path = yaml.string(key);
    yaml.config()[key] = path;
    if (!io::path_exists(in_dir(dir, path))) {
      fail(yaml.where_of(key), "{} '{}' not found ({} does not exist)", key, path, in_dir(dir, path));
    }
    return DataFile{in_dir(dir, path), default_kind};
  }
  if (node.size() == 0) fail(yaml.where_of(key), "{} must be a path or a non-empty list of candidate paths", key);
  yaml.config()[key] = yaml.json(node);
  // Every candidate is checked, not only those before the one found, so a typo never waits
  // for the day the earlier files are missing.
  std::vector<std::string> tried;
  std::optional<DataFile> found;
  for (const YAML::Node& item : node) {
    const DataFile candidate = read_candidate(yaml, key, item, default_kind);
    if (!found && io::path_exists(in_dir(dir, candidate.path)))
      found = DataFile{in_dir(dir, candidate.path), candidate.kind};
    tried.push_back(candidate.path);
  }
  if (!found) {
    fail(yaml.where_of(key), "{}: none of {} exists in {}", key, fmt::join(tried, ", "), dir.empty() ? "." : dir);
  }
  return *found;
}

std::vector<std::string> read_column_names(TaskYaml& yaml, bool csv) {
  if (!yaml.has("column_names")) {
    if (csv) fail(yaml.path(), "missing required key 'column_names' (dataset_kind: csv files have no header)");
    return {};
  }
  if (!csv) fail(yaml.where_of("column_names"), "column_names applies to dataset_kind: csv only");
  const YAML::Node& node = yaml.at("column_names");
  if (!node.IsSequence() || node.size() == 0)
    fail(yaml.where_of("column_names"), "column_names must be a non-empty list");
  std::vector<std::string> names;
  for (const YAML::Node& item : node) {
    const std::string name = scalar_string(item, "column_names entry", yaml.where(item));
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      fail(yaml.where(item), "column '{}' is named twice", name);
    }
    names.push_back(name);
  }
  yaml.config()["column_names"] = names;
  return names;
}

// A built-in preprocessor by name; lm-eval's `!function utils.x` fails in scalar_string.
DocProcessor read_process_docs(TaskYaml& yaml) {
  if (!yaml.has("process_docs")) return nullptr;
  const std::string name = yaml.string("process_docs");
  const auto processor = find_doc_processor(name);
  if (!processor) {
    fail(yaml.where_of("process_docs"), "unknown process_docs '{}' (built in: {})", name,
         fmt::join(doc_processor_names(), ", "));
  }
  yaml.config()["process_docs"] = name;
  return *processor;
}

// document_range: {field: NAME, first: N, last: M}, the documents whose integer field lies in
// [N, M] (a split held by task ids, as MBPP's test split is task_ids 11-510 of its one file).
std::optional<Task::DocumentRange> read_document_range(TaskYaml& yaml) {
  if (!yaml.has("document_range")) return std::nullopt;
  const std::string where = yaml.where_of("document_range");
  const nlohmann::ordered_json v = yaml.json(yaml.at("document_range"));
  auto refuse = [&] {
    fail(where, "document_range must be a mapping {{field: NAME, first: N, last: M}} with integers N <= M");
  };
  if (!v.is_object() || v.size() != 3 || !v.contains("field") || !v["field"].is_string() ||
      v["field"].get_ref<const std::string&>().empty() || !v.contains("first") || !v["first"].is_number_integer() ||
      !v.contains("last") || !v["last"].is_number_integer() || v["first"].get<int64_t>() > v["last"].get<int64_t>())
    refuse();
  yaml.config()["document_range"] = v;
  return Task::DocumentRange{v["field"].get<std::string>(), v["first"].get<int64_t>(), v["last"].get<int64_t>(), where};
}

// lm-eval's TaskConfig default output_type is generate_until.
OutputType read_output_type(TaskYaml& yaml) {
  OutputType type = OutputType::kGenerateUntil;
  if (yaml.has("output_type")) {
    const std::string name = yaml.string("output_type");
    const OutputType all[] = {OutputType::kMultipleChoice, OutputType::kLoglikelihood,
                              OutputType::kLoglikelihoodRolling, OutputType::kGenerateUntil};
    const auto* it =
        std::find_if(std::begin(all), std::end(all), [&](OutputType t) { return name == output_type_name(t); });
    if (it == std::end(all)) {
      fail(
          yaml.where_of("output_type"),
          "unknown output_type '{}' (expected multiple_choice, loglikelihood, loglikelihood_rolling or generate_until)",
          name);
    }
    type = *it;
  }
  yaml.config()["output_type"] = output_type_name(type);
  return type;
}

// `key: !function <name>`: the built-in doc function (process_docs.h) standing in for lm-eval's
// Python one; nullptr when the key is absent or not tagged !function.
DocProcessor read_doc_function(TaskYaml& yaml, const std::string& key) {
  if (!yaml.has(key) || yaml.at(key).Tag() != "!function") return nullptr;
  const YAML::Node& node = yaml.at(key);
  if (!node.IsScalar()) fail(yaml.where_of(key), "{}: !function must name a function", key);
  const std::string name = node.Scalar();
  const auto function = find_doc_function(name);
  if (!function) {
    fail(yaml.where_of(key), "{}: !function {}: gpueval runs no Python; its built-in functions are {}", key, name,
         fmt::join(doc_function_names(), ", "));
  }
  yaml.config()[key] = "!function " + name;
  return *function;
}

bool is_function(TaskYaml& yaml, const std::string& key) { return yaml.has(key) && yaml.at(key).Tag() == "!function"; }

std::optional<Template> read_template(TaskYaml& yaml, const std::string& key) {
  if (!yaml.has(key) || is_function(yaml, key)) return std::nullopt;
  const std::string text = yaml.string(key);
  yaml.config()[key] = text;
  return Template::parse(text, key, yaml.where_of(key));
}

// doc_to_choice written as a literal list (or a mapping, whose values lm-eval takes in order)
// shared by every document; nullopt when the task has none or writes a template.
std::optional<std::vector<std::string>> read_choice_list(TaskYaml& yaml) {
  if (!yaml.has("doc_to_choice") || yaml.at("doc_to_choice").IsScalar() || is_function(yaml, "doc_to_choice")) {
    return std::nullopt;
  }
  const std::string where = yaml.where_of("doc_to_choice");
  const nlohmann::ordered_json literal = yaml.json(yaml.at("doc_to_choice"));
  nlohmann::ordered_json items = literal;
  if (literal.is_object()) {
    items = nlohmann::ordered_json::array();
    for (const auto& [key, value] : literal.items()) items.push_back(value);
  }
  if (!items.is_array()) fail(where, "doc_to_choice must be a template, a list or a mapping");
  std::vector<std::string> choices;
  for (const auto& item : items) {
    if (!item.is_string()) fail(where, "doc_to_choice entries must be strings");
    choices.push_back(item.get<std::string>());
  }
  yaml.config()["doc_to_choice"] = literal;
  return choices;
}

// The templates each output type needs to build its requests.
void require_prompt_keys(const TaskYaml& yaml, OutputType type) {
  switch (type) {
    case OutputType::kMultipleChoice:
      yaml.require("doc_to_text");
      yaml.require("doc_to_target");
      yaml.require("doc_to_choice");
      break;
    case OutputType::kLoglikelihood:
    case OutputType::kGenerateUntil:
      yaml.require("doc_to_text");
      yaml.require("doc_to_target");
      break;
    case OutputType::kLoglikelihoodRolling:
      if (!yaml.has("doc_to_target") && !yaml.has("doc_to_text")) yaml.require("doc_to_target");
      break;
  }
}

// target_delimiter or fewshot_delimiter, `fallback` (lm-eval's default) when absent.
std::string read_delimiter(TaskYaml& yaml, const std::string& key, const std::string& fallback) {
  const std::string delimiter = yaml.has(key) ? yaml.string(key) : fallback;
  yaml.config()[key] = delimiter;
  return delimiter;
}

// lm-eval's samplers: default (random.sample, also without fewshot_config) and first_n; and
// `samples`, a list of example documents written in the task file (gsm8k-cot's eight), which
// are the few-shot pool instead of a fewshot_path (lm-eval takes them as they are, without
// process_docs). Returns the sampler; fills `samples` and their YAML lines.
std::string read_fewshot_config(TaskYaml& yaml, std::vector<Document>& samples, std::vector<int64_t>& lines) {
  std::string sampler = "default";
  if (!yaml.has("fewshot_config")) return sampler;
  const YAML::Node& node = yaml.at("fewshot_config");
  const nlohmann::ordered_json fc = yaml.json(node);
  if (!fc.is_object()) fail(yaml.where_of("fewshot_config"), "fewshot_config must be a mapping");
  for (const auto& entry : node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const std::string where = yaml.where(entry.first);
    if (key == "samples") {
      if (!entry.second.IsSequence() || entry.second.size() == 0) {
        fail(yaml.where(entry.second),
             "fewshot_config.samples must be a non-empty list of documents (mappings); "
             "a !function is not supported");
      }
      if (yaml.has("fewshot_path")) {
        fail(where,
             "fewshot_config.samples and fewshot_path are both given (lm-eval would use the split and "
             "ignore the samples); keep one");
      }
      for (const YAML::Node& item : entry.second) {
        const nlohmann::ordered_json doc = yaml.json(item);
        if (!doc.is_object()) fail(yaml.where(item), "a fewshot_config.samples entry must be a mapping");
        samples.push_back(Document{static_cast<int64_t>(samples.size()), nlohmann::json(doc)});
        lines.push_back(static_cast<int64_t>(item.Mark().line) + 1);
      }
      continue;
    }
    if (key != "sampler") {
      fail(where, "fewshot_config: only 'sampler' and 'samples' are supported yet, not {}", quote_untrusted(key));
    }
    sampler = scalar_string(entry.second, "fewshot_config.sampler", where);
    if (sampler != "default" && sampler != "first_n") {
      fail(where, "fewshot_config: unknown sampler {} (lm-eval's samplers: default, first_n)",
           quote_untrusted(sampler));
    }
  }
  yaml.config()["fewshot_config"] = fc;
  return sampler;
}

// The task file's num_fewshot (default 0) unless the run sets one; examples need a fewshot_path
// or fewshot_config.samples.
int64_t read_num_fewshot(TaskYaml& yaml, const TaskLoadOptions& options, bool has_fewshot_source) {
  int64_t num_fewshot = 0;
  if (yaml.has("num_fewshot")) {
    const auto n = yaml.json(yaml.at("num_fewshot"));
    if (!n.is_number_integer() || n.get<int64_t>() < 0)
      fail(yaml.where_of("num_fewshot"), "num_fewshot must be an integer >= 0");
    num_fewshot = n.get<int64_t>();
  }
  if (options.num_fewshot) num_fewshot = *options.num_fewshot;
  if (num_fewshot > 0 && !has_fewshot_source) {
    fail(yaml.has("num_fewshot") ? yaml.where_of("num_fewshot") : yaml.path(),
         "num_fewshot {} needs fewshot_path or fewshot_config.samples (the documents to draw examples from)",
         num_fewshot);
  }
  yaml.config()["num_fewshot"] = num_fewshot;  // lm-eval's evaluator writes the number it used
  return num_fewshot;
}

bool same_file(const std::string& a, const std::string& b) {
  return std::filesystem::path(a).lexically_normal() == std::filesystem::path(b).lexically_normal();
}

std::string fewshot_from_dataset_note(const std::string& task, int64_t num_fewshot, const std::string& dataset_file,
                                      const std::string& sampler, uint64_t seed) {
  return fmt::format(
      "{}: the {} few-shot examples come from the evaluated file {} itself ({}, skipping the document being "
      "asked, lm-eval's rule when fewshot_split is the test split), so scores are not comparable to lm-eval's "
      "with a separate few-shot split",
      task, num_fewshot, std::filesystem::path(dataset_file).lexically_normal().string(),
      sampler == "first_n" ? "the first documents" : fmt::format("drawn at random, seed {}", seed));
}

// Far beyond OLMo 3's 8 or lm-eval's self-consistency 64; bounds the requests one task file makes.
constexpr int64_t kMaxRepeats = 1024;

// unsafe_code: true exactly when a metric runs the model's programs (in gpueval's sandbox,
// src/sandbox/), as lm-eval's code tasks say it; returns whether one does.
bool read_unsafe_code(TaskYaml& yaml, const std::vector<MetricSpec>& metrics) {
  const bool runs = std::any_of(metrics.begin(), metrics.end(), [](const MetricSpec& m) { return m.runs_programs; });
  bool unsafe = false;
  if (yaml.has("unsafe_code")) {
    const nlohmann::ordered_json v = yaml.json(yaml.at("unsafe_code"));
    if (!v.is_boolean()) fail(yaml.where_of("unsafe_code"), "unsafe_code must be true or false");
    unsafe = v.get<bool>();
  }
  if (runs && !unsafe)
    fail(yaml.where_of("metric_list"), "a metric that runs the model's programs needs unsafe_code: true in the task");
  if (unsafe && !runs)
    fail(yaml.where_of("unsafe_code"),
         "unsafe_code: true, but no metric runs programs (gpueval's that do: "
         "!function utils.pass_at_k, !function utils.pass_at_1)");
  yaml.config()["unsafe_code"] = unsafe;
  return runs;
}

// repeats: how many responses a generate_until request gets (lm-eval's Instance.repeats), each
// sampled with its own seed.
int64_t read_repeats(TaskYaml& yaml, OutputType type) {
  int64_t repeats = 1;
  if (yaml.has("repeats")) {
    const nlohmann::ordered_json v = yaml.json(yaml.at("repeats"));
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxRepeats) {
      fail(yaml.where_of("repeats"), "repeats must be an integer from 1 to {}", kMaxRepeats);
    }
    repeats = v.get<int64_t>();
    if (repeats > 1 && type != OutputType::kGenerateUntil) {
      fail(yaml.where_of("repeats"),
           "repeats {} applies to generate_until tasks only (a score does not change "
           "when it is computed again)",
           repeats);
    }
  }
  yaml.config()["repeats"] = repeats;
  return repeats;
}

MetricSpec& add_metric(std::vector<MetricSpec>& metrics, const std::string& name, OutputType type,
                       const std::string& where) {
  const std::vector<std::string> allowed = metrics_for(type);
  auto spec = builtin_metric(name);
  if (!spec)
    fail(where, "unknown metric '{}' (known for {}: {})", name, output_type_name(type), fmt::join(allowed, ", "));
  if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
    fail(where, "metric '{}' does not apply to {} tasks (use {})", name, output_type_name(type),
         fmt::join(allowed, ", "));
  }
  for (const MetricSpec& m : metrics) {
    if (m.name == name) fail(where, "metric '{}' is listed twice", name);
  }
  metrics.push_back(*spec);
  return metrics.back();
}

// The options of a metric_list mapping besides `metric`: aggregation, higher_is_better, and
// exact_match's own (checked by calling it once).
void read_metric_options(const nlohmann::ordered_json& entry, MetricSpec& spec, const std::string& where) {
  const MetricRow& row = *metric_row(spec.name);
  for (const auto& [key, value] : entry.items()) {
    if (key == "metric") continue;
    if (key == "aggregation") {
      const auto aggregation = value.is_string() ? parse_aggregation(value.get<std::string>()) : std::nullopt;
      if (!aggregation || is_weighted(*aggregation) != is_weighted(spec.aggregation)) {
        fail(where, "aggregation {} does not fit metric '{}' (its default is '{}')", value.dump(), spec.name,
             aggregation_name(spec.aggregation));
      }
      spec.aggregation = *aggregation;
    } else if (key == "higher_is_better") {
      if (!value.is_boolean()) fail(where, "higher_is_better must be true or false");
      spec.higher_is_better = value.get<bool>();
    } else if (key == "k" && row.per_k) {
      spec.kwargs[key] = value;  // read by expand_over_k()
    } else if (row.match_options) {
      spec.kwargs[key] = value;
    } else {
      fail(where, "metric '{}' takes no option '{}'", spec.name, key);
    }
  }
  try {
    nlohmann::json options = spec.kwargs;
    options.erase("k");
    if (row.match_options) exact_match("", "", options);
  } catch (const Error& e) {
    fail(where, "{}", e.what());
  }
}

nlohmann::ordered_json metric_entry(const MetricSpec& spec) {
  nlohmann::ordered_json entry;
  entry["metric"] = spec.name;
  entry["aggregation"] = aggregation_name(spec.aggregation);
  entry["higher_is_better"] = spec.higher_is_better;
  return entry;
}

// metric_list: entries are a metric name (gpueval's shorthand) or lm-eval's mapping
// {metric, aggregation, higher_is_better, further options of the metric}; without it, lm-eval's
// defaults for the output type.
// The run's extra_metrics that this output type computes and metric_list lacks, appended (and
// shown in the config's metric_list, as if the file had them).
void add_extra_metrics(TaskYaml& yaml, std::vector<MetricSpec>& metrics, const std::vector<std::string>& extra,
                       OutputType type) {
  const std::vector<std::string> computed = metrics_for(type);
  for (const std::string& name : extra) {
    if (std::find(computed.begin(), computed.end(), name) == computed.end()) continue;
    if (std::any_of(metrics.begin(), metrics.end(), [&](const MetricSpec& m) { return m.name == name; })) continue;
    const std::optional<MetricSpec> spec = builtin_metric(name);
    if (!spec) fail(yaml.path(), "unknown extra metric '{}'", name);
    metrics.push_back(*spec);
    if (yaml.config().contains("metric_list") && yaml.config()["metric_list"].is_array()) {
      yaml.config()["metric_list"].push_back(metric_entry(*spec));
    }
  }
}

// A pass_at_k / maj_at_k entry as one spec per k ("pass@1", "pass@4", ...); k (an integer or a
// list of them, default 1) must be within the task's repeats.
void expand_over_k(std::vector<MetricSpec>& metrics, int64_t repeats, const std::string& where) {
  const MetricSpec base = metrics.back();
  const MetricRow* row = metric_row(base.name);
  if (!row || !row->per_k) return;
  metrics.pop_back();
  nlohmann::json ks = base.kwargs.contains("k") ? base.kwargs.at("k") : nlohmann::json(1);
  if (!ks.is_array()) ks = nlohmann::json::array({ks});
  if (ks.empty()) fail(where, "{}: k must be an integer or a non-empty list of integers", base.name);
  for (const auto& k : ks) {
    if (!k.is_number_integer() || k.get<int64_t>() < 1 || k.get<int64_t>() > repeats) {
      fail(where, "{}: k {} must be an integer from 1 to the task's repeats ({})", base.name, k.dump(), repeats);
    }
    MetricSpec spec = base;
    spec.k = k.get<int64_t>();
    spec.kwargs.erase("k");
    spec.name = row->per_k + std::to_string(spec.k);
    for (const MetricSpec& m : metrics) {
      if (m.name == spec.name) fail(where, "metric '{}' is listed twice", spec.name);
    }
    metrics.push_back(std::move(spec));
  }
}

std::vector<MetricSpec> read_metrics(TaskYaml& yaml, OutputType type, int64_t repeats) {
  std::vector<MetricSpec> metrics;
  if (!yaml.has("metric_list")) {
    for (const std::string& name : default_metrics(type)) add_metric(metrics, name, type, yaml.where(yaml.root()));
  } else {
    const YAML::Node& list = yaml.at("metric_list");
    if (!list.IsSequence() || list.size() == 0)
      fail(yaml.where_of("metric_list"), "metric_list must be a non-empty list");
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const YAML::Node& item : list) {
      const std::string where = yaml.where(item);
      if (item.IsScalar()) {
        if (item.Scalar() == "pass_at_1")
          fail(where, "metric pass_at_1 is lm-eval's mbpp code metric: write it as !function utils.pass_at_1");
        entries.push_back(metric_entry(add_metric(metrics, item.Scalar(), type, where)));
        expand_over_k(metrics, repeats, where);
        continue;
      }
      if (!item.IsMap() || !item["metric"])
        fail(where, "a metric_list entry must be a name or a mapping with 'metric'");
      YAML::Node metric_node = item["metric"];
      const bool runs_programs = metric_node.IsScalar() && metric_node.Tag() == "!function";
      if (runs_programs) metric_node.SetTag("!");  // read as its name from here on
      nlohmann::ordered_json entry = yaml.json(item);
      if (!entry["metric"].is_string()) fail(where, "metric must be a string");
      std::string name = entry["metric"].get<std::string>();
      if (runs_programs) {
        // lm-eval's code_eval metric (humaneval's utils.pass_at_k): the unbiased pass@k over the
        // responses' programs, each run in the sandbox.
        // mbpp's utils.pass_at_1: whether the first response's program passes.
        if (name != "utils.pass_at_k" && name != "utils.pass_at_1")
          fail(where,
               "metric !function {}: gpueval runs no Python; its built-in metric functions are "
               "utils.pass_at_k (humaneval's code_eval pass@k) and utils.pass_at_1 (mbpp's)",
               name);
        name = name.substr(6);
      } else if (name == "pass_at_1") {
        fail(where, "metric pass_at_1 is lm-eval's mbpp code metric: write it as !function utils.pass_at_1");
      }
      MetricSpec& spec = add_metric(metrics, name, type, where);
      spec.runs_programs = runs_programs;
      read_metric_options(entry, spec, where);
      expand_over_k(metrics, repeats, where);
      entries.push_back(entry);
    }
    yaml.config()["metric_list"] = entries;
  }
  // lm-eval reports metrics in the order its process_results computes them, whatever the
  // order of metric_list.
  const std::vector<std::string> allowed = metrics_for(type);
  std::stable_sort(metrics.begin(), metrics.end(), [&](const MetricSpec& a, const MetricSpec& b) {
    return std::find(allowed.begin(), allowed.end(), a.name) < std::find(allowed.begin(), allowed.end(), b.name);
  });
  return metrics;
}

struct GenerationSettings {
  std::vector<std::string> until;
  std::optional<int64_t> max_gen_toks;  // nullopt: the Task's default
  // Request's sampling fields: 0 / 0 / 1 when greedy; negative: the checkpoint's (request.h).
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
};

// generation_kwargs of a generate_until task: until, max_gen_toks, and sampling as lm-eval's
// HF backend passes it to transformers' generate(): do_sample, temperature, top_k, top_p.
// Settings whose meaning differs between lm-eval's backends are refused rather than guessed:
// a temperature without do_sample (transformers would decode greedily, vLLM would sample), and
// sampling settings beside do_sample false (transformers ignores them).
GenerationSettings read_generation_kwargs(TaskYaml& yaml, OutputType type, const std::string& fewshot_delimiter) {
  const bool given = yaml.has("generation_kwargs");
  if (type != OutputType::kGenerateUntil) {
    if (given) fail(yaml.where_of("generation_kwargs"), "generation_kwargs applies to generate_until tasks only");
    return {};
  }
  nlohmann::ordered_json kwargs;
  if (given) {
    kwargs = yaml.json(yaml.at("generation_kwargs"));
    if (!kwargs.is_object()) fail(yaml.where_of("generation_kwargs"), "generation_kwargs must be a mapping");
  } else {
    // lm-eval's TaskConfig default: greedy, stopping at the few-shot delimiter.
    kwargs["until"] = nlohmann::ordered_json::array({fewshot_delimiter});
    kwargs["do_sample"] = false;
    kwargs["temperature"] = 0;
  }
  if (!kwargs.contains("until")) kwargs["until"] = nlohmann::ordered_json::array({fewshot_delimiter});
  const std::string where = given ? yaml.where_of("generation_kwargs") : yaml.path();
  GenerationSettings settings;
  for (const auto& [key, value] : kwargs.items()) {
    if (key == "until") {
      for (const auto& stop : value.is_array() ? value : nlohmann::ordered_json::array({value})) {
        if (!stop.is_string()) fail(where, "generation_kwargs.until must be a string or a list of strings");
        settings.until.push_back(stop.get<std::string>());
      }
    } else if (key == "max_gen_toks") {
      if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
        fail(where, "generation_kwargs.max_gen_toks must be a positive integer");
      }
      settings.max_gen_toks = value.get<int64_t>();
    } else if (key == "do_sample") {
      if (!value.is_boolean()) fail(where, "generation_kwargs.do_sample must be true or false");
    } else if (key == "temperature" || key == "top_p") {
      if (!value.is_number() || value.get<double>() < 0 || !std::isfinite(value.get<double>()) ||
          (key == "top_p" && value.get<double>() > 1)) {
        fail(where, "generation_kwargs.{} must be a number {}", key, key == "top_p" ? "in [0, 1]" : ">= 0");
      }
    } else if (key == "top_k") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0) {
        fail(where, "generation_kwargs.top_k must be an integer >= 0 (0: off)");
      }
    } else {
      fail(where,
           "generation_kwargs.{} is not supported yet (supported: until, max_gen_toks, do_sample, "
           "temperature, top_k, top_p)",
           key);
    }
  }
  const bool do_sample = kwargs.contains("do_sample") && kwargs["do_sample"].get<bool>();
  const std::optional<double> temperature =
      kwargs.contains("temperature") ? std::optional<double>(kwargs["temperature"].get<double>()) : std::nullopt;
  if (!do_sample) {
    if (temperature && *temperature != 0.0) {
      fail(where,
           "generation_kwargs.temperature {} without do_sample: true (lm-eval's HF backend would decode "
           "greedily and vLLM would sample); say do_sample: true to sample, or drop the temperature",
           *temperature);
    }
    for (const char* k : {"top_k", "top_p"}) {
      if (kwargs.contains(k)) {
        fail(where,
             "generation_kwargs.{} without do_sample: true (greedy decoding ignores it); say do_sample: "
             "true to sample, or drop it",
             k);
      }
    }
  } else {
    if (temperature && *temperature == 0.0) {
      fail(where,
           "generation_kwargs: do_sample true with temperature 0 (transformers refuses it); give a "
           "temperature > 0, or do_sample: false for greedy decoding");
    }
    settings.temperature = temperature ? *temperature : -1.0;
    settings.top_k = kwargs.contains("top_k") ? kwargs["top_k"].get<int64_t>() : -1;
    settings.top_p = kwargs.contains("top_p") ? kwargs["top_p"].get<double>() : -1.0;
    if (settings.top_p == 0.0) fail(where, "generation_kwargs.top_p 0 keeps no token; give a value in (0, 1]");
  }
  yaml.config()["generation_kwargs"] = kwargs;
  return settings;
}

// Every pipeline leaves what its metrics need: a response at all (take_first_k within the
// repeats), and k of them for pass@k / maj@k.
void check_filters_leave_enough(TaskYaml& yaml, const std::vector<FilterPipeline>& filters,
                                const std::vector<MetricSpec>& metrics, int64_t repeats) {
  for (const FilterPipeline& f : filters) {
    const int64_t left = f.output_count(repeats);
    const std::string where = yaml.has("filter_list") ? yaml.where_of("filter_list") : yaml.path();
    if (left == 0) fail(where, "filter '{}' keeps more responses than the task's repeats ({})", f.name(), repeats);
    for (const MetricSpec& m : metrics) {
      if (m.k > left) {
        fail(yaml.has("metric_list") ? yaml.where_of("metric_list") : where,
             "metric {} needs {} responses, but filter '{}' leaves {} of the task's {} repeats", m.name, m.k, f.name(),
             left, repeats);
      }
    }
  }
}

std::vector<FilterPipeline> read_filters(TaskYaml& yaml, OutputType type) {
  if (!yaml.has("filter_list")) return {FilterPipeline::none()};
  if (type != OutputType::kGenerateUntil) {
    fail(yaml.where_of("filter_list"), "filter_list applies to generate_until tasks only (gpueval)");
  }
  std::vector<FilterPipeline> filters = parse_filter_list(yaml.at("filter_list"), yaml.path());
  yaml.config()["filter_list"] = yaml.json(yaml.at("filter_list"));
  return filters;
}

// The keys kept as written; returns metadata.version (null without one).
nlohmann::json read_descriptive_keys(TaskYaml& yaml) {
  nlohmann::ordered_json& config = yaml.config();
  for (const std::string& key : descriptive_keys()) {
    if (yaml.has(key)) config[key] = yaml.json(yaml.at(key));
  }
  if (!config.contains("should_decontaminate")) config["should_decontaminate"] = false;
  if (!config.contains("metadata")) return nullptr;
  if (!config["metadata"].is_object()) fail(yaml.where_of("metadata"), "metadata must be a mapping");
  return config["metadata"].contains("version") ? nlohmann::json(config["metadata"]["version"]) : nlohmann::json();
}

nlohmann::ordered_json in_task_config_order(const nlohmann::ordered_json& config) {
  nlohmann::ordered_json ordered;
  for (const std::string& key : task_config_order()) {
    if (config.contains(key)) ordered[key] = config[key];
  }
  return ordered;
}

}  // namespace

Task Task::parse(const std::string& yaml_path, const TaskLoadOptions& options) {
  TaskYaml yaml(yaml_path);
  Task task;
  task.yaml_path_ = yaml_path;
  yaml.require("task");
  task.name_ = yaml.string("task");
  if (task.name_.empty()) fail(yaml.where_of("task"), "task must not be empty");
  yaml.config()["task"] = task.name_;
  task.alias_ = yaml.has("task_alias") ? yaml.string("task_alias") : task.name_;

  // Dataset files: relative to the data root when the task names one, else to the YAML file.
  const std::string data_dir = read_data_dir(yaml, options);
  const DatasetKind default_kind = read_default_dataset_kind(yaml);
  yaml.require("dataset_path");
  const DataFile dataset = read_data_file(yaml, "dataset_path", data_dir, default_kind);
  task.dataset_file_ = dataset.path;
  task.dataset_kind_ = dataset.kind;
  if (yaml.has("fewshot_path")) {
    const DataFile fewshot = read_data_file(yaml, "fewshot_path", data_dir, default_kind);
    task.fewshot_file_ = fewshot.path;
    task.fewshot_kind_ = fewshot.kind;
  }
  const bool csv = task.dataset_kind_ == DatasetKind::kCsv ||
                   (!task.fewshot_file_.empty() && task.fewshot_kind_ == DatasetKind::kCsv);
  task.column_names_ = read_column_names(yaml, csv);
  task.process_docs_ = read_process_docs(yaml);
  task.document_range_ = read_document_range(yaml);

  task.output_type_ = read_output_type(yaml);
  task.doc_to_text_ = read_template(yaml, "doc_to_text");
  task.doc_to_target_ = read_template(yaml, "doc_to_target");
  task.doc_to_text_fn_ = read_doc_function(yaml, "doc_to_text");
  task.doc_to_target_fn_ = read_doc_function(yaml, "doc_to_target");
  task.doc_to_choice_fn_ = read_doc_function(yaml, "doc_to_choice");
  task.description_ = read_template(yaml, "description");
  if (!task.description_) yaml.config()["description"] = "";
  if (yaml.has("doc_to_choice") && yaml.at("doc_to_choice").IsScalar()) {
    task.doc_to_choice_ = read_template(yaml, "doc_to_choice");
  }
  task.choice_list_ = read_choice_list(yaml);
  require_prompt_keys(yaml, task.output_type_);
  task.target_delimiter_ = read_delimiter(yaml, "target_delimiter", task.target_delimiter_);
  task.fewshot_delimiter_ = read_delimiter(yaml, "fewshot_delimiter", task.fewshot_delimiter_);

  task.fewshot_seed_ = options.fewshot_seed;
  task.prompt_ = options.prompt;
  task.fewshot_sampler_ = read_fewshot_config(yaml, task.fewshot_pool_, task.fewshot_lines_);
  if (!task.fewshot_pool_.empty()) {
    task.fewshot_inline_ = true;
    task.fewshot_file_ = yaml_path;  // examples are located by their line in the task file
  }
  task.num_fewshot_ = read_num_fewshot(yaml, options, !task.fewshot_file_.empty());
  if (task.num_fewshot_ > 0 && !task.fewshot_inline_ && same_file(task.fewshot_file_, task.dataset_file_)) {
    task.fewshot_from_dataset_ = true;
    task.notes_.push_back(fewshot_from_dataset_note(task.name_, task.num_fewshot_, task.dataset_file_,
                                                    task.fewshot_sampler_, task.fewshot_seed_));
  }
  yaml.config()["unsafe_code"] = false;  // its place in lm-eval's key order; read_unsafe_code sets it
  task.repeats_ = read_repeats(yaml, task.output_type_);

  task.metrics_ = read_metrics(yaml, task.output_type_, task.repeats_);
  task.runs_programs_ = read_unsafe_code(yaml, task.metrics_);
  add_extra_metrics(yaml, task.metrics_, options.extra_metrics, task.output_type_);
  GenerationSettings generation = read_generation_kwargs(yaml, task.output_type_, task.fewshot_delimiter_);
  task.until_ = std::move(generation.until);
  if (generation.max_gen_toks) task.max_gen_toks_ = *generation.max_gen_toks;
  task.temperature_ = generation.temperature;
  task.top_k_ = generation.top_k;
  task.top_p_ = generation.top_p;
  task.filters_ = read_filters(yaml, task.output_type_);
  check_filters_leave_enough(yaml, task.filters_, task.metrics_, task.repeats_);
  task.version_ = read_descriptive_keys(yaml);
  task.config_ = in_task_config_order(yaml.config());
  return task;
}

}  // namespace gpueval
