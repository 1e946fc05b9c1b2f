#include "evaluation/checkpoint_evaluation.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <unordered_map>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)

#include "aggregate/aggregator.h"
#include "common/console.h"
#include "common/file_io.h"
#include "evaluation/calibration.h"
#include "evaluation/program_runs.h"
#include "evaluation/run_inputs.h"
#include "evaluation/run_journal.h"
#include "evaluation/run_loop.h"
#include "gpueval/error.h"
#include "gpueval/report.h"
#include "plan/planner.h"
#include "report/report_files.h"
#include "run/device_memory.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Budget calibrated_budget(const RunConfig& config, const EvaluationOptions& options, const RunInputs& in, Plan& plan,
                         Scheduler* scheduler, int64_t host_available_bytes) {
  Budget b{in.plan_options, "config"};
  PlanOptions& po = b.options;
  if (config.batch_size != "auto" || config.batch_tokens > 0) return b;
  CalibrationOptions co = calibration_options(config, options.executable, in.model_dir,
                                              std::max<int64_t>(1, longest_item(plan)), options.recalibrate);
  co.log_dir = config.output + "/logs";
  co.sample = probe_sample(plan, ProbeOptions{}.max_tokens);
  co.work_tokens = plan.padded_tokens + plan.prefix_tokens;
  co.host_available_bytes = host_available_bytes;
  if (scheduler)
    co.probe_in_worker = [scheduler, &in](const DeviceSlot& slot, const ProbeOptions& po) {
      return scheduler->probe(slot, in.model_dir, po);
    };
  const std::vector<DeviceBudget> budgets = calibrate_devices(in.slots, co);
  po.batch_tokens = budgets.front().batch_tokens;
  b.source = budgets.front().source;
  for (const DeviceBudget& d : budgets)
    if (d.batch_tokens < po.batch_tokens) {
      po.batch_tokens = d.batch_tokens;
      b.source = d.source;
    }
  plan = rebatch(plan, po);  // the same items, cut under the chosen budget
  return b;
}

Budget choose_budget(const RunConfig& config, const EvaluationOptions& options, const RunInputs& in,
                     RunJournal& journal, Plan& plan, Scheduler* scheduler, int64_t host_available_bytes) {
  Budget b{in.plan_options, "config"};
  PlanOptions& po = b.options;
  const bool auto_budget = config.batch_size == "auto" && config.batch_tokens <= 0;
  const std::optional<int64_t> journal_budget = journal.batch_tokens();  // what the stored results were planned with
  if (auto_budget && journal_budget) {
    po.batch_tokens = *journal_budget;  // the same plan as the interrupted run, so the same results
    b.source = "journal";
    plan = rebatch(plan, po);
  } else if (auto_budget) {
    b = calibrated_budget(config, options, in, plan, scheduler, host_available_bytes);
  } else if (journal_budget && *journal_budget != po.batch_tokens) {
    std::cerr << fmt::format(
        "[sched] note: resumed results were computed with a budget of {} tokens, this run plans "
        "with {}; results are not bit-identical to an uninterrupted run\n",
        *journal_budget, po.batch_tokens);
  }
  if (!journal_budget) journal.set_batch_tokens(po.batch_tokens);
  return b;
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

void log_plan(const RunInputs& in, const Plan& plan, const PlanOptions& po) {
  std::cerr << fmt::format(
      "[sched] {} tasks, {} requests, {} batches ({} tokens, {:.1f}% padding, budget {} tokens) on {} worker(s): {}\n",
      in.tasks.size(), in.requests.size(), plan.batches.size(), plan.total_tokens, 100 * plan.padding_fraction(),
      po.batch_tokens, in.slots.size(), in.spec);
  if (plan.truncated_requests > 0)
    std::cerr << fmt::format(
        "[sched] warning: {} of {} requests are longer than the context of {} tokens and were "
        "left-truncated, as lm-evaluation-harness does\n",
        plan.truncated_requests, in.requests.size(), po.max_length);
  if (plan.long_continuations > 0)
    std::cerr << fmt::format(
        "[sched] warning: {} requests have a continuation longer than the context of {} tokens: "
        "only its last {} tokens are scored (lm-evaluation-harness 0.4.13 fails on these)\n",
        plan.long_continuations, po.max_length, po.max_length);
  if (po.prefix_reuse || po.group_continuations)
    std::cerr << fmt::format(
        "[sched] shared work ({}): {} tokens in rows + {} shared prefixes of {} tokens in all, "
        "for {} requested ({:.2f}x fewer with one worker)\n",
        po.prefix_reuse && po.group_continuations
            ? "prefix reuse, continuations grouped"
            : (po.prefix_reuse ? "prefix reuse, continuations not grouped" : "no prefix reuse, continuations grouped"),
        plan.row_tokens, plan.num_prefixes, plan.prefix_tokens, plan.total_tokens,
        plan.row_tokens + plan.prefix_tokens > 0
            ? static_cast<double>(plan.total_tokens) / (plan.row_tokens + plan.prefix_tokens)
            : 1.0);
}

RunSummary run_summary(const RunConfig& config, const RunInputs& in, const Budget& budget, const Plan& plan,
                       const ExecutionStats& stats, const nlohmann::json& journal, double wall_seconds,
                       std::vector<std::string> incomplete) {
  const PlanOptions& po = budget.options;
  RunSummary summary;
  summary.config = config.to_json();
  summary.config["add_bos_token"] = po.add_bos;  // what add_bos resolved to (lm-eval's model_args name)
  if (!in.chat.empty()) summary.config["chat"] = in.chat;  // the template (its sha256) and options prompts used
  summary.config["batch_tokens_used"] = po.batch_tokens;
  summary.config["batch_tokens_source"] = budget.source;
  summary.model = in.model_dir;
  summary.wall_seconds = wall_seconds;
  summary.incomplete = std::move(incomplete);
  summary.limit = config.limit;
  summary.groups = in.selection.groups;
  summary.batching = {{"prefix_reuse", po.prefix_reuse},
                      {"group_continuations", po.group_continuations},
                      {"batch_tokens", po.batch_tokens},
                      {"batches", plan.batches.size()},
                      {"items", plan.num_items},
                      {"tokens_requested", plan.total_tokens},
                      {"tokens_computed", stats.tokens_computed},
                      {"prefix_tokens_computed", stats.prefix_tokens},
                      {"shared_prefixes", plan.num_prefixes},
                      {"row_tokens", plan.row_tokens},
                      {"padded_tokens", plan.padded_tokens},
                      {"padding_fraction", plan.padding_fraction()},
                      {"oom_splits", stats.oom_splits},
                      {"truncated_requests", plan.truncated_requests},
                      {"long_continuations", plan.long_continuations},
                      {"max_length", po.max_length}};
  summary.journal = journal;
  summary.date =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - summary.wall_seconds;
  return summary;
}

CheckpointReports write_checkpoint_reports(const RunConfig& config, const RunInputs& in,
                                           const Aggregator::Documents& docs, const RunSummary& summary) {
  std::vector<const Task*> task_ptrs;
  for (const Task& t : in.tasks) task_ptrs.push_back(&t);
  CheckpointReports written;
  written.scores = score_run(task_ptrs, docs.scored, summary.bootstrap_iters, summary.groups);
  if (in.lm_eval.empty() || docs.outside.empty()) {
    written.table = write_reports(config.output, written.scores, summary);
    return written;
  }
  try {
    written.scores.lm_eval = score_lm_eval_tasks(in.lm_eval, docs.outside, in.lm_eval_first, config.output);
  } catch (const Error& e) {
    RunSummary without = summary;
    without.incomplete.push_back(fmt::format("lm_eval tasks not scored: {}", e.what()));
    write_reports(config.output, written.scores, without);
    throw;
  }
  written.table = write_reports(config.output, written.scores, summary);
  return written;
}

void show_scores(const EvaluationOptions& options, const std::string& heading, const std::string& table,
                 const std::string& report_dir) {
  if (!options.scores_out) return;
  Console::clear_status();
  std::ostream& out = *options.scores_out;
  if (!heading.empty()) out << "## " << heading << "\n\n";
  out << table << "\nfull report: " << report_dir << "/report.md\n";
  if (!heading.empty()) out << "\n";
  out.flush();
}

namespace {

void log_outcome(const char* state, const Plan& plan, const SchedulerReport& report, const RunJournal& journal,
                 size_t scored, size_t docs_total, double wall_seconds, const std::string& output) {
  const ExecutionStats& st = report.stats;
  std::cerr << fmt::format(
      "[sched] computed {} tokens for {} requested ({:.2f}x fewer; {} prefix tokens){}\n", st.tokens_computed,
      plan.total_tokens, st.tokens_computed > 0 ? static_cast<double>(plan.total_tokens) / st.tokens_computed : 1.0,
      st.prefix_tokens, st.oom_splits > 0 ? fmt::format(", {} out-of-memory splits", st.oom_splits) : std::string());
  std::cerr << fmt::format("[sched] journal {}: computed {} requests in {} batches\n", journal.path(),
                           journal.requests_computed(), journal.batches_computed());
  std::cerr << fmt::format("[sched] {}: {} of {} documents scored, {} worker restarts, {:.1f}s; report in {}\n", state,
                           scored, docs_total, report.worker_restarts, wall_seconds, output);
}

}  // namespace

namespace {

// The aggregator as a sink of the run loop (run_loop.h), its progress in status.json.
class AggregatorSink : public RunSink {
 public:
  AggregatorSink(Aggregator& aggregator, ProgressReporter& progress) : aggregator_(aggregator), progress_(progress) {}
  void items(const std::vector<ItemResult>& items) override { aggregator_.add(items); }
  void resumed(size_t, size_t) override { progress_.set_extra("task_progress", aggregator_.progress()); }
  void batch_done() override { progress_.set_extra("task_progress", aggregator_.progress()); }

 private:
  Aggregator& aggregator_;
  ProgressReporter& progress_;
};

// The sandbox the code tasks' programs run in, when any task runs programs: made here, before any
// generation, so a machine without one fails now, in one line, rather than after the night's
// generations.
std::optional<Sandbox> code_sandbox(const RunConfig& config, const RunInputs& in) {
  std::optional<Sandbox> sandbox;
  if (std::any_of(in.tasks.begin(), in.tasks.end(), [](const Task& t) { return t.runs_programs(); })) {
    sandbox.emplace(sandbox_options(config.code_execution));
    if (config.code_execution.unsafe_no_sandbox)
      Console::error(
          "[exec] --unsafe-no-sandbox: the model's programs run without a sandbox, as this user, with "
          "rlimits only");
  }
  return sandbox;
}

// The programs' settings: the default number of sandboxes leaves the run's CPU workers' cores alone.
ProgramRunSettings run_program_settings(const RunConfig& config) {
  int busy_cores = 0;
  for (const DeviceSlot& slot : run_device_slots(config))
    if (slot.kind == DeviceSlot::Kind::kCpu) busy_cores += slot.threads;
  return program_run_settings(config.code_execution, busy_cores);
}

// The documents of a finished run, scored: the programs still running or queued when generation
// ended are waited for (not after a failed or interrupted run: queued ones are dropped), their
// verdicts scored and their outcomes attached; results.json's "code_execution" into `code_execution`.
Aggregator::Documents finish_documents(const Aggregator& aggregator, std::optional<ProgramSink>& programs,
                                       const SchedulerReport& report, nlohmann::json& code_execution) {
  std::optional<ProgramRunReport> ran;
  if (programs && report.fatal_error.empty() && !report.interrupted) {
    ran = programs->finish();
    code_execution = programs->summary(*ran);
  }
  programs.reset();  // an interrupted or failed run: queued programs are dropped, running ones end
  return scored_documents(aggregator, ran ? &*ran : nullptr);
}

// The run's state from how the scheduler ended and how many documents were scored.
const char* run_state(const SchedulerReport& report, size_t scored, size_t docs_total) {
  return !report.fatal_error.empty() ? "failed"
         : report.interrupted        ? "interrupted"
         : scored < docs_total       ? "incomplete"
                                     : "complete";
}

}  // namespace

std::vector<std::string> quarantine_lines(const SchedulerReport& report) {
  std::vector<std::string> lines;
  for (const QuarantinedBatch& q : report.quarantined) {
    lines.push_back(fmt::format("batch {} quarantined after {} attempts ({}); requests {}", q.batch_id, q.attempts,
                                q.last_failure, fmt::join(q.request_indices, ", ")));
    Console::error("[sched] " + lines.back());  // why the run exits incomplete: shown even when quiet
  }
  return lines;
}

CheckpointOutcome evaluate_checkpoint(const RunConfig& run_config, const EvaluationOptions& options,
                                      const RunTasks& tasks, const Checkpoint& checkpoint,
                                      const std::string& output_dir, Scheduler& scheduler, ProgressReporter& progress,
                                      const ScoredCallback& on_scored) {
  const auto t0 = Clock::now();
  RunConfig config = run_config;  // this checkpoint's view: its model and its output directory
  config.output = output_dir;
  config.models = {checkpoint.path};
  // The workers load the model while the inputs load, the plan is cut and its budget chosen, a
  // probe running in one of them (Scheduler::start_workers, probe); not when the journal may hold
  // every result already. With no journal yet (or --fresh) nothing is stored: they start before
  // the tokenizer and the tasks' requests load, else once the journal says what is left.
  const bool nothing_stored = options.fresh || !io::path_exists(RunJournal::path_in(config.output));
  if (nothing_stored) scheduler.start_workers(checkpoint.path);
  // A tokenizer or journal that does not load ends those workers without a word: its error is the one line.
  struct AbandonUnlessLoaded {
    Scheduler& scheduler;
    bool loaded = false;
    ~AbandonUnlessLoaded() {
      if (!loaded) scheduler.abandon_workers();
    }
  } early{scheduler};
  progress.phase(fmt::format("loading the tokenizer and the requests for {}", checkpoint.name));
  const RunInputs in = load_run_inputs(config, options.executable, checkpoint.path, &tasks.inputs);
  io::make_directories(config.output + "/logs");
  // Journal (run_journal.h): what an earlier run of this model and config already scored.
  RunJournal journal(config.output, checkpoint.fingerprint, in.model_dir, tasks.config_fp, in.requests, options.fresh);
  const std::optional<Sandbox> sandbox = code_sandbox(config, in);
  early.loaded = true;
  const int64_t host_available = available_host_bytes();
  if (!nothing_stored && journal.stored_items() < in.requests.size()) scheduler.start_workers(in.model_dir);
  progress.phase(fmt::format("tokenizing {} requests", format_count(static_cast<int64_t>(in.requests.size()))));
  Plan plan = make_plan(in.requests, *in.tokenizer, in.plan_options);
  progress.phase("choosing the batch budget");
  const Budget budget = choose_budget(config, options, in, journal, plan, &scheduler, host_available);
  log_plan(in, plan, budget.options);
  progress.set_extra("model", in.model_dir);
  progress.set_extra("tasks", config.tasks);

  Aggregator aggregator(in.tasks, in.requests);
  AggregatorSink scores_sink(aggregator, progress);
  // The code tasks' programs run beside generation (program_runs.h): a document's programs go to
  // the runner as soon as its generations are in, resumed ones included.
  std::optional<ProgramSink> programs;
  if (sandbox) programs.emplace(*sandbox, run_program_settings(config), journal, aggregator, progress);
  std::vector<RunSink*> sinks = {&scores_sink};
  if (programs) sinks.push_back(&*programs);
  const PlanRunReport ran = run_plan(plan, in, config.dtype, journal, scheduler, progress, sinks);
  const SchedulerReport& report = ran.scheduler;

  nlohmann::json code_execution = nlohmann::json::object();
  Aggregator::Documents docs = finish_documents(aggregator, programs, report, code_execution);
  const std::vector<std::string> quarantined = quarantine_lines(report);
  const size_t docs_total = docs.scored.size() + docs.incomplete.size();
  docs.incomplete.insert(docs.incomplete.begin(), quarantined.begin(), quarantined.end());
  const double wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  RunSummary summary =
      run_summary(config, in, budget, plan, report.stats, journal.summary(), wall_seconds, std::move(docs.incomplete));
  summary.timing = report.timing.summary(std::chrono::duration<double>(ran.started - t0).count());
  summary.code_execution = code_execution;
  CheckpointReports written;
  progress.phase("scoring and writing the report");
  try {
    written = write_checkpoint_reports(config, in, docs, summary);
  } catch (const std::exception& e) {
    if (report.fatal_error.empty()) throw;
    // The run failed already (e.g. a full disk): say why the report is missing, keep the original error.
    std::cerr << "[sched] cannot write the report: " << e.what() << "\n";
  }

  const char* state = run_state(report, docs.scored.size(), docs_total);
  log_outcome(state, plan, report, journal, docs.scored.size(), docs_total, wall_seconds, config.output);
  if (!report.fatal_error.empty()) {
    progress.finish(state);
    throw Error(report.fatal_error);
  }
  if (on_scored && !report.interrupted) on_scored(docs.scored, written.scores, summary, state);
  CheckpointOutcome outcome;
  outcome.state = state;
  outcome.table = written.table;
  outcome.exit_code = report.interrupted ? 128 + report.signal : docs.scored.size() == docs_total ? 0 : kExitIncomplete;
  return outcome;
}

}  // namespace gpueval
