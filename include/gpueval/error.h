// gpueval::Error is the one exception type the project throws for bad input
// and failed system calls. Its message is a single line that names the file
// (or flag, or key) and the problem, e.g.
//   "models/x/model.safetensors: tensor 'lm_head.weight' ends past the file (offset 96 > 64)"
// It is caught only at process boundaries (main, the worker loop), where it
// becomes "gpueval: <message>" on stderr and a non-zero exit code.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace gpueval {

class Error : public std::runtime_error {
 public:
  // A line break in `message` (from a file's own text echoed back, or a library's message) is
  // written as "\n" / "\r", so the message is one line whatever the input held.
  explicit Error(const std::string& message) : std::runtime_error(one_line(message)) {}

 private:
  static std::string one_line(const std::string& s) {
    if (s.find_first_of("\n\r") == std::string::npos) return s;
    std::string out;
    for (char c : s) out += c == '\n' ? std::string("\\n") : c == '\r' ? std::string("\\r") : std::string(1, c);
    return out;
  }
};

// Throws Error("<where>: <formatted message>").
template <typename... Args>
[[noreturn]] void fail(const std::string& where, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(where + ": " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace gpueval
