// Scoring one checkpoint: the flow of DESIGN.md for one model, and its steps for the sharded
// flow (cluster/), which runs them on different machines. Its inputs are loaded and checked
// (run_inputs.h), planned (plan/planner.h), matched against the output's journal (run_journal.h),
// given a batch budget (the config's, the journal's, or calibration's), run on the scheduler's
// workers (run/scheduler.h), aggregated (aggregate/aggregator.h) and written as report files
// (gpueval/report.h). A single-checkpoint run and every checkpoint of a nightly run go through here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "evaluation/checkpoints.h"
#include "evaluation/run_inputs.h"
#include "evaluation/run_journal.h"
#include "gpueval/evaluation.h"
#include "gpueval/report.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {

// Called once a checkpoint is scored (not when it was interrupted): its complete documents, their
// scores (aggregate/aggregator.h) and the summary its reports were written with, and its state.
using ScoredCallback = std::function<void(const std::vector<DocRecord>& records, const Scores& scores,
                                          const RunSummary& summary, const std::string& state)>;

// The batch budget a checkpoint's plan is cut under, and where it came from: the config's
// (a number), the journal's (so a resumed run plans as the interrupted one did), or calibration's
// (probed, or read from the calibration cache).
struct Budget {
  PlanOptions options;
  std::string source = "config";  // config | journal | probed | cache
};

// The config's budget, else (batch_size auto and no batch_tokens) calibration's on `in.slots`: the
// cache's entry or one probe, the smallest over the devices. Re-cuts `plan` when it changes.
// With `scheduler`, a probe runs in the run's worker for the slot (Scheduler::probe), and a CPU
// worker's memory share is of `host_available_bytes` (MemAvailable before the workers started; 0:
// read now).
Budget calibrated_budget(const RunConfig& config, const EvaluationOptions& options, const RunInputs& in, Plan& plan,
                         Scheduler* scheduler = nullptr, int64_t host_available_bytes = 0);

// calibrated_budget(), except that a journal's budget wins for an auto budget (a resumed run
// plans as the interrupted one did); stores the budget in a new journal. Re-cuts `plan`.
Budget choose_budget(const RunConfig& config, const EvaluationOptions& options, const RunInputs& in,
                     RunJournal& journal, Plan& plan, Scheduler* scheduler = nullptr, int64_t host_available_bytes = 0);

// The scheduler of a run on `slots`: the config's dtype, load, fault limits, <output>/logs.
SchedulerOptions scheduler_options(const RunConfig& config, const EvaluationOptions& options,
                                   const std::vector<DeviceSlot>& slots);

// The "[sched] N tasks, M requests, B batches ..." lines (and truncation warnings) of a plan.
void log_plan(const RunInputs& in, const Plan& plan, const PlanOptions& po);

// results.json's "config", "batching" and "journal" and the rest of what write_reports needs:
// `stats` is what was computed, `journal` goes in as results.json's "journal".
RunSummary run_summary(const RunConfig& config, const RunInputs& in, const Budget& budget, const Plan& plan,
                       const ExecutionStats& stats, const nlohmann::json& journal, double wall_seconds,
                       std::vector<std::string> incomplete);

// What write_checkpoint_reports scored and wrote: the scores of the documents (pointing into
// them), and report.md's table of scores.
struct CheckpointReports {
  Scores scores;
  std::string table;
};

// Scores the documents (score_run) and writes their report files (gpueval/report.h) into
// config.output; the lm_eval: tasks' results (docs.outside) are scored by lm-eval first
// (lm_eval_tasks.h). When lm-eval fails, the report is written without them, saying so among what is
// incomplete, and its error is thrown after (the journal keeps every result: a rerun scores them).
CheckpointReports write_checkpoint_reports(const RunConfig& config, const RunInputs& in,
                                           const Aggregator::Documents& docs, const RunSummary& summary);

// One line per quarantined batch ("batch B quarantined after N attempts (why); requests ..."), each
// logged as an error (shown even when quiet): a run's report lists them first among what is incomplete.
std::vector<std::string> quarantine_lines(const SchedulerReport& report);

// Prints a report's table of scores, then "full report: <report_dir>/report.md", to
// options.scores_out (null: nothing), under "## <heading>" when there is one (a checkpoint of a
// nightly run). The console's status line is erased first, as stdout may share its terminal.
void show_scores(const EvaluationOptions& options, const std::string& heading, const std::string& table,
                 const std::string& report_dir);

// Scores one checkpoint into `output_dir` with the scheduler's workers through the run loop
// (run_loop.h), writes its report files, hands its complete documents and their scores to
// `on_scored`, and returns its state (complete | incomplete | interrupted) and exit code. A fatal
// error is thrown as Error.
// The flow of DESIGN.md: inputs, plan, journal, budget, scheduler, aggregator, report.
struct CheckpointOutcome {
  std::string state;
  int exit_code = 0;
  std::string table;  // report.md's table of scores (show_scores); empty: no report was written
};

// `tasks`: the run's tasks and config fingerprint (load_run_tasks), shared by its checkpoints.
CheckpointOutcome evaluate_checkpoint(const RunConfig& run_config, const EvaluationOptions& options,
                                      const RunTasks& tasks, const Checkpoint& checkpoint,
                                      const std::string& output_dir, Scheduler& scheduler, ProgressReporter& progress,
                                      const ScoredCallback& on_scored);

}  // namespace gpueval
