// Loading a task: its YAML definition, its JSONL or CSV documents and its few-shot examples. What a loaded task does with a
// document (requests, metrics) is in task_requests.cpp.
#include "gpueval/task.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <yaml-cpp/yaml.h>

#include "common/file_io.h"
#include "common/strict_json.h"
#include "common/strings.h"
#include "common/utf8.h"
#include "common/yaml_json.h"
#include "gpueval/error.h"
#include "gpueval/filters.h"
#include "gpueval/process_docs.h"
#include "tasks/csv.h"
#include "tasks/hellaswag_text.h"
#include "tasks/python_random.h"

namespace gpueval {
namespace {

// lm-eval's TaskConfig fields in declaration order: the order results.json "configs" uses.
const std::vector<std::string>& task_config_order() {
  static const std::vector<std::string> kOrder = {
      "task", "task_alias", "tag", "custom_dataset", "dataset_path", "dataset_name", "dataset_kwargs",
      "training_split", "validation_split", "test_split", "fewshot_split", "process_docs", "doc_to_text",
      "doc_to_target", "doc_to_image", "doc_to_audio", "unsafe_code", "doc_to_choice", "process_results",
      "use_prompt", "description", "target_delimiter", "fewshot_delimiter", "fewshot_config", "num_fewshot",
      "metric_list", "output_type", "generation_kwargs", "repeats", "filter_list", "should_decontaminate",
      "doc_to_decontamination_query", "gen_prefix", "metadata",
      // gpueval's dataset keys (task.h), after lm-eval's.
      "dataset_kind", "column_names", "data_root", "fewshot_path"};
  return kOrder;
}

// TaskConfig keys that change what lm-eval computes and that gpueval does not implement yet:
// rejected, so a task never silently scores differently from lm-eval.
const std::set<std::string>& unsupported_keys() {
  static const std::set<std::string> kKeys = {
      "custom_dataset", "doc_to_image", "doc_to_audio", "process_results", "use_prompt",
      "gen_prefix", "group", "include", "class"};
  return kKeys;
}

// Keys that only describe the task (dataset splits and names matter to Hugging Face datasets,
// not to a local JSONL file): kept in the config as written.
const std::set<std::string>& descriptive_keys() {
  static const std::set<std::string> kKeys = {"task_alias",       "tag",        "dataset_name",  "dataset_kwargs",
                                              "training_split",   "validation_split", "test_split", "fewshot_split",
                                              "should_decontaminate", "doc_to_decontamination_query", "metadata"};
  return kKeys;
}

std::optional<OutputType> parse_output_type(const std::string& s) {
  for (const OutputType t : {OutputType::kMultipleChoice, OutputType::kLoglikelihood,
                             OutputType::kLoglikelihoodRolling, OutputType::kGenerateUntil}) {
    if (s == output_type_name(t)) return t;
  }
  return std::nullopt;
}

// The metrics lm-eval's process_results computes for each output type, in its order.
const std::vector<std::string>& metrics_for(OutputType type) {
  static const std::vector<std::string> kChoice = {"acc", "acc_norm", "acc_bytes", "exact_match"};
  static const std::vector<std::string> kLoglikelihood = {"perplexity", "acc"};
  static const std::vector<std::string> kRolling = {"word_perplexity", "byte_perplexity", "bits_per_byte"};
  static const std::vector<std::string> kGenerate = {"exact_match"};
  switch (type) {
    case OutputType::kMultipleChoice: return kChoice;
    case OutputType::kLoglikelihood: return kLoglikelihood;
    case OutputType::kLoglikelihoodRolling: return kRolling;
    case OutputType::kGenerateUntil: return kGenerate;
  }
  return kGenerate;
}

// lm-eval's DEFAULT_METRIC_REGISTRY: the metrics of a task without metric_list.
std::vector<std::string> default_metrics(OutputType type) {
  switch (type) {
    case OutputType::kMultipleChoice: return {"acc", "acc_norm"};
    case OutputType::kLoglikelihood: return {"perplexity", "acc"};
    case OutputType::kLoglikelihoodRolling: return {"word_perplexity", "byte_perplexity", "bits_per_byte"};
    case OutputType::kGenerateUntil: return {"exact_match"};
  }
  return {};
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string scalar_string(const YAML::Node& value, const std::string& key, const std::string& where) {
  if (!value.IsScalar()) fail(where, "{} must be a string", key);
  const std::string& tag = value.Tag();
  if (tag != "?" && tag != "!" && tag != "tag:yaml.org,2002:str") {
    fail(where, "{}: tag '{}' is not supported (gpueval runs no Python)", key, tag);
  }
  return value.Scalar();
}

std::optional<Task::DatasetKind> parse_dataset_kind(const std::string& s) {
  if (s == "jsonl") return Task::DatasetKind::kJsonl;
  if (s == "csv") return Task::DatasetKind::kCsv;
  if (s == "hellaswag_text") return Task::DatasetKind::kHellaswagText;
  if (s == "text") return Task::DatasetKind::kText;
  return std::nullopt;
}

nlohmann::ordered_json metric_entry(const std::string& name, const MetricSpec& spec) {
  nlohmann::ordered_json entry;
  entry["metric"] = name;
  entry["aggregation"] = aggregation_name(spec.aggregation);
  entry["higher_is_better"] = spec.higher_is_better;
  return entry;
}

}  // namespace

const char* output_type_name(OutputType type) {
  switch (type) {
    case OutputType::kMultipleChoice: return "multiple_choice";
    case OutputType::kLoglikelihood: return "loglikelihood";
    case OutputType::kLoglikelihoodRolling: return "loglikelihood_rolling";
    case OutputType::kGenerateUntil: return "generate_until";
  }
  return "?";
}

Task Task::load(const std::string& name_or_path, const std::vector<std::string>& search_dirs,
                const TaskLoadOptions& options) {
  const bool is_path =
      looks_like_task_path(name_or_path);
  if (is_path) {
    if (!io::path_exists(name_or_path)) fail(name_or_path, "task file not found");
    Task task = parse(name_or_path, options);
    task.load_documents();
    return task;
  }
  if (const auto path = find_task_file(name_or_path, search_dirs)) {
    Task task = parse(*path, options);
    if (task.name_ != name_or_path) fail(*path, "defines task '{}', not '{}'", task.name_, name_or_path);
    task.load_documents();
    return task;
  }
  fail("task '" + name_or_path + "'", "no {}.yaml in {}", name_or_path,
       search_dirs.empty() ? std::string("(no task directories)") : join(search_dirs, ", "));
}

Task Task::parse(const std::string& yaml_path, const TaskLoadOptions& options) {
  Task task;
  task.yaml_path_ = yaml_path;
  const std::string text = io::read_file(yaml_path, uint64_t{1} << 24);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(e.mark.line >= 0 ? yaml_path + ":" + std::to_string(e.mark.line + 1) : yaml_path, "invalid YAML: {}", e.msg);
  }
  if (!root.IsMap()) fail(yaml_path, "a task file must be a YAML mapping of keys to values");

  // First pass: every key known, none twice, and typed values where lm-eval types them.
  std::map<std::string, YAML::Node> values;
  for (const auto& entry : root) {
    const std::string where = yaml_where(yaml_path, entry.first);
    if (!entry.first.IsScalar()) fail(where, "keys must be plain text");
    const std::string key = entry.first.Scalar();
    if (values.count(key)) fail(where, "duplicate key '{}'", key);
    const auto& order = task_config_order();
    if (unsupported_keys().count(key)) fail(where, "key '{}' is not supported yet", key);
    if (std::find(order.begin(), order.end(), key) == order.end()) {
      fail(where, "unknown key {} (lm-evaluation-harness task keys: task, dataset_path, output_type, doc_to_text, "
           "doc_to_target, doc_to_choice, target_delimiter, description, metric_list, generation_kwargs, ...)",
           quote_untrusted(key));
    }
    values[key] = entry.second;
  }
  auto where_of = [&](const std::string& key) { return yaml_where(yaml_path, values.at(key)); };
  auto require = [&](const std::string& key) {
    if (!values.count(key)) fail(yaml_path, "missing required key '{}'", key);
  };

  nlohmann::ordered_json config;  // filled in any order; put into TaskConfig order at the end
  require("task");
  task.name_ = scalar_string(values.at("task"), "task", where_of("task"));
  if (task.name_.empty()) fail(where_of("task"), "task must not be empty");
  config["task"] = task.name_;
  task.alias_ = task.name_;
  if (values.count("task_alias")) task.alias_ = scalar_string(values.at("task_alias"), "task_alias", where_of("task_alias"));

  // Dataset files: relative to the data root when the task names one, else to the YAML file.
  std::string base_dir = io::dir_of(yaml_path);
  if (values.count("data_root")) {
    const std::string root = scalar_string(values.at("data_root"), "data_root", where_of("data_root"));
    config["data_root"] = root;
    const auto it = options.data_roots.find(root);
    if (it != options.data_roots.end()) {
      base_dir = it->second;
      if (!io::is_directory(base_dir)) {
        fail("data root '" + root + "'", "{} is not a directory (set it with --data {}=PATH or the run config's "
             "data: {{{}: PATH}})", base_dir, root, root);
      }
    } else {
      base_dir.clear();
#ifdef GPUEVAL_SOURCE_TASKS_DIR
      base_dir = std::string(GPUEVAL_SOURCE_TASKS_DIR) + "/../../shared/data/" + root;
#endif
      if (base_dir.empty() || !io::is_directory(base_dir)) {
        fail("data root '" + root + "'", "not set and no default directory {} (set it with --data {}=PATH or the run "
             "config's data: {{{}: PATH}})", base_dir, root, root);
      }
    }
  }
  auto kind_of = [&](const YAML::Node& node, const std::string& where) {
    const std::string kind = scalar_string(node, "dataset_kind", where);
    const auto parsed = parse_dataset_kind(kind);
    if (!parsed) fail(where, "dataset_kind must be jsonl, csv, hellaswag_text or text, got '{}'", kind);
    return *parsed;
  };
  DatasetKind default_kind = DatasetKind::kJsonl;
  if (values.count("dataset_kind")) {
    default_kind = kind_of(values.at("dataset_kind"), where_of("dataset_kind"));
    config["dataset_kind"] = values.at("dataset_kind").Scalar();
  }
  // A path, or a list of candidates of which the first that exists is used; a candidate may be
  // {path: FILE, dataset_kind: KIND} when the layouts differ.
  auto resolve_data = [&](const std::string& key, DatasetKind& kind) {
    const YAML::Node& node = values.at(key);
    auto full = [&](const std::string& path) { return !path.empty() && path[0] == '/' ? path : base_dir + "/" + path; };
    if (!node.IsSequence()) {
      const std::string path = scalar_string(node, key, where_of(key));
      config[key] = path;
      if (!io::path_exists(full(path))) fail(where_of(key), "{} '{}' not found ({} does not exist)", key, path, full(path));
      kind = default_kind;
      return full(path);
    }
    if (node.size() == 0) fail(where_of(key), "{} must be a path or a non-empty list of candidate paths", key);
    config[key] = yaml_to_json(node, yaml_path);
    // Every candidate is checked, not only those before the one found, so a typo never waits
    // for the day the earlier files are missing.
    std::vector<std::string> tried;
    std::optional<std::pair<std::string, DatasetKind>> found;
    for (const YAML::Node& item : node) {
      const std::string where = yaml_where(yaml_path, item);
      std::string path;
      DatasetKind item_kind = default_kind;
      if (item.IsMap()) {
        for (const auto& entry : item) {
          const std::string field = entry.first.IsScalar() ? entry.first.Scalar() : "";
          if (field == "path") {
            path = scalar_string(entry.second, key + " path", where);
          } else if (field == "dataset_kind") {
            item_kind = kind_of(entry.second, where);
          } else {
            fail(where, "a {} candidate takes path and dataset_kind, not '{}'", key, field);
          }
        }
        if (path.empty()) fail(where, "a {} candidate needs a path", key);
      } else {
        path = scalar_string(item, key + " entry", where);
      }
      if (!found && io::path_exists(full(path))) found.emplace(full(path), item_kind);
      tried.push_back(path);
    }
    if (found) {
      kind = found->second;
      return found->first;
    }
    fail(where_of(key), "{}: none of {} exists in {}", key, join(tried, ", "), base_dir.empty() ? "." : base_dir);
  };
  require("dataset_path");
  task.dataset_file_ = resolve_data("dataset_path", task.dataset_kind_);
  if (values.count("fewshot_path")) task.fewshot_file_ = resolve_data("fewshot_path", task.fewshot_kind_);
  const bool csv = task.dataset_kind_ == DatasetKind::kCsv || (!task.fewshot_file_.empty() && task.fewshot_kind_ == DatasetKind::kCsv);

  if (values.count("column_names")) {
    if (!csv) fail(where_of("column_names"), "column_names applies to dataset_kind: csv only");
    const YAML::Node& node = values.at("column_names");
    if (!node.IsSequence() || node.size() == 0) fail(where_of("column_names"), "column_names must be a non-empty list");
    for (const YAML::Node& item : node) {
      const std::string name = scalar_string(item, "column_names entry", yaml_where(yaml_path, item));
      if (std::find(task.column_names_.begin(), task.column_names_.end(), name) != task.column_names_.end()) {
        fail(yaml_where(yaml_path, item), "column '{}' is named twice", name);
      }
      task.column_names_.push_back(name);
    }
    config["column_names"] = task.column_names_;
  } else if (csv) {
    fail(yaml_path, "missing required key 'column_names' (dataset_kind: csv files have no header)");
  }

  if (values.count("process_docs")) {
    // A built-in preprocessor by name; lm-eval's `!function utils.x` fails in scalar_string.
    const std::string name = scalar_string(values.at("process_docs"), "process_docs", where_of("process_docs"));
    const auto processor = find_doc_processor(name);
    if (!processor) {
      fail(where_of("process_docs"), "unknown process_docs '{}' (built in: {})", name, join(doc_processor_names(), ", "));
    }
    task.process_docs_ = *processor;
    config["process_docs"] = name;
  }

  // lm-eval's TaskConfig default output_type is generate_until.
  std::string output_type = "generate_until";
  if (values.count("output_type")) {
    output_type = scalar_string(values.at("output_type"), "output_type", where_of("output_type"));
    const auto parsed = parse_output_type(output_type);
    if (!parsed) {
      fail(where_of("output_type"),
           "unknown output_type '{}' (expected multiple_choice, loglikelihood, loglikelihood_rolling or generate_until)",
           output_type);
    }
    task.output_type_ = *parsed;
  }
  const OutputType type = task.output_type_;

  auto load_template = [&](const std::string& key) -> std::optional<Template> {
    if (!values.count(key)) return std::nullopt;
    const std::string text = scalar_string(values.at(key), key, where_of(key));
    config[key] = text;
    return Template::parse(text, key, where_of(key));
  };
  task.doc_to_text_ = load_template("doc_to_text");
  task.doc_to_target_ = load_template("doc_to_target");
  task.description_ = load_template("description");
  if (!task.description_) config["description"] = "";

  if (values.count("doc_to_choice")) {
    const YAML::Node& node = values.at("doc_to_choice");
    if (node.IsScalar()) {
      task.doc_to_choice_ = load_template("doc_to_choice");
    } else {
      // A literal list (or a mapping, whose values lm-eval takes in order) shared by every document.
      const nlohmann::ordered_json literal = yaml_to_json(node, yaml_path);
      nlohmann::ordered_json items = literal;
      if (literal.is_object()) {
        items = nlohmann::ordered_json::array();
        for (const auto& [key, value] : literal.items()) items.push_back(value);
      }
      if (!items.is_array()) fail(where_of("doc_to_choice"), "doc_to_choice must be a template, a list or a mapping");
      std::vector<std::string> choices;
      for (const auto& item : items) {
        if (!item.is_string()) fail(where_of("doc_to_choice"), "doc_to_choice entries must be strings");
        choices.push_back(item.get<std::string>());
      }
      task.choice_list_ = std::move(choices);
      config["doc_to_choice"] = literal;
    }
  }

  switch (type) {
    case OutputType::kMultipleChoice:
      require("doc_to_text");
      require("doc_to_target");
      require("doc_to_choice");
      break;
    case OutputType::kLoglikelihood:
    case OutputType::kGenerateUntil:
      require("doc_to_text");
      require("doc_to_target");
      break;
    case OutputType::kLoglikelihoodRolling:
      if (!task.doc_to_target_ && !task.doc_to_text_) require("doc_to_target");
      break;
  }

  if (values.count("target_delimiter")) {
    task.target_delimiter_ = scalar_string(values.at("target_delimiter"), "target_delimiter", where_of("target_delimiter"));
  }
  config["target_delimiter"] = task.target_delimiter_;
  std::string fewshot_delimiter = "\n\n";
  if (values.count("fewshot_delimiter")) {
    fewshot_delimiter = scalar_string(values.at("fewshot_delimiter"), "fewshot_delimiter", where_of("fewshot_delimiter"));
  }
  config["fewshot_delimiter"] = fewshot_delimiter;
  task.fewshot_delimiter_ = fewshot_delimiter;

  task.fewshot_seed_ = options.fewshot_seed;
  if (values.count("fewshot_config")) {
    // lm-eval's samplers: default (random.sample, also without fewshot_config) and first_n.
    const YAML::Node& node = values.at("fewshot_config");
    const nlohmann::ordered_json fc = yaml_to_json(node, yaml_path);
    if (!fc.is_object()) fail(where_of("fewshot_config"), "fewshot_config must be a mapping");
    for (const auto& entry : node) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const std::string where = yaml_where(yaml_path, entry.first);
      if (key != "sampler") fail(where, "fewshot_config: only 'sampler' is supported yet, not {}", quote_untrusted(key));
      const std::string sampler = scalar_string(entry.second, "fewshot_config.sampler", where);
      if (sampler != "default" && sampler != "first_n") {
        fail(where, "fewshot_config: unknown sampler {} (lm-eval's samplers: default, first_n)", quote_untrusted(sampler));
      }
      task.fewshot_sampler_ = sampler;
    }
    config["fewshot_config"] = fc;
  }
  if (values.count("num_fewshot")) {
    const auto n = yaml_to_json(values.at("num_fewshot"), yaml_path);
    if (!n.is_number_integer() || n.get<int64_t>() < 0) fail(where_of("num_fewshot"), "num_fewshot must be an integer >= 0");
    task.num_fewshot_ = n.get<int64_t>();
  }
  if (options.num_fewshot) task.num_fewshot_ = *options.num_fewshot;
  if (task.num_fewshot_ > 0) {
    const std::string where = values.count("num_fewshot") ? where_of("num_fewshot") : yaml_path;
    if (task.fewshot_file_.empty()) {
      fail(where, "num_fewshot {} needs fewshot_path (the documents to draw examples from)", task.num_fewshot_);
    }
    if (std::filesystem::path(task.fewshot_file_).lexically_normal() ==
        std::filesystem::path(task.dataset_file_).lexically_normal()) {
      task.fewshot_from_dataset_ = true;
      task.notes_.push_back(fmt::format(
          "{}: the {} few-shot examples come from the evaluated file {} itself ({}, skipping the document being "
          "asked, lm-eval's rule when fewshot_split is the test split), so scores are not comparable to lm-eval's "
          "with a separate few-shot split",
          task.name_, task.num_fewshot_, std::filesystem::path(task.dataset_file_).lexically_normal().string(),
          task.fewshot_sampler_ == "first_n" ? "the first documents"
                                             : fmt::format("drawn at random, seed {}", task.fewshot_seed_)));
    }
  }
  config["num_fewshot"] = task.num_fewshot_;  // lm-eval's evaluator writes the number it used

  if (values.count("unsafe_code") && yaml_to_json(values.at("unsafe_code"), yaml_path) != false) {
    fail(where_of("unsafe_code"), "unsafe_code tasks are not supported");
  }
  config["unsafe_code"] = false;

  if (values.count("repeats")) {
    const auto n = yaml_to_json(values.at("repeats"), yaml_path);
    if (n != 1) fail(where_of("repeats"), "repeats other than 1 is not supported yet");
  }
  config["repeats"] = 1;

  // metric_list: entries are a metric name (gpueval's shorthand) or lm-eval's mapping
  // {metric, aggregation, higher_is_better, further options of the metric}.
  const std::vector<std::string>& allowed = metrics_for(type);
  auto add_metric = [&](const std::string& name, const YAML::Node& at) -> MetricSpec& {
    const std::string where = yaml_where(yaml_path, at);
    auto spec = builtin_metric(name);
    if (!spec) fail(where, "unknown metric '{}' (known for {}: {})", name, output_type_name(type), join(allowed, ", "));
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      fail(where, "metric '{}' does not apply to {} tasks (use {})", name, output_type_name(type), join(allowed, ", "));
    }
    for (const MetricSpec& m : task.metrics_) {
      if (m.name == name) fail(where, "metric '{}' is listed twice", name);
    }
    task.metrics_.push_back(*spec);
    return task.metrics_.back();
  };
  if (values.count("metric_list")) {
    const YAML::Node& list = values.at("metric_list");
    if (!list.IsSequence() || list.size() == 0) fail(where_of("metric_list"), "metric_list must be a non-empty list");
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const YAML::Node& item : list) {
      const std::string where = yaml_where(yaml_path, item);
      if (item.IsScalar()) {
        MetricSpec& spec = add_metric(item.Scalar(), item);
        entries.push_back(metric_entry(spec.name, spec));
        continue;
      }
      if (!item.IsMap() || !item["metric"]) fail(where, "a metric_list entry must be a name or a mapping with 'metric'");
      nlohmann::ordered_json entry = yaml_to_json(item, yaml_path);
      if (!entry["metric"].is_string()) fail(where, "metric must be a string");
      MetricSpec& spec = add_metric(entry["metric"].get<std::string>(), item);
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
        } else if (spec.name == "exact_match") {
          spec.kwargs[key] = value;
        } else {
          fail(where, "metric '{}' takes no option '{}'", spec.name, key);
        }
      }
      try {
        if (spec.name == "exact_match") exact_match("", "", spec.kwargs);
      } catch (const Error& e) {
        fail(where, "{}", e.what());
      }
      entries.push_back(entry);
    }
    config["metric_list"] = entries;
  } else {
    for (const std::string& name : default_metrics(type)) add_metric(name, root);
  }
  // lm-eval reports metrics in the order its process_results computes them, whatever the
  // order of metric_list.
  std::stable_sort(task.metrics_.begin(), task.metrics_.end(), [&](const MetricSpec& a, const MetricSpec& b) {
    return std::find(allowed.begin(), allowed.end(), a.name) < std::find(allowed.begin(), allowed.end(), b.name);
  });

  config["output_type"] = output_type;

  if (type == OutputType::kGenerateUntil) {
    nlohmann::ordered_json kwargs;
    if (values.count("generation_kwargs")) {
      kwargs = yaml_to_json(values.at("generation_kwargs"), yaml_path);
      if (!kwargs.is_object()) fail(where_of("generation_kwargs"), "generation_kwargs must be a mapping");
    } else {
      // lm-eval's TaskConfig default: greedy, stopping at the few-shot delimiter.
      kwargs["until"] = nlohmann::ordered_json::array({fewshot_delimiter});
      kwargs["do_sample"] = false;
      kwargs["temperature"] = 0;
    }
    if (!kwargs.contains("until")) kwargs["until"] = nlohmann::ordered_json::array({fewshot_delimiter});
    const std::string where = values.count("generation_kwargs") ? where_of("generation_kwargs") : yaml_path;
    for (const auto& [key, value] : kwargs.items()) {
      if (key == "until") {
        for (const auto& stop : value.is_array() ? value : nlohmann::ordered_json::array({value})) {
          if (!stop.is_string()) fail(where, "generation_kwargs.until must be a string or a list of strings");
          task.until_.push_back(stop.get<std::string>());
        }
      } else if (key == "max_gen_toks") {
        if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
          fail(where, "generation_kwargs.max_gen_toks must be a positive integer");
        }
        task.max_gen_toks_ = value.get<int64_t>();
      } else if (key == "do_sample") {
        if (value != false) fail(where, "generation_kwargs.do_sample: only greedy decoding is supported yet");
      } else if (key == "temperature") {
        if (!value.is_number() || value.get<double>() != 0.0) {
          fail(where, "generation_kwargs.temperature: only greedy decoding (0) is supported yet");
        }
      } else {
        fail(where, "generation_kwargs.{} is not supported yet", key);
      }
    }
    config["generation_kwargs"] = kwargs;
  } else if (values.count("generation_kwargs")) {
    fail(where_of("generation_kwargs"), "generation_kwargs applies to generate_until tasks only");
  }

  if (values.count("filter_list")) {
    if (type != OutputType::kGenerateUntil) {
      fail(where_of("filter_list"), "filter_list applies to generate_until tasks only (gpueval)");
    }
    task.filters_ = parse_filter_list(values.at("filter_list"), yaml_path);
    config["filter_list"] = yaml_to_json(values.at("filter_list"), yaml_path);
  } else {
    task.filters_ = {FilterPipeline::none()};
  }

  for (const std::string& key : descriptive_keys()) {
    if (values.count(key)) config[key] = yaml_to_json(values.at(key), yaml_path);
  }
  if (!config.contains("should_decontaminate")) config["should_decontaminate"] = false;
  task.version_ = nullptr;
  if (config.contains("metadata")) {
    if (!config["metadata"].is_object()) fail(where_of("metadata"), "metadata must be a mapping");
    if (config["metadata"].contains("version")) task.version_ = config["metadata"]["version"];
  }

  for (const std::string& key : task_config_order()) {
    if (config.contains(key)) task.config_[key] = config[key];
  }
  return task;
}

std::vector<Document> Task::read_documents(const std::string& file, DatasetKind kind, std::vector<int64_t>& lines) const {
  std::vector<Document> documents;
  auto add = [&](nlohmann::json fields, int64_t line) {
    if (process_docs_) fields = process_docs_(fields, file + ":" + std::to_string(line));
    documents.push_back(Document{static_cast<int64_t>(documents.size()), std::move(fields)});
    lines.push_back(line);
  };
  if (kind == DatasetKind::kCsv) {
    for (const CsvRecord& record : read_csv(file, column_names_.size())) {
      nlohmann::json fields = nlohmann::json::object();
      for (size_t i = 0; i < column_names_.size(); ++i) fields[column_names_[i]] = record.fields[i];
      add(std::move(fields), record.line);
    }
    if (documents.empty()) fail(file, "no documents");
    return documents;
  }
  if (kind == DatasetKind::kText) {
    std::string text = io::read_file(file);
    const size_t bad = utf8_invalid_offset(text);
    if (bad != text.size()) {
      const int64_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
      fail(file + ":" + std::to_string(line), "not UTF-8 text (invalid byte at offset {})", bad);
    }
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) fail(file, "no documents (the file is empty)");
    add(nlohmann::json{{"text", std::move(text)}}, 1);
    return documents;
  }
  if (kind == DatasetKind::kHellaswagText) {
    // The fields lm-eval's hellaswag process_docs gives (its text already preprocessed), with
    // label a string as in the Hugging Face copy.
    for (HellaswagRecord& record : read_hellaswag_text(file)) {
      nlohmann::json fields = {{"query", std::move(record.context)},
                               {"choices", std::move(record.endings)},
                               {"gold", record.gold},
                               {"label", std::to_string(record.gold)}};
      add(std::move(fields), record.line);
    }
    if (documents.empty()) fail(file, "no documents");
    return documents;
  }
  const std::string text = io::read_file(file);
  int64_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = file + ":" + std::to_string(line_number);
    const nlohmann::ordered_json parsed = parse_strict_json(line, where, "the line");
    if (!parsed.is_object()) fail(where, "expected a JSON object, got {}", parsed.type_name());
    add(nlohmann::json(parsed), line_number);
  }
  if (documents.empty()) fail(file, "no documents");
  return documents;
}

void Task::load_documents() {
  documents_ = read_documents(dataset_file_, dataset_kind_, lines_);
  if (num_fewshot_ > 0) {
    if (!fewshot_from_dataset_) fewshot_pool_ = read_documents(fewshot_file_, fewshot_kind_, fewshot_lines_);
    draw_fewshot();
  }
  // Render everything once, so a bad document fails the load, not the run.
  for (const Document& doc : documents_) requests(doc);
}

void Task::draw_fewshot() {
  const std::vector<Document>& pool = fewshot_pool();
  const size_t n = static_cast<size_t>(num_fewshot_);
  const bool first_n = fewshot_sampler_ == "first_n";
  // lm-eval passes the asked document to the sampler when fewshot_split is the test split
  // (here: fewshot_path is dataset_path); the default sampler then draws n + 1.
  const size_t needed = fewshot_from_dataset_ ? n + 1 : n;
  if (pool.size() < needed) {
    if (fewshot_from_dataset_) {
      fail(dataset_file_, "num_fewshot {} from the task's own {} documents needs at least {}", num_fewshot_,
           pool.size(), needed);
    }
    fail(fewshot_file_, "num_fewshot {} but only {} documents to draw examples from", num_fewshot_, pool.size());
  }
  // One generator for the task, advanced document by document in file order, as lm-eval's
  // build_all_requests calls sampler.sample() once per document (Random(fewshot_random_seed)).
  PythonRandom rnd(fewshot_seed_);
  fewshot_draws_.assign(documents_.size(), {});
  for (size_t d = 0; d < documents_.size(); ++d) {
    const Document& doc = documents_[d];
    std::vector<size_t>& out = fewshot_draws_[d];
    // lm-eval compares documents with != (dict equality), so every copy of the asked one goes.
    auto is_asked = [&](size_t k) { return fewshot_from_dataset_ && pool[k].fields == doc.fields; };
    auto too_few = [&](size_t have) {
      fail(location(doc), "only {} of the {} few-shot documents differ from this one; num_fewshot is {}", have,
           pool.size(), num_fewshot_);
    };
    if (first_n) {
      // FirstNSampler: the pool without the asked document, the first n.
      for (size_t k = 0; k < pool.size() && out.size() < n; ++k) {
        if (!is_asked(k)) out.push_back(k);
      }
      if (out.size() < n) too_few(out.size());
      continue;
    }
    // ContextSampler.sample: rnd.sample(pool, n), or with the asked document
    // rnd.sample(pool, n + 1) less its copies, the first n. lm-eval tests `not eval_doc`, so an
    // empty document counts as none.
    const bool skip = fewshot_from_dataset_ && !doc.fields.empty();
    if (!skip) {
      out = rnd.sample_indices(pool.size(), n);
      continue;
    }
    for (const size_t k : rnd.sample_indices(pool.size(), n + 1)) {
      if (!is_asked(k) && out.size() < n) out.push_back(k);
    }
    if (out.size() < n) {
      // Copies of the asked document took the headroom: lm-eval draws n again from the pool
      // without them.
      std::vector<size_t> others;
      for (size_t k = 0; k < pool.size(); ++k) {
        if (!is_asked(k)) others.push_back(k);
      }
      if (others.size() < n) too_few(others.size());
      out.clear();
      for (const size_t i : rnd.sample_indices(others.size(), n)) out.push_back(others[i]);
    }
  }
  // Render each example used once; context() joins them.
  fewshot_rendered_.assign(pool.size(), std::string());
  std::vector<bool> used(pool.size(), false);
  for (const std::vector<size_t>& draws : fewshot_draws_) {
    for (const size_t k : draws) used[k] = true;
  }
  for (size_t k = 0; k < pool.size(); ++k) {
    if (!used[k]) continue;
    const std::string where =
        fewshot_from_dataset_ ? location(pool[k]) : fewshot_file_ + ":" + std::to_string(fewshot_lines_[k]);
    fewshot_rendered_[k] = fewshot_example(pool[k], where) + fewshot_delimiter_;
  }
}

const std::vector<size_t>& Task::fewshot_indices(const Document& doc) const {
  static const std::vector<size_t> kNone;
  if (num_fewshot_ == 0) return kNone;
  if (doc.doc_id < 0 || doc.doc_id >= static_cast<int64_t>(fewshot_draws_.size())) {
    fail(location(doc), "document {} is not a document of task '{}'", doc.doc_id, name_);
  }
  return fewshot_draws_[static_cast<size_t>(doc.doc_id)];
}

std::string Task::location(const Document& doc) const {
  if (doc.doc_id < 0 || doc.doc_id >= static_cast<int64_t>(lines_.size())) {
    return dataset_file_ + ": document " + std::to_string(doc.doc_id);
  }
  return dataset_file_ + ":" + std::to_string(lines_[static_cast<size_t>(doc.doc_id)]);
}

bool looks_like_task_path(const std::string& name) {
  return name.find('/') != std::string::npos || ends_with(name, ".yaml") || ends_with(name, ".yml");
}

std::optional<std::string> find_task_file(const std::string& name, const std::vector<std::string>& search_dirs) {
  namespace fs = std::filesystem;
  for (const std::string& dir : search_dirs) {
    const std::string path = dir + "/" + name + ".yaml";
    if (io::path_exists(path)) return path;
    std::error_code ec;
    std::vector<std::string> subdirs;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_directory(ec)) subdirs.push_back(it->path().string());
    }
    std::sort(subdirs.begin(), subdirs.end());
    for (const std::string& sub : subdirs) {
      if (io::path_exists(sub + "/" + name + ".yaml")) return sub + "/" + name + ".yaml";
    }
  }
  return std::nullopt;
}

std::vector<Request> build_requests(const std::vector<const Task*>& tasks, std::optional<int64_t> limit) {
  std::vector<Request> out;
  for (const Task* task : tasks) {
    const auto& docs = task->documents();
    const size_t n = limit ? std::min(docs.size(), static_cast<size_t>(std::max<int64_t>(*limit, 0))) : docs.size();
    for (size_t i = 0; i < n; ++i) {
      for (Request& r : task->requests(docs[i])) {
        r.index = static_cast<int64_t>(out.size());
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

}  // namespace gpueval
