// Many programs through one Sandbox, at most `max_sandboxes` at once: a queue and that many
// threads, each running one sandbox at a time (sandbox.h). Verdicts come back through a callback,
// called under the pool's lock (one at a time), in the order programs finish. May call common only.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "sandbox/sandbox.h"

namespace gpueval {

struct ProgramRequest {
  std::string program;
  SandboxLimits limits;
  ProgramMode mode = ProgramMode::kCodeEval;
};

// Runs every request; returns when all have their verdicts. A Verdict of kind kError is returned
// for a program the sandbox could not run (a failed system call), never an exception.
void run_programs(const Sandbox& sandbox, const std::vector<ProgramRequest>& requests, int max_sandboxes,
                  const std::function<void(size_t index, const Verdict& verdict)>& on_verdict);

// The default number of sandboxes at once: the cores the machine has (sched_getaffinity) less
// `busy_cores` (those CPU workers use), at least 1.
int default_max_sandboxes(int busy_cores);

}  // namespace gpueval
