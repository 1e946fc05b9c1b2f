// CPU workers forked ahead: at the start of `gpueval run`, while the process still has one thread,
// it forks one waiting process per CPU worker, so that the scheduler's first launches skip exec
// and LibTorch's start-up (its 289 libraries and op registration, ~0.6 s a process; a short run
// pays it before any batch). A waiting process blocks on its command pipe; launch_worker hands it
// a kLaunch frame (its log file and environment) and it becomes a worker exactly as an exec'd one
// would: fds 3 and 4 its pipes, stdin /dev/null, its own process group, killed when its parent
// dies, the handled signals back to default, OpenBLAS's pool sized from OMP_NUM_THREADS.
// Restarts, GPU workers and anything other than this program's own `worker` are exec'd as before
// (worker_launch.h); GPUEVAL_PREFORK=0 turns this off.
//
// A fork copies only the calling thread, so forking is safe only before the first thread: the
// caller is run_main, right after parsing, before LibTorch's thread pools exist; prefork_workers
// stops OpenBLAS's server threads (as OpenBLAS's own fork handler does), checks that the process
// then has one thread, and forks nothing otherwise. It owns the waiting
// processes until take_preforked_worker hands one over as a Child; the ones never taken see end of
// stream or SIGKILL when the parent exits. Forks, pipes and reaps through common/process; calls
// run/subprocess and run/wire.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/subprocess.h"

namespace gpueval {

// What the process is after prefork_workers returns: the parent (go on with the command), a
// forked process that was launched (run run_worker() now), or one never launched (exit 0).
enum class PreforkRole { kParent, kWorker, kUnused };

// Forks `count` waiting processes. Never throws: a failure forks fewer. In a forked process it
// returns only once that process is launched (kWorker: set up as launch_worker sets up a worker)
// or never will be (kUnused: end of stream, a bad kLaunch frame, or a log it cannot open, said on
// stderr).
PreforkRole prefork_workers(int count);

// The kLaunch frame's payload: the log the worker's stdout and stderr are appended to ("": the
// parent's) and the variables set in its environment.
struct LaunchRequest {
  std::string log_path;
  std::vector<std::pair<std::string, std::string>> env;
};
nlohmann::json to_json(const LaunchRequest& r);
LaunchRequest launch_request_from_json(const nlohmann::json& j);  // Error naming the field

// A waiting process made the worker `options` describes, or nullopt when none is waiting or the
// options are not a CPU worker of this program: argv {this executable, "worker"}, a new process
// group, die_with_parent, and no environment but OMP_NUM_THREADS. Throws Error as Child::spawn
// does when the log cannot be opened. Thread-safe.
std::optional<Child> take_preforked_worker(const SpawnOptions& options);

}  // namespace gpueval
