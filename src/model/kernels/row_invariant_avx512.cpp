// The AVX-512 bodies of row_invariant_multiply (row_invariant.h): for products of many rows (a
// generation's prefill) outputs paired, for a few rows (a decode step's) rows paired. Built with -mavx512f -mavx2
// -mfma, so it includes nothing but intrinsics (as row_invariant_avx2.cpp, and for the same reason).
//
// It computes the AVX2 body's order, bit for bit: each output is 8 lanes, lane l summing
// x[i][c] * w[j][c] for c = l, l + 8, ... as a chain of fused multiply-adds in index order (the last
// partial group with zeros past k), then (l0+l4 + l2+l6) + (l1+l5 + l3+l7). A 512-bit register
// holds two outputs' 8 lanes side by side: the row's 8 elements broadcast to both halves, the two
// outputs' 8 weights beside each other, one FMA advancing both chains. The weights are packed first
// (pairs of outputs interleaved by groups of 8, zeros past k, into the caller's scratch), so a pair
// is one load. A tile holds up to 6 rows by 4 pairs (24 accumulators, 10 loads per 24 FMAs of 16
// lanes); edge tiles run the same chains, so no output's bits depend on its tile or its rows.
//
// A decode step multiplies a few rows by large weights, read once from memory: packing them would
// cost more than it saves. There the rows are paired instead (multiply_avx512_pairs): the caller
// packs the rows once (two rows' groups of 8 side by side, zeros past k and for a missing last row),
// and each output's 8 weights, broadcast to both halves straight from its row, advance two rows'
// chains in one FMA. A tile holds up to 4 row pairs by 6 outputs (24 accumulators, 10 loads per 24
// FMAs of 16 lanes), every row tile of an output block reading the block's weights while they are
// in cache.
//
// Also row_invariant_weighted_sum's AVX-512 body (weighted_sum_avx512): 16 output columns per lane
// vector, each lane its own chain over c, so it equals the scalar body with no reordering at all.
#include <immintrin.h>

#include <cstdint>

namespace gpueval::row_invariant_detail {

void multiply_avx2(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                   int64_t ldy);

namespace {

constexpr int kRows = 6;  // rows of x per tile
constexpr int kPairs = 4;  // pairs of outputs per tile
constexpr int64_t kRowBlock = 48;  // rows that share one pass over a group of pairs (x stays in cache)

int64_t groups_of(int64_t k) { return (k + 7) / 8; }

// The AVX2 body's lane sum of one 8-lane half.
float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4 .. l3+l7
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 8 floats of a row, in both halves.
inline __m512 both_halves(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(p))));
}
inline __m512 both_halves_partial(const float* p, int64_t count) {
  const __m256i lanes =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_maskload_ps(p, lanes))));
}

// Rows i < R against pairs p < P: panel + p * panel_stride holds pair p's packed weights.
template <int R, int P>
inline __attribute__((always_inline)) void tile(int64_t k, const float* x, int64_t ldx, const float* panel,
                                                int64_t panel_stride, float* y, int64_t ldy) {
  __m512 acc[R][P];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[i][p] = _mm512_setzero_ps();
  const int64_t full = k / 8;
  for (int64_t g = 0; g < full; ++g) {
    __m512 wv[P];
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) wv[p] = _mm512_loadu_ps(panel + p * panel_stride + 16 * g);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m512 xv = both_halves(x + i * ldx + 8 * g);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
    }
  }
  if (full * 8 < k) {  // the last partial group: zeros past k, as the AVX2 body's masked loads
    __m512 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = _mm512_loadu_ps(panel + p * panel_stride + 16 * full);
    for (int i = 0; i < R; ++i) {
      const __m512 xv = both_halves_partial(x + i * ldx + 8 * full, k - 8 * full);
      for (int p = 0; p < P; ++p) acc[i][p] = _mm512_fmadd_ps(xv, wv[p], acc[i][p]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int p = 0; p < P; ++p) {
      y[i * ldy + 2 * p] = lane_sum(_mm512_castps512_ps256(acc[i][p]));
      y[i * ldy + 2 * p + 1] = lane_sum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][p]), 1)));
    }
}

template <int P>
void rows(int64_t m, int64_t k, const float* x, int64_t ldx, const float* panel, int64_t panel_stride, float* y,
          int64_t ldy) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) tile<kRows, P>(k, x + i * ldx, ldx, panel, panel_stride, y + i * ldy, ldy);
  const float* xr = x + i * ldx;
  float* yr = y + i * ldy;
  switch (m - i) {
    case 1: tile<1, P>(k, xr, ldx, panel, panel_stride, yr, ldy); break;
    case 2: tile<2, P>(k, xr, ldx, panel, panel_stride, yr, ldy); break;
    case 3: tile<3, P>(k, xr, ldx, panel, panel_stride, yr, ldy); break;
    case 4: tile<4, P>(k, xr, ldx, panel, panel_stride, yr, ldy); break;
    case 5: tile<5, P>(k, xr, ldx, panel, panel_stride, yr, ldy); break;
    default: break;
  }
}

// Row pairs r < RP against outputs q < Q: xp + r * pair_stride holds pair r's packed rows; y's rows
// 2r and 2r + 1 (the second only where `last_odd` is false or r < RP - 1).
template <int RP, int Q>
inline __attribute__((always_inline)) void pair_tile(int64_t k, const float* xp, int64_t pair_stride, const float* w,
                                                     int64_t ldw, float* y, int64_t ldy, bool last_odd) {
  __m512 acc[RP][Q];
#pragma GCC unroll 4
  for (int r = 0; r < RP; ++r)
#pragma GCC unroll 6
    for (int q = 0; q < Q; ++q) acc[r][q] = _mm512_setzero_ps();
  const int64_t full = k / 8;
  for (int64_t g = 0; g < full; ++g) {
    __m512 xv[RP];
#pragma GCC unroll 4
    for (int r = 0; r < RP; ++r) xv[r] = _mm512_loadu_ps(xp + r * pair_stride + 16 * g);
#pragma GCC unroll 6
    for (int q = 0; q < Q; ++q) {
      const __m512 wv = both_halves(w + q * ldw + 8 * g);
#pragma GCC unroll 4
      for (int r = 0; r < RP; ++r) acc[r][q] = _mm512_fmadd_ps(xv[r], wv, acc[r][q]);
    }
  }
  if (full * 8 < k) {  // the last partial group: zeros past k (packed rows; masked weights)
    __m512 xv[RP];
    for (int r = 0; r < RP; ++r) xv[r] = _mm512_loadu_ps(xp + r * pair_stride + 16 * full);
    for (int q = 0; q < Q; ++q) {
      const __m512 wv = both_halves_partial(w + q * ldw + 8 * full, k - 8 * full);
      for (int r = 0; r < RP; ++r) acc[r][q] = _mm512_fmadd_ps(xv[r], wv, acc[r][q]);
    }
  }
  for (int r = 0; r < RP; ++r)
    for (int q = 0; q < Q; ++q) {
      y[2 * r * ldy + q] = lane_sum(_mm512_castps512_ps256(acc[r][q]));
      if (!(last_odd && r == RP - 1))
        y[(2 * r + 1) * ldy + q] = lane_sum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][q]), 1)));
    }
}

constexpr int kPairRows = 4;  // row pairs per tile
constexpr int kOutputs = 6;  // outputs per tile

template <int Q>
void pair_rows(int64_t m, int64_t k, const float* xp, int64_t pair_stride, const float* w, int64_t ldw, float* y,
               int64_t ldy) {
  const int64_t pairs = (m + 1) / 2;
  const bool odd = m % 2 == 1;
  int64_t r = 0;
  for (; r + kPairRows <= pairs; r += kPairRows)
    pair_tile<kPairRows, Q>(k, xp + r * pair_stride, pair_stride, w, ldw, y + 2 * r * ldy, ldy,
                            odd && r + kPairRows == pairs);
  const float* xr = xp + r * pair_stride;
  float* yr = y + 2 * r * ldy;
  switch (pairs - r) {
    case 1: pair_tile<1, Q>(k, xr, pair_stride, w, ldw, yr, ldy, odd); break;
    case 2: pair_tile<2, Q>(k, xr, pair_stride, w, ldw, yr, ldy, odd); break;
    case 3: pair_tile<3, Q>(k, xr, pair_stride, w, ldw, yr, ldy, odd); break;
    default: break;
  }
}

// row_invariant_weighted_sum's tile: R rows of x by 64 columns of w (four 16-lane vectors, the
// columns past n loaded as zeros and not stored), each output lane one chain of FMAs over c in order
// (from +0, or from y's value when accumulating).
template <int R>
inline __attribute__((always_inline)) void weighted_tile(int64_t cols, int64_t k, const float* x, int64_t ldx,
                                                         const float* w, int64_t ldw, float* y, int64_t ldy,
                                                         bool accumulate) {
  __mmask16 lanes[4];
#pragma GCC unroll 8
  for (int v = 0; v < 4; ++v) {
    const int64_t left = cols - 16 * v;
    lanes[v] = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>(left <= 0 ? 0u : (1u << left) - 1u);
  }
  __m512 acc[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < 4; ++v)
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(lanes[v], y + r * ldy + 16 * v) : _mm512_setzero_ps();
  for (int64_t c = 0; c < k; ++c) {
    const float* wc = w + c * ldw;
    __m512 wv[4];
#pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) wv[v] = _mm512_maskz_loadu_ps(lanes[v], wc + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + c]);
#pragma GCC unroll 8
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(xb, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(y + r * ldy + 16 * v, lanes[v], acc[r][v]);
}

}  // namespace

void weighted_sum_avx512(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                         float* y, int64_t ldy, bool accumulate) {
  for (int64_t j = 0; j < n; j += 64) {
    const int64_t cols = n - j < 64 ? n - j : 64;
    int64_t i = 0;
    for (; i + 6 <= m; i += 6)
      weighted_tile<6>(cols, k, x + i * ldx, ldx, w + j, ldw, y + i * ldy + j, ldy, accumulate);
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy + j;
    switch (m - i) {
      case 1: weighted_tile<1>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      case 2: weighted_tile<2>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      case 3: weighted_tile<3>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      case 4: weighted_tile<4>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      case 5: weighted_tile<5>(cols, k, xi, ldx, w + j, ldw, yi, ldy, accumulate); break;
      default: break;
    }
  }
}

int64_t avx512_pair_scratch_floats(int64_t m, int64_t k) { return (m + 1) / 2 * groups_of(k) * 16; }

void pack_row_pairs(int64_t m, int64_t k, const float* x, int64_t ldx, float* out) {
  const int64_t groups = groups_of(k), stride = groups * 16;
  for (int64_t r = 0; r < (m + 1) / 2; ++r)
    for (int half = 0; half < 2; ++half) {
      const int64_t i = 2 * r + half;
      float* o = out + r * stride + 8 * half;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t l = 0; l < 8; ++l) {
          const int64_t c = 8 * g + l;
          o[16 * g + l] = i < m && c < k ? x[i * ldx + c] : 0.0f;
        }
    }
}

void multiply_avx512_pairs(int64_t m, int64_t n, int64_t k, const float* xp, const float* w, int64_t ldw, float* y,
                           int64_t ldy) {
  const int64_t pair_stride = groups_of(k) * 16;
  int64_t j = 0;
  for (; j + kOutputs <= n; j += kOutputs) pair_rows<kOutputs>(m, k, xp, pair_stride, w + j * ldw, ldw, y + j, ldy);
  const float* wr = w + j * ldw;
  switch (n - j) {
    case 1: pair_rows<1>(m, k, xp, pair_stride, wr, ldw, y + j, ldy); break;
    case 2: pair_rows<2>(m, k, xp, pair_stride, wr, ldw, y + j, ldy); break;
    case 3: pair_rows<3>(m, k, xp, pair_stride, wr, ldw, y + j, ldy); break;
    case 4: pair_rows<4>(m, k, xp, pair_stride, wr, ldw, y + j, ldy); break;
    case 5: pair_rows<5>(m, k, xp, pair_stride, wr, ldw, y + j, ldy); break;
    default: break;
  }
}

int64_t avx512_scratch_floats(int64_t n, int64_t k) { return (n / 2) * groups_of(k) * 16; }

void multiply_avx512(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                     float* y, int64_t ldy, float* scratch) {
  const int64_t pairs = n / 2, groups = groups_of(k), panel_stride = groups * 16;
  // Pack: pair p's group g is w[2p][8g .. 8g+8] then w[2p+1][8g .. 8g+8], zeros past k.
  for (int64_t p = 0; p < pairs; ++p) {
    const float* w0 = w + 2 * p * ldw;
    const float* w1 = w0 + ldw;
    float* out = scratch + p * panel_stride;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c = 8 * g;
      if (c + 8 <= k) {
        _mm256_storeu_ps(out + 16 * g, _mm256_loadu_ps(w0 + c));
        _mm256_storeu_ps(out + 16 * g + 8, _mm256_loadu_ps(w1 + c));
      } else {
        for (int64_t l = 0; l < 8; ++l) {
          out[16 * g + l] = c + l < k ? w0[c + l] : 0.0f;
          out[16 * g + 8 + l] = c + l < k ? w1[c + l] : 0.0f;
        }
      }
    }
  }
  for (int64_t r = 0; r < m; r += kRowBlock) {
    const int64_t mb = m - r < kRowBlock ? m - r : kRowBlock;
    const float* xb = x + r * ldx;
    float* yb = y + r * ldy;
    int64_t p = 0;
    for (; p + kPairs <= pairs; p += kPairs)
      rows<kPairs>(mb, k, xb, ldx, scratch + p * panel_stride, panel_stride, yb + 2 * p, ldy);
    const float* panel = scratch + p * panel_stride;
    switch (pairs - p) {
      case 1: rows<1>(mb, k, xb, ldx, panel, panel_stride, yb + 2 * p, ldy); break;
      case 2: rows<2>(mb, k, xb, ldx, panel, panel_stride, yb + 2 * p, ldy); break;
      case 3: rows<3>(mb, k, xb, ldx, panel, panel_stride, yb + 2 * p, ldy); break;
      default: break;
    }
  }
  if (n % 2 == 1) multiply_avx2(m, 1, k, x, ldx, w + (n - 1) * ldw, ldw, y + (n - 1), ldy);  // the odd last output
}

}  // namespace gpueval::row_invariant_detail
