#include "gpueval/run_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "common/byte_amount.h"
#include "common/file_io.h"
#include "common/yaml_json.h"
#include "evaluation/lm_eval_tasks.h"
#include "gpueval/error.h"
#include "gpueval/task.h"
#include "run/batch_probe.h"
#include "run/devices.h"
#include "sandbox/sandbox.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

// A run config is a page of keys; anything bigger is the wrong file.
constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;

const std::vector<std::string> kKeys = {"model",
                                        "tasks",
                                        "batch_size",
                                        "batch_tokens",
                                        "dtype",
                                        "seed",
                                        "output",
                                        "limit",
                                        "num_fewshot",
                                        "fewshot_seed",
                                        "extra_metrics",
                                        "max_length",
                                        "add_bos",
                                        "prefix_reuse",
                                        "group_continuations",
                                        "data",
                                        "gpus",
                                        "cpu_threads",
                                        "max_attempts",
                                        "heartbeat_timeout_s",
                                        "max_worker_restarts",
                                        "max_memory",
                                        "calibration_cache",
                                        "history",
                                        "fail_on_regression",
                                        "load",
                                        "tensorboard",
                                        "code_execution",
                                        "apply_chat_template",
                                        "chat_template",
                                        "fewshot_as_multiturn",
                                        "system_instruction",
                                        "chat_template_args",
                                        "think_end_token",
                                        "lm_eval"};

const std::vector<std::string> kDtypes = {"auto", "float32", "bfloat16", "float16"};

// The value checks below are shared by the file and the flags. Each returns "" when the value is
// fine, or the problem phrased to follow "key 'x' " (file) or "--flag: " (command line).

std::string batch_size_problem(const std::string& value) {
  if (value == "auto") return "";
  int64_t n = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (!value.empty() && value[0] != '-' && ec == std::errc() && ptr == end && n > 0) return "";
  return fmt::format("must be 'auto' or a positive integer, got '{}'", value);
}

std::string add_bos_problem(const std::string& value) {
  if (value == "auto" || value == "true" || value == "false") return "";
  return fmt::format("must be auto, true or false, got '{}'", value);
}

// "true"/"on" or "false"/"off" into *out; "" when fine.
std::string switch_problem(const std::string& value, bool* out) {
  if (value == "true" || value == "on") {
    *out = true;
    return "";
  }
  if (value == "false" || value == "off") {
    *out = false;
    return "";
  }
  return fmt::format("must be true/on or false/off, got '{}'", value);
}

std::string dtype_problem(const std::string& value) {
  if (std::find(kDtypes.begin(), kDtypes.end(), value) != kDtypes.end()) return "";
  return fmt::format("must be one of auto, float32, bfloat16, float16, got '{}'", value);
}

std::string min_problem(int64_t value, int64_t min_value) {
  if (value >= min_value) return "";
  if (min_value == 1) return fmt::format("must be a positive integer, got {}", value);
  if (min_value == 0) return fmt::format("must be a non-negative integer, got {}", value);
  return fmt::format("must be at least {}, got {}", min_value, value);
}

// Checks the form only: a share ("0.5") is resolved against the memory available at run time.
// "" when `text` is a finite number >= 0.
std::string points_problem(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value < 0)
    return fmt::format("must be a number of points >= 0, got '{}'", text);
  return "";
}

std::string max_memory_problem(const std::string& value) {
  try {
    parse_memory_amount(value, int64_t{1} << 40, "");
  } catch (const Error& e) {
    std::string m = e.what();
    return m.compare(0, 2, ": ") == 0 ? m.substr(2) : m;
  }
  return "";
}

std::string path_problem(const std::string& value) { return value.empty() ? "must not be empty" : ""; }

// Lower-case, '-' read as '_': how a slip of the keyboard is compared with the real keys.
std::string fold(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c == '-') c = '_';
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known key closest to `key`, if one is close enough to be what was meant.
std::string did_you_mean(const std::string& key) {
  const std::string folded = fold(key);
  std::string best;
  size_t best_distance = std::string::npos;
  for (const std::string& known : kKeys) {
    size_t d = edit_distance(folded, known);
    // A key inside a real one ("fewshot") or around one ("output_dir") is a guess worth offering too.
    if ((folded.size() >= 4 && known.find(folded) != std::string::npos) ||
        (known.size() >= 4 && folded.find(known) != std::string::npos))
      d = std::min<size_t>(d, 1);
    if (d < best_distance) {
      best_distance = d;
      best = known;
    }
  }
  const size_t allowed = folded.size() <= 4 ? 1 : folded.size() <= 8 ? 2 : 3;
  return best_distance <= allowed ? best : "";
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The chat keys that mean nothing alone (lm-eval refuses --fewshot_as_multiturn without
// --apply_chat_template too).
void check_chat_keys(const RunConfig& c, const std::string& where) {
  if (c.chat()) {
    if (!c.apply_chat_template->empty() && !c.chat_template.empty())
      fail(where,
           "apply_chat_template names the checkpoint's template '{}' and chat_template gives a file: "
           "use one (apply_chat_template: true with chat_template: FILE)",
           *c.apply_chat_template);
    return;
  }
  const char* alone = c.fewshot_as_multiturn.value_or(false) ? "fewshot_as_multiturn: true"
                      : !c.chat_template.empty()             ? "chat_template"
                      : !c.chat_template_args.empty()        ? "chat_template_args"
                                                             : nullptr;
  if (alone) fail(where, "{} needs apply_chat_template (true or a template name)", alone);
}

// Reads one YAML document into a RunConfig, naming the file and line in every error.
class ConfigReader {
 public:
  ConfigReader(std::string source, fs::path base_dir) : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  RunConfig read(const YAML::Node& root) {
    if (root.IsNull()) fail(source_, "the file is empty; a run config needs at least 'model' and 'tasks'");
    if (!root.IsMap()) fail(at(root), "expected a mapping of keys (model: ..., tasks: ...), got {}", describe(root));
    RunConfig config;
    config.source = source_;
    std::map<std::string, int> seen_on_line;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key_node = it->first;
      const YAML::Node value = it->second;
      if (!key_node.IsScalar()) fail(at(key_node), "keys must be plain names, got {}", describe(key_node));
      const std::string key = key_node.Scalar();
      const int line = key_node.Mark().line + 1;
      if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
        const std::string guess = did_you_mean(key);
        if (guess.empty()) fail(at(key_node), "unknown key '{}' (known keys: {})", key, known_keys());
        fail(at(key_node), "unknown key '{}' (did you mean '{}'?)", key, guess);
      }
      auto [previous, inserted] = seen_on_line.emplace(key, line);
      if (!inserted) fail(at(key_node), "key '{}' appears twice (first on line {})", key, previous->second);
      key_line_ = key_node.Mark();
      read_key(config, key, value);
    }
    if (!seen_on_line.count("model"))
      fail(source_, "missing required key 'model' (a checkpoint directory or a list of them)");
    if (!seen_on_line.count("tasks"))
      fail(source_, "missing required key 'tasks' (a list of task names or task YAML files)");
    check_chat_keys(config, source_);
    return config;
  }

 private:
  // Every key is known by now (read() checked it); each group reads its own keys.
  void read_key(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (read_inputs(c, key, v) || read_batching(c, key, v) || read_workers(c, key, v) || read_chat(c, key, v)) return;
    read_outputs(c, key, v);
  }

  // The prompt format of instruct checkpoints: lm-eval's chat options.
  bool read_chat(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (key == "apply_chat_template") {
      const std::string value = scalar(key, v, "true, false or the name of one of the checkpoint's chat templates");
      bool on = false;
      if (v.Tag() != "!" && switch_problem(value, &on).empty()) {
        if (on)
          c.apply_chat_template = "";
        else
          c.apply_chat_template.reset();
      } else {
        if (value.empty()) check(key, v, "must be true, false or a template name, got an empty name");
        c.apply_chat_template = value;
      }
    } else if (key == "chat_template") {
      if (!v.IsNull()) c.chat_template = path(key, v, "a chat template file (Jinja)");
    } else if (key == "fewshot_as_multiturn") {
      if (v.IsNull()) return true;
      bool on = false;
      check(key, v, switch_problem(scalar(key, v, "true or false"), &on));
      c.fewshot_as_multiturn = on;
    } else if (key == "system_instruction") {
      if (!v.IsNull()) c.system_instruction = scalar(key, v, "a text");
    } else if (key == "chat_template_args") {
      if (v.IsNull()) return true;
      if (!v.IsMap())
        fail(at(v),
             "key 'chat_template_args' must be a mapping of keywords for the chat template "
             "(e.g. enable_thinking: false), got {}",
             describe(v));
      c.chat_template_args = nlohmann::json(yaml_to_json(v, source_));
    } else if (key == "think_end_token") {
      if (v.IsNull()) return true;
      c.think_end_token = scalar(key, v, "the text that ends a reasoning model's thinking (</think>)");
      int64_t id = 0;
      const char* end = c.think_end_token.data() + c.think_end_token.size();
      if (v.Tag() != "!" && !c.think_end_token.empty() && std::from_chars(c.think_end_token.data(), end, id).ptr == end)
        fail(at(v),
             "key 'think_end_token' is a token id; gpueval takes the token's text (think_end_token: \"</think>\")");
      if (c.think_end_token.empty()) check(key, v, "must not be empty");
    } else {
      return false;
    }
    return true;
  }

  // What is scored: the checkpoints, the tasks and their documents, examples and data roots.
  bool read_inputs(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (key == "model") {
      c.models = path_list(key, v, "a checkpoint path or a list of them", "model", "a path",
                           [&](const std::string& p) { return resolve(p); });
    } else if (key == "tasks") {
      c.tasks = path_list(key, v, "a list of task names or task YAML files", "task", "a task name or path",
                          [&](const std::string& t) {
                            if (is_lm_eval_task(t)) {
                              check(key, v, lm_eval_task_problem(t));
                              return t;
                            }
                            return looks_like_task_path(t) ? resolve(t) : t;
                          });
    } else if (key == "seed") {
      c.seed = unsigned_integer(key, v);
    } else if (key == "fewshot_seed") {
      c.fewshot_seed = unsigned_integer(key, v);
    } else if (key == "limit") {
      if (!v.IsNull()) c.limit = integer(key, v, 1);
    } else if (key == "num_fewshot") {
      if (!v.IsNull()) c.num_fewshot = integer(key, v, 0);
    } else if (key == "data") {
      read_data(c, v);
    } else if (key == "extra_metrics") {
      read_extra_metrics(c, key, v);
    } else if (key == "lm_eval") {
      read_lm_eval(c, v);
    } else {
      return false;
    }
    return true;
  }

  void read_lm_eval(RunConfig& c, const YAML::Node& v) {
    if (v.IsNull()) return;
    if (!v.IsMap())
      fail(at(v),
           "key 'lm_eval' must be a mapping (python, include_path, include_defaults, confirm_run_unsafe_code), got {}",
           describe(v));
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string name = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const std::string key = "lm_eval." + name;
      const YAML::Node value = it->second;  // a copy: it->second is a member of a temporary
      if (name == "python") {
        // A command name is looked up on PATH when the run starts; a path is the file's.
        const std::string text = scalar(key, value, "a Python interpreter (a path, or a name on PATH)");
        check(key, value, path_problem(text));
        c.lm_eval.python = text.find('/') == std::string::npos ? text : resolve(text);
      } else if (name == "include_path") {
        c.lm_eval.include_path = path(key, value, "a directory of lm-eval task files");
      } else if (name == "include_defaults") {
        check(key, value, switch_problem(scalar(key, value, "true or false"), &c.lm_eval.include_defaults));
      } else if (name == "confirm_run_unsafe_code") {
        check(key, value, switch_problem(scalar(key, value, "true or false"), &c.lm_eval.confirm_run_unsafe_code));
      } else {
        fail(at(it->first),
             "unknown key 'lm_eval.{}' (known: python, include_path, include_defaults, confirm_run_unsafe_code)", name);
      }
    }
  }

  void read_extra_metrics(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (!v.IsSequence()) fail(at(v), "key '{}' must be a list of metric names (e.g. [bpb]), got {}", key, describe(v));
    c.extra_metrics.clear();
    for (const YAML::Node& item : v) {
      if (!item.IsScalar()) fail(at(item), "key '{}': entries must be metric names, got {}", key, describe(item));
      const std::string name = item.Scalar();
      if (!builtin_metric(name)) fail(at(item), "key '{}': unknown metric '{}'", key, name);
      if (name == "pass_at_k" || name == "maj_at_k") {
        fail(at(item), "key '{}': {} needs k and the task's repeats; list it in the task file's metric_list", key,
             name);
      }
      if (name == "pass_at_1")
        fail(at(item), "key '{}': pass_at_1 runs the model's programs; list it in a code task file's metric_list", key);
      if (std::find(c.extra_metrics.begin(), c.extra_metrics.end(), name) == c.extra_metrics.end()) {
        c.extra_metrics.push_back(name);
      }
    }
  }

  void read_data(RunConfig& c, const YAML::Node& v) {
    if (v.IsNull()) return;
    if (!v.IsMap()) fail(at(v), "key 'data' must be a mapping of data root names to directories, got {}", describe(v));
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!it->first.IsScalar() || it->first.Scalar().empty())
        fail(at(it->first), "key 'data': names must be plain text, got {}", describe(it->first));
      const std::string name = it->first.Scalar();
      c.data[name] = path("data." + name, it->second, "a directory path");
    }
  }

  // How requests become batches: sizes, precision, context and prefixes, memory for probing.
  bool read_batching(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (key == "batch_size") {
      c.batch_size = scalar(key, v, "'auto' or a positive integer");
      check(key, v, batch_size_problem(c.batch_size));
    } else if (key == "batch_tokens") {
      c.batch_tokens = integer(key, v, 0);
    } else if (key == "dtype") {
      c.dtype = scalar(key, v, "one of auto, float32, bfloat16, float16");
      check(key, v, dtype_problem(c.dtype));
    } else if (key == "load") {
      c.load = scalar(key, v, "mmap or broadcast");
      if (c.load != "mmap" && c.load != "broadcast")
        check(key, v, fmt::format("must be mmap or broadcast, got '{}'", c.load));
    } else if (key == "max_length") {
      if (!v.IsNull()) c.max_length = integer(key, v, 1);
    } else if (key == "add_bos") {
      c.add_bos = scalar(key, v, "auto, true or false");
      check(key, v, add_bos_problem(c.add_bos));
    } else if (key == "prefix_reuse") {
      check(key, v, switch_problem(scalar(key, v, "true or false"), &c.prefix_reuse));
    } else if (key == "group_continuations") {
      check(key, v, switch_problem(scalar(key, v, "true or false"), &c.group_continuations));
    } else if (key == "max_memory") {
      if (v.IsNull()) return true;
      c.max_memory = scalar(key, v, "an amount such as 6GiB or a share such as 0.5");
      check(key, v, max_memory_problem(c.max_memory));
    } else {
      return false;
    }
    return true;
  }

  // Where the work runs and how the scheduler treats workers that fail.
  bool read_workers(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (key == "gpus") {
      if (v.IsNull()) return true;
      c.gpus = scalar(key, v, "a device spec such as 0-3, all or cpu:N");
      check_device_spec_syntax(c.gpus, at(v) + ": key 'gpus'");
    } else if (key == "cpu_threads") {
      c.cpu_threads = integer(key, v, 1);
    } else if (key == "max_attempts") {
      c.max_attempts = integer(key, v, 1);
    } else if (key == "heartbeat_timeout_s") {
      c.heartbeat_timeout_s = seconds(key, v);
    } else if (key == "max_worker_restarts") {
      c.max_worker_restarts = integer(key, v, 0);
    } else if (key == "code_execution") {
      read_code_execution(c, v);
    } else {
      return false;
    }
    return true;
  }

  void read_code_execution(RunConfig& c, const YAML::Node& v) {
    if (v.IsNull()) return;
    if (!v.IsMap())
      fail(at(v),
           "key 'code_execution' must be a mapping (max_sandboxes, cpu_seconds, wall_seconds, memory, "
           "max_subprocesses, unsafe_no_sandbox), got {}",
           describe(v));
    RunConfig::CodeExecution& e = c.code_execution;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string name = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const std::string key = "code_execution." + name;
      const YAML::Node value = it->second;  // a copy: it->second is a member of a temporary
      if (name == "max_sandboxes") {
        e.max_sandboxes = integer(key, value, 1);
      } else if (name == "cpu_seconds") {
        e.cpu_seconds = seconds(key, value);
      } else if (name == "wall_seconds") {
        e.wall_seconds = seconds(key, value);
      } else if (name == "memory") {
        const std::string text = scalar(key, value, "an amount such as 2GiB");
        const std::optional<int64_t> bytes =
            parse_byte_amount(text, int64_t{64} << 20, at(value) + ": key '" + key + "'");
        if (!bytes) fail(at(value), "key '{}' must be an amount such as 2GiB, got {}", key, describe(value));
        e.memory = *bytes;
      } else if (name == "max_subprocesses") {
        e.max_subprocesses = integer(key, value, 1);
      } else if (name == "unsafe_no_sandbox") {
        check(key, value, switch_problem(scalar(key, value, "true or false"), &e.unsafe_no_sandbox));
      } else {
        fail(at(it->first),
             "unknown key 'code_execution.{}' (known: max_sandboxes, cpu_seconds, wall_seconds, "
             "memory, max_subprocesses, unsafe_no_sandbox)",
             name);
      }
    }
    SandboxLimits limits;
    limits.cpu_seconds = e.cpu_seconds;
    limits.wall_seconds = e.wall_seconds;
    limits.memory = e.memory;
    limits.max_subprocesses = static_cast<int>(std::min<int64_t>(e.max_subprocesses, 1 << 20));
    check_sandbox_limits(limits, at(v) + ": key 'code_execution'");
  }

  // What the run writes and keeps: the output directory, the calibration cache, the history.
  void read_outputs(RunConfig& c, const std::string& key, const YAML::Node& v) {
    if (key == "output") {
      c.output = path(key, v, "a directory path");
    } else if (key == "calibration_cache") {
      if (!v.IsNull()) c.calibration_cache = path(key, v, "a file path");
    } else if (key == "history") {
      if (!v.IsNull()) c.history = path(key, v, "a file path");
    } else if (key == "tensorboard") {
      if (!v.IsNull()) c.tensorboard = path(key, v, "a directory path");
    } else if (key == "fail_on_regression") {
      if (!v.IsNull()) c.fail_on_regression = points(key, v);
    }
  }

  // A path, relative to the config's directory unless absolute.
  std::string path(const std::string& key, const YAML::Node& v, const char* expected) const {
    const std::string value = scalar(key, v, expected);
    check(key, v, path_problem(value));
    return resolve(value);
  }

  // A drop in points: a number >= 0.
  double points(const std::string& key, const YAML::Node& v) const {
    constexpr const char* kExpected = "a number of points >= 0 (2 = two percentage points of accuracy)";
    if (!v.IsScalar() || v.Tag() == "!" || v.Scalar().empty())
      fail(at(v), "key '{}' must be {}, got {}", key, kExpected, describe(v));
    const std::string problem = points_problem(v.Scalar());
    if (!problem.empty()) fail(at(v), "key '{}' must be {}, got {}", key, kExpected, describe(v));
    return std::strtod(v.Scalar().c_str(), nullptr);
  }

  // "file:line" for a node. An empty value (`limit:`) is marked where the next token starts, often
  // the next line, so it takes its key's line instead.
  std::string at(const YAML::Node& node) const {
    const YAML::Mark& m = node.IsNull() || node.Mark().is_null() ? key_line_ : node.Mark();
    if (m.is_null()) return source_;
    return fmt::format("{}:{}", source_, m.line + 1);
  }

  static std::string describe(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Null: return "nothing (null)";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Scalar:
        if (node.Tag() == "!") return fmt::format("the quoted string \"{}\"", node.Scalar());
        return fmt::format("'{}'", node.Scalar());
      default: return "an undefined value";
    }
  }

  void check(const std::string& key, const YAML::Node& v, const std::string& problem) const {
    if (!problem.empty()) fail(at(v), "key '{}' {}", key, problem);
  }

  // Any scalar, quoted or not: `dtype: float16` and `dtype: "float16"` mean the same.
  std::string scalar(const std::string& key, const YAML::Node& v, const char* expected) const {
    if (!v.IsScalar()) fail(at(v), "key '{}' must be {}, got {}", key, expected, describe(v));
    return v.Scalar();
  }

  // An unquoted decimal integer: a quoted "10" is a string, and a string is not a count.
  int64_t integer(const std::string& key, const YAML::Node& v, int64_t min_value) const {
    const char* expected = min_value >= 1 ? "a positive integer" : "a non-negative integer";
    if (!v.IsScalar() || v.Tag() == "!") fail(at(v), "key '{}' must be {}, got {}", key, expected, describe(v));
    std::string text = v.Scalar();
    if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.erase(0, 1);
    int64_t n = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, n);
    if (ec == std::errc::result_out_of_range) fail(at(v), "key '{}' is out of range: {}", key, v.Scalar());
    if (text.empty() || ec != std::errc() || ptr != end)
      fail(at(v), "key '{}' must be {}, got {}", key, expected, describe(v));
    check(key, v, min_problem(n, min_value));
    return n;
  }

  uint64_t unsigned_integer(const std::string& key, const YAML::Node& v) const {
    constexpr const char* kExpected = "a non-negative integer below 2^64";
    if (!v.IsScalar() || v.Tag() == "!") fail(at(v), "key '{}' must be {}, got {}", key, kExpected, describe(v));
    std::string text = v.Scalar();
    if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.erase(0, 1);
    uint64_t n = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, n);
    if (text.empty() || ec != std::errc() || ptr != end)
      fail(at(v), "key '{}' must be {}, got {}", key, kExpected, describe(v));
    return n;
  }

  double seconds(const std::string& key, const YAML::Node& v) const {
    constexpr const char* kExpected = "a positive number of seconds";
    if (!v.IsScalar() || v.Tag() == "!" || v.Scalar().empty())
      fail(at(v), "key '{}' must be {}, got {}", key, kExpected, describe(v));
    const std::string& text = v.Scalar();
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(value) || !(value > 0))
      fail(at(v), "key '{}' must be {}, got {}", key, kExpected, describe(v));
    return value;
  }

  // One scalar or a non-empty list of them, each mapped through `convert`, no entry twice.
  template <typename Convert>
  std::vector<std::string> path_list(const std::string& key, const YAML::Node& v, const char* expected,
                                     const char* noun, const char* entry, Convert convert) const {
    std::vector<YAML::Node> items;
    if (v.IsScalar()) {
      items.push_back(v);
    } else if (v.IsSequence()) {
      for (const YAML::Node& item : v) items.push_back(item);
      if (items.empty()) fail(at(v), "key '{}' must list at least one {}", key, noun);
    } else {
      fail(at(v), "key '{}' must be {}, got {}", key, expected, describe(v));
    }
    std::vector<std::string> out;
    for (const YAML::Node& item : items) {
      if (!item.IsScalar()) fail(at(item), "key '{}': each entry must be {}, got {}", key, entry, describe(item));
      if (item.Scalar().empty()) fail(at(item), "key '{}' has an empty {} entry", key, noun);
      std::string value = convert(item.Scalar());
      if (std::find(out.begin(), out.end(), value) != out.end())
        fail(at(item), "key '{}' lists '{}' twice", key, item.Scalar());
      out.push_back(std::move(value));
    }
    return out;
  }

  std::string resolve(const std::string& path) const {
    fs::path p(path);
    if (p.is_absolute()) return strip_trailing_slashes(p.lexically_normal().string());
    return strip_trailing_slashes((base_dir_ / p).lexically_normal().string());
  }

  static std::string known_keys() {
    std::string out;
    for (const std::string& k : kKeys) out += (out.empty() ? "" : ", ") + k;
    return out;
  }

  std::string source_;
  fs::path base_dir_;
  YAML::Mark key_line_ = YAML::Mark::null_mark();  // the key being read, for values without a mark
};

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

nlohmann::json RunConfig::to_json() const {
  auto optional = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json out{
      {"source", source},
      {"models", models},
      {"tasks", tasks},
      {"batch_size", batch_size},
      {"batch_tokens", batch_tokens},
      {"dtype", dtype},
      {"load", load},
      {"seed", seed},
      {"fewshot_seed", fewshot_seed},
      {"output", output},
      {"limit", optional(limit)},
      {"num_fewshot", optional(num_fewshot)},
      {"max_length", optional(max_length)},
      {"add_bos", add_bos},
      {"prefix_reuse", prefix_reuse},
      {"group_continuations", group_continuations},
      {"data", data},
      {"gpus", gpus},
      {"cpu_threads", cpu_threads},
      {"max_attempts", max_attempts},
      {"heartbeat_timeout_s", heartbeat_timeout_s},
      {"max_worker_restarts", max_worker_restarts},
      {"max_memory", max_memory},
      {"calibration_cache", calibration_cache},
      {"history", history},
      {"fail_on_regression", fail_on_regression ? nlohmann::json(*fail_on_regression) : nlohmann::json()},
  };
  // Only when set: results.json of runs without it stay as they were.
  if (!extra_metrics.empty()) out["extra_metrics"] = extra_metrics;
  if (!tensorboard.empty()) out["tensorboard"] = tensorboard;
  if (!code_execution.is_default()) out["code_execution"] = code_execution.to_json();
  if (apply_chat_template)
    out["apply_chat_template"] =
        apply_chat_template->empty() ? nlohmann::json(true) : nlohmann::json(*apply_chat_template);
  if (!chat_template.empty()) out["chat_template"] = chat_template;
  if (fewshot_as_multiturn) out["fewshot_as_multiturn"] = *fewshot_as_multiturn;
  if (!system_instruction.empty()) out["system_instruction"] = system_instruction;
  if (!chat_template_args.empty()) out["chat_template_args"] = chat_template_args;
  if (!think_end_token.empty()) out["think_end_token"] = think_end_token;
  if (!lm_eval.is_default()) out["lm_eval"] = lm_eval.to_json();
  return out;
}

nlohmann::json RunConfig::LmEval::to_json() const {
  return {{"python", python},
          {"include_path", include_path},
          {"include_defaults", include_defaults},
          {"confirm_run_unsafe_code", confirm_run_unsafe_code}};
}

bool RunConfig::CodeExecution::is_default() const { return to_json() == CodeExecution().to_json(); }

nlohmann::json RunConfig::CodeExecution::to_json() const {
  return {{"max_sandboxes", max_sandboxes},       {"cpu_seconds", cpu_seconds},
          {"wall_seconds", wall_seconds},         {"memory", byte_amount_str(memory)},
          {"max_subprocesses", max_subprocesses}, {"unsafe_no_sandbox", unsafe_no_sandbox}};
}

RunConfig load_run_config(const std::string& path) {
  const std::string text = io::read_file(path, kMaxConfigBytes);
  if (const size_t second = yaml_second_document_line(text); second > 0)
    fail(fmt::format("{}:{}", path, second), "a second YAML document (after '---'); a run config is one document");
  const YAML::Node document = parse_yaml(text, path);
  // Canonical makes the paths in the file absolute and independent of symlinks on the way to it;
  // the file was just read, so its directory exists and only an odd permission can stop that.
  const fs::path directory = fs::absolute(fs::path(path)).parent_path();
  std::error_code ignored;
  fs::path base_dir = fs::canonical(directory, ignored);
  if (base_dir.empty()) base_dir = directory.lexically_normal();
  ConfigReader reader(path, base_dir);
  try {
    return reader.read(document);
  } catch (const YAML::Exception& e) {
    fail(path, "{}", one_line(e.what()));
  }
}

namespace {

// to_json()'s fields as a file's keys: `models` is `model`; unset optionals (null) and unset
// strings ("") are left out, as a file leaves them out.
nlohmann::json file_keys(const nlohmann::json& j) {
  nlohmann::json file = nlohmann::json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "source" || it.value().is_null() ||
        (it.value().is_string() && it.value().get<std::string>().empty()))
      continue;
    file[it.key() == "models" ? "model" : it.key()] = it.value();
  }
  return file;
}

}  // namespace

nlohmann::json run_config_file(const RunConfig& config) { return file_keys(config.to_json()); }

RunConfig run_config_from_json(const nlohmann::json& j, const std::string& source, const std::string& base_dir) {
  if (!j.is_object()) fail(source, "a run config must be an object, got {}", j.type_name());
  ConfigReader reader(source, fs::path(base_dir));
  try {
    const YAML::Node root = YAML::Load(file_keys(j).dump());
    return reader.read(root);
  } catch (const YAML::Exception& e) {
    fail(source, "{}", one_line(e.what()));
  }
}

RunConfig with_absolute_paths(const RunConfig& config) {
  RunConfig c = run_config_from_json(config.to_json(), config.source, fs::current_path().string());
  c.source = config.source;
  return c;
}

void apply_overrides(RunConfig& config, const ConfigOverrides& overrides) {
  auto check = [](const char* flag, const std::string& problem) {
    if (!problem.empty()) fail(flag, "{}", problem);
  };
  RunConfig c = config;
  if (overrides.model) {
    if (overrides.model->empty()) fail("--model", "must name at least one checkpoint");
    for (const std::string& m : *overrides.model) check("--model", path_problem(m));
    c.models = *overrides.model;
  }
  if (overrides.tasks) {
    if (overrides.tasks->empty()) fail("--tasks", "must list at least one task");
    std::vector<std::string> tasks;
    for (const std::string& task : *overrides.tasks) {
      if (task.empty()) fail("--tasks", "has an empty task entry");
      if (is_lm_eval_task(task) && !lm_eval_task_problem(task).empty())
        fail("--tasks", "{}", lm_eval_task_problem(task));
      if (std::find(tasks.begin(), tasks.end(), task) != tasks.end()) fail("--tasks", "lists '{}' twice", task);
      tasks.push_back(task);
    }
    c.tasks = std::move(tasks);
  }
  if (overrides.output) {
    check("--output", path_problem(*overrides.output));
    c.output = *overrides.output;
  }
  if (overrides.batch_size) {
    check("--batch-size", batch_size_problem(*overrides.batch_size));
    c.batch_size = *overrides.batch_size;
  }
  if (overrides.batch_tokens) {
    check("--batch-tokens", min_problem(*overrides.batch_tokens, 1));
    c.batch_tokens = *overrides.batch_tokens;
  }
  if (overrides.gpus) {
    check_device_spec_syntax(*overrides.gpus, "--gpus " + (overrides.gpus->empty() ? "''" : *overrides.gpus));
    c.gpus = *overrides.gpus;
  }
  if (overrides.limit) {
    check("--limit", min_problem(*overrides.limit, 1));
    c.limit = overrides.limit;
  }
  if (overrides.num_fewshot) {
    check("--num-fewshot", min_problem(*overrides.num_fewshot, 0));
    c.num_fewshot = overrides.num_fewshot;
  }
  if (overrides.seed) c.seed = *overrides.seed;
  if (overrides.dtype) {
    check("--dtype", dtype_problem(*overrides.dtype));
    c.dtype = *overrides.dtype;
  }
  if (overrides.max_length) {
    check("--max-length", min_problem(*overrides.max_length, 1));
    c.max_length = overrides.max_length;
  }
  if (overrides.cpu_threads) {
    check("--cpu-threads", min_problem(*overrides.cpu_threads, 1));
    c.cpu_threads = *overrides.cpu_threads;
  }
  if (overrides.max_sandboxes) {
    if (*overrides.max_sandboxes < 1) fail("--max-sandboxes", "must be at least 1, got {}", *overrides.max_sandboxes);
    c.code_execution.max_sandboxes = *overrides.max_sandboxes;
  }
  if (overrides.unsafe_no_sandbox) c.code_execution.unsafe_no_sandbox = true;
  if (overrides.max_memory) {
    check("--max-memory", max_memory_problem(*overrides.max_memory));
    c.max_memory = *overrides.max_memory;
  }
  if (overrides.history) {
    check("--history", path_problem(*overrides.history));
    c.history = *overrides.history;
  }
  if (overrides.tensorboard) {
    check("--tensorboard", path_problem(*overrides.tensorboard));
    c.tensorboard = *overrides.tensorboard;
  }
  if (overrides.fail_on_regression) {
    if (!std::isfinite(*overrides.fail_on_regression) || *overrides.fail_on_regression < 0)
      fail("--fail-on-regression", "must be a number of points >= 0, got {}", *overrides.fail_on_regression);
    c.fail_on_regression = overrides.fail_on_regression;
  }
  if (overrides.add_bos) {
    check("--add-bos", add_bos_problem(*overrides.add_bos));
    c.add_bos = *overrides.add_bos;
  }
  if (overrides.prefix_reuse) check("--prefix-reuse", switch_problem(*overrides.prefix_reuse, &c.prefix_reuse));
  if (overrides.group_continuations)
    check("--group-continuations", switch_problem(*overrides.group_continuations, &c.group_continuations));
  for (const std::string& entry : overrides.data) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size())
      fail("--data " + entry, "must be NAME=PATH (e.g. --data mmlu=../shared/data/mmlu)");
    c.data[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (overrides.apply_chat_template) c.apply_chat_template = *overrides.apply_chat_template;
  if (overrides.chat_template) {
    check("--chat-template", path_problem(*overrides.chat_template));
    c.chat_template = *overrides.chat_template;
  }
  if (overrides.fewshot_as_multiturn) {
    bool on = false;
    check("--fewshot-as-multiturn", switch_problem(*overrides.fewshot_as_multiturn, &on));
    c.fewshot_as_multiturn = on;
  }
  if (overrides.system_instruction) c.system_instruction = *overrides.system_instruction;
  if (overrides.think_end_token) {
    if (overrides.think_end_token->empty()) fail("--think-end-token", "must not be empty");
    c.think_end_token = *overrides.think_end_token;
  }
  check_chat_keys(c, "the command line");
  config = std::move(c);
}

bool resolve_add_bos(const std::string& add_bos, bool tokenizer_adds_bos) {
  const std::string problem = add_bos_problem(add_bos);
  if (!problem.empty()) fail("add_bos", "{}", problem);
  if (add_bos == "auto") return tokenizer_adds_bos;
  return add_bos == "true";
}

}  // namespace gpueval
