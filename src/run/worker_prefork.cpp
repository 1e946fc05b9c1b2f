#include "run/worker_prefork.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/process.h"
#include "common/wire_json.h"
#include "gpueval/error.h"
#include "run/wire.h"

namespace gpueval {
namespace {

constexpr int kCommandFd = 3;  // as Child::spawn hands them over (subprocess.h)
constexpr int kResultFd = 4;
constexpr int kFirstFreeFd = 5;

struct Waiting {
  pid_t pid = -1;
  io::UniqueFd command_fd;  // parent's write end
  io::UniqueFd result_fd;  // parent's read end, O_NONBLOCK
};

std::mutex g_mutex;
std::vector<Waiting> g_waiting;  // guarded by g_mutex
std::string g_executable;  // /proc/self/exe when the processes were forked

// Threads of this process, from /proc/self/task; 0 when it cannot be read.
int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return 0;
  int n = 0;
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n;
}

// OpenBLAS (Debian's LibTorch links it) starts its server threads when it is loaded, and registers
// blas_thread_shutdown_ as its pthread_atfork prepare handler: every fork stops and joins them, and
// its next call in the parent starts them again. Calling it first changes nothing fork would not.
void stop_openblas_threads() {
  using Shutdown = int (*)();
  if (auto shutdown = reinterpret_cast<Shutdown>(::dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"))) shutdown();
}

void set_openblas_threads(int threads) {
  using SetThreads = void (*)(int);
  if (threads <= 0) return;
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

// Whether `fd` may become a pipe end in the forked processes: closed, or open without FD_CLOEXEC,
// which is how descriptors inherited from whoever started this process arrive (a test harness
// hands gpueval its pipes as 3 and 4; an exec'd worker gets them replaced too). What libraries open
// for themselves is close-on-exec, and is left alone.
bool replaceable(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  return flags < 0 || (flags & FD_CLOEXEC) == 0;
}

// In a forked process: closes the descriptors above 4 that an exec would not have kept closed
// either, those without FD_CLOEXEC (inherited ones).
void close_inherited_descriptors() {
  std::vector<int> inherited;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(dir)) {
      const int fd = std::atoi(e->d_name);
      if (fd >= kFirstFreeFd && fd != ::dirfd(dir) && e->d_name[0] != '.') {
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags >= 0 && (flags & FD_CLOEXEC) == 0) inherited.push_back(fd);
      }
    }
    ::closedir(dir);
  }
  for (int fd : inherited) ::close(fd);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// In a forked process: everything Child::spawn's child does before exec, then the wait for kLaunch.
// `pipe_ends`: the command pipe's read end and the result pipe's write end, owned from here on.
PreforkRole become_worker(const int* pipe_ends, pid_t parent, const sigset_t& mask) {
  process::reset_signals_in_child();
  const auto give_up = [](const char* call) {
    std::fprintf(stderr, "gpueval: preforked worker: %s failed: %s\n", call, std::strerror(errno));
    return PreforkRole::kUnused;
  };
  if (::setpgid(0, 0) != 0) return give_up("setpgid");
  bool parent_alive = true;
  if (!process::die_with_parent(parent, &parent_alive)) return give_up("prctl(PR_SET_PDEATHSIG)");
  if (!parent_alive) return PreforkRole::kUnused;  // the parent died before prctl took effect
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) return give_up("open /dev/null");
  const int fds[kFirstFreeFd] = {null_fd, -1, -1, pipe_ends[0], pipe_ends[1]};
  if (!process::place_descriptors(fds, kFirstFreeFd)) return give_up("dup2");
  // The originals, unless one of them landed on a descriptor that placing replaced, or is one.
  for (const int fd : fds)
    if (fd >= kFirstFreeFd || (fd >= 0 && fds[fd] < 0)) ::close(fd);
  close_inherited_descriptors();
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);

  try {
    const std::optional<Frame> frame = read_frame(kCommandFd);
    if (!frame) return PreforkRole::kUnused;  // the parent never needed this one
    if (frame->type != FrameType::kLaunch)
      throw Error(fmt::format("expected a launch frame, got {}", frame_type_name(frame->type)));
    const LaunchRequest request = launch_request_from_json(unpack_payload(*frame));
    for (const auto& [name, value] : request.env) {
      ::setenv(name.c_str(), value.c_str(), 1);
      // An exec'd worker's OpenBLAS sizes its pool from OMP_NUM_THREADS when it loads; this one's
      // was sized in the parent, so it is told the same count.
      if (name == "OMP_NUM_THREADS") set_openblas_threads(std::atoi(value.c_str()));
    }
    if (!request.log_path.empty()) {
      const int log = ::open(request.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (log < 0) throw Error(fmt::format("{}: cannot open: {}", request.log_path, std::strerror(errno)));
      if (::dup2(log, 1) < 0 || ::dup2(log, 2) < 0) throw Error(fmt::format("dup2 failed: {}", std::strerror(errno)));
      ::close(log);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpueval: preforked worker: %s\n", e.what());
    return PreforkRole::kUnused;
  }
  return PreforkRole::kWorker;
}

// Forks one waiting process and adds it to g_waiting (g_mutex held): kParent, or nullopt when a
// pipe or the fork fails. In the forked process: its role, once it is launched or never will be.
std::optional<PreforkRole> fork_waiting(pid_t parent) {
  process::Pipe command, result;
  try {
    command = process::make_pipe("prefork");
    result = process::make_pipe("prefork");
    process::set_nonblocking(result.read.get(), "prefork");
  } catch (const Error&) {
    return std::nullopt;
  }
  sigset_t mask;
  const pid_t pid = process::fork_with_signals_blocked(&mask);
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    command.write = io::UniqueFd();
    result.read = io::UniqueFd();
    g_waiting.clear();  // the other waiting processes' ends
    const int pipe_ends[2] = {command.read.release(), result.write.release()};
    return become_worker(pipe_ends, parent, mask);
  }
  g_waiting.push_back({pid, std::move(command.write), std::move(result.read)});
  return PreforkRole::kParent;
}

}  // namespace

nlohmann::json to_json(const LaunchRequest& r) {
  nlohmann::json env = nlohmann::json::array();
  for (const auto& [name, value] : r.env) env.push_back({name, value});
  return {{"log_path", r.log_path}, {"env", env}};
}

LaunchRequest launch_request_from_json(const nlohmann::json& j) {
  wire::require_object(j, "launch");
  LaunchRequest r;
  r.log_path = wire::get_string(wire::field(j, "log_path", "launch"), "launch: log_path");
  for (const nlohmann::json& pair : wire::array_field(j, "env", "launch")) {
    if (!pair.is_array() || pair.size() != 2) throw Error("launch: env: each entry must be [name, value]");
    std::string name = wire::get_string(pair[0], "launch: env: name");
    if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos)
      throw Error(fmt::format("launch: env: bad variable name '{}'", name));
    r.env.emplace_back(std::move(name), wire::get_string(pair[1], "launch: env: value"));
  }
  return r;
}

PreforkRole prefork_workers(int count) {
  if (count <= 0) return PreforkRole::kParent;
  if (const char* v = std::getenv("GPUEVAL_PREFORK"); v && std::string(v) == "0") return PreforkRole::kParent;
  // A fork copies the calling thread alone: with a second thread alive, a lock it holds would stay
  // locked in the child forever. Descriptors 3 and 4 must be free to become the pipes.
  if (thread_count() != 1) stop_openblas_threads();
  // A joined thread's /proc entry can outlive the join by a moment: up to 100 ms for it to go.
  for (int i = 0; i < 100 && thread_count() > 1; ++i) ::usleep(1000);
  if (thread_count() != 1 || !replaceable(kCommandFd) || !replaceable(kResultFd)) return PreforkRole::kParent;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return PreforkRole::kParent;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_executable.assign(exe, static_cast<size_t>(n));
  // Whatever is buffered would be written again by every child.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  for (int i = 0; i < count; ++i) {
    const std::optional<PreforkRole> role = fork_waiting(parent);
    if (!role) break;
    if (*role != PreforkRole::kParent) return *role;
  }
  return PreforkRole::kParent;
}

std::optional<Child> take_preforked_worker(const SpawnOptions& options) {
  if (options.argv.size() != 2 || options.argv[1] != "worker" || !options.new_process_group || !options.die_with_parent)
    return std::nullopt;
  for (const auto& [name, value] : options.env)
    if (name != "OMP_NUM_THREADS") return std::nullopt;  // CUDA_VISIBLE_DEVICES and the like need exec
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_waiting.empty() || !same_file(options.argv[0], g_executable)) return std::nullopt;
  // Opened here first, so that a log that cannot be opened is the same Error as from Child::spawn.
  if (!options.log_path.empty()) io::open_file(options.log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  LaunchRequest request{options.log_path, options.env};
  const Frame launch{FrameType::kLaunch, pack_payload(to_json(request))};
  while (!g_waiting.empty()) {
    Waiting w = std::move(g_waiting.back());
    g_waiting.pop_back();
    try {
      // Into its empty pipe: a process that died while waiting fails the write (EPIPE) or shows
      // up dead to the scheduler's first poll, which restarts it as it would any worker.
      write_frame(w.command_fd.get(), launch);
    } catch (const Error&) {
      process::kill_and_reap(w.pid);
      continue;
    }
    return Child::adopt(w.pid, options.argv[0], std::move(w.command_fd), std::move(w.result_fd));
  }
  return std::nullopt;
}

}  // namespace gpueval
