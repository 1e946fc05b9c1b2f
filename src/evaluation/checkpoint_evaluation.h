// Scoring one checkpoint: the flow of DESIGN.md for one model. Its inputs are loaded and checked
// (run_inputs.h), planned (plan/planner.h), matched against the output's journal (run_journal.h),
// given a batch budget (the config's, the journal's, or calibration's), run on the scheduler's
// workers (run/scheduler.h), aggregated (aggregate/aggregator.h) and written as report files
// (gpueval/report.h). A single-checkpoint run and every checkpoint of a nightly run go through here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evaluation/checkpoints.h"
#include "gpueval/evaluation.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {

// Called once a checkpoint is scored (not when it was interrupted): its complete documents, the
// results.json written for it, and its state.
using ScoredCallback = std::function<void(const std::vector<DocRecord>& records, const nlohmann::ordered_json& results,
                                          const std::string& state)>;

// The batch budget a checkpoint's plan is cut under, and where it came from: the config's
// (a number), the journal's (so a resumed run plans as the interrupted one did), or calibration's
// (probed, or read from the calibration cache). Re-cuts `plan` when the budget changes.
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
                                      Scheduler& scheduler, ProgressReporter& progress, const ScoredCallback& on_scored);

}  // namespace gpueval
