#include "sandbox/interpreter.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/process.h"
#include "common/strings.h"
#include "gpueval/error.h"

namespace gpueval {

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

Interpreter probe_interpreter(const std::string& python) {
  Interpreter in;
  char real[PATH_MAX];
  if (!::realpath(python.c_str(), real)) fail(python, "no Python interpreter there ({})", std::strerror(errno));
  in.path = real;
  int status = -1;
  const std::string out = process::run_and_capture(
      {in.path, "-I", "-c",
       "import sys\nprint('version', '.'.join(map(str, sys.version_info[:3])))\nfor p in sys.path: print('path', p)\n"},
      status);
  if (status != 0) fail(python, "the interpreter did not answer `{} -I -c ...` (exit status {})", in.path, status);
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (starts_with(line, "version ")) in.version = line.substr(8);
    if (!starts_with(line, "path ")) continue;
    const std::string folder = line.substr(5);
    if (folder.empty() || folder[0] != '/' || !is_dir(folder)) continue;
    bool inside = false;
    for (const std::string& f : in.folders) inside = inside || starts_with(folder, f + "/") || folder == f;
    if (!inside) in.folders.push_back(folder);
  }
  if (in.version.empty()) fail(python, "the interpreter did not say its version");
  // The loader and the shared libraries the interpreter and its extension modules load.
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64"}) {
    char r[PATH_MAX];
    if (!is_dir(dir) || !::realpath(dir, r)) continue;
    bool inside = false;
    for (const std::string& f : in.folders) inside = inside || starts_with(std::string(r), f + "/") || f == r;
    if (!inside) in.folders.push_back(r);
  }
  return in;
}

}  // namespace gpueval
