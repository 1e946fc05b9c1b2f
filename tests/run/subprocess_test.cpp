#include "run/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "run/wire.h"
#include "run/worker_launch.h"
#include "test_util.h"

namespace gpueval {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

SpawnOptions shell(const std::string& script) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return options;
}

Child spawn_shell(const std::string& script) { return Child::spawn(shell(script)); }

// Everything the child writes on its fd 4 until it closes it, waiting at most `timeout`.
std::string read_results(Child& child, std::chrono::milliseconds timeout = 5000ms) {
  const auto deadline = Clock::now() + timeout;
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(child.result_fd(), buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return out;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) throw std::runtime_error("read failed");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) throw std::runtime_error("timed out reading the child's results: " + out);
    pollfd p{child.result_fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

// Reads `n` bytes from fd 4 of the child, for a child that announces it is ready.
std::string read_exactly(Child& child, size_t n) {
  std::string out;
  const auto deadline = Clock::now() + 5s;
  while (out.size() < n && Clock::now() < deadline) {
    char buf[256];
    const ssize_t got = ::read(child.result_fd(), buf, std::min(sizeof buf, n - out.size()));
    if (got > 0) {
      out.append(buf, static_cast<size_t>(got));
    } else if (got == 0) {
      break;
    } else {
      pollfd p{child.result_fd(), POLLIN, 0};
      ::poll(&p, 1, 100);
    }
  }
  return out;
}

// Running, as opposed to gone or a zombie nobody has reaped yet: a test cannot count on the
// container's init reaping orphans promptly.
bool process_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

bool wait_until_gone(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (process_running(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// Waits until `pid` sleeps in a nanosleep (its wchan says so; where the kernel hides wchan, its
// state is S): an exec'd `sleep` has then finished loading. False after 30 s.
bool wait_until_asleep(pid_t pid) {
  const auto deadline = Clock::now() + 30s;
  const std::string proc = "/proc/" + std::to_string(pid);
  while (Clock::now() < deadline) {
    std::ifstream wchan_file(proc + "/wchan");
    std::string wchan;
    std::getline(wchan_file, wchan);
    std::ifstream stat(proc + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    const char state = paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
    if (wchan.find("nanosleep") != std::string::npos || ((wchan.empty() || wchan == "0") && state == 'S')) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

void expect_reaped(pid_t pid) {
  errno = 0;
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD) << "the child is still ours: a zombie or still running";
}

TEST(SubprocessTest, ExitCodeIsMapped) {
  Child child = spawn_shell("exit 3");
  const ExitStatus status = child.wait();
  EXPECT_EQ(status.kind, ExitStatus::Kind::kExited);
  EXPECT_EQ(status.code, 3);
  EXPECT_FALSE(status.success());
  EXPECT_EQ(status.describe(), "exited with code 3");
  expect_reaped(child.pid());

  EXPECT_TRUE(spawn_shell("exit 0").wait().success());
}

TEST(SubprocessTest, SignalIsMapped) {
  Child child = spawn_shell("kill -9 $$");
  const ExitStatus status = child.wait();
  EXPECT_EQ(status.kind, ExitStatus::Kind::kSignaled);
  EXPECT_EQ(status.signal, 9);
  EXPECT_FALSE(status.success());
  EXPECT_EQ(status.describe(), "killed by signal 9 (Killed)");
}

TEST(SubprocessTest, PollSeesTheChildRunThenExit) {
  Child child = spawn_shell("read line <&3; exit 7");
  EXPECT_FALSE(child.poll());
  child.close_command();
  EXPECT_EQ(child.command_fd(), -1);
  EXPECT_EQ(child.wait().code, 7);
  // Cached from then on; signalling a reaped child does nothing.
  ASSERT_TRUE(child.poll());
  EXPECT_EQ(child.poll()->code, 7);
  child.signal(SIGKILL);
  EXPECT_EQ(child.wait().code, 7);
}

TEST(SubprocessTest, MissingExecutableThrowsNamingIt) {
  SpawnOptions options;
  options.argv = {"/nonexistent/gpueval-worker", "--device", "0"};
  try {
    Child::spawn(options);
    ADD_FAILURE() << "spawn of a missing binary succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/gpueval-worker"));
    EXPECT_THAT(e.what(), HasSubstr("execve"));
    EXPECT_THAT(e.what(), HasSubstr(std::strerror(ENOENT)));
  }
}

TEST(SubprocessTest, NonExecutableFileThrows) {
  testing::TempDir dir;
  testing::write_text(dir.file("worker"), "#!/bin/sh\nexit 0\n");
  SpawnOptions options;
  options.argv = {dir.file("worker")};
  try {
    Child::spawn(options);
    ADD_FAILURE() << "spawn of a non-executable file succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.file("worker")));
    EXPECT_THAT(e.what(), HasSubstr(std::strerror(EACCES)));
  }
}

TEST(SubprocessTest, BadOptionsThrow) {
  EXPECT_THROW(Child::spawn(SpawnOptions{}), Error);
  SpawnOptions bad_env = shell("exit 0");
  bad_env.env = {{"A=B", "c"}};
  EXPECT_THROW(Child::spawn(bad_env), Error);
  SpawnOptions bad_log = shell("exit 0");
  bad_log.log_path = "/nonexistent/dir/worker.log";
  try {
    Child::spawn(bad_log);
    ADD_FAILURE() << "spawn with an unwritable log succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/worker.log"));
  }
}

TEST(SubprocessTest, EnvironmentOverridesAreVisible) {
  SpawnOptions options = shell(R"(printf '%s|%s|%s' "$GPUEVAL_TEST_VAR" "$HOME" "$PATH" >&4)");
  options.env = {{"GPUEVAL_TEST_VAR", "hello world"}, {"HOME", "/first"}, {"HOME", "/override"}};
  Child child = Child::spawn(options);
  const char* path = std::getenv("PATH");
  EXPECT_EQ(read_results(child), std::string("hello world|/override|") + (path ? path : ""));
  EXPECT_TRUE(child.wait().success());
}

// The one launcher: `<executable> worker`, the slot's thread count, its GPU as the only one
// visible, output to the log. A script stands in for the gpueval binary and prints what it got.
TEST(SubprocessTest, LaunchWorkerSetsTheSlotsEnvironment) {
  testing::TempDir dir;
  const std::string exe = dir.file("fake_gpueval");
  testing::write_text(exe, "#!/bin/sh\necho \"$1|$OMP_NUM_THREADS|${CUDA_VISIBLE_DEVICES-unset}\"\n");
  ASSERT_EQ(::chmod(exe.c_str(), 0755), 0);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  DeviceSlot gpu;
  gpu.kind = DeviceSlot::Kind::kCuda;
  gpu.index = 3;
  gpu.threads = 2;
  ASSERT_TRUE(launch_worker(gpu, exe, dir.file("gpu.log")).wait().success());
  EXPECT_EQ(io::read_file(dir.file("gpu.log")), "worker|2|3\n");
  DeviceSlot cpu;
  cpu.threads = 0;  // still at least one OpenMP thread
  ASSERT_TRUE(launch_worker(cpu, exe, dir.file("cpu.log")).wait().success());
  EXPECT_EQ(io::read_file(dir.file("cpu.log")), "worker|1|unset\n");

  const WorkerHello hello = first_hello(gpu, "/models/m", "auto", 0.5);
  EXPECT_EQ(hello.worker, "cuda:3");
  EXPECT_EQ(hello.device, "cuda:0") << "the worker sees only its own GPU";
  EXPECT_EQ(hello.threads, 2);
  EXPECT_EQ(first_hello(cpu, "/models/m", "auto", 0.5).device, "cpu");
}

TEST(SubprocessTest, LogPathCapturesStdoutAndStderr) {
  testing::TempDir dir;
  const std::string log = dir.file("w0.log");
  testing::write_text(log, "earlier run\n");
  SpawnOptions options = shell("echo to stdout; echo to stderr >&2");
  options.log_path = log;
  ASSERT_TRUE(Child::spawn(options).wait().success());
  EXPECT_EQ(io::read_file(log), "earlier run\nto stdout\nto stderr\n");
  struct stat st;
  ASSERT_EQ(::stat(log.c_str(), &st), 0);

  const std::string fresh = dir.file("fresh.log");
  options.log_path = fresh;
  ASSERT_TRUE(Child::spawn(options).wait().success());
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  const mode_t umask_now = ::umask(0);
  ::umask(umask_now);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~umask_now);
}

TEST(SubprocessTest, FramesEchoThroughFds3And4) {
  Child child = spawn_shell("exec cat <&3 >&4");
  const std::vector<Frame> sent = {{FrameType::kHello, pack_payload({{"device", 0}})},
                                   {FrameType::kWork, std::string(1 << 20, 'w')},
                                   {FrameType::kShutdown, ""}};
  // A writer thread: 1 MiB fills both pipes long before cat has echoed it all back.
  std::thread writer([&] {
    for (const Frame& f : sent) write_frame(child.command_fd(), f);
    child.close_command();
  });
  std::vector<Frame> got;
  while (auto frame = read_frame(child.result_fd())) got.push_back(std::move(*frame));
  writer.join();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].type, sent[i].type);
    EXPECT_TRUE(got[i].payload == sent[i].payload);
  }
  EXPECT_TRUE(child.wait().success());
  EXPECT_TRUE(::fcntl(child.result_fd(), F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(::fcntl(child.result_fd(), F_GETFD) & FD_CLOEXEC);
}

std::string link_target(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

TEST(SubprocessTest, OnlyFds0To4ReachTheChild) {
  // Descriptors opened without O_CLOEXEC, as careless library code might.
  const int leaky_file = ::open("/dev/null", O_RDONLY);
  int leaky_pipe[2];
  ASSERT_GE(leaky_file, 0);
  ASSERT_EQ(::pipe(leaky_pipe), 0);

  // spawn returns once exec succeeded, but the dynamic loader may still hold a library open; the
  // table is `sleep`'s own once it sleeps. Listing it from the parent keeps a directory
  // descriptor out of it.
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Child child = Child::spawn(options);
  ASSERT_TRUE(wait_until_asleep(child.pid())) << "sleep never reached its nanosleep";
  const std::string fd_dir = "/proc/" + std::to_string(child.pid()) + "/fd";
  std::set<int> fds;
  DIR* dir = ::opendir(fd_dir.c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') fds.insert(std::stoi(entry->d_name));
  }
  ::closedir(dir);
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(link_target(fd_dir + "/0"), "/dev/null");
  EXPECT_THAT(link_target(fd_dir + "/3"), HasSubstr("pipe:"));
  EXPECT_THAT(link_target(fd_dir + "/4"), HasSubstr("pipe:"));
  EXPECT_NE(link_target(fd_dir + "/3"), link_target(fd_dir + "/4"));

  ::close(leaky_file);
  ::close(leaky_pipe[0]);
  ::close(leaky_pipe[1]);
}

TEST(SubprocessTest, WorksWhenTheParentHasFds0To4Closed) {
  // Then /dev/null, the log and the pipes land on 0..4 themselves, and wiring them up in the
  // child must not overwrite one with another. Run in a forked process, which may close them.
  testing::TempDir dir;
  const std::string log = dir.file("w.log");
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (int fd = 0; fd <= 4; ++fd) ::close(fd);
    try {
      SpawnOptions options = shell("echo logged; exec cat <&3 >&4");
      options.log_path = log;
      Child child = Child::spawn(options);
      const Frame frame{FrameType::kWork, "round trip"};
      write_frame(child.command_fd(), frame);
      child.close_command();
      auto echoed = read_frame(child.result_fd());
      if (!echoed || echoed->payload != frame.payload || read_frame(child.result_fd())) ::_exit(1);
      ::_exit(child.wait().success() ? 0 : 2);
    } catch (...) {
      ::_exit(3);
    }
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(io::read_file(log), "logged\n");
}

TEST(SubprocessTest, ChildGetsItsOwnProcessGroup) {
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Child own = Child::spawn(options);
  EXPECT_EQ(::getpgid(own.pid()), own.pid());
  EXPECT_NE(::getpgid(own.pid()), ::getpgrp());

  options.new_process_group = false;
  Child shared = Child::spawn(options);
  EXPECT_EQ(::getpgid(shared.pid()), ::getpgrp());
}

TEST(SubprocessTest, ChildStartsWithDefaultSignals) {
  // Ignored in the parent; a shell that inherits an ignored SIGPIPE cannot be killed by one.
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old_action), 0);
  Child piped = spawn_shell("kill -PIPE $$; exit 0");
  ::sigaction(SIGPIPE, &old_action, nullptr);
  const ExitStatus piped_status = piped.wait();
  EXPECT_EQ(piped_status.kind, ExitStatus::Kind::kSignaled) << piped_status.describe();
  EXPECT_EQ(piped_status.signal, SIGPIPE);

  // Blocked in the parent's thread; the child must still die of SIGTERM.
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &term, &old_mask), 0);
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Child sleeper = Child::spawn(options);
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  const ExitStatus status = sleeper.kill_and_wait(2000ms);
  EXPECT_EQ(status.kind, ExitStatus::Kind::kSignaled);
  EXPECT_EQ(status.signal, SIGTERM);
}

TEST(SubprocessTest, DestructorKillsAndReapsRunningChild) {
  pid_t pid;
  const auto start = Clock::now();
  {
    SpawnOptions options;
    options.argv = {"/bin/sleep", "30"};
    Child child = Child::spawn(options);
    pid = child.pid();
    EXPECT_TRUE(process_running(pid));
  }
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_FALSE(process_running(pid));
  expect_reaped(pid);
}

TEST(SubprocessTest, MoveTransfersOwnership) {
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Child first = Child::spawn(options);
  const pid_t pid = first.pid();
  Child second = std::move(first);
  EXPECT_EQ(second.pid(), pid);
  EXPECT_EQ(first.command_fd(), -1);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_TRUE(process_running(pid));
  second = Child::spawn(shell("exit 5"));  // the first process is killed and reaped
  EXPECT_FALSE(process_running(pid));
  expect_reaped(pid);
  EXPECT_EQ(second.wait().code, 5);
}

TEST(SubprocessTest, KillAndWaitStopsAtSigtermWhenHonoured) {
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Child child = Child::spawn(options);
  const auto start = Clock::now();
  const ExitStatus status = child.kill_and_wait(5000ms);
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(status.kind, ExitStatus::Kind::kSignaled);
  EXPECT_EQ(status.signal, SIGTERM);
  expect_reaped(child.pid());
}

TEST(SubprocessTest, KillAndWaitEscalatesWhenSigtermIsIgnored) {
  // The ignored disposition survives exec, so `sleep` ignores SIGTERM as well.
  Child child = spawn_shell("trap '' TERM; echo ready >&4; exec sleep 30");
  ASSERT_EQ(read_exactly(child, 6), "ready\n");
  const auto start = Clock::now();
  const ExitStatus status = child.kill_and_wait(150ms);
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_EQ(status.kind, ExitStatus::Kind::kSignaled);
  EXPECT_EQ(status.signal, SIGKILL);
  expect_reaped(child.pid());
}

// A middle process (forked from this test) spawns `sleep` through Child, reports its pid, and is
// then SIGKILLed; returns the grandchild's pid, or -1.
pid_t grandchild_of_killed_middle(bool die_with_parent) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return -1;
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::close(report[0]);
    try {
      SpawnOptions options;
      options.argv = {"/bin/sleep", "30"};
      options.die_with_parent = die_with_parent;
      Child grandchild = Child::spawn(options);
      const pid_t pid = grandchild.pid();
      if (::write(report[1], &pid, sizeof pid) != sizeof pid) ::_exit(1);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(report[1]);
  pid_t grandchild = -1;
  pollfd p{report[0], POLLIN, 0};
  if (::poll(&p, 1, 5000) != 1 || ::read(report[0], &grandchild, sizeof grandchild) != sizeof grandchild) {
    grandchild = -1;
  }
  ::close(report[0]);
  ::kill(middle, SIGKILL);
  ::waitpid(middle, nullptr, 0);
  return grandchild;
}

TEST(SubprocessTest, ChildDiesWithItsParent) {
  const pid_t grandchild = grandchild_of_killed_middle(true);
  ASSERT_GT(grandchild, 0);
  const bool gone = wait_until_gone(grandchild, 5000ms);
  EXPECT_TRUE(gone) << "the grandchild outlived its parent";
  if (!gone) ::kill(grandchild, SIGKILL);
}

TEST(SubprocessTest, ChildOutlivesItsParentWhenAsked) {
  const pid_t grandchild = grandchild_of_killed_middle(false);
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(wait_until_gone(grandchild, 200ms)) << "died although die_with_parent was false";
  ::kill(grandchild, SIGKILL);
}

TEST(SubprocessTest, InheritedFdsAreCheckedInTheWorker) {
  // Run in a forked process so that this process's descriptors 3 and 4 stay untouched.
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    ::close(3);
    ::close(4);
    try {
      inherited_command_fd();
      code |= 1;  // accepted a closed fd 3
    } catch (const Error&) {}
    int fds[2];
    if (::pipe(fds) != 0) ::_exit(100);
    // Kept above 4, where the dup2 calls below cannot overwrite them.
    const int read_end = ::fcntl(fds[0], F_DUPFD, 10);
    const int write_end = ::fcntl(fds[1], F_DUPFD, 10);
    if (read_end < 0 || write_end < 0 || ::dup2(read_end, 3) < 0 || ::dup2(write_end, 4) < 0) ::_exit(100);
    try {
      if (inherited_command_fd() != 3 || inherited_result_fd() != 4) code |= 2;
      if (!(::fcntl(3, F_GETFD) & FD_CLOEXEC) || !(::fcntl(4, F_GETFD) & FD_CLOEXEC)) code |= 4;
    } catch (const Error&) {
      code |= 8;
    }
    // The wrong way round: 3 writable, 4 readable.
    if (::dup2(write_end, 3) < 0 || ::dup2(read_end, 4) < 0) ::_exit(100);
    try {
      inherited_command_fd();
      code |= 16;
    } catch (const Error&) {}
    try {
      inherited_result_fd();
      code |= 32;
    } catch (const Error&) {}
    ::_exit(code);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace gpueval
