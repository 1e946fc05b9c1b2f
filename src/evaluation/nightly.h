// The nightly loop: several checkpoints (a list or a glob, checkpoints.h) scored into
// <output>/<name>/ by one set of workers, oldest first, and the trend report over all of them.
#pragma once

#include <vector>

#include "evaluation/checkpoints.h"
#include "evaluation/history_recorder.h"
#include "evaluation/run_inputs.h"
#include "gpueval/evaluation.h"
#include "gpueval/run_config.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {

// The nightly loop: every checkpoint into <output>/<name>/, oldest first, with one set of workers
// that switch checkpoints in place. Checkpoints the history holds complete for this config are
// skipped (--fresh scores them again). A checkpoint that fails (a bad file, workers that keep
// dying) is reported and the others are still scored. status.json carries a line per
// checkpoint; report.md and report.html in <output> show the trend of every checkpoint the
// history holds for this config.
// `tasks`: the config's tasks, loaded once for every checkpoint.
int run_checkpoints(const RunConfig& config, const EvaluationOptions& options, const RunTasks& tasks,
                    const std::vector<Checkpoint>& checkpoints, Scheduler& scheduler, ProgressReporter& progress,
                    HistoryRecorder& recorder);

}  // namespace gpueval
