#include "evaluation/run_loop.h"

#include <utility>

namespace gpueval {

PlanRunReport run_plan(const Plan& plan, const RunInputs& in, const std::string& dtype, RunJournal& journal,
                       Scheduler& scheduler, ProgressReporter& progress, const std::vector<RunSink*>& sinks) {
  PlanRunReport out;
  std::vector<std::vector<ItemResult>> stored(in.requests.size());
  // The batches not all in the journal (a generation batch without the sequences stored).
  const Plan todo = journal.remaining(plan, stored, generation_rows_independent_on(in, dtype));
  for (std::vector<ItemResult>& items : stored) {
    for (RunSink* sink : sinks) sink->items(items);
    std::vector<ItemResult>().swap(items);  // handed on: the sinks keep what they need
  }
  out.batches = plan.batches.size();
  out.batches_resumed = plan.batches.size() - todo.batches.size();
  for (RunSink* sink : sinks) sink->resumed(out.batches_resumed, todo.batches.size());
  out.started = std::chrono::steady_clock::now();
  out.scheduler = scheduler.run(
      todo, in.model_dir,
      [&](const Batch&, std::vector<ItemResult> items, const std::string&) {
        journal.record(items);  // committed before it counts; a failure ends the run (scheduler.h)
        for (RunSink* sink : sinks) sink->items(items);
        for (RunSink* sink : sinks) sink->batch_done();
      },
      [&](const SchedulerStatus& s, bool final) {
        for (RunSink* sink : sinks) sink->status(s, final);
        progress.update(s, final);
      },
      [&](const Batch&, const std::vector<ItemResult>& items) { journal.record_ahead(items); });
  return out;
}

}  // namespace gpueval
