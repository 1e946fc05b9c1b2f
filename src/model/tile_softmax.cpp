#include "model/tile_softmax.h"

#include "gpueval/error.h"

namespace gpueval {
#ifdef GPUEVAL_WITH_SLEEF
namespace tile_softmax_detail {
float masked_exp_row_avx2(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n);
}
#endif

bool tile_softmax_available() {
#ifdef GPUEVAL_WITH_SLEEF
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return cpu;
#else
  return false;
#endif
}

float masked_exp_row(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n) {
  if (!tile_softmax_available())
    throw Error("masked_exp_row: this build or CPU has no AVX2+FMA softmax (tile_softmax_available())");
#ifdef GPUEVAL_WITH_SLEEF
  return tile_softmax_detail::masked_exp_row_avx2(x, prefix_mask, p, own_mask, n);
#else
  return 0;
#endif
}

}  // namespace gpueval
