// An evaluation run, end to end: `gpueval --gpus 0-3 configs/mmlu.yaml`.
// Loads the tasks and builds their requests, plans batches (independent of the
// number of workers), runs them on one worker process per device slot through
// the Scheduler, aggregates per-request results into per-document metrics, and
// writes the report files (results.json, samples_<task>.jsonl, report.md) plus
// status.json and per-worker logs into the output directory.
//
// Exit codes: 0 complete; 3 finished but incomplete (quarantined batches);
// 1 fatal error; 130/143 interrupted by SIGINT/SIGTERM (what was done is
// still written).
#pragma once

#include <string>

#include "gpueval/run_config.h"

namespace gpueval {

constexpr int kExitIncomplete = 3;

struct EvaluationOptions {
  std::string executable;  // this binary, exec'd in worker mode
  bool live_progress = false;  // redraw one progress line (stderr is a terminal)
};

int run_evaluation(const RunConfig& config, const EvaluationOptions& options);

// Where a task name is looked up, in order: $GPUEVAL_TASKS_DIR, <executable dir>/../tasks,
// the source tree's tasks/, then the config file's directory.
std::vector<std::string> task_search_dirs(const RunConfig& config, const std::string& executable);

}  // namespace gpueval
