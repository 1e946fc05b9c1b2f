// The Python interpreter that sandboxed programs run on, asked once where it lives: its real
// path, the folders of its sys.path (what the sandbox binds read-only, with the loader's library
// folders) and its version, which goes into results.json beside the limits. The probe runs the
// interpreter unsandboxed (`python3 -I -c ...`): it is the machine's own, trusted. May call common
// only.
#pragma once

#include <string>
#include <vector>

namespace gpueval {

struct Interpreter {
  std::string path;  // the real path of the executable
  std::string version;  // "3.11.2"
  std::vector<std::string> folders;  // bound read-only, none inside another
};

// Throws Error("<python>: ...") when there is no such interpreter or it does not answer.
Interpreter probe_interpreter(const std::string& python);

}  // namespace gpueval
