#include "evaluation/lm_eval_tasks.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/process.h"
#include "evaluation/request_run.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHowToSetPython =
    "lm_eval: tasks need Python with the gpueval_lm_eval package (pip install ./python); name it with the "
    "config's lm_eval: {python: PATH} or $GPUEVAL_LM_EVAL_PYTHON";

// The interpreter: the config's, else $GPUEVAL_LM_EVAL_PYTHON, else python3; a name without '/'
// is looked up on PATH as a shell would.
std::string interpreter(const RunConfig& config) {
  std::string name = config.lm_eval.python;
  const char* env = std::getenv("GPUEVAL_LM_EVAL_PYTHON");
  if (name.empty() && env && *env) name = env;
  if (name.empty()) name = "python3";
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) fail(config.source, "lm_eval.python {} is not an executable file", name);
    return name;
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && !io::is_directory(candidate)) return candidate;
  }
  fail(config.source, "{} is not on PATH; {}", name, kHowToSetPython);
}

// What of the config the bridge cannot carry to lm-eval is refused, not ignored.
void check_supported(const RunConfig& config) {
  if (!config.extra_metrics.empty())
    fail(config.source, "extra_metrics applies to gpueval's own tasks; lm_eval: tasks keep lm-eval's metric_list");
  if (!config.chat_template.empty())
    fail(config.source, "chat_template: FILE is not passed to lm_eval: tasks (lm-eval uses the checkpoint's template)");
  for (auto it = config.chat_template_args.begin(); it != config.chat_template_args.end(); ++it) {
    if (it.key() != "enable_thinking" || !it.value().is_boolean())
      fail(config.source, "chat_template_args: only enable_thinking (true or false) reaches lm_eval: tasks, not {}",
           it.key());
  }
}

std::vector<std::string> bridge_arguments(const RunConfig& config, const std::vector<std::string>& tasks,
                                          const std::string& executable, const std::string& model_dir) {
  std::string names;
  for (const std::string& t : tasks) names += (names.empty() ? "" : ",") + t;
  std::vector<std::string> args = {"--tasks", names};
  if (!config.lm_eval.include_path.empty()) args.insert(args.end(), {"--include_path", config.lm_eval.include_path});
  if (!config.lm_eval.include_defaults) args.insert(args.end(), {"--include_defaults", "false"});
  if (config.lm_eval.confirm_run_unsafe_code) args.push_back("--confirm_run_unsafe_code");
  if (config.num_fewshot) args.insert(args.end(), {"--num_fewshot", std::to_string(*config.num_fewshot)});
  if (config.limit) args.insert(args.end(), {"--limit", std::to_string(*config.limit)});
  if (config.chat()) {
    args.push_back("--apply_chat_template");
    if (!config.apply_chat_template->empty()) args.push_back(*config.apply_chat_template);
    args.insert(args.end(), {"--fewshot_as_multiturn", config.multiturn() ? "true" : "false"});
  }
  if (!config.system_instruction.empty()) args.insert(args.end(), {"--system_instruction", config.system_instruction});
  args.insert(args.end(), {"--fewshot_seed", std::to_string(config.fewshot_seed)});
  if (!config.think_end_token.empty())
    args.insert(args.end(), {"--model_arg", "think_end_token=" + config.think_end_token});
  if (config.chat_template_args.contains("enable_thinking"))
    args.insert(args.end(),
                {"--model_arg", std::string("enable_thinking=") +
                                    (config.chat_template_args["enable_thinking"].get<bool>() ? "True" : "False")});
  args.insert(args.end(), {"--model", model_dir, "--binary", executable});
  return args;
}

// A scratch folder removed when it goes out of scope.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/gpueval-lm-eval-XXXXXX";
    if (!::mkdtemp(pattern.data())) throw Error(fmt::format("lm_eval: cannot make a folder like {}", pattern));
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// Runs one step of the bridge; its output (stdout and stderr) when it fails names the problem.
void run_bridge(const std::string& python, const std::string& step, const std::vector<std::string>& args,
                const std::string& source) {
  std::vector<std::string> argv = {python, "-m", "gpueval_lm_eval.bridge", step};
  argv.insert(argv.end(), args.begin(), args.end());
  int status = -1;
  process::Capture how;
  how.keep_environment = true;
  how.with_stderr = true;
  const std::string output = process::run_and_capture(argv, status, how);
  if (status == 0) return;
  // The last line that says something: the bridge's one-line error, or Python's exception.
  std::string last;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  if (output.find("No module named gpueval_lm_eval") != std::string::npos)
    fail(source, "{} has no gpueval_lm_eval package; {}", python, kHowToSetPython);
  fail(source, "lm-eval's {} step failed (exit {}): {}", step, status, last.empty() ? "no output" : last);
}

double number(const nlohmann::ordered_json& v) { return v.get<double>(); }

// scores.json's `section` entry for `name`, or null.
nlohmann::ordered_json entry_of(const nlohmann::ordered_json& j, const char* section, const std::string& name) {
  if (!j.contains(section) || !j[section].is_object() || !j[section].contains(name)) return nullptr;
  return j[section][name];
}

// The entry's numeric "<metric>,<filter>" values, each with its "<metric>_stderr,<filter>" (a
// number, or "N/A": none), its direction and `n` documents.
std::vector<MetricResult> metrics_of(const LmEvalScores& s, int64_t n) {
  std::vector<MetricResult> out;
  for (auto m = s.result.begin(); m != s.result.end(); ++m) {
    const size_t comma = m.key().find(',');
    if (comma == std::string::npos || !m.value().is_number()) continue;
    const std::string metric = m.key().substr(0, comma), filter = m.key().substr(comma + 1);
    if (metric.size() > 7 && metric.compare(metric.size() - 7, 7, "_stderr") == 0 &&
        s.result.contains(metric.substr(0, metric.size() - 7) + "," + filter))
      continue;
    MetricResult r;
    r.name = metric;
    r.filter = filter;
    r.value = number(m.value());
    const std::string stderr_key = metric + "_stderr," + filter;
    if (s.result.contains(stderr_key) && s.result[stderr_key].is_number()) r.stderr = number(s.result[stderr_key]);
    r.higher_is_better = !(s.higher_is_better.contains(metric) && s.higher_is_better[metric].is_boolean() &&
                           !s.higher_is_better[metric].get<bool>());
    r.n = n;
    out.push_back(std::move(r));
  }
  return out;
}

// What scores.json says of the task or group `name` (one of its "results").
LmEvalScores scores_entry(const nlohmann::ordered_json& j, const std::string& name) {
  LmEvalScores s;
  s.name = name;
  s.is_group = !entry_of(j, "groups", name).is_null();
  s.result = j["results"][name];
  s.config = entry_of(j, "configs", name);
  s.version = entry_of(j, "versions", name);
  if (const auto shots = entry_of(j, "n-shot", name); shots.is_number_integer()) s.num_fewshot = shots.get<int64_t>();
  if (const auto hib = entry_of(j, "higher_is_better", name); hib.is_object()) s.higher_is_better = hib;
  s.n_samples = entry_of(j, "n-samples", name);
  if (const auto members = entry_of(j, "group_subtasks", name); members.is_array())
    for (const auto& t : members)
      if (t.is_string()) s.subtasks.push_back(t.get<std::string>());
  if (const auto hash = entry_of(j, "task_hashes", name); hash.is_string()) s.task_hash = hash.get<std::string>();
  if (const auto lines = entry_of(j, "samples", name); lines.is_string()) s.samples = lines.get<std::string>();
  int64_t n = 0;
  if (s.n_samples.is_object() && s.n_samples.contains("effective") && s.n_samples["effective"].is_number_integer())
    n = s.n_samples["effective"].get<int64_t>();
  s.metrics = metrics_of(s, n);
  return s;
}

// A group's n for each of its metrics: the documents of the tasks under it that have the metric.
void count_group_documents(const std::vector<LmEvalScores>& tasks, std::vector<LmEvalScores>& groups) {
  std::map<std::string, const LmEvalScores*> by_name;
  for (const LmEvalScores& t : tasks) by_name[t.name] = &t;
  for (const LmEvalScores& g : groups) by_name[g.name] = &g;
  std::function<int64_t(const std::string&, const std::string&, std::set<std::string>&)> count =
      [&](const std::string& name, const std::string& metric, std::set<std::string>& seen) -> int64_t {
    const auto it = by_name.find(name);
    if (!seen.insert(name).second || it == by_name.end()) return 0;
    if (!it->second->is_group) {
      for (const MetricResult& m : it->second->metrics)
        if (m.name == metric) return m.n;
      return 0;
    }
    int64_t total = 0;
    for (const std::string& member : it->second->subtasks) total += count(member, metric, seen);
    return total;
  };
  for (LmEvalScores& g : groups) {
    for (MetricResult& m : g.metrics) {
      std::set<std::string> seen;
      m.n = count(g.name, m.name, seen);
    }
  }
}

}  // namespace

bool is_lm_eval_task(const std::string& entry) { return entry.rfind(kLmEvalPrefix, 0) == 0; }

std::string lm_eval_task_problem(const std::string& entry) {
  const std::string name = entry.substr(kLmEvalPrefix.size());
  if (name.empty()) return fmt::format("has '{}' without a task name after it", entry);
  if (name.find_first_of(" \t\r\n,") != std::string::npos)
    return fmt::format("has '{}': an lm-eval task name has no spaces or commas (list each task)", entry);
  return "";
}

LmEvalRequests load_lm_eval_requests(const RunConfig& config, const std::string& executable,
                                     const std::string& model_dir) {
  LmEvalRequests out;
  for (const std::string& entry : config.tasks)
    if (is_lm_eval_task(entry)) out.tasks.push_back(entry.substr(kLmEvalPrefix.size()));
  if (out.tasks.empty()) return out;
  check_supported(config);
  out.python = interpreter(config);
  out.arguments = bridge_arguments(config, out.tasks, executable, model_dir);
  std::cerr << fmt::format("[sched] lm-eval builds the requests of {} (through {})\n", out.arguments[1], out.python);
  const ScratchDir scratch;
  std::vector<std::string> args = out.arguments;
  args.insert(args.end(), {"--out", scratch.path + "/requests.jsonl"});
  run_bridge(out.python, "requests", args, config.source);
  out.lines = io::read_file(scratch.path + "/requests.jsonl");
  out.requests = read_request_lines(out.lines, "lm-eval's requests (" + out.arguments[1] + ")");
  for (Request& r : out.requests) r.task = std::string(kLmEvalPrefix) + r.task;
  std::cerr << fmt::format("[sched] lm-eval: {} requests\n", out.requests.size());
  return out;
}

std::vector<LmEvalScores> score_lm_eval_tasks(const LmEvalRequests& lm, const std::vector<RequestResult>& results,
                                              int64_t first_index, const std::string& output_dir) {
  std::vector<const RequestResult*> by_line(lm.requests.size(), nullptr);
  for (const RequestResult& r : results) {
    const int64_t line = r.index - first_index;
    if (line >= 0 && line < static_cast<int64_t>(by_line.size())) by_line[static_cast<size_t>(line)] = &r;
  }
  std::string responses;
  for (size_t i = 0; i < by_line.size(); ++i) {
    if (!by_line[i]) fail("lm_eval", "no result for lm-eval's request {} ({})", i, lm.requests[i].task);
    responses += result_line(lm.requests[i], *by_line[i]);
  }
  const std::string dir = output_dir + "/lm_eval";
  io::make_directories(dir);
  io::write_file_atomic(dir + "/requests.jsonl", lm.lines);
  io::write_file_atomic(dir + "/responses.jsonl", responses);
  std::vector<std::string> args = lm.arguments;
  args.insert(args.end(), {"--requests", dir + "/requests.jsonl", "--responses", dir + "/responses.jsonl", "--out",
                           dir + "/scores.json"});
  std::cerr << fmt::format("[sched] lm-eval scores {}\n", lm.arguments[1]);
  run_bridge(lm.python, "score", args, dir + "/scores.json");
  return read_lm_eval_scores(io::read_file(dir + "/scores.json"), dir + "/scores.json");
}

std::vector<LmEvalScores> read_lm_eval_scores(const std::string& text, const std::string& where) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(where, "not JSON: {}", e.what());
  }
  if (!j.is_object() || !j.contains("results") || !j["results"].is_object())
    fail(where, "no \"results\" object (not the lm-eval bridge's scores)");
  std::vector<LmEvalScores> tasks, groups;
  for (auto it = j["results"].begin(); it != j["results"].end(); ++it) {
    if (!it.value().is_object()) fail(where, "results.{} is not an object", it.key());
    LmEvalScores s = scores_entry(j, it.key());
    (s.is_group ? groups : tasks).push_back(std::move(s));
  }
  count_group_documents(tasks, groups);
  tasks.insert(tasks.end(), std::make_move_iterator(groups.begin()), std::make_move_iterator(groups.end()));
  return tasks;
}

}  // namespace gpueval
