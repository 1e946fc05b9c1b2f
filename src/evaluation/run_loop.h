// The one loop every run goes through (a one-machine run's checkpoint, a nightly run's, a shard's
// share of a sharded plan): the plan is matched against the journal (run_journal.h), the items it
// holds go to the sinks at once, and the batches it lacks run on the scheduler's workers
// (run/scheduler.h), each batch's items committed to the journal before any sink sees them. The
// sinks are what the caller does with the items: the aggregator's, the code tasks' programs
// (ProgramSink, program_runs.h), a shard's count of batches. Calibration measures budgets in a
// worker (Scheduler::probe) and runs no plan, so it has no loop here.
// Single-threaded: everything is called on the caller's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "evaluation/run_inputs.h"
#include "evaluation/run_journal.h"
#include "plan/item_result.h"
#include "plan/planner.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {

// What takes a run's items beside the journal. run_plan calls the sinks in the order given; an
// exception from one while the scheduler runs ends the run as a failed journal write does (the
// scheduler's fatal_error), before it (the journal's items) it propagates. Each method does
// nothing unless overridden.
class RunSink {
 public:
  virtual ~RunSink() = default;
  // Items the journal held (one request's at a time), or a computed batch's once journaled.
  virtual void items(const std::vector<ItemResult>& items) {}
  // Once every stored item went to every sink: how many of the plan's batches the journal held
  // whole, and how many are left to compute.
  virtual void resumed(size_t batches_stored, size_t batches_left) {}
  // After a computed batch's items went to every sink.
  virtual void batch_done() {}
  // Each progress update of the scheduler, before the progress reporter's own (final: the last).
  virtual void status(const SchedulerStatus& status, bool final) {}
};

struct PlanRunReport {
  SchedulerReport scheduler;
  size_t batches = 0;  // in the plan
  size_t batches_resumed = 0;  // held whole by the journal: not computed
  std::chrono::steady_clock::time_point started;  // when the scheduler began on the rest
};

// Runs `plan` (of `in`'s requests, for in.model_dir in `dtype`) to its end: the journal's items
// to the sinks, the rest computed, journaled and handed to the sinks batch by batch, the
// journal's ahead items (a generation's ended sequences) committed as they come, and `progress`
// updated after the sinks. Returns the scheduler's report (interrupted, fatal_error, quarantined
// batches: the caller's to act on).
PlanRunReport run_plan(const Plan& plan, const RunInputs& in, const std::string& dtype, RunJournal& journal,
                       Scheduler& scheduler, ProgressReporter& progress, const std::vector<RunSink*>& sinks);

}  // namespace gpueval
