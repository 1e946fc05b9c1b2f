// The programs of a checkpoint's code tasks (Task::runs_programs: humaneval's code_eval pass@k),
// run in the sandbox (src/sandbox/) once its generations are in, before its documents are scored.
// Each program's execution key is the SHA-256 of the program, its limits, its mode (code_eval) and
// the sandbox and interpreter that run it; verdicts stored in the journal under their key are
// reused, the others run at most `max_sandboxes` at once, each journaled as it ends, so a run
// resumed after a crash runs only what was not finished. An "error" verdict (the sandbox could
// not run the program) is never stored and ends the run: a score with it would be wrong.
// May call sandbox/, store/ (through run_journal.h) and common/.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evaluation/run_journal.h"
#include "gpueval/task.h"
#include "sandbox/sandbox.h"

namespace gpueval {

struct ProgramRunSettings {
  SandboxLimits limits;   // the defaults: 3 CPU seconds, 2GiB, ... (sandbox.h)
  int max_sandboxes = 0;  // 0: every core (generation is over when programs run)
};

struct ProgramRunReport {
  ProgramVerdicts verdicts;  // every program asked for
  int64_t run = 0, resumed = 0, passed = 0, failed = 0, timed_out = 0;
  double seconds = 0;
  // results.json "code_execution": the sandbox, the limits and the counts above.
  nlohmann::json summary(const Sandbox& sandbox, const ProgramRunSettings& settings) const;
};

// The key a program's verdict is stored under.
std::string execution_key(const std::string& program, const SandboxLimits& limits, const Sandbox& sandbox);

// Runs `programs` (or takes their verdicts from the journal; without one, as `gpueval merge` does
// for a sharded run, runs them all); logs one line on stderr
// ("[exec] N programs: R from the journal, ran K in S s with M sandboxes: P passed, F failed,
// T timed out"). Throws Error on an "error" verdict, naming the program's first line and why.
ProgramRunReport run_task_programs(const std::vector<std::string>& programs, const Sandbox& sandbox,
                                   const ProgramRunSettings& settings, RunJournal* journal);

}  // namespace gpueval
