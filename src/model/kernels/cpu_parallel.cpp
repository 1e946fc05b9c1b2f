#include "model/kernels/cpu_parallel.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

namespace gpueval {

void cpu_parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  // The caller's thread-local state (inference mode, grad mode) on every thread, so that ATen calls
  // in f behave as on the caller. at::parallel_for is instantiated here: built with OpenMP, it forks.
  const at::ThreadLocalState state;
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    at::ThreadLocalStateGuard guard(state);
    f(b, e);
  });
}

bool cpu_parallel_forks() {
#if defined(_OPENMP) && AT_PARALLEL_OPENMP
  return true;
#else
  return false;
#endif
}

}  // namespace gpueval
