#include "evaluation/output_lock.h"

#include <iostream>

#include <fmt/format.h>

#include "common/file_io.h"

namespace gpueval {

DirectoryLock lock_output(const std::string& dir, const EvaluationOptions& options) {
  io::make_directories(dir);
  const std::string what = options.command.empty() ? "gpueval" : options.command;
  return DirectoryLock::acquire(dir, what, options.wait, [&](const std::string& holder) {
    std::cerr << fmt::format("[sched] {} is in use by {}; waiting for it to finish (--wait)\n", dir, holder)
              << std::flush;
  });
}

}  // namespace gpueval
