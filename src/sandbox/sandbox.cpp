#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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

#include "common/file_io.h"
#include "common/process.h"
#include "common/strings.h"
#include "gpueval/error.h"
#include "sandbox/process_tree.h"
#include "sandbox/python_entry.h"
#include "sandbox/seccomp_filter.h"

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

constexpr const char* kDidNotStart = "the sandbox did not start within";

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
    bwrap_version_ = last_line(process::run_and_capture({options_.bwrap, "--version"}, status));
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
    hint =
        ": unprivileged user namespaces must be allowed (sysctl user.max_user_namespaces > 0; on Debian "
        "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 kernel.apparmor_restrict_unprivileged_userns=0 or an "
        "AppArmor profile for bwrap)" +
        or_unsafe;
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

namespace {

// bubblewrap's command line for one program (or, unsandboxed, the interpreter's), the entry and
// its arguments last: every namespace, mount and environment variable of the sandbox is here.
std::vector<std::string> bwrap_arguments(const SandboxOptions& options, const Interpreter& interpreter,
                                         const SandboxLimits& limits, ProgramMode mode) {
  const bool unsafe = options.unsafe_no_sandbox;
  const auto cpu_backstop = static_cast<long long>(std::ceil(limits.cpu_seconds));
  const std::vector<std::string> entry_args = {unsafe ? "/proc/self/fd/7" : "/.sandbox/entry.py",
                                               mode == ProgramMode::kCodeEval ? "code_eval" : "script",
                                               std::to_string(cpu_backstop),
                                               std::to_string(limits.memory),
                                               std::to_string(limits.file_size),
                                               std::to_string(limits.max_open_files),
                                               std::to_string(limits.max_subprocesses),
                                               unsafe ? "/proc/self/fd/6" : "/.sandbox/program.py"};
  std::vector<std::string> a;
  if (unsafe) {
    a = {interpreter.path, "-I"};
  } else {
    a = {options.bwrap,
         "--unshare-all",
         "--unshare-user",
         "--die-with-parent",
         "--new-session",
         "--clearenv",
         "--setenv",
         "PATH",
         "/usr/bin:/bin",
         "--setenv",
         "HOME",
         "/work",
         "--setenv",
         "LANG",
         "C.UTF-8",
         "--setenv",
         "OMP_NUM_THREADS",
         "1",
         "--setenv",
         "OPENBLAS_NUM_THREADS",
         "1",
         "--setenv",
         "MKL_NUM_THREADS",
         "1",
         "--hostname",
         "sandbox",
         "--ro-bind",
         interpreter.path,
         interpreter.path};
    for (const std::string& f : interpreter.folders) a.insert(a.end(), {"--ro-bind", f, f});
    for (const char* link : {"/lib", "/lib64", "/bin"}) {
      const std::string target = std::string("usr") + link;
      if (std::find(interpreter.folders.begin(), interpreter.folders.end(), link) == interpreter.folders.end())
        a.insert(a.end(), {"--symlink", target, link});
    }
    const std::string tmpfs = std::to_string(limits.tmpfs_size);
    a.insert(a.end(), {"--proc",
                       "/proc",
                       "--dev",
                       "/dev",
                       "--size",
                       tmpfs,
                       "--perms",
                       "0700",
                       "--tmpfs",
                       "/work",
                       "--size",
                       tmpfs,
                       "--tmpfs",
                       "/tmp",
                       "--ro-bind-data",
                       std::to_string(kProgramFd),
                       "/.sandbox/program.py",
                       "--ro-bind-data",
                       std::to_string(kEntryFd),
                       "/.sandbox/entry.py",
                       "--chdir",
                       "/work",
                       "--json-status-fd",
                       std::to_string(kStatusFd),
                       "--seccomp",
                       std::to_string(kFilterFd),
                       interpreter.path,
                       "-I"});
  }
  a.insert(a.end(), entry_args.begin(), entry_args.end());
  return a;
}

// What the child needs, prepared before fork so that it makes async-signal-safe calls only.
struct ChildPlan {
  char* const* argv;
  char* const* envp;
  pid_t parent_pid;
  bool drop_root;  // become nobody: gpueval runs as root
  const char* chdir_to;  // nullptr: stay
  int fds[kFds];  // what becomes the child's 0..kFds-1 (-1: left as it is)
  int max_fd;
};

// Between fork and exec: async-signal-safe calls only. Every signal is blocked on entry.
[[noreturn]] void run_child(const ChildPlan& plan) {
  // Raw system calls: glibc's set*id wrappers are not async-signal-safe (they coordinate every
  // thread of the process, and a forked child of a threaded parent has one).
  if (plan.drop_root &&
      (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, kNobody, kNobody, kNobody) != 0 ||
       ::syscall(SYS_setresuid, kNobody, kNobody, kNobody) != 0))
    ::_exit(126);
  bool parent_alive = true;
  process::die_with_parent(plan.parent_pid, &parent_alive);  // after the uid change, which clears it
  // The program starts with no signal blocked, whatever the calling thread had (a run's program
  // threads block every signal, for its scheduler's thread).
  process::clear_signal_mask();
  if (!parent_alive) ::_exit(126);
  ::setsid();
  if (!process::place_descriptors(plan.fds, kFds)) ::_exit(126);
  process::close_on_exec_from(kFds, plan.max_fd);
  if (plan.chdir_to && ::chdir(plan.chdir_to) != 0) ::_exit(126);
  ::execve(plan.argv[0], plan.argv, plan.envp);
  ::_exit(127);
}

// One program's run: the steps of Sandbox::run_once (spawn, watch, reap, verdict) and what they
// share. Destroying a run whose child was not reaped kills and reaps it.
class ProgramRun {
 public:
  ProgramRun(const std::string& program, const SandboxLimits& limits, ProgramMode mode, const std::string& seccomp_bpf,
             bool unsafe);
  ProgramRun(const ProgramRun&) = delete;
  ProgramRun& operator=(const ProgramRun&) = delete;
  ~ProgramRun();

  void spawn(std::vector<std::string> args);
  // Reads the output, the result and bubblewrap's status until the child is gone, sampling the
  // tree's CPU time and killing it at a limit.
  void watch();
  // The child and the namespace's init, with their CPU time; the unsandboxed working folder removed.
  void reap();
  Verdict verdict();

 private:
  enum class Kill { kNone, kCpu, kWall, kOutput };
  static constexpr size_t kHead = 2048, kTail = 4096, kMaxResult = 8192;

  std::vector<pollfd> watched() const;
  void on_ready(int fd);
  void on_status(const char* data, size_t n);
  void take_output(const char* data, size_t n);
  void take_result(const char* data, size_t n);
  void drain();
  void sample();
  void kill_tree(Kill why);

  const SandboxLimits& limits_;
  const ProgramMode mode_;
  const bool unsafe_;
  process::Pipe out_, result_, status_;  // the program's stdout and stderr, its result, bwrap's status
  io::UniqueFd program_fd_, entry_fd_, filter_fd_, devnull_;
  std::string workdir_;  // the unsandboxed run's working folder

  pid_t pid_ = -1;
  bool reaped_ = false;
  std::chrono::steady_clock::time_point t0_;
  io::UniqueFd child_pidfd_, init_pidfd_;
  pid_t init_pid_ = 0;  // the root of the tree whose CPU time counts
  std::string head_, tail_, status_text_, result_text_;
  uint64_t out_total_ = 0;
  Kill killed_ = Kill::kNone;
  bool out_open_ = true, result_open_ = true, status_open_ = true, child_done_ = false;
  double polled_cpu_ = 0;
  std::set<std::pair<pid_t, uint64_t>> seen_;
  Verdict v_;
  int exit_code_ = 0;  // as a shell gives it
  char buf_[65536];
};

ProgramRun::ProgramRun(const std::string& program, const SandboxLimits& limits, ProgramMode mode,
                       const std::string& seccomp_bpf, bool unsafe)
    : limits_(limits),
      mode_(mode),
      unsafe_(unsafe),
      out_(process::make_pipe("sandbox")),
      result_(process::make_pipe("sandbox")),
      status_(process::make_pipe("sandbox")),
      program_fd_(process::memfd_with("gpueval-program", program, "sandbox")),
      entry_fd_(process::memfd_with("gpueval-entry", kPythonEntry, "sandbox")),
      filter_fd_(unsafe ? io::UniqueFd() : process::memfd_with("gpueval-seccomp", seccomp_bpf, "sandbox")),
      devnull_(::open("/dev/null", O_RDONLY | O_CLOEXEC)),
      status_open_(!unsafe) {
  if (unsafe_) {
    std::string tmpl =
        (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) + "/gpueval-program-XXXXXX";
    if (!::mkdtemp(tmpl.data())) fail("sandbox", "mkdtemp: {}", std::strerror(errno));
    workdir_ = tmpl;
  }
}

ProgramRun::~ProgramRun() {
  if (pid_ <= 0 || reaped_) return;  // reap() was not reached: an exception left watch()
  if (init_pidfd_.get() >= 0) process::kill_pidfd(init_pidfd_.get(), SIGKILL);
  if (child_pidfd_.get() >= 0) process::kill_pidfd(child_pidfd_.get(), SIGKILL);
  if (unsafe_) process::kill_group(pid_, SIGKILL);
  process::wait_for(pid_);
  if (init_pidfd_.get() >= 0 && !unsafe_) process::reap_pidfd(init_pidfd_.get(), nullptr);
}

void ProgramRun::spawn(std::vector<std::string> args) {
  const std::vector<char*> argv = process::pointers_to(args);
  std::vector<std::string> env;
  if (unsafe_) env = {"PATH=/usr/bin:/bin", "HOME=" + workdir_, "OMP_NUM_THREADS=1"};
  const std::vector<char*> envp = process::pointers_to(env);
  const ChildPlan plan{argv.data(),
                       envp.data(),
                       ::getpid(),
                       !unsafe_ && ::geteuid() == 0,
                       unsafe_ ? workdir_.c_str() : nullptr,
                       {devnull_.get(), out_.write.get(), out_.write.get(), result_.write.get(), status_.write.get(),
                        filter_fd_.get(), program_fd_.get(), entry_fd_.get()},
                       process::descriptor_limit()};
  t0_ = std::chrono::steady_clock::now();
  const pid_t pid = process::fork_with_signals_blocked();
  if (pid < 0) fail("sandbox", "fork: {}", std::strerror(errno));
  if (pid == 0) run_child(plan);
  pid_ = pid;
  out_.write = io::UniqueFd();
  result_.write = io::UniqueFd();
  status_.write = io::UniqueFd();
  child_pidfd_ = process::open_pidfd(pid_);
  if (unsafe_) init_pid_ = pid_;
}

std::vector<pollfd> ProgramRun::watched() const {
  std::vector<pollfd> fds;
  if (out_open_) fds.push_back({out_.read.get(), POLLIN, 0});
  if (result_open_) fds.push_back({result_.read.get(), POLLIN, 0});
  if (status_open_) fds.push_back({status_.read.get(), POLLIN, 0});
  if (!child_done_) fds.push_back({child_pidfd_.get(), POLLIN, 0});
  return fds;
}

void ProgramRun::watch() {
  const double wall_limit = limits_.wall_ceiling();
  while (!child_done_ || out_open_ || result_open_) {
    std::vector<pollfd> fds = watched();
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(kPollSeconds * 1000));
    if (r < 0 && errno != EINTR) fail("sandbox", "poll: {}", std::strerror(errno));
    for (const pollfd& f : fds) {
      if (r > 0 && (f.revents & (POLLIN | POLLHUP | POLLERR))) on_ready(f.fd);
    }
    if (child_done_) drain();
    if (killed_ == Kill::kNone && init_pid_ > 0 && !child_done_) {
      sample();
      if (polled_cpu_ >= limits_.cpu_seconds) kill_tree(Kill::kCpu);
    }
    if (killed_ == Kill::kNone && seconds_since(t0_) >= wall_limit) kill_tree(Kill::kWall);
  }
}

void ProgramRun::on_ready(int fd) {
  if (fd == child_pidfd_.get()) {
    child_done_ = true;
    // Its sandbox is gone with it: what is left in the pipes is all there will be.
    ::fcntl(out_.read.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(result_.read.get(), F_SETFL, O_NONBLOCK);
    return;
  }
  const ssize_t n = ::read(fd, buf_, sizeof buf_);
  if (n < 0 && errno == EINTR) return;
  if (fd == out_.read.get()) {
    if (n <= 0)
      out_open_ = false;
    else
      take_output(buf_, static_cast<size_t>(n));
  } else if (fd == result_.read.get()) {
    if (n <= 0)
      result_open_ = false;
    else
      take_result(buf_, static_cast<size_t>(n));
  } else if (fd == status_.read.get()) {
    if (n <= 0)
      status_open_ = false;
    else
      on_status(buf_, static_cast<size_t>(n));
  }
}

// bubblewrap's first status line names the namespace's init, the root of the tree to watch.
void ProgramRun::on_status(const char* data, size_t n) {
  status_text_.append(data, n);
  const size_t nl = status_text_.find('\n');
  if (init_pid_ != 0 || nl == std::string::npos) return;
  const nlohmann::json j = nlohmann::json::parse(status_text_.substr(0, nl), nullptr, false);
  if (!j.is_object() || !j.contains("child-pid") || !j["child-pid"].is_number_integer()) return;
  init_pid_ = j["child-pid"].get<pid_t>();
  init_pidfd_ = process::open_pidfd(init_pid_);
  if (killed_ != Kill::kNone && init_pidfd_.get() >= 0) process::kill_pidfd(init_pidfd_.get(), SIGKILL);
  if (killed_ == Kill::kNone) sample();  // at once: a short program may end before the first tick
}

void ProgramRun::take_output(const char* data, size_t n) {
  out_total_ += n;
  if (head_.size() < kHead) head_.append(data, std::min(n, kHead - head_.size()));
  tail_.append(data, n);
  if (tail_.size() > kTail) tail_.erase(0, tail_.size() - kTail);
  if (out_total_ > static_cast<uint64_t>(limits_.max_output)) kill_tree(Kill::kOutput);
}

void ProgramRun::take_result(const char* data, size_t n) {
  if (result_text_.size() < kMaxResult) result_text_.append(data, n);
}

// After the child: a descendant that outlived the namespace cannot exist, so read without blocking.
void ProgramRun::drain() {
  for (ssize_t n; out_open_ && (n = ::read(out_.read.get(), buf_, sizeof buf_)) > 0;)
    take_output(buf_, static_cast<size_t>(n));
  for (ssize_t n; result_open_ && (n = ::read(result_.read.get(), buf_, sizeof buf_)) > 0;)
    take_result(buf_, static_cast<size_t>(n));
  if (unsafe_) process::kill_group(pid_, SIGKILL);
  out_open_ = result_open_ = false;
}

void ProgramRun::sample() {
  const ProcessTreeSample s = sample_process_tree(init_pid_);
  polled_cpu_ = std::max(polled_cpu_, s.cpu_seconds);
  seen_.insert(s.processes.begin(), s.processes.end());
}

void ProgramRun::kill_tree(Kill why) {
  if (killed_ != Kill::kNone) return;
  killed_ = why;
  // The namespace's init: everything in it dies.
  if (init_pidfd_.get() >= 0) process::kill_pidfd(init_pidfd_.get(), SIGKILL);
  if (child_pidfd_.get() >= 0) process::kill_pidfd(child_pidfd_.get(), SIGKILL);
  if (unsafe_) process::kill_group(pid_, SIGKILL);  // its session, as far as it stayed in it
}

void ProgramRun::reap() {
  rusage child_usage{}, init_usage{};
  const int status = process::wait_for(pid_, &child_usage);
  reaped_ = true;
  // bwrap does not wait for its namespace's init: it is re-parented to us (a subreaper). Reaping it
  // gives the CPU time of every process it reaped. Killing it first makes sure the namespace is
  // gone (it exits with pid 2 anyway).
  if (!unsafe_ && init_pidfd_.get() >= 0) {
    process::kill_pidfd(init_pidfd_.get(), SIGKILL);
    process::reap_pidfd(init_pidfd_.get(), &init_usage);
  }
  v_.wall_seconds = seconds_since(t0_);
  // Processes killed with the namespace are reaped by its dying init with SIGCHLD ignored, which
  // gives their times to nobody: only the /proc samples saw them.
  v_.cpu_seconds = std::max(rusage_seconds(child_usage) + rusage_seconds(init_usage), polled_cpu_);
  v_.processes.assign(seen_.begin(), seen_.end());
  if (unsafe_) {
    int st = 0;
    process::run_and_capture({"/bin/rm", "-rf", "--", workdir_}, st);
  }
  exit_code_ = exit_status_from_wait(status < 0 ? 0 : status).shell_code();
}

Verdict ProgramRun::verdict() {
  Verdict v = std::move(v_);
  const int code = exit_code_;
  const double wall_limit = limits_.wall_ceiling();
  const nlohmann::json result = nlohmann::json::parse(result_text_.substr(0, result_text_.find('\n')), nullptr, false);
  const bool has_result = result.is_object() && result.contains("result") && result["result"].is_string();
  if (killed_ == Kill::kCpu || v.cpu_seconds >= limits_.cpu_seconds || (!has_result && code == 128 + SIGXCPU)) {
    v.kind = Verdict::Kind::kTimedOut;
    v.detail = fmt::format("cpu time {}, limit {}", seconds_str(v.cpu_seconds), seconds_str(limits_.cpu_seconds));
  } else if (killed_ == Kill::kWall && init_pid_ == 0) {
    // Nothing of the program ran: the sandbox itself never came up. Not the program's timeout.
    v.kind = Verdict::Kind::kError;
    v.detail = fmt::format("{} {}", kDidNotStart, seconds_str(wall_limit));
  } else if (killed_ == Kill::kWall) {
    v.kind = Verdict::Kind::kTimedOut;
    v.detail = fmt::format("wall-clock ceiling {} (cpu time {})", seconds_str(wall_limit), seconds_str(v.cpu_seconds));
  } else if (killed_ == Kill::kOutput) {
    v.kind = Verdict::Kind::kFailed;
    v.detail = fmt::format("output over {} bytes", limits_.max_output);
  } else if (init_pid_ == 0) {
    v.kind = Verdict::Kind::kError;
    v.detail = "the sandbox did not start: " + last_line(head_ + tail_);
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
    v.kind = mode_ == ProgramMode::kCodeEval ? Verdict::Kind::kTimedOut : Verdict::Kind::kFailed;
    const std::string line = last_line(out_total_ <= head_.size() ? head_ : tail_);
    v.detail = code > 128 ? fmt::format("ended without a result: killed by signal {}", code - 128)
                          : fmt::format("ended without a result: exit status {}", code);
    if (!line.empty()) v.detail += ": " + line;
  }
  return v;
}

}  // namespace

Verdict Sandbox::run_once(const std::string& program, const SandboxLimits& limits, ProgramMode mode) const {
  ProgramRun run(program, limits, mode, seccomp_bpf_, options_.unsafe_no_sandbox);
  run.spawn(bwrap_arguments(options_, interpreter_, limits, mode));
  run.watch();
  run.reap();
  return run.verdict();
}

}  // namespace gpueval
