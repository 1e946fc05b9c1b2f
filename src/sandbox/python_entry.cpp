#include "sandbox/python_entry.h"

namespace gpueval {

const char* const kPythonEntry = R"PY(# gpueval's sandbox entry (src/sandbox/python_entry.h says what it does).
import os, sys


def _limits(cpu, memory, file_size, open_files, processes):
    import resource

    def cap(which, soft, hard=None):
        resource.setrlimit(which, (soft, soft if hard is None else hard))

    with open("/proc/self/status") as f:
        used = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    cap(resource.RLIMIT_CPU, cpu + 1, cpu + 2)
    cap(resource.RLIMIT_AS, used + memory)
    cap(resource.RLIMIT_FSIZE, file_size)
    cap(resource.RLIMIT_NOFILE, open_files)
    cap(resource.RLIMIT_NPROC, processes)
    cap(resource.RLIMIT_CORE, 0)


def _guard():
    import builtins, faulthandler, shutil, subprocess

    faulthandler.disable()
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                 "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    for name in ("rmtree", "move", "chown"):
        setattr(shutil, name, None)
    subprocess.Popen = None
    builtins.exit = None
    builtins.quit = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


def _main():
    import contextlib, io, json

    mode = sys.argv[1]
    cpu, memory, file_size, open_files, processes = (int(a) for a in sys.argv[2:7])
    with open(sys.argv[7], encoding="utf-8") as f:
        program = f.read()
    write, dumps, leave = os.write, json.dumps, os._exit
    os.closerange(4, 1 << 16)
    sys.path[0] = os.getcwd()
    _limits(cpu, memory, file_size, open_files, processes)

    class Unreadable(io.StringIO):
        def read(self, *args, **kwargs):
            raise OSError

        def readline(self, *args, **kwargs):
            raise OSError

        def readlines(self, *args, **kwargs):
            raise OSError

        def readable(self, *args, **kwargs):
            return False

    outcome = {"result": "passed"}
    try:
        if mode == "code_eval":
            sink = Unreadable()
            _guard()
            stdin = sys.stdin
            sys.stdin = sink
            try:
                with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                    exec(program, {})
            finally:
                sys.stdin = stdin
        else:
            sys.argv = ["main.py"]
            try:
                exec(compile(program, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            except SystemExit as e:
                if e.code not in (None, 0):
                    raise
    except BaseException as e:
        outcome = {"result": "failed", "error": type(e).__name__, "message": str(e)[:1000]}
        if mode != "code_eval":
            import traceback

            traceback.print_exc()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    write(3, (dumps(outcome) + "\n").encode())
    leave(0)


_main()
)PY";

}  // namespace gpueval
