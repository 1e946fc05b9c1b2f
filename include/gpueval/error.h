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
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error("<where>: <formatted message>").
template <typename... Args>
[[noreturn]] void fail(const std::string& where, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(where + ": " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace gpueval
