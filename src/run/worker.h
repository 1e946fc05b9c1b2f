// The worker process: `gpueval worker`, started by the scheduler with fork+exec
// (never run by hand). It reads frames on fd 3 and writes frames on fd 4
// (wire.h): a Hello that names the model, device, dtype and thread count;
// then Work frames, each a planned batch, answered by a Result frame with one
// ItemResult per work item (a generation batch's sequences also one kItems frame each as they
// end; a Work frame that arrives while a generation batch drains, with the same prefix, joins its
// running set: executor.h's execute_generation, answered as its own batch); or Probe frames (batch_probe.h options),
// answered by a Result frame {"probe", "device", "dtype"}; Shutdown or EOF ends it. A background thread sends a
// Heartbeat every `heartbeat_s` seconds, from before the model starts loading, so the scheduler can tell a slow worker
// from a hung one. The worker owns its model replica, tokenizer, KV caches and the shared prefixes of recent batches
// (prefix_cache.h), seeds sampling per request (the planner put the seed on each item), and never writes a report.
//
// Test-only fault injection, read from the environment at start-up:
//   GPUEVAL_FAULT=crash:<request index>    abort() on a batch holding that request
//   GPUEVAL_FAULT=corrupt:<request index>  answer that batch with a corrupted frame
//   GPUEVAL_FAULT=hang:<request index>     stop heartbeats and hang on that batch
//   GPUEVAL_FAULT=slow:<milliseconds>      sleep that long before every batch
//   GPUEVAL_FAULT=oom:<tokens>             every forward of more than <tokens> padded tokens throws
//                                          c10::OutOfMemoryError, as a full GPU does (the batch is split)
//   (and the item and look-ahead faults crash-items, hold-items, twice-items, crash-join: worker.cpp)
//   GPUEVAL_FAULT_ONCE=<path>              fire the fault only once per run: the worker that
//                                          creates <path> (O_EXCL) fires, every later one does not
#pragma once

namespace gpueval {

// Runs the worker loop on the inherited fds; returns the process exit code.
int run_worker();

}  // namespace gpueval
