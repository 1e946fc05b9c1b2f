// The code sandbox (src/sandbox/): lm-eval's code_eval semantics in code_eval mode, and a hostile
// battery in script mode (no guard: the strongest program), each checking its verdict, that the
// host is unchanged (a canary file, a listener on 127.0.0.1, a sentinel process, the test's own
// output folder) and that no process the sandbox ran is left. Needs bubblewrap and unprivileged
// user namespaces; without them each test skips saying why, unless GPUEVAL_REQUIRE_SANDBOX=1
// (scripts/test.sh sets it, so CI fails instead of skipping).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sandbox/process_tree.h"
#include "sandbox/program_pool.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp_filter.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = Verdict::Kind;

// The one Sandbox of this test process, or why there is none.
const Sandbox* shared_sandbox(std::string* why) {
  static std::unique_ptr<Sandbox> sandbox;
  static std::string error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      sandbox = std::make_unique<Sandbox>(SandboxOptions{});
    } catch (const Error& e) {
      error = e.what();
    }
  }
  *why = error;
  return sandbox.get();
}

#define GPUEVAL_REQUIRE_SANDBOX(var)                                                                  \
  std::string why_##var;                                                                              \
  const Sandbox* var = shared_sandbox(&why_##var);                                                    \
  if (!var) {                                                                                         \
    const char* require = std::getenv("GPUEVAL_REQUIRE_SANDBOX");                                     \
    if (require && std::string(require) == "1") FAIL() << "GPUEVAL_REQUIRE_SANDBOX=1: " << why_##var; \
    GTEST_SKIP() << "no code sandbox here: " << why_##var;                                            \
  }

// A second of CPU time; the wall-clock ceiling far above it, so a loaded machine (ctest -j2) cannot
// turn a CPU-time verdict into a wall-clock one.
SandboxLimits quick_limits(double wall_seconds = 30.0) {
  SandboxLimits l;
  l.cpu_seconds = 1.0;
  l.wall_seconds = wall_seconds;
  l.memory = int64_t{512} << 20;
  return l;
}

// Every process the sampler saw is gone. (A program that ends within a few milliseconds may be
// gone before the first sample: the daemon test checks that one was seen.)
void expect_nothing_left(const Verdict& v) {
  for (const auto& [pid, start] : v.processes) EXPECT_FALSE(process_alive(pid, start)) << "pid " << pid << " is left";
}

TEST(SandboxFilter, RefusesWhatTestProgramsNeverNeed) {
  const std::vector<std::string> refused = seccomp_refused_calls();
  for (const char* call : {"ptrace", "mount", "unshare", "setns", "keyctl", "bpf", "kexec_load", "personality",
                           "clone(CLONE_NEW*)", "clone3 (ENOSYS)", "ioctl(TIOCSTI)"})
    EXPECT_NE(std::find(refused.begin(), refused.end(), call), refused.end()) << call;
  const std::string bpf = seccomp_filter_bpf();
  EXPECT_GT(bpf.size(), 100u);
  EXPECT_EQ(bpf.size() % 8, 0u) << "a classic BPF program is whole 8-byte instructions";
}

TEST(SandboxTest, WithoutBubblewrapItRefusesInOneLineSayingWhatToInstall) {
  SandboxOptions o;
  o.bwrap = "/nonexistent/bwrap";
  EXPECT_EQ(testing::error_of([&] { Sandbox s(o); }),
            "sandbox: the code sandbox needs bubblewrap at /nonexistent/bwrap: install it (Debian: apt-get install "
            "bubblewrap), or pass --unsafe-no-sandbox to run the programs without a sandbox");
  o.offer_unsafe = false;  // a run has no such flag to offer
  EXPECT_EQ(testing::error_of([&] { Sandbox s(o); }),
            "sandbox: the code sandbox needs bubblewrap at /nonexistent/bwrap: install it (Debian: apt-get install "
            "bubblewrap)");
  o.python = "/nonexistent/python3";
  o.unsafe_no_sandbox = true;
  EXPECT_THAT(testing::error_of([&] { Sandbox s(o); }),
              StartsWith("/nonexistent/python3: no Python interpreter there"));
}

// A sandbox that never comes up (here a bubblewrap that, after the start-up check, only sleeps) is
// no verdict on the program: it is tried once more, then an error, never "timed out".
TEST(SandboxTest, ASandboxThatNeverStartsIsAnErrorNotATimeout) {
  GPUEVAL_REQUIRE_SANDBOX(real);
  testing::TempDir dir;
  // Run as nobody when gpueval is root: the folder must be open to it.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string state = dir.file("state");
  ASSERT_EQ(::mkdir(state.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(state.c_str(), 0777), 0);
  const std::string fake = dir.file("bwrap");
  testing::write_text(fake,
                      "#!/bin/sh\ncase \"$1\" in --version) exec /usr/bin/bwrap \"$@\";; esac\n"
                      "if [ -e " +
                          state +
                          "/started ]; then exec sleep 600; fi\n"
                          ": > " +
                          state + "/started\nexec /usr/bin/bwrap \"$@\"\n");
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  SandboxOptions o;
  o.bwrap = fake;
  const Sandbox sandbox(o);  // its start-up check runs through the real bubblewrap
  const Verdict v = sandbox.run("assert True\n", quick_limits(/*wall_seconds=*/1.0), ProgramMode::kCodeEval);
  EXPECT_EQ(v.kind, Kind::kError);
  EXPECT_EQ(v.detail, "the sandbox did not start within 1.00 s");
}

TEST(SandboxLimitsCheck, OutOfRangeValuesAreOneLineErrors) {
  SandboxLimits l;
  l.cpu_seconds = 0;
  EXPECT_EQ(testing::error_of([&] { check_sandbox_limits(l, "x.jsonl line 3"); }),
            "x.jsonl line 3: CPU seconds must be in (0, 3600], got 0");
  l = SandboxLimits{};
  l.memory = 1 << 20;
  EXPECT_THAT(testing::error_of([&] { check_sandbox_limits(l, "--memory"); }), HasSubstr("at least 64MiB"));
  l = SandboxLimits{};
  l.max_subprocesses = 0;
  EXPECT_THAT(testing::error_of([&] { check_sandbox_limits(l, "w"); }), HasSubstr("subprocesses must be 1 to 4096"));
}

TEST(SandboxTest, CodeEvalModeGivesLmEvalsVerdicts) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  struct Case {
    const char* program;
    Kind kind;
    const char* detail;
  };
  const Case cases[] = {
      {"def f(x):\n    return x + 1\nassert f(1) == 2\n", Kind::kPassed, ""},
      {"assert 1 + 1 == 3\n", Kind::kFailed, "AssertionError"},
      {"x = undefined_name\n", Kind::kFailed, "NameError: name 'undefined_name' is not defined"},
      {"def f(:\n", Kind::kFailed, "SyntaxError"},
      // Any BaseException fails, SystemExit(0) included, as code_eval's `except BaseException`.
      {"import sys\nsys.exit(0)\n", Kind::kFailed, "SystemExit: 0"},
      // The guard: exit, quit, os.kill and `import resource` are gone.
      {"exit()\n", Kind::kFailed, "TypeError: 'NoneType' object is not callable"},
      {"import os\nos.kill(os.getpid(), 9)\n", Kind::kFailed, "TypeError: 'NoneType' object is not callable"},
      {"import resource\n", Kind::kFailed, "ModuleNotFoundError: import of resource halted; None in sys.modules"},
      // Output is swallowed and stdin unreadable.
      {"print('x' * 10000)\n", Kind::kPassed, ""},
      {"input()\n", Kind::kFailed, "OSError"},
      // exec() with empty globals: __name__ is not "__main__".
      {"if __name__ == '__main__':\n    raise ValueError('ran as main')\n", Kind::kPassed, ""},
      {"while True:\n    pass\n", Kind::kTimedOut, "cpu time"},
  };
  for (const Case& c : cases) {
    const Verdict v = sandbox->run(c.program, quick_limits(), ProgramMode::kCodeEval);
    EXPECT_EQ(verdict_name(v.kind), std::string(verdict_name(c.kind))) << c.program << " -> " << v.detail;
    EXPECT_THAT(v.detail, StartsWith(c.detail)) << c.program;
    expect_nothing_left(v);
  }
}

TEST(SandboxTest, ScriptModeRunsAProgramAsPythonDoes) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  Verdict v = sandbox->run("import sys\nprint('hi')\nsys.exit(0)\n", quick_limits(), ProgramMode::kScript);
  EXPECT_EQ(v.kind, Kind::kPassed) << v.detail;
  v = sandbox->run("import sys\nsys.exit(3)\n", quick_limits(), ProgramMode::kScript);
  EXPECT_EQ(v.kind, Kind::kFailed);
  EXPECT_EQ(v.detail, "SystemExit: 3");
  v = sandbox->run("if __name__ == '__main__':\n    raise ValueError('ran as main')\n", quick_limits(),
                   ProgramMode::kScript);
  EXPECT_EQ(v.detail, "ValueError: ran as main");
  // What a program sees: the user nobody, pid 2 under the namespace's init, no /etc, a clean env.
  v = sandbox->run("import os\nraise RuntimeError(repr((os.getpid(), sorted(os.listdir('/')), sorted(os.environ))))\n",
                   quick_limits(), ProgramMode::kScript);
  EXPECT_EQ(v.detail,
            "RuntimeError: (2, ['.sandbox', 'bin', 'dev', 'lib', 'lib64', 'proc', 'tmp', 'usr', 'work'], "
            "['HOME', 'LANG', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PATH', 'PWD'])");
}

TEST(SandboxTest, CpuTimeCountsEveryProcessAndThreadOfTheTree) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  // Four children, each under the per-process backstop: only the tree's sum reaches the limit.
  const char* forks =
      "import os\nfor _ in range(4):\n    if os.fork() == 0:\n        while True:\n            pass\n"
      "os.wait()\n";
  const char* threads =
      "import threading\nts = [threading.Thread(target=lambda: sum(range(10**10))) for _ in range(3)]\n"
      "[t.start() for t in ts]\n[t.join() for t in ts]\n";
  for (const char* program : {forks, threads}) {
    const Verdict v = sandbox->run(program, quick_limits(), ProgramMode::kScript);
    EXPECT_EQ(v.kind, Kind::kTimedOut) << v.detail;
    EXPECT_GE(v.cpu_seconds, 1.0);
    // Stopped near the limit: a poll or two after it on a quiet machine, later when the monitor
    // waits for a core; the per-process backstop (a second above) bounds each process anyway.
    EXPECT_LT(v.cpu_seconds, 3.0);
    expect_nothing_left(v);
  }
}

// A listener on 127.0.0.1 that a sandboxed program must never reach.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), n) != 0 || ::listen(fd, 4) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0)
      throw std::runtime_error("listener");
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
  bool connected() const {
    const int c = ::accept(fd, nullptr, nullptr);
    if (c >= 0) ::close(c);
    return c >= 0;
  }
};

// A process of the test's own that a program tries to kill.
struct Sentinel {
  pid_t pid = -1;
  Sentinel() {
    pid = ::fork();
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  ~Sentinel() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  bool alive() const { return ::waitpid(pid, nullptr, WNOHANG) == 0; }
};

struct Attack {
  const char* name;
  std::string program;  // {canary}, {secret}, {port}, {sentinel} are filled in
  std::vector<Kind> allowed;
  const char* detail;  // what the verdict's detail starts with
  double wall_seconds = 30.0;
};

class SandboxBattery : public ::testing::TestWithParam<Attack> {};

TEST_P(SandboxBattery, TheAttackFailsAndTheHostIsUnchanged) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  testing::TempDir dir;
  const std::string canary = dir.write("canary.txt", "still here");
  const std::string secret = dir.write("results.json", "{\"secret\": 1}");
  Listener listener;
  Sentinel sentinel;
  const Attack& attack = GetParam();
  const std::string program =
      fmt::format(fmt::runtime(attack.program), fmt::arg("canary", canary), fmt::arg("secret", secret),
                  fmt::arg("port", listener.port), fmt::arg("sentinel", sentinel.pid));
  const Verdict v = sandbox->run(program, quick_limits(attack.wall_seconds), ProgramMode::kScript);
  // Every attack is written to pass when it succeeds.
  EXPECT_NE(v.kind, Kind::kPassed) << attack.name << ": the attack succeeded";
  EXPECT_NE(v.kind, Kind::kError) << v.detail;
  EXPECT_NE(std::find(attack.allowed.begin(), attack.allowed.end(), v.kind), attack.allowed.end())
      << attack.name << ": " << verdict_name(v.kind) << " " << v.detail;
  EXPECT_THAT(v.detail, StartsWith(attack.detail)) << attack.name;
  // The host is unchanged.
  std::ifstream in(canary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "still here");
  EXPECT_TRUE(std::filesystem::exists(secret));
  EXPECT_FALSE(listener.connected()) << "a program reached 127.0.0.1:" << listener.port;
  EXPECT_TRUE(sentinel.alive());
  expect_nothing_left(v);
  // The sandbox goes on: the next program runs.
  EXPECT_EQ(sandbox->run("pass\n", quick_limits(), ProgramMode::kScript).kind, Kind::kPassed);
}

const Attack kAttacks[] = {
    {"fork_bomb", "import os\nwhile True:\n    os.fork()\n", {Kind::kFailed, Kind::kTimedOut}, ""},
    {"infinite_loop", "while True:\n    pass\n", {Kind::kTimedOut}, "cpu time"},
    {"sleep_forever", "import time\ntime.sleep(1e9)\n", {Kind::kTimedOut}, "wall-clock ceiling 2.00 s", 2.0},
    {"allocate_64g", "x = bytearray(64 << 30)\n", {Kind::kFailed}, "MemoryError"},
    {"write_10g",
     "with open('big', 'wb') as f:\n    for _ in range(10240):\n        f.write(b'x' * (1 << 20))\n",
     {Kind::kFailed},
     "OSError: [Errno 27] File too large"},
    {"print_1g",
     "import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * (1 << 20))\n",
     {Kind::kFailed},
     "output over 1048576 bytes"},
    {"delete_canary", "import os\nos.remove('{canary}')\n", {Kind::kFailed}, "FileNotFoundError"},
    {"read_output_folder", "print(open('{secret}').read())\n", {Kind::kFailed}, "FileNotFoundError"},
    {"read_etc_shadow", "print(open('/etc/shadow').read())\n", {Kind::kFailed}, "FileNotFoundError"},
    {"connect_tcp",
     "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).send(b'hi')\n",
     {Kind::kFailed},
     "ConnectionRefusedError"},
    {"kill_parent",
     "import os\nos.kill(os.getppid(), 9)\nos.kill({sentinel}, 9)\n",
     {Kind::kFailed},
     "ProcessLookupError"},
    {"kill_everything",
     "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError:\n    pass\nfor pid in range(2, 5000):\n    try:\n"
     "        os.kill(pid, 9)\n    except OSError:\n        pass\nos.kill({sentinel}, 0)\n",
     {Kind::kFailed},
     ""},
    {"daemon_outlives",
     "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n"
     "    os._exit(0)\ntime.sleep(0.2)\nraise SystemExit(1)\n",
     {Kind::kFailed},
     "SystemExit: 1"},
    {"ptrace",
     "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
     "if libc.ptrace(16, 1, 0, 0) != 0:\n    raise OSError(ctypes.get_errno(), 'ptrace')\n",
     {Kind::kFailed},
     "PermissionError: [Errno 1] ptrace"},
    {"unshare",
     "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
     "if libc.unshare(0x10000000) != 0:\n    raise OSError(ctypes.get_errno(), 'unshare')\n",
     {Kind::kFailed},
     "PermissionError: [Errno 1] unshare"},
};

INSTANTIATE_TEST_SUITE_P(Hostile, SandboxBattery, ::testing::ValuesIn(kAttacks),
                         [](const ::testing::TestParamInfo<Attack>& info) { return std::string(info.param.name); });

TEST(SandboxTest, ADaemonThatOutlivesAPassingProgramIsKilledToo) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  const Verdict v = sandbox->run(
      "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n"
      "    os._exit(0)\ntime.sleep(0.2)\n",
      quick_limits(), ProgramMode::kScript);
  EXPECT_EQ(v.kind, Kind::kPassed) << v.detail;
  EXPECT_GE(v.processes.size(), 3u) << "the program, its child and the daemon were seen";
  expect_nothing_left(v);
}

TEST(SandboxTest, APoolRunsProgramsConcurrentlyAndReturnsEveryVerdict) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  std::vector<ProgramRequest> requests;
  for (int i = 0; i < 8; ++i)
    requests.push_back({fmt::format("assert {} % 2 == 0\n", i), quick_limits(), ProgramMode::kCodeEval});
  std::vector<std::string> verdicts(requests.size());
  run_programs(*sandbox, requests, 3, [&](size_t i, const Verdict& v) { verdicts[i] = verdict_name(v.kind); });
  for (size_t i = 0; i < verdicts.size(); ++i) EXPECT_EQ(verdicts[i], i % 2 == 0 ? "passed" : "failed") << i;
}

TEST(ExecuteCommand, VerdictsComeInInputOrderWithTheirIds) {
  GPUEVAL_REQUIRE_SANDBOX(sandbox);
  const testing::CommandResult r =
      testing::run_gpueval({"execute", "--max-sandboxes", "2", "--cpu-seconds", "1"},
                           "{\"id\": \"loop\", \"program\": \"while True: pass\"}\n"
                           "\n"
                           "{\"id\": 7, \"program\": \"assert True\"}\n"
                           "{\"id\": [1, 2], \"program\": \"import sys; sys.exit(2)\", \"mode\": \"script\"}\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> lines;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0]["id"], "loop");
  EXPECT_EQ(lines[0]["verdict"], "timed out");
  EXPECT_EQ(lines[1]["id"], 7);
  EXPECT_EQ(lines[1]["verdict"], "passed");
  EXPECT_EQ(lines[2]["id"], nlohmann::json({1, 2}));
  EXPECT_EQ(lines[2]["detail"], "SystemExit: 2");
  EXPECT_THAT(r.out, StartsWith("{\"id\":\"loop\",\"verdict\":\"timed out\",\"detail\":\"cpu time"));
  EXPECT_THAT(r.err, HasSubstr("3 programs in"));
}

TEST(ExecuteCommand, ABadLineIsOneErrorBeforeAnyProgramRuns) {
  const testing::CommandResult r =
      testing::run_gpueval({"execute"}, "{\"id\": 1, \"program\": \"pass\"}\n{\"id\": 2, \"program\": 5}\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpueval: stdin line 2: 'program' must be a string\n");
  const testing::CommandResult unknown =
      testing::run_gpueval({"execute"}, "{\"id\": 1, \"program\": \"pass\", \"timeout\": 3}\n");
  EXPECT_EQ(unknown.err,
            "gpueval: stdin line 1: unknown key 'timeout' (known: id, program, cpu_seconds, memory, mode)\n");
  const testing::CommandResult memory =
      testing::run_gpueval({"execute", "--memory", "2 GiB"}, "{\"id\": 1, \"program\": \"pass\"}\n");
  EXPECT_EQ(memory.exit_code, 1);
  EXPECT_THAT(memory.err, HasSubstr("--memory: unknown unit ' GiB'"));
}

}  // namespace
}  // namespace gpueval
