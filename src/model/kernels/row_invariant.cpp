#include "model/kernels/row_invariant.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpueval/error.h"
#include "model/kernels/cpu_parallel.h"

namespace gpueval {

#ifdef GPUEVAL_ROW_INVARIANT_AVX2
namespace row_invariant_detail {
void multiply_avx2(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                   int64_t ldy);
void weighted_sum_avx2(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                       float* y, int64_t ldy, bool accumulate);
#ifdef GPUEVAL_ROW_INVARIANT_AVX512
int64_t avx512_scratch_floats(int64_t n, int64_t k);
void multiply_avx512(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                     float* y, int64_t ldy, float* scratch);
int64_t avx512_pair_scratch_floats(int64_t m, int64_t k);
void pack_row_pairs(int64_t m, int64_t k, const float* x, int64_t ldx, float* out);
void multiply_avx512_pairs(int64_t m, int64_t n, int64_t k, const float* xp, const float* w, int64_t ldw, float* y,
                           int64_t ldy);
void weighted_sum_avx512(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                         float* y, int64_t ldy, bool accumulate);
#endif
}  // namespace row_invariant_detail
#endif

namespace {

thread_local int invariant_scopes = 0;

// The fixed order of row_invariant.h, one output at a time.
float scalar_dot(const float* a, const float* b, int64_t k) {
  float sum[8] = {};
  const int64_t padded = (k + 7) / 8 * 8;
  for (int64_t c = 0; c < padded; ++c) {
    const float u = c < k ? a[c] : 0.0f, v = c < k ? b[c] : 0.0f;
    sum[c % 8] = std::fma(u, v, sum[c % 8]);
  }
  return ((sum[0] + sum[4]) + (sum[2] + sum[6])) + ((sum[1] + sum[5]) + (sum[3] + sum[7]));
}

#ifdef GPUEVAL_ROW_INVARIANT_AVX512
// Which AVX-512 body a product of m rows takes: outputs paired for many rows, rows paired for a few
// (one row alone stays with the AVX2 body under kBest: half of each pair would be padding).
bool avx512_paired_rows(int64_t m) { return m < kAvx512PackedMinRows; }
bool avx512_takes(RowInvariantCode code, int64_t m) {
  return code == RowInvariantCode::kAvx512 ||
         (code == RowInvariantCode::kBest && m >= 2 && row_invariant_avx512_code());
}
#endif

bool is_cpu_float32(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

}  // namespace

bool row_invariant_vector_code() {
#ifdef GPUEVAL_ROW_INVARIANT_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
}

bool row_invariant_avx512_code() {
#ifdef GPUEVAL_ROW_INVARIANT_AVX512
  // GPUEVAL_ROW_INVARIANT_AVX512=0 keeps it off (the AVX2 body then, the same bits), to measure it.
  static const bool avx512 = [] {
    const char* setting = std::getenv("GPUEVAL_ROW_INVARIANT_AVX512");
    return row_invariant_vector_code() && __builtin_cpu_supports("avx512f") &&
           !(setting && std::strcmp(setting, "0") == 0);
  }();
  return avx512;
#else
  return false;
#endif
}

void row_invariant_multiply(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                            float* y, int64_t ldy, RowInvariantCode code) {
  if (m <= 0 || n <= 0) return;
  if ((code == RowInvariantCode::kAvx2 && !row_invariant_vector_code()) ||
      (code == RowInvariantCode::kAvx512 && !row_invariant_avx512_code()))
    throw Error("row_invariant_multiply: this CPU or build has no such vector body");
#ifdef GPUEVAL_ROW_INVARIANT_AVX512
  if (avx512_takes(code, m) && avx512_paired_rows(m)) {
    thread_local std::vector<float> pairs;
    pairs.resize(static_cast<size_t>(row_invariant_detail::avx512_pair_scratch_floats(m, k)));
    row_invariant_detail::pack_row_pairs(m, k, x, ldx, pairs.data());
    row_invariant_detail::multiply_avx512_pairs(m, n, k, pairs.data(), w, ldw, y, ldy);
    return;
  }
  if (avx512_takes(code, m)) {
    // The packed weights, one buffer per thread (the threads share a product's outputs).
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(std::max<int64_t>(1, row_invariant_detail::avx512_scratch_floats(n, k))));
    row_invariant_detail::multiply_avx512(m, n, k, x, ldx, w, ldw, y, ldy, scratch.data());
    return;
  }
#endif
#ifdef GPUEVAL_ROW_INVARIANT_AVX2
  if (code == RowInvariantCode::kAvx2 || (code == RowInvariantCode::kBest && row_invariant_vector_code())) {
    row_invariant_detail::multiply_avx2(m, n, k, x, ldx, w, ldw, y, ldy);
    return;
  }
#endif
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = scalar_dot(x + i * ldx, w + j * ldw, k);
}

void row_invariant_weighted_sum(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                                int64_t ldw, float* y, int64_t ldy, bool accumulate, RowInvariantCode code) {
  if (m <= 0 || n <= 0) return;
  if ((code == RowInvariantCode::kAvx2 && !row_invariant_vector_code()) ||
      (code == RowInvariantCode::kAvx512 && !row_invariant_avx512_code()))
    throw Error("row_invariant_weighted_sum: this CPU or build has no such vector body");
#ifdef GPUEVAL_ROW_INVARIANT_AVX512
  if (code == RowInvariantCode::kAvx512 || (code == RowInvariantCode::kBest && row_invariant_avx512_code())) {
    row_invariant_detail::weighted_sum_avx512(m, n, k, x, ldx, w, ldw, y, ldy, accumulate);
    return;
  }
#endif
#ifdef GPUEVAL_ROW_INVARIANT_AVX2
  if (code == RowInvariantCode::kAvx2 || (code == RowInvariantCode::kBest && row_invariant_vector_code())) {
    row_invariant_detail::weighted_sum_avx2(m, n, k, x, ldx, w, ldw, y, ldy, accumulate);
    return;
  }
#endif
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = accumulate ? y[i * ldy + j] : 0.0f;
      for (int64_t c = 0; c < k; ++c) sum = std::fma(x[i * ldx + c], w[c * ldw + j], sum);
      y[i * ldy + j] = sum;
    }
}

bool row_invariant_project_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!is_cpu_float32(x) || !is_cpu_float32(weight) || weight.dim() != 2 || x.dim() < 1) return false;
  if (x.size(-1) != weight.size(1)) return false;
  if (bias.defined() && (!is_cpu_float32(bias) || bias.dim() != 1 || bias.size(0) != weight.size(0))) return false;
  return !(at::GradMode::is_enabled() &&
           (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad())));
}

at::Tensor row_invariant_project(const at::Tensor& x, const at::Tensor& weight_in, const at::Tensor& bias) {
  if (!row_invariant_project_applies(x, weight_in, bias))
    throw Error("row_invariant_project: needs CPU float32 x [..., in], weight [out, in] and bias [out] or none");
  const int64_t in = weight_in.size(1), out = weight_in.size(0);
  const at::Tensor rows = x.reshape({-1, in}).contiguous(), weight = weight_in.contiguous();
  const int64_t m = rows.size(0);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out;
  at::Tensor y = at::empty({m, out}, x.options());
  const float* a = rows.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* c = y.data_ptr<float>();
  // The threads share the outputs in chunks of 48 (a multiple of the vector tile's 3); every output
  // is computed whole by one call, so the chunks change no bits.
  constexpr int64_t kChunk = 48;
  const int64_t chunks = (out + kChunk - 1) / kChunk;
#ifdef GPUEVAL_ROW_INVARIANT_AVX512
  if (m > 0 && avx512_takes(RowInvariantCode::kBest, m) && avx512_paired_rows(m)) {
    // A few rows (a decode step): paired once here, for every thread's chunks.
    std::vector<float> pairs(static_cast<size_t>(row_invariant_detail::avx512_pair_scratch_floats(m, in)));
    row_invariant_detail::pack_row_pairs(m, in, a, in, pairs.data());
    cpu_parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kChunk, last = std::min(out, end * kChunk);
      row_invariant_detail::multiply_avx512_pairs(m, last - first, in, pairs.data(), w + first * in, in, c + first,
                                                  out);
    });
    if (bias.defined()) y.add_(bias);
    return y.view(shape);
  }
#endif
  if (m > 0)
    cpu_parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kChunk, last = std::min(out, end * kChunk);
      row_invariant_multiply(m, last - first, in, a, in, w + first * in, in, c + first, out);
    });
  if (bias.defined()) y.add_(bias);
  return y.view(shape);
}

bool row_invariant_product_applies(const at::Tensor& x, const at::Tensor& w) {
  return x.dim() == 2 && row_invariant_project_applies(x, w);
}

at::Tensor row_invariant_product(const at::Tensor& x, const at::Tensor& w) {
  if (!row_invariant_product_applies(x, w))
    throw Error("row_invariant_product: needs CPU float32 x [n, d] and w [e, d] of the same d");
  return row_invariant_project(x, w);
}

RowInvariantProducts::RowInvariantProducts() { ++invariant_scopes; }
RowInvariantProducts::~RowInvariantProducts() { --invariant_scopes; }

bool row_invariant_products_on() {
  // GPUEVAL_ROW_INVARIANT_PRODUCTS=0 turns the switch off, to measure what invariance costs.
  static const bool allowed = [] {
    const char* setting = std::getenv("GPUEVAL_ROW_INVARIANT_PRODUCTS");
    return !(setting && std::strcmp(setting, "0") == 0);
  }();
  return invariant_scopes > 0 && allowed && row_invariant_vector_code();
}

}  // namespace gpueval
