#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "common/strings.h"
#include "gpueval/error.h"
#include "sandbox/process_tree.h"
#include "sandbox/python_entry.h"
#include "sandbox/seccomp_filter.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace gpueval {
namespace {

constexpr double kPollSeconds = 0.01;
constexpr uid_t kNobody = 65534;
// The descriptors the sandbox's first process gets: 0 /dev/null, 1 and 2 the output pipe, 3 the
// result pipe, then bwrap's own: its status pipe, the filter, the program and the entry.
enum : int { kResultFd = 3, kStatusFd = 4, kFilterFd = 5, kProgramFd = 6, kEntryFd = 7, kFds = 8 };

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double rusage_seconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

// Owns a descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd(other.fd) { other.fd = -1; }
  ~Fd() { reset(); }
  void reset(int f = -1) {
    if (fd >= 0) ::close(fd);
    fd = f;
  }
};

Fd memfd_with(const char* name, const std::string& data) {
  Fd f(memfd_create(name, MFD_CLOEXEC));
  if (f.fd < 0) fail("sandbox", "memfd_create: {}", std::strerror(errno));
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = ::write(f.fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("sandbox", "writing a memfd: {}", std::strerror(errno));
    off += static_cast<size_t>(n);
  }
  ::lseek(f.fd, 0, SEEK_SET);
  return f;
}

constexpr const char* kDidNotStart = "the sandbox did not start within";

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
void pidfd_kill(int fd) { ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0); }

// Reaps the process behind `pidfd` (our child), adding its rusage; false when it is not ours.
bool reap(int pidfd, rusage* usage) {
  siginfo_t info{};
  for (;;) {
    const long rc = ::syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED, usage);
    if (rc == 0) return true;
    if (errno != EINTR) return false;
  }
}

std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  const size_t nl = s.rfind('\n', end);
  const size_t start = nl == std::string::npos ? 0 : nl + 1;
  std::string line = s.substr(start, end - start + 1);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

std::string seconds_str(double s) { return fmt::format("{:.2f} s", s); }

}  // namespace

void check_sandbox_limits(const SandboxLimits& l, const std::string& where) {
  if (!(l.cpu_seconds > 0 && l.cpu_seconds <= 3600))
    fail(where, "CPU seconds must be in (0, 3600], got {}", l.cpu_seconds);
  if (!(l.wall_seconds >= 0 && l.wall_seconds <= 36000))
    fail(where, "wall-clock seconds must be in [0, 36000], got {}", l.wall_seconds);
  if (l.memory < (int64_t{64} << 20)) fail(where, "memory must be at least 64MiB, got {} bytes", l.memory);
  if (l.max_subprocesses < 1 || l.max_subprocesses > 4096)
    fail(where, "subprocesses must be 1 to 4096, got {}", l.max_subprocesses);
  if (l.file_size < 1 || l.tmpfs_size < (int64_t{1} << 20) || l.max_output < 1 || l.max_open_files < 8)
    fail(where, "file size, tmpfs size (at least 1MiB), output and open files (at least 8) must be positive");
}

const char* verdict_name(Verdict::Kind kind) {
  switch (kind) {
    case Verdict::Kind::kPassed: return "passed";
    case Verdict::Kind::kFailed: return "failed";
    case Verdict::Kind::kTimedOut: return "timed out";
    case Verdict::Kind::kError: return "error";
  }
  return "error";
}

nlohmann::ordered_json to_json(const Verdict& v) {
  return {{"verdict", verdict_name(v.kind)},
          {"detail", v.detail},
          {"cpu_s", std::round(v.cpu_seconds * 1000) / 1000},
          {"wall_s", std::round(v.wall_seconds * 1000) / 1000}};
}

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)) {
  const std::string or_unsafe =
      options_.offer_unsafe ? ", or pass --unsafe-no-sandbox to run the programs without a sandbox" : "";
  if (!options_.unsafe_no_sandbox && ::access(options_.bwrap.c_str(), X_OK) != 0)
    fail("sandbox", "the code sandbox needs bubblewrap at {}: install it (Debian: apt-get install bubblewrap){}",
         options_.bwrap, or_unsafe);
  interpreter_ = probe_interpreter(options_.python);
  if (!options_.unsafe_no_sandbox) {
    seccomp_bpf_ = seccomp_filter_bpf();
    int status = -1;
    bwrap_version_ = last_line(run_and_capture({options_.bwrap, "--version"}, status));
  }
  // bwrap leaves each sandbox's init to whoever is above it: that must be us, to reap it and count
  // its processes' CPU time.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) fail("sandbox", "PR_SET_CHILD_SUBREAPER: {}", std::strerror(errno));
  SandboxLimits limits;
  limits.cpu_seconds = 10;
  const Verdict v = run("pass\n", limits, ProgramMode::kScript);
  if (v.kind == Verdict::Kind::kPassed) return;
  std::string hint;
  if (v.detail.find("namespace") != std::string::npos || v.detail.find("Operation not permitted") != std::string::npos)
    hint = ": unprivileged user namespaces must be allowed (sysctl user.max_user_namespaces > 0; on Debian "
           "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 kernel.apparmor_restrict_unprivileged_userns=0 or an "
           "AppArmor profile for bwrap)" + or_unsafe;
  else if (v.detail.find("source path") != std::string::npos || v.detail.find("Permission denied") != std::string::npos)
    hint = fmt::format(": the interpreter {} and its libraries must be readable by the sandbox's user{}",
                       interpreter_.path, ::geteuid() == 0 ? " (nobody, since gpueval runs as root)" : "");
  fail("sandbox", "the code sandbox does not start here ({}: {}){}", verdict_name(v.kind), v.detail, hint);
}

nlohmann::json Sandbox::describe() const {
  return {{"sandbox", options_.unsafe_no_sandbox ? "none" : "bwrap"},
          {"bwrap", options_.unsafe_no_sandbox ? std::string() : bwrap_version_},
          {"python", interpreter_.path},
          {"python_version", interpreter_.version}};
}

Verdict Sandbox::run(const std::string& program, const SandboxLimits& limits, ProgramMode mode) const {
  Verdict v = run_once(program, limits, mode);
  if (v.kind == Verdict::Kind::kError && v.detail.rfind(kDidNotStart, 0) == 0) {
    std::cerr << "[sandbox] " << v.detail << "; trying the program once more\n";
    v = run_once(program, limits, mode);
  }
  return v;
}

Verdict Sandbox::run_once(const std::string& program, const SandboxLimits& limits, ProgramMode mode) const {
  const bool unsafe = options_.unsafe_no_sandbox;
  const double wall_limit = limits.wall_ceiling();
  int out_pipe[2], result_pipe[2], status_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) fail("sandbox", "pipe: {}", std::strerror(errno));
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(result_pipe, O_CLOEXEC) != 0) fail("sandbox", "pipe: {}", std::strerror(errno));
  Fd result_r(result_pipe[0]), result_w(result_pipe[1]);
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) fail("sandbox", "pipe: {}", std::strerror(errno));
  Fd status_r(status_pipe[0]), status_w(status_pipe[1]);
  Fd program_fd = memfd_with("gpueval-program", program);
  Fd entry_fd = memfd_with("gpueval-entry", kPythonEntry);
  Fd filter_fd = unsafe ? Fd() : memfd_with("gpueval-seccomp", seccomp_bpf_);
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // The unsandboxed run's working folder.
  std::string workdir;
  if (unsafe) {
    std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) +
                       "/gpueval-program-XXXXXX";
    if (!::mkdtemp(tmpl.data())) fail("sandbox", "mkdtemp: {}", std::strerror(errno));
    workdir = tmpl;
  }

  const auto cpu_backstop = static_cast<long long>(std::ceil(limits.cpu_seconds));
  std::vector<std::string> entry_args = {
      unsafe ? "/proc/self/fd/7" : "/.sandbox/entry.py",
      mode == ProgramMode::kCodeEval ? "code_eval" : "script",
      std::to_string(cpu_backstop),
      std::to_string(limits.memory),
      std::to_string(limits.file_size),
      std::to_string(limits.max_open_files),
      std::to_string(limits.max_subprocesses),
      unsafe ? "/proc/self/fd/6" : "/.sandbox/program.py"};
  std::vector<std::string> a;
  if (unsafe) {
    a = {interpreter_.path, "-I"};
  } else {
    a = {options_.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv",
         "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work", "--setenv", "LANG", "C.UTF-8",
         "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "OPENBLAS_NUM_THREADS", "1", "--setenv",
         "MKL_NUM_THREADS", "1", "--hostname", "sandbox", "--ro-bind", interpreter_.path, interpreter_.path};
    for (const std::string& f : interpreter_.folders) a.insert(a.end(), {"--ro-bind", f, f});
    for (const char* link : {"/lib", "/lib64", "/bin"}) {
      const std::string target = std::string("usr") + link;
      if (std::find(interpreter_.folders.begin(), interpreter_.folders.end(), link) == interpreter_.folders.end())
        a.insert(a.end(), {"--symlink", target, link});
    }
    const std::string tmpfs = std::to_string(limits.tmpfs_size);
    a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--size", tmpfs, "--perms", "0700", "--tmpfs", "/work",
                       "--size", tmpfs, "--tmpfs", "/tmp", "--ro-bind-data", std::to_string(kProgramFd),
                       "/.sandbox/program.py", "--ro-bind-data", std::to_string(kEntryFd), "/.sandbox/entry.py",
                       "--chdir", "/work", "--json-status-fd", std::to_string(kStatusFd), "--seccomp",
                       std::to_string(kFilterFd), interpreter_.path, "-I"});
  }
  a.insert(a.end(), entry_args.begin(), entry_args.end());
  std::vector<char*> argv;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string path_env = "PATH=/usr/bin:/bin", home_env = "HOME=" + workdir, threads_env = "OMP_NUM_THREADS=1";
  std::vector<char*> envp = {nullptr};
  if (unsafe) envp = {path_env.data(), home_env.data(), threads_env.data(), nullptr};
  const int sources[kFds] = {devnull.fd, out_w.fd, out_w.fd, result_w.fd, status_w.fd,
                             filter_fd.fd, program_fd.fd, entry_fd.fd};
  const bool drop_root = !unsafe && ::geteuid() == 0;
  const char* chdir_to = unsafe ? workdir.c_str() : nullptr;

  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) fail("sandbox", "fork: {}", std::strerror(errno));
  if (pid == 0) {
    // Async-signal-safe calls only from here.
    // Raw system calls: glibc's set*id wrappers are not async-signal-safe (they coordinate every
    // thread of the process, and a forked child of a threaded parent has one).
    if (drop_root && (::syscall(SYS_setgroups, 0, nullptr) != 0 ||
                      ::syscall(SYS_setresgid, kNobody, kNobody, kNobody) != 0 ||
                      ::syscall(SYS_setresuid, kNobody, kNobody, kNobody) != 0))
      ::_exit(126);
    ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // after the uid change, which clears it
    // The program starts with no signal blocked, whatever the calling thread had (a run's program
    // threads block every signal, for its scheduler's thread); the raw call, no interceptor.
    const uint64_t no_signals = 0;
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &no_signals, nullptr, sizeof no_signals);
    if (::getppid() == 1) ::_exit(126);
    ::setsid();
    int moved[kFds];
    for (int i = 0; i < kFds; ++i) moved[i] = sources[i] >= 0 ? ::fcntl(sources[i], F_DUPFD, 64) : -1;
    for (int i = 0; i < kFds; ++i)
      if (moved[i] >= 0) ::dup2(moved[i], i);
    ::syscall(SYS_close_range, static_cast<unsigned>(kFds), ~0u, 0u);
    if (chdir_to && ::chdir(chdir_to) != 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  out_w.reset();
  result_w.reset();
  status_w.reset();
  Fd child_pidfd(pidfd_open(pid));
  Fd init_pidfd;
  pid_t init_pid = unsafe ? pid : 0;  // the root of the tree whose CPU time counts

  Verdict v;
  std::string head, tail, status_text, result_text;
  uint64_t out_total = 0;
  constexpr size_t kHead = 2048, kTail = 4096;
  enum class Kill { kNone, kCpu, kWall, kOutput } killed = Kill::kNone;
  bool out_open = true, result_open = true, status_open = !unsafe, child_done = false;
  double polled_cpu = 0;
  std::set<std::pair<pid_t, uint64_t>> seen;
  auto kill_tree = [&](Kill why) {
    if (killed != Kill::kNone) return;
    killed = why;
    if (init_pidfd.fd >= 0) pidfd_kill(init_pidfd.fd);  // the namespace's init: everything in it dies
    if (child_pidfd.fd >= 0) pidfd_kill(child_pidfd.fd);
    if (unsafe) ::kill(-pid, SIGKILL);  // its session, as far as it stayed in it
  };
  auto sample = [&] {
    const ProcessTreeSample s = sample_process_tree(init_pid);
    polled_cpu = std::max(polled_cpu, s.cpu_seconds);
    seen.insert(s.processes.begin(), s.processes.end());
  };
  auto take_output = [&](const char* buf, size_t n) {
    out_total += n;
    if (head.size() < kHead) head.append(buf, std::min(n, kHead - head.size()));
    tail.append(buf, n);
    if (tail.size() > kTail) tail.erase(0, tail.size() - kTail);
    if (out_total > static_cast<uint64_t>(limits.max_output)) kill_tree(Kill::kOutput);
  };
  char buf[65536];
  while (!child_done || out_open || result_open) {
    std::vector<pollfd> fds;
    if (out_open) fds.push_back({out_r.fd, POLLIN, 0});
    if (result_open) fds.push_back({result_r.fd, POLLIN, 0});
    if (status_open) fds.push_back({status_r.fd, POLLIN, 0});
    if (!child_done) fds.push_back({child_pidfd.fd, POLLIN, 0});
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(kPollSeconds * 1000));
    if (r < 0 && errno != EINTR) fail("sandbox", "poll: {}", std::strerror(errno));
    for (const pollfd& f : fds) {
      if (r <= 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (f.fd == child_pidfd.fd) {
        child_done = true;
        // Its sandbox is gone with it: what is left in the pipes is all there will be.
        ::fcntl(out_r.fd, F_SETFL, O_NONBLOCK);
        ::fcntl(result_r.fd, F_SETFL, O_NONBLOCK);
        continue;
      }
      const ssize_t n = ::read(f.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (f.fd == out_r.fd) {
        if (n <= 0) out_open = false;
        else take_output(buf, static_cast<size_t>(n));
      } else if (f.fd == result_r.fd) {
        if (n <= 0) result_open = false;
        else if (result_text.size() < 8192) result_text.append(buf, static_cast<size_t>(n));
      } else if (f.fd == status_r.fd) {
        if (n <= 0) {
          status_open = false;
          continue;
        }
        status_text.append(buf, static_cast<size_t>(n));
        const size_t nl = status_text.find('\n');
        if (init_pid == 0 && nl != std::string::npos) {
          const nlohmann::json j = nlohmann::json::parse(status_text.substr(0, nl), nullptr, false);
          if (j.is_object() && j.contains("child-pid") && j["child-pid"].is_number_integer()) {
            init_pid = j["child-pid"].get<pid_t>();
            init_pidfd.reset(pidfd_open(init_pid));
            if (killed != Kill::kNone && init_pidfd.fd >= 0) pidfd_kill(init_pidfd.fd);
            if (killed == Kill::kNone) sample();  // at once: a short program may end before the first tick
          }
        }
      }
    }
    if (child_done) {
      // A descendant that outlived the namespace cannot exist: drain without blocking.
      for (ssize_t n; out_open && (n = ::read(out_r.fd, buf, sizeof buf)) > 0;) take_output(buf, static_cast<size_t>(n));
      for (ssize_t n; result_open && (n = ::read(result_r.fd, buf, sizeof buf)) > 0;)
        if (result_text.size() < 8192) result_text.append(buf, static_cast<size_t>(n));
      if (unsafe) ::kill(-pid, SIGKILL);
      out_open = result_open = false;
    }
    if (killed == Kill::kNone && init_pid > 0 && !child_done) {
      sample();
      if (polled_cpu >= limits.cpu_seconds) kill_tree(Kill::kCpu);
    }
    if (killed == Kill::kNone && seconds_since(t0) >= wall_limit) kill_tree(Kill::kWall);
  }
  rusage child_usage{}, init_usage{};
  int status = 0;
  while (::wait4(pid, &status, 0, &child_usage) < 0 && errno == EINTR) {
  }
  // bwrap does not wait for its namespace's init: it is re-parented to us (a subreaper). Reaping it
  // gives the CPU time of every process it reaped. Killing it first makes sure the namespace is
  // gone (it exits with pid 2 anyway).
  if (!unsafe && init_pidfd.fd >= 0) {
    pidfd_kill(init_pidfd.fd);
    reap(init_pidfd.fd, &init_usage);
  }
  v.wall_seconds = seconds_since(t0);
  // Processes killed with the namespace are reaped by its dying init with SIGCHLD ignored, which
  // gives their times to nobody: only the /proc samples saw them.
  v.cpu_seconds = std::max(rusage_seconds(child_usage) + rusage_seconds(init_usage), polled_cpu);
  v.processes.assign(seen.begin(), seen.end());
  if (unsafe) {
    int st = 0;
    run_and_capture({"/bin/rm", "-rf", "--", workdir}, st);
  }

  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const nlohmann::json result = nlohmann::json::parse(result_text.substr(0, result_text.find('\n')), nullptr, false);
  const bool has_result = result.is_object() && result.contains("result") && result["result"].is_string();
  if (killed == Kill::kCpu || v.cpu_seconds >= limits.cpu_seconds || (!has_result && code == 128 + SIGXCPU)) {
    v.kind = Verdict::Kind::kTimedOut;
    v.detail = fmt::format("cpu time {}, limit {}", seconds_str(v.cpu_seconds), seconds_str(limits.cpu_seconds));
  } else if (killed == Kill::kWall && init_pid == 0) {
    // Nothing of the program ran: the sandbox itself never came up. Not the program's timeout.
    v.kind = Verdict::Kind::kError;
    v.detail = fmt::format("{} {}", kDidNotStart, seconds_str(wall_limit));
  } else if (killed == Kill::kWall) {
    v.kind = Verdict::Kind::kTimedOut;
    v.detail = fmt::format("wall-clock ceiling {} (cpu time {})", seconds_str(wall_limit), seconds_str(v.cpu_seconds));
  } else if (killed == Kill::kOutput) {
    v.kind = Verdict::Kind::kFailed;
    v.detail = fmt::format("output over {} bytes", limits.max_output);
  } else if (init_pid == 0) {
    v.kind = Verdict::Kind::kError;
    v.detail = "the sandbox did not start: " + last_line(head + tail);
    if (code == 126 || code == 127) v.detail += fmt::format(" (exit status {})", code);
  } else if (has_result && result["result"] == "passed") {
    v.kind = Verdict::Kind::kPassed;
  } else if (has_result) {
    v.kind = Verdict::Kind::kFailed;
    const std::string error = result.value("error", std::string("error"));
    const std::string message = result.value("message", std::string());
    v.detail = message.empty() ? error : error + ": " + message;
  } else {
    // Ended without a result (os._exit, a crash of the interpreter): code_eval counts a child that
    // left no result as timed out, and code_eval mode does as it does.
    v.kind = mode == ProgramMode::kCodeEval ? Verdict::Kind::kTimedOut : Verdict::Kind::kFailed;
    const std::string line = last_line(out_total <= head.size() ? head : tail);
    v.detail = code > 128 ? fmt::format("ended without a result: killed by signal {}", code - 128)
                          : fmt::format("ended without a result: exit status {}", code);
    if (!line.empty()) v.detail += ": " + line;
  }
  return v;
}

}  // namespace gpueval
