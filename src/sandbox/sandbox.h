// One program in a sandbox, with a verdict: the sandbox code tasks (HumanEval, MBPP) and
// `gpueval execute` run model-written programs in.
//
// Each program gets its own bubblewrap sandbox: every namespace unshared (no network; its own
// pid, ipc, uts, mount and user namespaces), --die-with-parent, --new-session, a cleared
// environment, a read-only view of the interpreter's files only (interpreter.h; no /etc, no home,
// no output folder), a fresh tmpfs working folder (/work) and /tmp, each of `tmpfs_size`, and the
// seccomp filter (seccomp_filter.h). When gpueval runs as root, bubblewrap runs as nobody (uid
// 65534): root's files stay unreadable through the user namespace's mapping, and RLIMIT_NPROC is
// enforced (it never is for root). The program's rlimits are set inside (python_entry.h).
//
// Limits hold for the sandbox's whole process tree: its CPU time (sampled every 10 ms from /proc,
// process_tree.h, and settled from the reaped processes' rusage) against `cpu_seconds`, so a
// verdict does not depend on the machine's load; a wall-clock ceiling only for programs that
// sleep; output (stdout and stderr) over `max_output` bytes. At a limit the sandbox's pid-namespace
// init is killed, which kills every process in it; nothing is left behind.
//
// A Sandbox is made once per process (it checks bubblewrap works here, probes the interpreter and
// builds the filter) and is then thread-safe: run() may be called from several threads at once.
// Making one marks the process a child subreaper (PR_SET_CHILD_SUBREAPER), because bubblewrap
// leaves each sandbox's init to be reaped by whoever is above it; run() reaps by pid only. May call
// common only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/interpreter.h"

namespace gpueval {

struct SandboxLimits {
  double cpu_seconds = 3.0;  // CPU time of the whole process tree
  double wall_seconds = 0;  // the ceiling for sleepers; 0: 10 + 3 * cpu_seconds
  int64_t memory = int64_t{2} << 30;  // address space per process, over the interpreter's own use
  int64_t file_size = int64_t{16} << 20;
  int64_t tmpfs_size = int64_t{64} << 20;  // each of /work and /tmp
  int64_t max_output = int64_t{1} << 20;  // stdout + stderr bytes
  int max_open_files = 64;
  int max_subprocesses = 16;  // processes and threads in the sandbox, its init and python included

  double wall_ceiling() const { return wall_seconds > 0 ? wall_seconds : 10.0 + 3.0 * cpu_seconds; }
};

// Throws Error("<where>: ...") for a value out of range: CPU seconds in (0, 3600], memory at least
// 64MiB, 1 to 4096 subprocesses.
void check_sandbox_limits(const SandboxLimits& limits, const std::string& where);

enum class ProgramMode {
  kCodeEval,  // lm-eval's code execution: exec() under its guard, output swallowed (python_entry.h)
  kScript,  // `python3 main.py`
};

struct Verdict {
  enum class Kind { kPassed, kFailed, kTimedOut, kError };
  Kind kind = Kind::kError;
  // Failed: the exception ("AssertionError", "NameError: name 'x' is not defined"), "output over N
  // bytes", or how the program ended without a result. Timed out: which limit. Error: why the
  // sandbox did not run it.
  std::string detail;
  double cpu_seconds = 0;  // of the whole tree
  double wall_seconds = 0;
  // Every process seen in the sandbox (host pid, start time): tests check none is left.
  std::vector<std::pair<pid_t, uint64_t>> processes;
};

// "passed", "failed", "timed out", "error".
const char* verdict_name(Verdict::Kind kind);

// {"verdict", "detail", "cpu_s", "wall_s"}, times in milliseconds' precision.
nlohmann::ordered_json to_json(const Verdict& verdict);

struct SandboxOptions {
  std::string python = "/usr/bin/python3";
  std::string bwrap = "/usr/bin/bwrap";
  // The same entry, limits and tree accounting without bubblewrap or seccomp: the program sees the
  // machine as the user running gpueval does. For machines without user namespaces, when the
  // programs are trusted; results.json says so.
  bool unsafe_no_sandbox = false;
  // Whether the caller has --unsafe-no-sandbox to offer when the sandbox does not start here
  // (`gpueval execute` and `gpueval run` do).
  bool offer_unsafe = true;
};

class Sandbox {
 public:
  // Checks the sandbox starts here by running an empty program; throws Error with one line saying
  // what to install or enable (bubblewrap, user namespaces, an interpreter nobody can read).
  explicit Sandbox(SandboxOptions options);

  // Runs one program to its verdict. A sandbox that has not started by the wall-clock ceiling
  // (bubblewrap never reported its namespace's first process) is no verdict on the program: it is
  // tried once more, then an "error" verdict ("the sandbox did not start within N s").
  Verdict run(const std::string& program, const SandboxLimits& limits, ProgramMode mode) const;

  const Interpreter& interpreter() const { return interpreter_; }
  const SandboxOptions& options() const { return options_; }
  // What results.json records: {"sandbox": "bwrap"|"none", "bwrap", "python", "python_version"}.
  nlohmann::json describe() const;

 private:
  Verdict run_once(const std::string& program, const SandboxLimits& limits, ProgramMode mode) const;

  SandboxOptions options_;
  Interpreter interpreter_;
  std::string seccomp_bpf_;
  std::string bwrap_version_;
};

}  // namespace gpueval
