// The AVX2+FMA body of masked_exp_row (tile_softmax.h). Built with -mavx2 -mfma, so it includes
// nothing but intrinsics and Sleef: an inline function from a shared header compiled here could
// be the copy the linker keeps for every file, and run on a CPU without AVX2.
#include <immintrin.h>
#include <sleef.h>

#include <cstdint>

namespace gpueval::tile_softmax_detail {
namespace {

// Lanes [0, count) set, count in 1..7.
__m256i first_lanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// x[c] += mask[c] over [0, len) (mask null: x as it is); returns the lane-wise maximum of the sums
// and `running`.
__m256 add_mask_and_max(float* x, const float* mask, int64_t len, __m256 running) {
  int64_t c = 0;
  if (mask == nullptr) {
    for (; c + 8 <= len; c += 8) running = _mm256_max_ps(running, _mm256_loadu_ps(x + c));
    if (c < len) {
      const __m256i lanes = first_lanes(len - c);
      const __m256 v = _mm256_maskload_ps(x + c, lanes);
      running = _mm256_blendv_ps(running, _mm256_max_ps(running, v), _mm256_castsi256_ps(lanes));
    }
    return running;
  }
  for (; c + 8 <= len; c += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(mask + c));
    _mm256_storeu_ps(x + c, v);
    running = _mm256_max_ps(running, v);
  }
  if (c < len) {
    const __m256i lanes = first_lanes(len - c);
    const __m256 v = _mm256_add_ps(_mm256_maskload_ps(x + c, lanes), _mm256_maskload_ps(mask + c, lanes));
    _mm256_maskstore_ps(x + c, lanes, v);
    running = _mm256_blendv_ps(running, _mm256_max_ps(running, v), _mm256_castsi256_ps(lanes));
  }
  return running;
}

float lane_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace

float masked_exp_row_avx2(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n) {
  __m256 running = _mm256_set1_ps(-__builtin_inff());
  running = add_mask_and_max(x, prefix_mask, p, running);
  running = add_mask_and_max(x + p, own_mask, n, running);
  const __m256 max = _mm256_set1_ps(lane_max(running));
  const int64_t width = p + n;
  __m256 sum = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= width; c += 8) {
    const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_loadu_ps(x + c), max));
    _mm256_storeu_ps(x + c, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (c < width) {
    // The lanes past the row read as 0 (their exponential may overflow) and are cleared before the sum.
    const __m256i lanes = first_lanes(width - c);
    const __m256 e = _mm256_and_ps(Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_maskload_ps(x + c, lanes), max)),
                                   _mm256_castsi256_ps(lanes));
    _mm256_maskstore_ps(x + c, lanes, e);
    sum = _mm256_add_ps(sum, e);
  }
  return lane_sum(sum);
}

}  // namespace gpueval::tile_softmax_detail
