#include "sandbox/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace gpueval {
namespace {

bool read_small_file(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return true;
}

// /proc/P/stat's fields after the command name (which may hold spaces and parentheses): field 3
// (state) is index 0, so utime (14) is 11, stime 12, cutime 13, cstime 14 and starttime (22) 19.
bool stat_fields(pid_t pid, std::string& text, uint64_t fields[20]) {
  if (!read_small_file("/proc/" + std::to_string(pid) + "/stat", text)) return false;
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  const char* p = text.c_str() + close + 2;
  for (int i = 0; i < 20; ++i) {
    while (*p == ' ') ++p;
    if (!*p) return false;
    char* end = nullptr;
    fields[i] = i == 0 ? 0 : std::strtoull(p, &end, 10);
    if (i == 0) {
      while (*p && *p != ' ') ++p;
    } else {
      p = end;
    }
  }
  return true;
}

}  // namespace

ProcessTreeSample sample_process_tree(pid_t root) {
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  ProcessTreeSample sample;
  std::vector<pid_t> stack{root};
  std::string text;
  uint64_t f[20];
  while (!stack.empty()) {
    const pid_t pid = stack.back();
    stack.pop_back();
    if (!stat_fields(pid, text, f)) continue;
    sample.cpu_seconds += static_cast<double>(f[11] + f[12] + f[13] + f[14]) / ticks;
    sample.processes.emplace_back(pid, f[19]);
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    DIR* dir = ::opendir(tasks.c_str());
    if (!dir) continue;
    while (dirent* e = ::readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      if (!read_small_file(tasks + "/" + e->d_name + "/children", text)) continue;
      const char* p = text.c_str();
      for (char* end = nullptr;; p = end) {
        const long child = std::strtol(p, &end, 10);
        if (end == p) break;
        stack.push_back(static_cast<pid_t>(child));
      }
    }
    ::closedir(dir);
  }
  return sample;
}

bool process_alive(pid_t pid, uint64_t start_ticks) {
  std::string text;
  uint64_t f[20];
  return stat_fields(pid, text, f) && f[19] == start_ticks;
}

}  // namespace gpueval
