// The processes of a sandbox, read from /proc: every live process reachable from a root (the
// sandbox's pid-namespace init) through /proc/P/task/T/children, and the CPU time they have used.
// A daemonised child is re-parented to the init, so it stays in the walk. Needs a kernel with
// CONFIG_PROC_CHILDREN (Debian's and most distributions' have it). May call common only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace gpueval {

struct ProcessTreeSample {
  // utime + stime of every live process (its threads, live and exited, included) + cutime + cstime
  // (the descendants it reaped), in seconds.
  double cpu_seconds = 0;
  // (host pid, start time in clock ticks since boot): a pid with its start time names one process
  // even after the pid is reused.
  std::vector<std::pair<pid_t, uint64_t>> processes;
};

// An empty sample when `root` is gone.
ProcessTreeSample sample_process_tree(pid_t root);

// Whether the process `pid` that started at `start_ticks` still exists (a zombie counts).
bool process_alive(pid_t pid, uint64_t start_ticks);

}  // namespace gpueval
