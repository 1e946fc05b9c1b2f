// How a worker process is started: the one launcher (fork+exec of `gpueval worker` with the
// slot's environment, or a CPU worker forked ahead by worker_prefork.h) and the first Hello that
// goes with it (worker_hello.h). The scheduler and calibration's probe both start workers through
// here, so a worker is the same process whichever of them asked. launch_worker may be called from
// any thread.
#pragma once

#include <string>

#include "run/devices.h"
#include "run/subprocess.h"
#include "run/worker_hello.h"

namespace gpueval {

// The first Hello for a worker that launch_worker started on `slot`.
WorkerHello first_hello(const DeviceSlot& slot, const std::string& model, const std::string& dtype, double heartbeat_s);

// Spawns `executable worker` for `slot`: OMP_NUM_THREADS is the slot's thread count (at least 1)
// and, on a GPU, CUDA_VISIBLE_DEVICES its index, so the worker sees that GPU alone as cuda:0; the
// worker's stdout and stderr are appended to `log_path`. A CPU worker of this program is a process
// forked ahead when one waits (worker_prefork.h), else fork+exec. Throws Error as Child::spawn does.
Child launch_worker(const DeviceSlot& slot, const std::string& executable, const std::string& log_path);

}  // namespace gpueval
