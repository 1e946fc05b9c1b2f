// An evaluation run, end to end: `gpueval --gpus 0-3 configs/mmlu.yaml`.
// Loads the tasks and builds their requests, plans batches (independent of the
// number of workers), runs them on one worker process per device slot through
// the Scheduler, aggregates per-request results into per-document metrics, and
// writes the report files (results.json, samples_<task>.jsonl, report.md) plus
// status.json and per-worker logs into the output directory. Every finished
// batch is committed to <output>/journal.sqlite first (run_journal.h), so
// running the same command again resumes: only missing requests are computed.
//
// Each report written, its table of scores (report.md's) and where the report is go to
// EvaluationOptions::scores_out: the command line prints them on stdout, its logs on stderr.
//
// Several checkpoints (a list or a glob: checkpoints.h) make a nightly run: each is scored into
// <output>/<name>/ by one set of workers, oldest first, skipping those the history database
// (history.h) already holds for this config, and <output>/report.md and report.html show the
// trend (trend_report.h). Every scored checkpoint, one alone too, goes into the history.
//
// Exit codes: 0 complete; 3 finished but incomplete (quarantined batches);
// 4 a score regressed (fail_on_regression); 1 fatal error (including a journal that cannot be
// written, e.g. a full disk; nightly: a checkpoint failed, the others were scored); 130/143
// interrupted by SIGINT/SIGTERM (what was done is
// still written); 5 the output folder is in use by another gpueval (one run per output folder:
// the holder's pid, host and start time are named; --wait waits for it instead).
#pragma once

#include <iosfwd>
#include <string>

#include "gpueval/run_config.h"

namespace gpueval {

constexpr int kExitIncomplete = 3;
constexpr int kExitRegression = 4;  // --fail-on-regression: a score fell by more than the points given
constexpr int kExitBusy = 5;  // the output folder is locked by another run

struct EvaluationOptions {
  std::string executable;  // this binary, exec'd in worker mode
  bool live_progress = false;  // redraw one progress line (stderr is a terminal)
  bool recalibrate = false;  // probe batch budgets even when the calibration cache has them
  bool fresh = false;  // --fresh: start the output's journal over instead of resuming from it
  bool wait = false;  // --wait: wait for another run that holds the output folder, instead of exiting 5
  std::string command;  // this command line, recorded in the output folder's lock for others to see
  // Where each report's table of scores and the path of its report.md are printed once it is
  // written (the command line's stdout); null: nowhere.
  std::ostream* scores_out = nullptr;
};

int run_evaluation(const RunConfig& config, const EvaluationOptions& options);

}  // namespace gpueval
