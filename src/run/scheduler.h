// The Scheduler runs a Plan on one worker process per device slot and hands
// every finished batch to a callback. It is the only place that knows about
// processes: it fork+execs `gpueval worker` per slot (CUDA_VISIBLE_DEVICES and
// thread counts set per worker, stdout/stderr to a per-worker log file), sends
// batches to whichever worker is idle (the next batch with the prefix it already
// holds, Batch::prefix_id, else one whose prefix no other worker holds, else the
// next in plan order: the pure policy of dispatch.h), and reads results, heartbeats and
// errors back over checksummed frames (wire.h, through one FrameChannel per worker). A busy worker
// whose generation batch is draining gets its next generation batch with the same prefix ahead of
// the result (choose_ahead), so that batch's sequences take the rows that free: a worker holds at
// most two batches, each answered on its own. Workers
// are started by worker_launch.h with a typed Hello (worker_hello.h); the signal mask is
// signals.h's.
//
// Faults: a worker that exits, dies, sends a bad frame, breaks the protocol or
// misses its heartbeat is killed if needed and restarted with backoff; its
// in-flight batches go back to the front of the queue, in the order they were sent (each without
// the sequences that ended ahead of it). A batch that has failed
// `max_attempts` times is quarantined: the run goes on without it and the
// report says so. SIGINT/SIGTERM stop dispatch, end every worker and return.
// Workers never outlive the scheduler: each is in its own process group with a
// parent-death signal, and every Child is reaped before run() returns.
//
// Workers outlive one run(): a nightly run scores checkpoint after checkpoint with
// one Scheduler, and a worker holding the previous checkpoint loads the next one in
// place (a second Hello frame; it frees the old weights first), so the process,
// its CUDA context and its threads stay. run() after an interruption or a fatal
// error starts new processes. The destructor (or shutdown()) ends every worker.
//
// Workers may start before run(): start_workers() launches them and returns at once, so they load
// while the caller plans, and probe() measures batch budgets (batch_probe.h) in a slot's fresh
// worker, which then stays for run(): a first run on a new model loads it once per worker, not once
// more for a probe process, and the prefix the probe computed stays in that worker's cache: run()
// sends it the batches that start with that prefix first.
//
// Single-threaded: run() is an event loop around ppoll(); signals are blocked
// except inside ppoll. Not thread-safe; one run() at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/planner.h"
#include "run/batch_probe.h"
#include "run/devices.h"
#include "run/executor.h"

namespace gpueval {

struct SchedulerOptions {
  std::vector<DeviceSlot> slots;
  std::string executable;  // the gpueval binary to exec in worker mode
  std::string dtype = "auto";
  // mmap: each worker maps the checkpoint; broadcast: at the first start of the workers, worker 0
  // reads it and NCCL sends it to the others (weight_broadcast.h). A broadcast these slots or this
  // build cannot do becomes mmap, said in one line on stderr; restarted workers and later
  // checkpoints load with mmap.
  std::string load = "mmap";
  std::string log_dir;  // <log_name>_<slot>.log files go here; "": workers write to this process's stderr
  std::string log_name = "worker";  // "probe" for a probe's own worker (probe_on_slot, calibration.h)
  int64_t max_attempts = 3;
  double heartbeat_timeout_s = 30;
  double heartbeat_period_s = 1;
  int64_t max_worker_restarts = 10;  // per slot
};

struct WorkerStatus {
  std::string name;  // "cpu:0", "cuda:1"
  std::string state;  // starting | idle | busy | restarting | retired
  pid_t pid = 0;
  int64_t batch = -1;  // in flight (the one it computes), or -1
  int64_t batches_in_flight = 0;  // 2 while a next batch, sent ahead, joins its running set
  int64_t batches_done = 0;
  int64_t tokens_done = 0;
  double tokens_per_second = 0;  // over the batches it finished
  double heartbeat_age_s = 0;
  int64_t restarts = 0;
};

// Where one run()'s time went, measured by the scheduler's clock (not derived from other figures):
// the compute window is from the first batch sent to a worker to the last result received, so it
// holds no model load, tokenizing or planning before it and no report writing after it (it does
// hold a worker that is still loading while another computes). A worker's busy time is the time it
// had a batch in flight (sent to result received; two in flight together count once); its load time is what its Hello
// reply said.
struct WorkerTiming {
  std::string name;
  double load_s = -1;  // its model load, as the worker measured it; -1: not loaded in this run's view
  double busy_s = 0;
  int64_t batches = 0;
  int64_t tokens_requested = 0;  // the requests' tokens in its batches (item costs): what no reuse computes
  int64_t tokens_computed = 0;  // real (unpadded) tokens its forwards ran, prefixes included
  int64_t tokens_scored = 0;  // rows through the output head: loglikelihood targets, generated tokens
};

struct RunTiming {
  double first_batch_s = -1;  // run() called to the first batch sent; -1: no batch was sent
  double compute_s = 0;  // the compute window; 0: no result came back
  std::vector<WorkerTiming> workers;
  nlohmann::json to_json() const;  // {"first_batch_s", "compute_s", "workers": [{name, load_s, busy_s, ...}]}
  // results.json's "timing": to_json() plus `before_run_s` (the caller's time before run(): inputs,
  // plan, probe) and the totals and rates over the compute window (null where it is 0).
  nlohmann::json summary(double before_run_s) const;
};

struct SchedulerStatus {
  int64_t batches_total = 0, batches_done = 0, batches_quarantined = 0;
  int64_t tokens_total = 0, tokens_done = 0;
  int64_t items_ahead = 0;  // items that came ahead of their batch's result (Scheduler::run's on_items)
  double elapsed_s = 0, eta_s = -1;  // -1: unknown yet
  std::vector<WorkerStatus> workers;
  RunTiming timing;  // so far: the window ends at the latest result
};

struct QuarantinedBatch {
  int64_t batch_id;
  int64_t attempts;
  std::string last_failure;
  std::vector<int64_t> request_indices;
};

struct SchedulerReport {
  bool interrupted = false;
  int signal = 0;  // SIGINT or SIGTERM when interrupted
  std::string fatal_error;  // non-empty: the run could not go on (e.g. the model does not load)
  std::vector<QuarantinedBatch> quarantined;
  int64_t batches_done = 0;
  int64_t worker_restarts = 0;
  double wall_seconds = 0;
  RunTiming timing;
  ExecutionStats stats;  // summed over the batches that finished (tokens computed, OOM splits)
};

class Scheduler {
 public:
  using ResultCallback =
      std::function<void(const Batch& batch, std::vector<ItemResult> items, const std::string& worker)>;
  using StatusCallback = std::function<void(const SchedulerStatus& status, bool final)>;
  using ItemsCallback = std::function<void(const Batch& batch, const std::vector<ItemResult>& items)>;

  explicit Scheduler(SchedulerOptions options);  // starts no process yet
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Runs `plan` on the checkpoint in `model_dir` to completion, interruption or a fatal error.
  // `on_result` is called once per finished batch, in completion order; `on_status` about
  // once a second. Workers stay up afterwards unless the run was interrupted or failed.
  // An exception thrown by `on_result` is a fatal error: its message becomes fatal_error,
  // no further result is delivered and the workers are ended.
  // `on_items` hears of items that are final before their batch is (a generation batch's sequences
  // as they end, kItems frames; executor.h), so the caller can journal them; on_result still gets
  // the whole batch. A batch whose worker fails after some of its items came ahead is sent again
  // without them (logged "[sched] batch B goes on without its K items that ended ahead"), and
  // on_result gets them merged back in the batch's order. Exceptions as for on_result.
  SchedulerReport run(const Plan& plan, const std::string& model_dir, const ResultCallback& on_result,
                      const StatusCallback& on_status, const ItemsCallback& on_items = nullptr);
  // Starts, without waiting for them, the workers that can load `model_dir` beside a batch-budget
  // probe and have no process yet: every CPU slot (a probe measures its own process) and the first
  // slot of each GPU (where a probe runs: probe() uses that worker); none with load: broadcast,
  // whose ranks must start together in run(). Returns how many it started.
  int start_workers(const std::string& model_dir);
  // Probes batch budgets on `slot` (the first slot of its device) in that slot's worker, started
  // here if it is not yet, loading `model_dir`; the worker stays up for run(). Absent when the
  // worker has run a batch, was probed, or holds another checkpoint (its resident memory is no longer
  // the model's alone, so its peaks would mislead), and with load: broadcast: the caller probes in a
  // process of its own (probe_on_slot, calibration.h). Error naming the slot when the probe fails;
  // that worker is ended, and run() starts a new one.
  std::optional<ProbeResult> probe(const DeviceSlot& slot, const std::string& model_dir, const ProbeOptions& options);
  // Ends every worker (a Shutdown frame, then signals after a few seconds); idempotent.
  void shutdown();
  // Ends every worker at once, by signals, without a word on how each ended: for workers started
  // before a run whose inputs then failed to load (that error is the one the user reads).
  void abandon_workers();

 private:
  struct Pool;
  SchedulerOptions options_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace gpueval
