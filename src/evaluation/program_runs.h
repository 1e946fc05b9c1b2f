// The programs of a checkpoint's code tasks (Task::runs_programs: humaneval's and mbpp's code_eval
// metrics), run in the sandbox (src/sandbox/) beside generation: a ProgramRunner takes a
// document's programs as soon as its generations are in and runs them on threads of its own, at
// most `max_sandboxes` at once, while the scheduler's loop goes on. Each program's execution key
// is the SHA-256 of the program, its limits, its mode (code_eval) and the sandbox and interpreter
// that run it; verdicts stored in the journal under their key are reused, and every new one is
// journaled by collect(), on the caller's thread (the journal's only thread), so a run resumed
// after a crash neither regenerates nor re-executes what was done. An "error" verdict (the
// sandbox could not run the program) is never stored and ends the run: a score with it would be
// wrong. In a run, a ProgramSink is the run loop's sink (run_loop.h) that feeds a ProgramRunner
// from the aggregator.
// May call sandbox/, store/ (through run_journal.h), aggregate/, run/progress and common/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "evaluation/run_journal.h"
#include "evaluation/run_loop.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "sandbox/sandbox.h"

namespace gpueval {

struct ProgramRunSettings {
  SandboxLimits limits;  // the defaults: 3 CPU seconds, 2GiB, ... (sandbox.h)
  int max_sandboxes = 0;  // 0: default_max_sandboxes(busy_cores)
  int busy_cores = 0;  // cores the run's CPU workers use (the default leaves them alone)
  int sandboxes() const;  // the number in effect
};

// How a program ended, for the samples file: "passed", "failed" or "timed out", and why.
struct ProgramOutcome {
  std::string verdict;
  std::string detail;
};

struct ProgramRunReport {
  ProgramVerdicts verdicts;  // every program asked for
  std::unordered_map<std::string, ProgramOutcome> outcomes;  // the same programs, with the detail
  int64_t run = 0, resumed = 0, passed = 0, failed = 0, timed_out = 0;
  double seconds = 0;  // from the first program run to the last verdict
  // results.json "code_execution": the sandbox, the limits and the counts above.
  nlohmann::json summary(const Sandbox& sandbox, const ProgramRunSettings& settings) const;
};

// What status.json and the progress line show while programs run.
struct ProgramRunStatus {
  int sandboxes_busy = 0, max_sandboxes = 0;
  int64_t programs_done = 0;  // verdicts collected (journaled), from the journal or run
  int64_t programs_queued = 0;  // waiting for a sandbox
  // {"sandboxes_busy", "max_sandboxes", "programs_done", "programs_queued"}
  nlohmann::json to_json() const;
};

// The sandbox and the settings a run config's code_execution asks for; `busy_cores`: the run's
// CPU workers (the default number of sandboxes leaves their cores alone).
SandboxOptions sandbox_options(const RunConfig::CodeExecution& config);
ProgramRunSettings program_run_settings(const RunConfig::CodeExecution& config, int busy_cores);

// The key a program's verdict is stored under.
std::string execution_key(const std::string& program, const SandboxLimits& limits, const Sandbox& sandbox);

class ProgramRunner {
 public:
  // `journal` (may be null: `gpueval merge` runs everything) must outlive the runner.
  ProgramRunner(const Sandbox& sandbox, ProgramRunSettings settings, RunJournal* journal);
  // Stops: queued programs are dropped; running ones end first (within their limits).
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;

  // Queues the programs not asked for before; one with a stored verdict is done at once.
  void submit(const std::vector<std::string>& programs);
  // Journals and counts the verdicts that came in since the last call (the run calls it with
  // every batch and every progress update, so a crash loses at most a tick's verdicts). An
  // "error" verdict is kept, not journaled: throw_if_failed() and finish() throw it.
  void collect();
  // Throws Error for the first "error" verdict collected, naming the program's first line and why.
  void throw_if_failed() const;
  ProgramRunStatus status() const;
  // Waits for every queued program, collecting as verdicts come in (`on_progress` after each
  // batch of them and at least every second); logs one line on stderr ("[exec] N programs: R from
  // the journal, ran K in S s with M sandboxes: P passed, F failed, T timed out").
  ProgramRunReport finish(const std::function<void(const ProgramRunStatus&)>& on_progress = {});

 private:
  struct Done {
    size_t index;  // into programs_
    Verdict verdict;
  };
  void work();
  void start_threads();

  const Sandbox& sandbox_;
  const ProgramRunSettings settings_;
  RunJournal* journal_;
  std::map<std::string, Journal::StoredVerdict> stored_;
  ProgramRunReport report_;
  std::vector<std::string> programs_;  // every program run here, by index
  std::vector<std::string> keys_;  // their execution keys
  std::chrono::steady_clock::time_point first_run_{};
  bool ran_any_ = false;
  std::string error_;  // the first "error" verdict, as a message

  mutable std::mutex mutex_;
  std::condition_variable work_ready_, done_ready_;
  std::deque<size_t> queue_;
  std::vector<Done> done_;
  int busy_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Code execution as a sink of the run loop (run_loop.h): once the journal's items are in and after
// every batch, the programs of the documents the aggregator completed go to a ProgramRunner
// (verdicts journaled, an "error" verdict ending the run with the next batch); each progress
// update collects verdicts; finish() runs the rest once generation is done. status.json's
// "code_execution" follows. Give it after the sink that feeds `aggregator`.
class ProgramSink : public RunSink {
 public:
  // Every argument must outlive the sink.
  ProgramSink(const Sandbox& sandbox, ProgramRunSettings settings, RunJournal& journal, Aggregator& aggregator,
              ProgressReporter& progress);

  void resumed(size_t batches_stored, size_t batches_left) override { hand(); }
  void batch_done() override { hand(); }
  void status(const SchedulerStatus& status, bool final) override;

  // For a run that neither failed nor was interrupted: throws an error a progress update kept,
  // then waits for every program (ProgramRunner::finish, progress shown as they end).
  ProgramRunReport finish();
  // results.json "code_execution" of what finish() returned.
  nlohmann::json summary(const ProgramRunReport& ran) const { return ran.summary(sandbox_, settings_); }

 private:
  void hand();  // the ready programs to the runner; throws an "error" verdict or a failed journal write

  const Sandbox& sandbox_;
  const ProgramRunSettings settings_;
  Aggregator& aggregator_;
  ProgressReporter& progress_;
  ProgramRunner runner_;
  std::string status_error_;  // a journal write that failed in status(): thrown with the next batch
};

// The aggregator's documents scored with the verdicts of `ran` (null: no program ran, as for a
// run without code tasks or one that failed), each code document given its programs' verdicts and
// details (DocRecord::programs, the samples file's "programs"; a program without one: verdict null).
// What a run (evaluation/checkpoint_evaluation) and a merge of shards (cluster/merge) both finish with.
Aggregator::Documents scored_documents(const Aggregator& aggregator, const ProgramRunReport* ran);

// Runs `programs` to the end (ProgramRunner: submit, finish).
ProgramRunReport run_task_programs(const std::vector<std::string>& programs, const Sandbox& sandbox,
                                   const ProgramRunSettings& settings, RunJournal* journal);

}  // namespace gpueval
