// The AVX2+FMA body of row_invariant_multiply (row_invariant.h). Built with -mavx2 -mfma, so it
// includes nothing but intrinsics: an inline function from a shared header compiled here could be
// the copy the linker keeps for every file, and run on a CPU without AVX2.
//
// Each output y[i][j] is one 8-lane accumulator: lane l sums x[i][c] * w[j][c] for c = l, l + 8, ...
// as a chain of fused multiply-adds in index order (the last partial group loaded with zeros past k),
// then the lanes are added (l0+l4 + l2+l6) + (l1+l5 + l3+l7). A tile holds up to 4 rows by 3 outputs
// (12 accumulators, 7 loads per 12 FMAs); smaller tiles at the edges run the same chain per output,
// so no output's bits depend on which tile, or how many rows, computed it.
//
// Also row_invariant_weighted_sum's AVX2 body (weighted_sum_avx2): 8 output columns per lane vector,
// each lane its own chain over c, so it equals the scalar body with no reordering at all.
#include <immintrin.h>

#include <cstdint>

namespace gpueval::row_invariant_detail {
namespace {

constexpr int kRows = 4;  // rows of x per tile
constexpr int kOutputs = 3;  // rows of w (outputs) per tile
constexpr int64_t kRowBlock = 48;  // rows that share one pass over a tile's outputs (x stays in cache)

// Lanes [0, count) set, count in 0..8.
__m256i first_lanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4 .. l3+l7
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Prefetch: also fetch the next O rows of w, a cache line per row every 16 elements. The first tile
// of rows over a set of outputs reads them from memory (the others from cache): at decode's 8 rows
// this took a 134M model's step from 51 to 40 ms on one Zen core. No effect on the bits.
template <int R, int O, bool Prefetch>
inline __attribute__((always_inline)) void tile(int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                                                float* y, int64_t ldy) {
  __m256 acc[R][O];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 3
    for (int j = 0; j < O; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    if (Prefetch && (c & 15) == 0) {
#pragma GCC unroll 3
      for (int j = 0; j < O; ++j) _mm_prefetch(reinterpret_cast<const char*>(w + (j + O) * ldw + c), _MM_HINT_T0);
    }
    __m256 wv[O];
#pragma GCC unroll 3
    for (int j = 0; j < O; ++j) wv[j] = _mm256_loadu_ps(w + j * ldw + c);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
#pragma GCC unroll 3
      for (int j = 0; j < O; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (c < k) {
    const __m256i lanes = first_lanes(k - c);
    __m256 wv[O];
    for (int j = 0; j < O; ++j) wv[j] = _mm256_maskload_ps(w + j * ldw + c, lanes);
    for (int i = 0; i < R; ++i) {
      const __m256 xv = _mm256_maskload_ps(x + i * ldx + c, lanes);
      for (int j = 0; j < O; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < O; ++j) y[i * ldy + j] = lane_sum(acc[i][j]);
}

// The last 1 to 3 rows.
template <int O, bool Prefetch>
void edge_rows(int64_t rest, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
               int64_t ldy) {
  switch (rest) {
    case 1: tile<1, O, Prefetch>(k, x, ldx, w, ldw, y, ldy); break;
    case 2: tile<2, O, Prefetch>(k, x, ldx, w, ldw, y, ldy); break;
    case 3: tile<3, O, Prefetch>(k, x, ldx, w, ldw, y, ldy); break;
    default: break;
  }
}

// All m rows against O outputs; the first tile prefetches the next outputs' rows of w.
template <int O>
void rows(int64_t m, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y, int64_t ldy) {
  if (m < kRows) return edge_rows<O, true>(m, k, x, ldx, w, ldw, y, ldy);
  tile<kRows, O, true>(k, x, ldx, w, ldw, y, ldy);
  int64_t i = kRows;
  for (; i + kRows <= m; i += kRows) tile<kRows, O, false>(k, x + i * ldx, ldx, w, ldw, y + i * ldy, ldy);
  edge_rows<O, false>(m - i, k, x + i * ldx, ldx, w, ldw, y + i * ldy, ldy);
}

// row_invariant_weighted_sum's tile: R rows of x by 16 columns of w (two 8-lane vectors, the
// columns past n loaded as zeros and not stored), each output lane one chain of FMAs over c in order
// (from +0, or from y's value when accumulating).
template <int R>
inline __attribute__((always_inline)) void weighted_tile(int64_t cols, int64_t k, const float* x, int64_t ldx,
                                                         const float* w, int64_t ldw, float* y, int64_t ldy,
                                                         bool accumulate) {
  const __m256i lo = first_lanes(cols < 8 ? cols : 8), hi = first_lanes(cols < 8 ? 0 : cols - 8);
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r][0] = accumulate ? _mm256_maskload_ps(y + r * ldy, lo) : _mm256_setzero_ps();
    acc[r][1] = accumulate ? _mm256_maskload_ps(y + r * ldy + 8, hi) : _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < k; ++c) {
    const float* wc = w + c * ldw;
    const __m256 w0 = _mm256_maskload_ps(wc, lo), w1 = _mm256_maskload_ps(wc + 8, hi);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + r * ldx + c);
      acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_maskstore_ps(y + r * ldy, lo, acc[r][0]);
    _mm256_maskstore_ps(y + r * ldy + 8, hi, acc[r][1]);
  }
}

}  // namespace

void weighted_sum_avx2(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                       float* y, int64_t ldy, bool accumulate) {
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t cols = n - j < 16 ? n - j : 16;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      weighted_tile<4>(cols, k, x + i * ldx, ldx, w + j, ldw, y + i * ldy + j, ldy, accumulate);
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy + j;
    switch (m - i) {
      case 1: weighted_tile<1>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      case 2: weighted_tile<2>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      case 3: weighted_tile<3>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      default: break;
    }
  }
}

void multiply_avx2(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                   int64_t ldy) {
  for (int64_t r = 0; r < m; r += kRowBlock) {
    const int64_t mb = m - r < kRowBlock ? m - r : kRowBlock;
    const float* xb = x + r * ldx;
    float* yb = y + r * ldy;
    int64_t j = 0;
    for (; j + kOutputs <= n; j += kOutputs) rows<kOutputs>(mb, k, xb, ldx, w + j * ldw, ldw, yb + j, ldy);
    for (; j < n; ++j) rows<1>(mb, k, xb, ldx, w + j * ldw, ldw, yb + j, ldy);
  }
}

}  // namespace gpueval::row_invariant_detail
