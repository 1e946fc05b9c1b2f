#include "gpueval/evaluation.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdlib>
#include <iostream>
#include <map>
#include <thread>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "common/file_io.h"
#include "evaluation/calibration.h"
#include "evaluation/checkpoints.h"
#include "evaluation/run_identity.h"
#include "evaluation/run_inputs.h"
#include "evaluation/run_journal.h"
#include "gpueval/error.h"
#include "gpueval/history.h"
#include "gpueval/model_config.h"
#include "gpueval/report.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"
#include "gpueval/tokenizer.h"
#include "model/model_fingerprint.h"
#include "plan/planner.h"
#include "report/trend.h"
#include "report/trend_report.h"
#include "run/devices.h"
#include "run/executor.h"
#include "run/progress.h"
#include "run/scheduler.h"
#include "store/calibration_cache.h"

namespace gpueval {

namespace {

using Clock = std::chrono::steady_clock;

// Called once a checkpoint is scored (not when it was interrupted): its complete documents, the
// results.json written for it, and its state.
using ScoredCallback = std::function<void(const std::vector<DocRecord>& records, const nlohmann::ordered_json& results,
                                          const std::string& state)>;

// The batch budget a checkpoint's plan is cut under, and where it came from: the config's
// (a number), the journal's (so a resumed run plans as the interrupted one did), or calibration's
// (probed, or read from the calibration cache). Re-cuts `plan` when the budget changes.
struct Budget {
  PlanOptions options;
  std::string source = "config";  // config | journal | probed | cache
};

Budget choose_budget(const RunConfig& config, const EvaluationOptions& options, const RunInputs& in,
                     RunJournal& journal, Plan& plan) {
  Budget b{in.plan_options, "config"};
  PlanOptions& po = b.options;
  const bool auto_budget = config.batch_size == "auto" && config.batch_tokens <= 0;
  const std::optional<int64_t> journal_budget = journal.batch_tokens();  // what the stored results were planned with
  if (auto_budget && journal_budget) {
    po.batch_tokens = *journal_budget;  // the same plan as the interrupted run, so the same results
    b.source = "journal";
    plan = rebatch(plan, po);
  } else if (auto_budget) {
    CalibrationOptions co;
    co.executable = options.executable;
    co.model_dir = in.model_dir;
    co.dtype = config.dtype;
    co.max_memory = config.max_memory;
    co.cache_path = CalibrationCache::default_path(config.calibration_cache);
    co.length = std::max<int64_t>(1, longest_item(plan));
    co.recalibrate = options.recalibrate;
    co.log_dir = config.output + "/logs";
    const std::vector<DeviceBudget> budgets = calibrate_devices(in.slots, co);
    po.batch_tokens = budgets.front().batch_tokens;
    b.source = budgets.front().source;
    for (const DeviceBudget& d : budgets)
      if (d.batch_tokens < po.batch_tokens) {
        po.batch_tokens = d.batch_tokens;
        b.source = d.source;
      }
    plan = rebatch(plan, po);  // the same items, cut under the chosen budget
  } else if (journal_budget && *journal_budget != po.batch_tokens) {
    std::cerr << fmt::format("[sched] note: resumed results were computed with a budget of {} tokens, this run plans "
                             "with {}; results are not bit-identical to an uninterrupted run\n",
                             *journal_budget, po.batch_tokens);
  }
  if (!journal_budget) journal.set_batch_tokens(po.batch_tokens);
  return b;
}

void log_plan(const RunInputs& in, const Plan& plan, const PlanOptions& po) {
  std::cerr << fmt::format("[sched] {} tasks, {} requests, {} batches ({} tokens, {:.1f}% padding, budget {} tokens) on {} worker(s): {}\n",
                           in.tasks.size(), in.requests.size(), plan.batches.size(), plan.total_tokens,
                           100 * plan.padding_fraction(), po.batch_tokens, in.slots.size(), in.spec);
  if (plan.truncated_requests > 0)
    std::cerr << fmt::format("[sched] warning: {} of {} requests are longer than the context of {} tokens and were "
                             "left-truncated, as lm-evaluation-harness does\n",
                             plan.truncated_requests, in.requests.size(), po.max_length);
  if (po.prefix_reuse)
    std::cerr << fmt::format("[sched] prefix reuse: {} tokens in rows + {} shared prefixes of {} tokens in all, "
                             "for {} requested ({:.2f}x fewer with one worker)\n",
                             plan.row_tokens, plan.num_prefixes, plan.prefix_tokens, plan.total_tokens,
                             plan.row_tokens + plan.prefix_tokens > 0
                                 ? static_cast<double>(plan.total_tokens) / (plan.row_tokens + plan.prefix_tokens)
                                 : 1.0);
}

// results.json's "config", "batching" and "journal" and the rest of what write_reports needs.
RunSummary run_summary(const RunConfig& config, const RunInputs& in, const Budget& budget, const Plan& plan,
                       const SchedulerReport& report, const RunJournal& journal, double wall_seconds,
                       std::vector<std::string> incomplete) {
  const PlanOptions& po = budget.options;
  RunSummary summary;
  summary.config = config.to_json();
  summary.config["add_bos_token"] = po.add_bos;  // what add_bos resolved to (lm-eval's model_args name)
  summary.config["batch_tokens_used"] = po.batch_tokens;
  summary.config["batch_tokens_source"] = budget.source;
  summary.model = in.model_dir;
  summary.wall_seconds = wall_seconds;
  summary.incomplete = std::move(incomplete);
  summary.limit = config.limit;
  summary.groups = in.selection.groups;
  summary.batching = {{"prefix_reuse", po.prefix_reuse},
                      {"batch_tokens", po.batch_tokens},
                      {"batches", plan.batches.size()},
                      {"tokens_requested", plan.total_tokens},
                      {"tokens_computed", report.stats.tokens_computed},
                      {"prefix_tokens_computed", report.stats.prefix_tokens},
                      {"shared_prefixes", plan.num_prefixes},
                      {"row_tokens", plan.row_tokens},
                      {"padded_tokens", plan.padded_tokens},
                      {"padding_fraction", plan.padding_fraction()},
                      {"oom_splits", report.stats.oom_splits},
                      {"truncated_requests", plan.truncated_requests},
                      {"max_length", po.max_length}};
  summary.journal = journal.summary();
  summary.date = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                 summary.wall_seconds;
  return summary;
}

// One line per quarantined batch, logged; they open the report's incomplete list.
std::vector<std::string> quarantine_lines(const SchedulerReport& report) {
  std::vector<std::string> lines;
  for (const QuarantinedBatch& q : report.quarantined) {
    lines.push_back(fmt::format("batch {} quarantined after {} attempts ({}); requests {}", q.batch_id, q.attempts,
                                q.last_failure, fmt::join(q.request_indices, ", ")));
    std::cerr << "[sched] " << lines.back() << "\n";
  }
  return lines;
}

void log_outcome(const char* state, const Plan& plan, const SchedulerReport& report, const RunJournal& journal,
                 size_t scored, size_t docs_total, double wall_seconds, const std::string& output) {
  const ExecutionStats& st = report.stats;
  std::cerr << fmt::format("[sched] computed {} tokens for {} requested ({:.2f}x fewer; {} prefix tokens){}\n",
                           st.tokens_computed, plan.total_tokens,
                           st.tokens_computed > 0 ? static_cast<double>(plan.total_tokens) / st.tokens_computed : 1.0,
                           st.prefix_tokens,
                           st.oom_splits > 0 ? fmt::format(", {} out-of-memory splits", st.oom_splits) : std::string());
  std::cerr << fmt::format("[sched] journal {}: computed {} requests in {} batches\n", journal.path(),
                           journal.requests_computed(), journal.batches_computed());
  std::cerr << fmt::format("[sched] {}: {} of {} documents scored, {} worker restarts, {:.1f}s; report in {}\n", state,
                           scored, docs_total, report.worker_restarts, wall_seconds, output);
}

// Scores one checkpoint into `output_dir` with the scheduler's workers, writes its report files,
// hands its complete documents and results.json to `on_scored`, and returns its state
// (complete | incomplete | interrupted) and exit code. A fatal error is thrown as Error.
// The flow of DESIGN.md: inputs, plan, journal, budget, scheduler, aggregator, report.
struct CheckpointOutcome {
  std::string state;
  int exit_code = 0;
};

CheckpointOutcome evaluate_checkpoint(const RunConfig& run_config, const EvaluationOptions& options,
                                      const Checkpoint& checkpoint, const std::string& output_dir,
                                      Scheduler& scheduler, ProgressReporter& progress, const ScoredCallback& on_scored) {
  const auto t0 = Clock::now();
  RunConfig config = run_config;  // this checkpoint's view: its model and its output directory
  config.output = output_dir;
  config.models = {checkpoint.path};
  const RunInputs in = load_run_inputs(config, options.executable, checkpoint.path);
  io::make_directories(config.output + "/logs");
  // Journal (run_journal.h): what an earlier run of this model and config already scored.
  RunJournal journal(config.output, checkpoint.fingerprint, in.model_dir, config, in.requests, options.fresh);
  Plan plan = make_plan(in.requests, *in.tokenizer, in.plan_options);
  const Budget budget = choose_budget(config, options, in, journal, plan);
  log_plan(in, plan, budget.options);
  progress.set_extra("model", in.model_dir);
  progress.set_extra("tasks", config.tasks);

  Aggregator aggregator(in.tasks, in.requests);
  std::vector<std::vector<ItemResult>> resumed(in.requests.size());
  const Plan todo = journal.remaining(plan, resumed);  // the batches not all in the journal
  for (std::vector<ItemResult>& items : resumed) aggregator.add(std::move(items));
  progress.set_extra("task_progress", aggregator.progress());
  const SchedulerReport report = scheduler.run(
      todo, in.model_dir,
      [&](const Batch&, std::vector<ItemResult> items, const std::string&) {
        journal.record(items);  // committed before it counts; a failure ends the run (scheduler.h)
        aggregator.add(std::move(items));
        progress.set_extra("task_progress", aggregator.progress());
      },
      [&](const SchedulerStatus& s, bool final) { progress.update(s, final); });

  Aggregator::Documents docs = aggregator.documents();
  const std::vector<std::string> quarantined = quarantine_lines(report);
  const size_t docs_total = docs.scored.size() + docs.incomplete.size();
  docs.incomplete.insert(docs.incomplete.begin(), quarantined.begin(), quarantined.end());
  const double wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const RunSummary summary =
      run_summary(config, in, budget, plan, report, journal, wall_seconds, std::move(docs.incomplete));
  std::vector<const Task*> task_ptrs;
  for (const Task& t : in.tasks) task_ptrs.push_back(&t);
  try {
    write_reports(config.output, task_ptrs, docs.scored, summary);
  } catch (const std::exception& e) {
    if (report.fatal_error.empty()) throw;
    // The run failed already (e.g. a full disk): say why the report is missing, keep the original error.
    std::cerr << "[sched] cannot write the report: " << e.what() << "\n";
  }

  const char* state = !report.fatal_error.empty()        ? "failed"
                      : report.interrupted               ? "interrupted"
                      : docs.scored.size() < docs_total  ? "incomplete"
                                                         : "complete";
  log_outcome(state, plan, report, journal, docs.scored.size(), docs_total, wall_seconds, config.output);
  if (!report.fatal_error.empty()) {
    progress.finish(state);
    throw Error(report.fatal_error);
  }
  if (on_scored && !report.interrupted) {
    // ordered: the first metric of each task is its primary one (trend.h)
    const nlohmann::ordered_json results = nlohmann::ordered_json::parse(io::read_file(config.output + "/results.json"));
    on_scored(docs.scored, results, state);
  }
  CheckpointOutcome outcome;
  outcome.state = state;
  outcome.exit_code = report.interrupted ? 128 + report.signal : docs.scored.size() == docs_total ? 0 : kExitIncomplete;
  return outcome;
}

SchedulerOptions scheduler_options(const RunConfig& config, const EvaluationOptions& options,
                                   const std::vector<DeviceSlot>& slots) {
  SchedulerOptions so;
  so.slots = slots;
  so.executable = options.executable;
  so.dtype = config.dtype;
  so.load = config.load;
  so.log_dir = config.output + "/logs";
  so.max_attempts = config.max_attempts;
  so.heartbeat_timeout_s = config.heartbeat_timeout_s;
  so.max_worker_restarts = config.max_worker_restarts;
  return so;
}

// What a run keeps in the history database (history.h): every checkpoint it scores, with the
// per-task scores and per-document outcomes the trend report and regression checks read.
class HistoryRecorder {
 public:
  HistoryRecorder(const RunConfig& config, const std::string& config_fp)
      : history_(History::open(History::default_path(config.history))), config_fp_(config_fp) {
    run_id_ = history_.begin_run(config_fp, config.to_json(), config.source);
  }
  History& history() { return history_; }
  const std::string& config_fingerprint() const { return config_fp_; }
  // The callback evaluate_checkpoint() calls once `c` is scored; `line` (its status.json line)
  // gets its primary scores.
  ScoredCallback recorder(const Checkpoint& c, nlohmann::json* line) {
    return [this, &c, line](const std::vector<DocRecord>& records, const nlohmann::ordered_json& results,
                            const std::string& state) {
      const std::vector<ScoreRow> scores = scores_from_results(results);
      history_.record(run_id_, info(c), config_fp_, state == "complete" ? "complete" : "incomplete", scores,
                      samples_from_records(records));
      if (line) (*line)["scores"] = primary_json(scores);
      scored_.push_back(c.name);
    };
  }
  static CheckpointInfo info(const Checkpoint& c) { return CheckpointInfo{c.fingerprint, c.path, c.name, c.mtime}; }
  static nlohmann::json primary_json(const std::vector<ScoreRow>& scores) {
    ScoredCheckpoint sc;
    sc.scores = scores;
    nlohmann::json out = nlohmann::json::object();
    for (const ScoreRow& r : primary_scores(sc))
      out[r.task] = {{"metric", r.metric}, {"value", r.value},
                     {"stderr", r.stderr_value ? nlohmann::json(*r.stderr_value) : nlohmann::json()}};
    return out;
  }
  // Drops against the previous checkpoint of more than `points` where the newer one was scored
  // by this run, each logged as one line naming the task.
  std::vector<Regression> regressions(double points) const {
    std::vector<Regression> out;
    for (const Regression& r : find_regressions(history_.trend(config_fp_), points)) {
      if (std::find(scored_.begin(), scored_.end(), r.current) == scored_.end()) continue;
      std::cerr << fmt::format("[sched] regression: {} {} went from {:.4f} ({}) to {:.4f} ({}): {:.2f} {} worse, more than {}\n", r.task,
                               r.metric, r.before, r.previous, r.after, r.current, r.drop_points,
                               r.in_points ? "points" : "units", points);
      out.push_back(r);
    }
    return out;
  }

 private:
  History history_;
  std::string config_fp_;
  int64_t run_id_ = 0;
  std::vector<std::string> scored_;
};

// The config fingerprint (run_identity.h) of a run: its tasks' requests and the settings that
// change results, independent of the checkpoint.
std::string run_config_fingerprint(const RunConfig& config, const std::string& executable) {
  return config_fingerprint(config, load_tasks(config, executable).requests);
}

// The nightly loop: every checkpoint into <output>/<name>/, oldest first, with one set of workers
// that switch checkpoints in place. Checkpoints the history holds complete for this config are
// skipped (--fresh scores them again). A checkpoint that fails (a bad file, workers that keep
// dying) is reported and the others are still scored. status.json carries a line per
// checkpoint; report.md and report.html in <output> show the trend of every checkpoint the
// history holds for this config.
int run_checkpoints(const RunConfig& config, const EvaluationOptions& options, const std::vector<Checkpoint>& checkpoints,
                    Scheduler& scheduler, ProgressReporter& progress, HistoryRecorder& recorder) {
  History& history = recorder.history();
  const std::string& config_fp = recorder.config_fingerprint();
  nlohmann::json lines = nlohmann::json::array();
  std::vector<std::string> names;
  std::map<std::string, const ScoredCheckpoint*> earlier;  // fingerprint -> its history record
  const std::vector<ScoredCheckpoint> trend = history.trend(config_fp);
  for (const ScoredCheckpoint& sc : trend) earlier[sc.checkpoint.fingerprint] = &sc;
  size_t skipped = 0;
  for (const Checkpoint& c : checkpoints) {
    nlohmann::json line = {{"name", c.name}, {"path", c.path}, {"fingerprint", c.fingerprint.substr(0, 16)}, {"state", "queued"}};
    if (c.error.empty() && options.fresh) history.forget(c.fingerprint, config_fp);
    if (c.error.empty() && !options.fresh && history.is_scored(c.fingerprint, config_fp)) {
      line["state"] = "skipped";
      if (earlier.count(c.fingerprint)) line["scores"] = HistoryRecorder::primary_json(earlier[c.fingerprint]->scores);
      ++skipped;
    }
    lines.push_back(line);
    names.push_back(c.name);
  }
  std::cerr << fmt::format("[sched] {} checkpoints, oldest first: {}\n", checkpoints.size(), fmt::join(names, ", "));
  if (skipped > 0)
    std::cerr << fmt::format("[sched] {} already scored for this config (history {}): skipped; --fresh scores them again\n",
                             skipped, history.path());
  progress.set_extra("checkpoints", lines);
  bool failed = false, incomplete = false;
  for (size_t k = 0; k < checkpoints.size(); ++k) {
    const Checkpoint& c = checkpoints[k];
    if (lines[k]["state"] == "skipped") {
      std::cerr << fmt::format("[sched] checkpoint {} of {}: {} already scored, skipped\n", k + 1, checkpoints.size(), c.name);
      continue;
    }
    lines[k]["state"] = "running";
    progress.set_extra("checkpoint", c.name);
    progress.set_extra("checkpoints", lines);
    std::cerr << fmt::format("[sched] checkpoint {} of {}: {} ({})\n", k + 1, checkpoints.size(), c.name, c.path);
    try {
      if (!c.error.empty()) throw Error(c.error);
      const CheckpointOutcome outcome = evaluate_checkpoint(config, options, c, config.output + "/" + c.name, scheduler,
                                                            progress, recorder.recorder(c, &lines[k]));
      lines[k]["state"] = outcome.state;
      progress.set_extra("checkpoints", lines);
      if (outcome.state == "interrupted") {
        progress.finish("interrupted");
        return outcome.exit_code;
      }
      incomplete = incomplete || outcome.exit_code != 0;
    } catch (const Error& e) {
      std::cerr << fmt::format("[sched] checkpoint {} failed: {}\n", c.name, e.what());
      lines[k]["state"] = "failed";
      lines[k]["error"] = e.what();
      progress.set_extra("checkpoints", lines);
      failed = true;
    }
  }
  scheduler.shutdown();
  progress.set_extra("checkpoint", nullptr);
  write_trend_reports(config.output, history, config_fp, config.fail_on_regression);
  std::cerr << fmt::format("[sched] trend of {} checkpoints: {}/report.md, {}/report.html\n", history.trend(config_fp).size(),
                           config.output, config.output);
  const bool regressed = config.fail_on_regression && !recorder.regressions(*config.fail_on_regression).empty();
  const char* state = failed ? "failed" : regressed ? "regressed" : incomplete ? "incomplete" : "complete";
  progress.finish(state);
  return failed ? 1 : regressed ? kExitRegression : incomplete ? kExitIncomplete : 0;
}

}  // namespace

int run_evaluation(const RunConfig& config, const EvaluationOptions& options) {
  const std::vector<Checkpoint> checkpoints = resolve_checkpoints(config.models, config.source);
  const bool nightly = config.models.size() > 1 || is_glob(config.models[0]);
  const std::vector<DeviceSlot> slots = run_device_slots(config);
  if (!nightly && !checkpoints[0].error.empty()) throw Error(checkpoints[0].error);
  HistoryRecorder recorder(config, run_config_fingerprint(config, options.executable));
  io::make_directories(config.output + "/logs");
  Scheduler scheduler(scheduler_options(config, options, slots));
  ProgressReporter progress(config.output + "/status.json", config.source, options.live_progress);
  if (nightly) return run_checkpoints(config, options, checkpoints, scheduler, progress, recorder);
  // One checkpoint: its report in <output>, its scores into the history (it is resumed from its
  // journal, never skipped).
  const CheckpointOutcome outcome = evaluate_checkpoint(config, options, checkpoints[0], config.output, scheduler,
                                                        progress, recorder.recorder(checkpoints[0], nullptr));
  scheduler.shutdown();
  const bool regressed = outcome.exit_code == 0 && config.fail_on_regression &&
                         !recorder.regressions(*config.fail_on_regression).empty();
  progress.finish(regressed ? "regressed" : outcome.state);
  return regressed ? kExitRegression : outcome.exit_code;
}

}  // namespace gpueval
