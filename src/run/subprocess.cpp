#include "run/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "gpueval/error.h"

namespace gpueval {
namespace {

constexpr int kChildCommandFd = 3;
constexpr int kChildResultFd = 4;
constexpr int kFirstFreeFd = 5;  // descriptors from here up are not meant for the child

// What the child writes to the status pipe when a step before exec, or exec itself, fails. The
// parent reads end of stream instead when exec succeeds, because the pipe is O_CLOEXEC.
struct ChildFailure {
  int step;
  int err;
};

enum ChildStep : int { kStepSetpgid, kStepPdeathsig, kStepMoveFd, kStepDup2, kStepExecve };

const char* child_step_call(int step) {
  switch (step) {
    case kStepSetpgid: return "setpgid";
    case kStepPdeathsig: return "prctl(PR_SET_PDEATHSIG)";
    case kStepMoveFd: return "fcntl(F_DUPFD_CLOEXEC)";
    case kStepDup2: return "dup2";
    case kStepExecve: return "execve";
  }
  return "child setup";
}

// Everything the child needs, prepared before fork so that the child only makes
// async-signal-safe calls.
struct ChildPlan {
  char* const* argv;
  char* const* envp;
  pid_t parent_pid;
  bool new_process_group;
  bool die_with_parent;
  int fds[kFirstFreeFd];  // what becomes the child's 0..4: /dev/null, the log (-1: the parent's
                          // stdout and stderr), the log again, the command and the result pipe
  int status_fd;
  int max_fd;  // descriptor_limit(), for the slow close-on-exec sweep if close_range is missing
};

[[noreturn]] void child_fail(int status_fd, int step) {
  const ChildFailure failure{step, errno};
  while (::write(status_fd, &failure, sizeof failure) < 0 && errno == EINTR) {}
  ::_exit(127);
}

// Between fork and exec: async-signal-safe calls only (no allocation, no locks, no exceptions).
[[noreturn]] void run_child(const ChildPlan& plan) {
  // Every signal is blocked here (fork_with_signals_blocked), so no handler of the parent's runs
  // in the child.
  process::reset_signals_in_child();

  int status_fd = plan.status_fd;
  if (plan.new_process_group && ::setpgid(0, 0) != 0) child_fail(status_fd, kStepSetpgid);
  bool parent_alive = true;
  if (plan.die_with_parent && !process::die_with_parent(plan.parent_pid, &parent_alive)) {
    child_fail(status_fd, kStepPdeathsig);
  }
  if (!parent_alive) ::_exit(127);

  // Above 4 first, so that placing 0..4 cannot overwrite it when it happened to land there.
  status_fd = process::lift_descriptor(status_fd, kFirstFreeFd);
  if (status_fd < 0) child_fail(plan.status_fd, kStepMoveFd);
  if (!process::place_descriptors(plan.fds, kFirstFreeFd)) child_fail(status_fd, kStepDup2);
  // Descriptors other code opened without O_CLOEXEC must not reach the worker either.
  process::close_on_exec_from(kFirstFreeFd, plan.max_fd);

  process::clear_signal_mask();
  ::execve(plan.argv[0], plan.argv, plan.envp);
  child_fail(status_fd, kStepExecve);
}

}  // namespace

namespace {

// After fork, in the parent: end of stream on the status pipe means exec succeeded, and with it
// every step before (setpgid included); otherwise the child is reaped and its failure thrown.
void check_exec(const std::string& who, pid_t pid, const io::UniqueFd& status_read) {
  ChildFailure failure{};
  ssize_t n;
  while ((n = ::read(status_read.get(), &failure, sizeof failure)) < 0 && errno == EINTR) {}
  const int read_errno = errno;
  if (n == 0) return;
  process::wait_for(pid);
  if (n < 0) fail(who, "read of the spawn status pipe failed: {}", std::strerror(read_errno));
  if (n != static_cast<ssize_t>(sizeof failure)) fail(who, "short read of the spawn status pipe ({} bytes)", n);
  fail(who, "{} failed: {}", child_step_call(failure.step), std::strerror(failure.err));
}

}  // namespace

Child Child::spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) fail("Child::spawn", "argv[0] (the executable) is empty");
  const std::string& who = options.argv[0];

  std::vector<std::string> argv_strings = options.argv;
  std::vector<std::string> env_strings = process::environment_with(who, options.env);
  const std::vector<char*> argv = process::pointers_to(argv_strings);
  const std::vector<char*> envp = process::pointers_to(env_strings);

  io::UniqueFd dev_null = io::open_file("/dev/null", O_RDONLY);
  io::UniqueFd log;
  if (!options.log_path.empty()) log = io::open_file(options.log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  process::Pipe command = process::make_pipe(who);
  process::Pipe result = process::make_pipe(who);
  process::Pipe status = process::make_pipe(who);
  process::set_nonblocking(result.read.get(), who);

  const ChildPlan plan{argv.data(),
                       envp.data(),
                       ::getpid(),
                       options.new_process_group,
                       options.die_with_parent,
                       {dev_null.get(), log.get(), log.get(), command.read.get(), result.write.get()},
                       status.write.get(),
                       process::descriptor_limit()};
  const pid_t pid = process::fork_with_signals_blocked();
  if (pid == 0) run_child(plan);
  if (pid < 0) fail(who, "fork failed: {}", std::strerror(errno));

  // The child's ends belong to the child now; closing ours lets end of stream reach the reader.
  command.read = io::UniqueFd();
  result.write = io::UniqueFd();
  status.write = io::UniqueFd();
  dev_null = io::UniqueFd();
  log = io::UniqueFd();
  check_exec(who, pid, status.read);

  Child child;
  child.pid_ = pid;
  child.name_ = who;
  child.command_fd_ = std::move(command.write);
  child.result_fd_ = std::move(result.read);
  return child;
}

Child Child::adopt(pid_t pid, std::string name, io::UniqueFd command_fd, io::UniqueFd result_fd) {
  Child child;
  child.pid_ = pid;
  child.name_ = std::move(name);
  child.command_fd_ = std::move(command_fd);
  child.result_fd_ = std::move(result_fd);
  child.forked_ahead_ = true;
  return child;
}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      name_(std::move(other.name_)),
      command_fd_(std::move(other.command_fd_)),
      result_fd_(std::move(other.result_fd_)),
      status_(std::exchange(other.status_, std::nullopt)),
      forked_ahead_(other.forked_ahead_) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    release();
    pid_ = std::exchange(other.pid_, -1);
    name_ = std::move(other.name_);
    command_fd_ = std::move(other.command_fd_);
    result_fd_ = std::move(other.result_fd_);
    status_ = std::exchange(other.status_, std::nullopt);
    forked_ahead_ = other.forked_ahead_;
  }
  return *this;
}

Child::~Child() { release(); }

void Child::release() noexcept {
  if (pid_ > 0 && !status_) {
    const int wait_status = process::kill_and_reap(pid_);
    if (wait_status >= 0) status_ = exit_status_from_wait(wait_status);
  }
  close_command();
  result_fd_ = io::UniqueFd();
}

void Child::close_command() {
  // close() is not retried on EINTR: Linux has released the descriptor either way.
  command_fd_ = io::UniqueFd();
}

void Child::signal(int sig) {
  if (pid_ <= 0 || status_) return;
  // Until reaped, the pid is ours (a zombie at worst), so kill cannot hit an unrelated process.
  if (::kill(pid_, sig) != 0 && errno != ESRCH) {
    fail(name_, "kill(pid {}, signal {}) failed: {}", pid_, sig, std::strerror(errno));
  }
}

std::optional<ExitStatus> Child::poll() {
  if (status_ || pid_ <= 0) return status_;
  const std::optional<int> wait_status = process::poll_exit(pid_, name_);
  if (!wait_status) return std::nullopt;
  status_ = exit_status_from_wait(*wait_status);
  return status_;
}

ExitStatus Child::wait() {
  if (status_) return *status_;
  if (pid_ <= 0) fail("Child::wait", "no process (moved from)");
  const int wait_status = process::wait_for(pid_);
  if (wait_status < 0) fail(name_, "waitpid(pid {}) failed: {}", pid_, std::strerror(errno));
  status_ = exit_status_from_wait(wait_status);
  return *status_;
}

ExitStatus Child::kill_and_wait(std::chrono::milliseconds grace) {
  if (auto status = poll()) return *status;
  signal(SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // Most workers exit within milliseconds of SIGTERM; back off so a slow one costs few wakeups.
  std::chrono::microseconds delay(500);
  for (;;) {
    if (auto status = poll()) return *status;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(delay, deadline - now));
    delay = std::min<std::chrono::microseconds>(delay * 2, std::chrono::milliseconds(50));
  }
  signal(SIGKILL);
  return wait();
}

namespace {

int check_inherited(const char* who, int fd, int access, const char* direction) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) {
    fail(who, "fd {} is not open ({}); this process must be started by the gpueval scheduler", fd,
         std::strerror(errno));
  }
  if ((flags & O_ACCMODE) != access) fail(who, "fd {} is open but not {}", fd, direction);
  const int fd_flags = ::fcntl(fd, F_GETFD);
  if (fd_flags < 0 || ::fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC) != 0) {
    fail(who, "fcntl(fd {}, F_SETFD) failed: {}", fd, std::strerror(errno));
  }
  return fd;
}

}  // namespace

int inherited_command_fd() { return check_inherited("inherited_command_fd", kChildCommandFd, O_RDONLY, "read-only"); }

int inherited_result_fd() { return check_inherited("inherited_result_fd", kChildResultFd, O_WRONLY, "write-only"); }

}  // namespace gpueval
