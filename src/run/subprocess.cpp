#include "run/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/file_io.h"
#include "gpueval/error.h"

extern char** environ;

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
  int stdin_fd;   // /dev/null
  int log_fd;     // -1: keep the parent's stdout and stderr
  int command_fd;
  int result_fd;
  int status_fd;
  int max_fd;     // RLIMIT_NOFILE, for the slow close-on-exec sweep if close_range is missing
};

[[noreturn]] void child_fail(int status_fd, int step) {
  const ChildFailure failure{step, errno};
  while (::write(status_fd, &failure, sizeof failure) < 0 && errno == EINTR) {
  }
  ::_exit(127);
}

}  // namespace

void reset_signals_in_child() {
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof default_action);
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction current;
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    const bool handled = (current.sa_flags & SA_SIGINFO) != 0 ||
                         (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
    if (handled || sig == SIGPIPE || sig == SIGINT || sig == SIGTERM) ::sigaction(sig, &default_action, nullptr);
  }
}

namespace {

// Between fork and exec: async-signal-safe calls only (no allocation, no locks, no exceptions).
[[noreturn]] void run_child(const ChildPlan& plan) {
  // Every signal is blocked here (the parent blocked them around fork), so no handler of the
  // parent's runs in the child.
  reset_signals_in_child();

  int status_fd = plan.status_fd;
  if (plan.new_process_group && ::setpgid(0, 0) != 0) child_fail(status_fd, kStepSetpgid);
  if (plan.die_with_parent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(status_fd, kStepPdeathsig);
    // The parent may have died before prctl took effect; then no signal will ever come.
    if (::getppid() != plan.parent_pid) ::_exit(127);
  }

  // Lift every descriptor the child needs above 4 first, so that none is overwritten by a dup2
  // below when the parent's pipes happened to land on 0..4.
  const auto lift = [&](int fd) {
    const int lifted = ::fcntl(fd, F_DUPFD_CLOEXEC, kFirstFreeFd);
    if (lifted < 0) child_fail(status_fd, kStepMoveFd);
    return lifted;
  };
  status_fd = lift(status_fd);
  const int stdin_fd = lift(plan.stdin_fd);
  const int log_fd = plan.log_fd >= 0 ? lift(plan.log_fd) : -1;
  const int command_fd = lift(plan.command_fd);
  const int result_fd = lift(plan.result_fd);
  // dup2 clears FD_CLOEXEC on the target, so exactly 0..4 survive exec.
  if (::dup2(stdin_fd, 0) < 0) child_fail(status_fd, kStepDup2);
  if (log_fd >= 0 && (::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0)) child_fail(status_fd, kStepDup2);
  if (::dup2(command_fd, kChildCommandFd) < 0) child_fail(status_fd, kStepDup2);
  if (::dup2(result_fd, kChildResultFd) < 0) child_fail(status_fd, kStepDup2);

  // Descriptors other code opened without O_CLOEXEC must not reach the worker either. Marking
  // them close-on-exec rather than closing them keeps the status pipe open until exec.
#ifdef SYS_close_range
  const bool swept = ::syscall(SYS_close_range, kFirstFreeFd, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) == 0;
#else
  const bool swept = false;
#endif
  if (!swept) {
    for (int fd = kFirstFreeFd; fd < plan.max_fd; ++fd) {
      const int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
  }

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.argv[0], plan.argv, plan.envp);
  child_fail(status_fd, kStepExecve);
}

// The parent's environment with `overrides` replacing or adding variables, as "NAME=value".
std::vector<std::string> child_environment(const std::string& who,
                                           const std::vector<std::pair<std::string, std::string>>& overrides) {
  const auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  for (const auto& entry : overrides) {
    const std::string& name = entry.first;  // not a structured binding: C++17 lambdas cannot capture those
    const std::string& value = entry.second;
    if (name.empty() || name.find('=') != std::string::npos) {
      fail(who, "environment variable name '{}' is empty or contains '='", name);
    }
    env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return name_of(e) == name; }),
              env.end());
    env.push_back(name + "=" + value);
  }
  return env;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// pipe2(O_CLOEXEC) into two owned descriptors: [0] the read end, [1] the write end.
std::pair<io::UniqueFd, io::UniqueFd> make_pipe(const std::string& who) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail(who, "pipe2 failed: {}", std::strerror(errno));
  return {io::UniqueFd(fds[0]), io::UniqueFd(fds[1])};
}

int wait_blocking(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

}  // namespace

ExitStatus exit_status_from_wait(int wait_status) {
  ExitStatus status;
  if (WIFSIGNALED(wait_status)) {
    status.kind = ExitStatus::Kind::kSignaled;
    status.signal = WTERMSIG(wait_status);
  } else {
    status.kind = ExitStatus::Kind::kExited;
    status.code = WEXITSTATUS(wait_status);
  }
  return status;
}

std::string ExitStatus::describe() const {
  if (kind == Kind::kExited) return fmt::format("exited with code {}", code);
  const char* name = ::strsignal(signal);
  return fmt::format("killed by signal {} ({})", signal, name ? name : "unknown signal");
}

Child Child::spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) fail("Child::spawn", "argv[0] (the executable) is empty");
  const std::string& who = options.argv[0];

  std::vector<std::string> argv_strings = options.argv;
  std::vector<std::string> env_strings = child_environment(who, options.env);
  const std::vector<char*> argv = pointers_to(argv_strings);
  const std::vector<char*> envp = pointers_to(env_strings);

  io::UniqueFd dev_null = io::open_file("/dev/null", O_RDONLY);
  io::UniqueFd log;
  if (!options.log_path.empty()) log = io::open_file(options.log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  auto [command_read, command_write] = make_pipe(who);
  auto [result_read, result_write] = make_pipe(who);
  auto [status_read, status_write] = make_pipe(who);
  const int result_flags = ::fcntl(result_read.get(), F_GETFL);
  if (result_flags < 0 || ::fcntl(result_read.get(), F_SETFL, result_flags | O_NONBLOCK) != 0) {
    fail(who, "fcntl(O_NONBLOCK) failed: {}", std::strerror(errno));
  }

  rlimit nofile{};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20))
                         : 1 << 16;
  ChildPlan plan;
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.parent_pid = ::getpid();
  plan.new_process_group = options.new_process_group;
  plan.die_with_parent = options.die_with_parent;
  plan.stdin_fd = dev_null.get();
  plan.log_fd = log.get();
  plan.command_fd = command_read.get();
  plan.result_fd = result_write.get();
  plan.status_fd = status_write.get();
  plan.max_fd = max_fd;

  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(plan);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) fail(who, "fork failed: {}", std::strerror(fork_errno));

  // The child's ends belong to the child now; closing ours lets end of stream reach the reader.
  command_read = io::UniqueFd();
  result_write = io::UniqueFd();
  status_write = io::UniqueFd();
  dev_null = io::UniqueFd();
  log = io::UniqueFd();

  // End of stream means exec succeeded, and with it every step before (setpgid included), so
  // the child is fully set up when spawn returns.
  ChildFailure failure{};
  ssize_t n;
  while ((n = ::read(status_read.get(), &failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  const int read_errno = errno;
  if (n != 0) {
    wait_blocking(pid);
    if (n < 0) fail(who, "read of the spawn status pipe failed: {}", std::strerror(read_errno));
    if (n != static_cast<ssize_t>(sizeof failure)) fail(who, "short read of the spawn status pipe ({} bytes)", n);
    fail(who, "{} failed: {}", child_step_call(failure.step), std::strerror(failure.err));
  }

  Child child;
  child.pid_ = pid;
  child.name_ = who;
  child.command_fd_ = command_write.release();
  child.result_fd_ = result_read.release();
  return child;
}

Child Child::adopt(pid_t pid, std::string name, int command_fd, int result_fd) {
  Child child;
  child.pid_ = pid;
  child.name_ = std::move(name);
  child.command_fd_ = command_fd;
  child.result_fd_ = result_fd;
  child.forked_ahead_ = true;
  return child;
}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      name_(std::move(other.name_)),
      command_fd_(std::exchange(other.command_fd_, -1)),
      result_fd_(std::exchange(other.result_fd_, -1)),
      status_(std::exchange(other.status_, std::nullopt)),
      forked_ahead_(other.forked_ahead_) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    release();
    pid_ = std::exchange(other.pid_, -1);
    name_ = std::move(other.name_);
    command_fd_ = std::exchange(other.command_fd_, -1);
    result_fd_ = std::exchange(other.result_fd_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    forked_ahead_ = other.forked_ahead_;
  }
  return *this;
}

Child::~Child() { release(); }

void Child::release() noexcept {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    const int wait_status = wait_blocking(pid_);
    if (wait_status >= 0) status_ = exit_status_from_wait(wait_status);
  }
  close_command();
  if (result_fd_ >= 0) ::close(result_fd_);
  result_fd_ = -1;
}

void Child::close_command() {
  // close() is not retried on EINTR: Linux has released the descriptor either way.
  if (command_fd_ >= 0) ::close(command_fd_);
  command_fd_ = -1;
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
  int wait_status = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &wait_status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r < 0) fail(name_, "waitpid(pid {}) failed: {}", pid_, std::strerror(errno));
  if (r == 0) return std::nullopt;
  status_ = exit_status_from_wait(wait_status);
  return status_;
}

ExitStatus Child::wait() {
  if (status_) return *status_;
  if (pid_ <= 0) fail("Child::wait", "no process (moved from)");
  const int wait_status = wait_blocking(pid_);
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

int inherited_command_fd() {
  return check_inherited("inherited_command_fd", kChildCommandFd, O_RDONLY, "read-only");
}

int inherited_result_fd() { return check_inherited("inherited_result_fd", kChildResultFd, O_WRONLY, "write-only"); }

}  // namespace gpueval
