#include "evaluation/request_run.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "common/console.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "common/wire_json.h"
#include "evaluation/checkpoint_evaluation.h"
#include "evaluation/checkpoints.h"
#include "evaluation/output_lock.h"
#include "evaluation/run_identity.h"
#include "evaluation/run_inputs.h"
#include "evaluation/run_journal.h"
#include "evaluation/run_loop.h"
#include "gpueval/error.h"
#include "plan/planner.h"
#include "run/device_memory.h"
#include "tokenizer/chat_template_files.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kKeys[] = {"type",  "context", "continuation", "until",  "max_gen_toks", "temperature",
                                 "top_k", "top_p",   "task",         "doc_id", "key"};

Request read_line(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(where, "not JSON");
  if (!j.is_object()) fail(where, "expected an object {{\"type\", \"context\", ...}}, got {}", j.type_name());
  for (const auto& [key, value] : j.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      fail(where, "unknown key '{}' (known: {})", key, fmt::join(std::begin(kKeys), std::end(kKeys), ", "));
  Request r;
  r.type = parse_request_type(wire::get_string(wire::field(j, "type", where), where + ": type"));
  r.context = wire::get_string(wire::field(j, "context", where), where + ": context");
  const bool generation = r.type == RequestType::kGenerateUntil;
  const bool loglikelihood = r.type == RequestType::kLoglikelihood;
  if (loglikelihood)
    r.continuation = wire::get_string(wire::field(j, "continuation", where), where + ": continuation");
  else if (j.contains("continuation"))
    fail(where, "'continuation' is for loglikelihood requests only");
  for (const char* key : {"until", "max_gen_toks", "temperature", "top_k", "top_p"})
    if (!generation && j.contains(key)) fail(where, "'{}' is for generate_until requests only", key);
  if (generation) {
    r.max_tokens = wire::get_int(j, where, "max_gen_toks", 256, 1, int64_t{1} << 30);
    if (j.contains("until")) r.stops = wire::get_strings(j["until"], where + ": until");
    r.stops.erase(std::remove(r.stops.begin(), r.stops.end(), std::string()), r.stops.end());
    r.temperature = wire::get_double(j, where, "temperature", 0.0);
    r.top_k = wire::get_int(j, where, "top_k", 0, -1, int64_t{1} << 30);
    r.top_p = wire::get_double(j, where, "top_p", 1.0);
    if (r.top_p > 1) fail(where, "top_p must be at most 1, got {}", r.top_p);
    if (!r.sampled() && (r.top_k != 0 || r.top_p != 1.0))
      fail(where, "top_k and top_p apply when sampling only (temperature is 0: greedy)");
  }
  if (j.contains("task")) r.task = wire::get_string(j["task"], where + ": task");
  if (j.contains("key")) wire::get_string(j["key"], where + ": key");  // the caller's own name for it
  r.doc_id = wire::get_int(j, where, "doc_id", 0, 0, std::numeric_limits<int64_t>::max());
  return r;
}

// <root>/<model base name>-<16 hex digits of the model's and the requests' fingerprints>.
std::string run_folder(const std::string& root, const Checkpoint& checkpoint, const std::string& config_fp) {
  const std::string key = sha256_hex(checkpoint.fingerprint + "\n" + config_fp);
  return root + "/" + checkpoint.name + "-" + key.substr(0, 16);
}

// The items of the run, whether the journal held them or a worker computed them.
class CollectSink : public RunSink {
 public:
  void items(const std::vector<ItemResult>& items) override { all_.insert(all_.end(), items.begin(), items.end()); }
  std::vector<ItemResult>& all() { return all_; }

 private:
  std::vector<ItemResult> all_;
};

// A run that did not compute every request: a fatal error is thrown, an interruption or quarantined
// batches are said in one line each and give the exit code (nothing is written; the journal holds
// what was computed). 0 when every batch finished.
int unfinished(const SchedulerReport& report, const RunJournal& journal, ProgressReporter& progress) {
  if (!report.fatal_error.empty()) {
    progress.finish("failed");
    throw Error(report.fatal_error);
  }
  if (report.interrupted) {
    progress.finish("interrupted");
    Console::error(
        fmt::format("[sched] interrupted: {} requests computed are in {}; the same command goes on from there",
                    journal.requests_computed(), journal.path()));
    return 128 + report.signal;
  }
  if (!report.quarantined.empty()) {
    progress.finish("incomplete");
    quarantine_lines(report);  // logs each
    Console::error(fmt::format("[sched] {} batches failed every attempt: no results written (the rest are in {})",
                               report.quarantined.size(), journal.path()));
    return kExitIncomplete;
  }
  return 0;
}

}  // namespace

std::vector<Request> read_request_lines(const std::string& text, const std::string& path) {
  std::vector<Request> requests;
  std::map<std::pair<std::string, int64_t>, int64_t> per_document;
  std::istringstream in(text);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Request r = read_line(line, fmt::format("{}:{}", path, number));
    r.index = static_cast<int64_t>(requests.size());
    r.choice = per_document[{r.task, r.doc_id}]++;
    r.as_hf = true;  // lm-eval's requests: hf's numbers
    requests.push_back(std::move(r));
  }
  return requests;
}

std::string result_line(const Request& request, const RequestResult& result) {
  nlohmann::json j;
  switch (request.type) {
    case RequestType::kLoglikelihood:
      j["logprob"] = result.logprob;
      j["is_greedy"] = result.is_greedy;
      break;
    case RequestType::kLoglikelihoodRolling: j["logprob"] = result.logprob; break;
    case RequestType::kGenerateUntil: j["text"] = result.text; break;
  }
  j["tokens"] = result.num_tokens;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json describe_model(const RunConfig& run_config, const std::string& executable) {
  RunConfig config = run_config;
  config.tasks.clear();
  if (config.models.size() != 1 || is_glob(config.models[0]))
    throw Error("gpueval requests: give one model (--model DIR)");
  const TaskInputs none;
  const RunInputs in = load_run_inputs(config, executable, config.models[0], &none);
  const Tokenizer& tok = *in.tokenizer;
  auto token_text = [&](std::optional<int32_t> id) {
    return id ? nlohmann::json(tok.decode({*id}, /*skip_special_tokens=*/false)) : nlohmann::json();
  };
  nlohmann::json templates = nlohmann::json::object();
  for (const auto& [name, source] : read_chat_templates(in.model_dir)) templates[name] = source.text;
  return {{"model", in.model_dir},
          {"model_type", in.model_config.model_type},
          {"max_length", in.plan_options.max_length},
          {"add_bos", in.plan_options.add_bos},
          {"bos_token", token_text(tok.bos_id())},
          {"eos_token", token_text(tok.eos_id())},
          {"chat_templates", templates}};
}

int run_requests(const RequestRunOptions& run, const EvaluationOptions& options) {
  const auto t0 = Clock::now();
  RunConfig config = run.config;
  if (config.models.size() != 1) throw Error("gpueval requests: give one model (--model DIR)");
  config.tasks.clear();
  const std::string source = run.requests_file == "-" ? "<stdin>" : run.requests_file;
  config.source = source;
  TaskInputs given;
  given.requests =
      read_request_lines(run.requests_file == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {})
                                                  : io::read_file(run.requests_file),
                         source);
  if (given.requests.empty()) {  // nothing to compute: no worker, no journal
    if (run.results_file != "-") io::write_file_atomic(run.results_file, "");
    return 0;
  }
  const std::vector<Checkpoint> checkpoints = resolve_checkpoints(config.models, "--model");
  if (checkpoints.size() != 1 || is_glob(config.models[0]))
    throw Error(fmt::format("--model {}: give one checkpoint directory", config.models[0]));
  const Checkpoint& checkpoint = checkpoints[0];
  if (!checkpoint.error.empty()) throw Error(checkpoint.error);
  // The config's fingerprint, marked as lm-eval's requests: rolling texts are windowed as hf does.
  const std::string config_fp = sha256_hex("gpueval-requests-v1\n" + config_fingerprint(config, given.requests));
  if (config.output.empty()) {
    if (run.journal_root.empty()) throw Error("gpueval requests: give --output DIR or --journal-root DIR");
    config.output = run_folder(run.journal_root, checkpoint, config_fp);
  }
  std::cerr << fmt::format("[sched] {} requests from {}; journal and logs in {}\n", given.requests.size(), source,
                           config.output);
  const std::vector<DeviceSlot> slots = run_device_slots(config);
  const DirectoryLock lock = lock_output(config.output, options);
  io::make_directories(config.output + "/logs");
  Scheduler scheduler(scheduler_options(config, options, slots));
  ProgressReporter progress(config.output + "/status.json", source, options.live_progress);
  const bool nothing_stored = options.fresh || !io::path_exists(RunJournal::path_in(config.output));
  if (nothing_stored) scheduler.start_workers(checkpoint.path);
  progress.phase("loading the tokenizer");
  RunInputs in = load_run_inputs(config, options.executable, checkpoint.path, &given);
  RunJournal journal(config.output, checkpoint.fingerprint, in.model_dir, config_fp, in.requests, options.fresh);
  if (!nothing_stored && journal.stored_items() < in.requests.size()) scheduler.start_workers(in.model_dir);
  progress.phase(fmt::format("tokenizing {} requests", format_count(static_cast<int64_t>(in.requests.size()))));
  Plan plan = make_plan(in.requests, *in.tokenizer, in.plan_options);
  progress.phase("choosing the batch budget");
  const Budget budget = choose_budget(config, options, in, journal, plan, &scheduler, available_host_bytes());
  log_plan(in, plan, budget.options);

  CollectSink collect;
  const PlanRunReport ran = run_plan(plan, in, config.dtype, journal, scheduler, progress, {&collect});
  scheduler.shutdown();
  const SchedulerReport& report = ran.scheduler;
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  if (const int code = unfinished(report, journal, progress)) return code;
  const std::vector<RequestResult> results = combine_items(collect.all());
  if (results.size() != in.requests.size())
    throw Error(fmt::format("internal error: {} results for {} requests", results.size(), in.requests.size()));
  std::string out;
  for (size_t i = 0; i < results.size(); ++i) out += result_line(in.requests[i], results[i]);
  if (run.results_file == "-") {
    std::cout << out;
    std::cout.flush();
  } else {
    io::write_file_atomic(run.results_file, out);
  }
  std::cerr << fmt::format("[sched] complete: {} requests ({} computed, {} from the journal) in {:.1f}s\n",
                           in.requests.size(), journal.requests_computed(),
                           static_cast<int64_t>(in.requests.size()) - journal.requests_computed(), wall);
  progress.finish("complete");
  return 0;
}

}  // namespace gpueval
