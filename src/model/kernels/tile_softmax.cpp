#include "model/kernels/tile_softmax.h"

#include "gpueval/error.h"

namespace gpueval {
#ifdef GPUEVAL_WITH_SLEEF
namespace tile_softmax_detail {
float masked_exp_row_avx2(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n);
float masked_exp_row_avx512(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n);
}  // namespace tile_softmax_detail
#endif

bool tile_softmax_available(TileSoftmaxIsa isa) {
#ifdef GPUEVAL_WITH_SLEEF
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return isa == TileSoftmaxIsa::kAvx512 ? avx512 : avx2;
#else
  (void)isa;
  return false;
#endif
}

bool tile_softmax_available() { return tile_softmax_available(TileSoftmaxIsa::kAvx2); }

float masked_exp_row(TileSoftmaxIsa isa, float* x, const float* prefix_mask, int64_t p, const float* own_mask,
                     int64_t n) {
  if (!tile_softmax_available(isa))
    throw Error(isa == TileSoftmaxIsa::kAvx512
                    ? "masked_exp_row: this build or CPU has no AVX-512 softmax (tile_softmax_available(kAvx512))"
                    : "masked_exp_row: this build or CPU has no AVX2+FMA softmax (tile_softmax_available())");
#ifdef GPUEVAL_WITH_SLEEF
  return isa == TileSoftmaxIsa::kAvx512 ? tile_softmax_detail::masked_exp_row_avx512(x, prefix_mask, p, own_mask, n)
                                        : tile_softmax_detail::masked_exp_row_avx2(x, prefix_mask, p, own_mask, n);
#else
  (void)x, (void)prefix_mask, (void)p, (void)own_mask, (void)n;
  return 0;
#endif
}

float masked_exp_row(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n) {
  static const TileSoftmaxIsa best =
      tile_softmax_available(TileSoftmaxIsa::kAvx512) ? TileSoftmaxIsa::kAvx512 : TileSoftmaxIsa::kAvx2;
  return masked_exp_row(best, x, prefix_mask, p, own_mask, n);
}

}  // namespace gpueval
