// The AVX-512 body of masked_exp_row (tile_softmax.h): 16 lanes a step where the AVX2 body
// (tile_softmax_avx2.cpp) takes 8, with the same bits. Sleef's 16-lane exponential equals its 8-lane
// one on every one of the 2^32 float inputs (checked when this was written), the maximum does not
// depend on the order, and the sum keeps the AVX2 body's 8 accumulators and order: each 16-lane
// step adds its lower 8 lanes, then its upper 8. Built with -mavx512f -mfma, so it includes nothing
// but intrinsics and Sleef (see tile_softmax_avx2.cpp).
#include <immintrin.h>
#include <sleef.h>

#include <cstdint>

namespace gpueval::tile_softmax_detail {
namespace {

// Lanes [0, count) set, count in 0..16.
__mmask16 first_lanes(int64_t count) { return static_cast<__mmask16>((1u << count) - 1u); }

// x[c] += mask[c] over [0, len) (mask null: x as it is); returns the lane-wise maximum of the sums
// and `running`.
__m512 add_mask_and_max(float* x, const float* mask, int64_t len, __m512 running) {
  int64_t c = 0;
  if (mask == nullptr) {
    for (; c + 16 <= len; c += 16) running = _mm512_max_ps(running, _mm512_loadu_ps(x + c));
    if (c < len)
      running = _mm512_mask_max_ps(running, first_lanes(len - c), running,
                                   _mm512_maskz_loadu_ps(first_lanes(len - c), x + c));
    return running;
  }
  for (; c + 16 <= len; c += 16) {
    const __m512 v = _mm512_add_ps(_mm512_loadu_ps(x + c), _mm512_loadu_ps(mask + c));
    _mm512_storeu_ps(x + c, v);
    running = _mm512_max_ps(running, v);
  }
  if (c < len) {
    const __mmask16 lanes = first_lanes(len - c);
    const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, x + c), _mm512_maskz_loadu_ps(lanes, mask + c));
    _mm512_mask_storeu_ps(x + c, lanes, v);
    running = _mm512_mask_max_ps(running, lanes, running, v);
  }
  return running;
}

// The AVX2 body's final reduction of its 8 accumulators.
float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

__m256 add_halves(__m256 sum, __m512 e) {
  sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
  return _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
}

}  // namespace

float masked_exp_row_avx512(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n) {
  __m512 running = _mm512_set1_ps(-__builtin_inff());
  running = add_mask_and_max(x, prefix_mask, p, running);
  running = add_mask_and_max(x + p, own_mask, n, running);
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(running));
  const int64_t width = p + n;
  __m256 sum = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= width; c += 16) {
    const __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + c), max));
    _mm512_storeu_ps(x + c, e);
    sum = add_halves(sum, e);
  }
  if (c < width) {
    // The lanes past the row read as 0 (their exponential may overflow) and are cleared before the
    // sum: a cleared upper half adds +0 to each accumulator, which changes no sum of exponentials.
    const __mmask16 lanes = first_lanes(width - c);
    const __m512 e =
        _mm512_maskz_mov_ps(lanes, Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + c), max)));
    _mm512_mask_storeu_ps(x + c, lanes, e);
    sum = add_halves(sum, e);
  }
  return lane_sum(sum);
}

}  // namespace gpueval::tile_softmax_detail
