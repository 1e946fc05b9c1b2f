#include "common/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "gpueval/error.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

extern char** environ;

namespace gpueval {

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

namespace process {

Pipe make_pipe(const std::string& who) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail(who, "pipe2 failed: {}", std::strerror(errno));
  return {io::UniqueFd(fds[0]), io::UniqueFd(fds[1])};
}

void set_nonblocking(int fd, const std::string& who) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    fail(who, "fcntl(O_NONBLOCK) failed: {}", std::strerror(errno));
  }
}

io::UniqueFd memfd_with(const char* name, const std::string& data, const std::string& who) {
  io::UniqueFd f(::memfd_create(name, MFD_CLOEXEC));
  if (f.get() < 0) fail(who, "memfd_create: {}", std::strerror(errno));
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = ::write(f.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(who, "writing a memfd: {}", std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  ::lseek(f.get(), 0, SEEK_SET);
  return f;
}

int descriptor_limit() {
  rlimit nofile{};
  return ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
             ? static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20))
             : 1 << 16;
}

std::vector<std::string> environment_with(const std::string& who,
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

pid_t fork_with_signals_blocked(sigset_t* parent_mask) {
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  if (parent_mask) *parent_mask = old_mask;
  const pid_t pid = ::fork();
  if (pid == 0) return 0;
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = fork_errno;
  return pid;
}

void reset_signals_in_child() {
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof default_action);
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction current;
    if (::sigaction(sig, nullptr, &current) != 0) continue;
    const bool handled =
        (current.sa_flags & SA_SIGINFO) != 0 || (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
    if (handled || sig == SIGPIPE || sig == SIGINT || sig == SIGTERM) ::sigaction(sig, &default_action, nullptr);
  }
}

void clear_signal_mask() {
  const uint64_t no_signals = 0;
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &no_signals, nullptr, sizeof no_signals);
}

bool die_with_parent(pid_t parent, bool* parent_alive) {
  // The raw call, as for the signal mask: no sanitizer's interceptor runs between fork and exec.
  if (::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return false;
  *parent_alive = ::getppid() == parent;
  return true;
}

int lift_descriptor(int fd, int lowest) { return ::fcntl(fd, F_DUPFD_CLOEXEC, lowest); }

bool place_descriptors(const int* sources, int count) {
  constexpr int kMaxPlaced = 64;
  if (count > kMaxPlaced) {
    errno = EINVAL;
    return false;
  }
  int lifted[kMaxPlaced];
  for (int i = 0; i < count; ++i) {
    lifted[i] = sources[i] >= 0 ? lift_descriptor(sources[i], count) : -1;
    if (sources[i] >= 0 && lifted[i] < 0) return false;
  }
  // dup2 clears FD_CLOEXEC on the target, so exactly the placed descriptors survive exec.
  for (int i = 0; i < count; ++i) {
    if (lifted[i] >= 0 && ::dup2(lifted[i], i) < 0) return false;
  }
  for (int i = 0; i < count; ++i) {
    if (lifted[i] >= 0) ::close(lifted[i]);
  }
  return true;
}

void close_on_exec_from(int first, int limit) {
#ifdef SYS_close_range
  const bool swept = ::syscall(SYS_close_range, first, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) == 0;
#else
  const bool swept = false;
#endif
  if (swept) return;
  for (int fd = first; fd < limit; ++fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

int wait_for(pid_t pid, rusage* usage) {
  int status = 0;
  while (::wait4(pid, &status, 0, usage) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

std::optional<int> poll_exit(pid_t pid, const std::string& who) {
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {}
  if (r < 0) fail(who, "waitpid(pid {}) failed: {}", pid, std::strerror(errno));
  if (r == 0) return std::nullopt;
  return status;
}

int kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  return wait_for(pid);
}

void kill_group(pid_t group, int sig) { ::kill(-group, sig); }

io::UniqueFd open_pidfd(pid_t pid) { return io::UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); }

void kill_pidfd(int pidfd, int sig) { ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0); }

bool reap_pidfd(int pidfd, rusage* usage) {
  siginfo_t info{};
  for (;;) {
    const long rc = ::syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED, usage);
    if (rc == 0) return true;
    if (errno != EINTR) return false;
  }
}

std::string run_and_capture(const std::vector<std::string>& argv, int& status, const Capture& how) {
  status = -1;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  io::UniqueFd out_read(fds[0]), out_write(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  if (how.with_stderr) posix_spawn_file_actions_adddup2(&actions, out_write.get(), 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char path_env[] = "PATH=/usr/bin:/bin";
  char* env[] = {path_env, nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), how.keep_environment ? environ : env);
  posix_spawn_file_actions_destroy(&actions);
  out_write = io::UniqueFd();
  if (rc != 0) return "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(out_read.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  const int st = wait_for(pid);
  status = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace process
}  // namespace gpueval
