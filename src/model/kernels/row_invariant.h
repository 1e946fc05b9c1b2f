// Row-invariant float32 products on the CPU: y = x·Wᵀ in which every output element is one dot
// product summed in one fixed order, so that a row's bits never depend on how many other rows share
// the product, how the work is tiled, the threads or the workers. A BLAS (oneDNN's sgemm, OpenBLAS)
// picks its kernel, and with it the order of its additions, by the matrix's shape: a sequence's
// logits then change in their last bits with the batch it shares, and a greedy or sampled token can
// flip on a near-tie. This is what the generation engine multiplies with (RowInvariantProducts), and
// what a MoE router's choice of experts uses (model.h's MoeImpl). A second product,
// row_invariant_weighted_sum (x·W, W not transposed: one FMA chain per output), and this one with
// it, are what a decode step's attention after a prefix multiplies with (cpu_attention.h).
//
// The order, for x[i] · w[j] over k elements: 8 running sums, element c going to sum c mod 8, each a
// chain of fused multiply-adds in index order starting from +0 (the last partial group padded with
// zeros); then the sums added (s0+s4 + s2+s6) + (s1+s5 + s3+s7). Vector bodies compute it: AVX2+FMA
// vector code (row_invariant_avx2.cpp, 4 rows by 3 outputs per tile, as fast as oneDNN's sgemm on
// decode shapes and 80-95% of it on prefill shapes; docs/performance.md) where the build and CPU have
// it, else scalar code with std::fma; and on CPUs with AVX-512F, AVX-512 code (row_invariant_avx512.cpp):
// for products of at least kAvx512PackedMinRows rows (a prefill chunk) two outputs' 8 lanes in one
// register, the weights packed in pairs first, 6 rows by 8 outputs per tile; for fewer rows (2 and
// up: decode steps) two rows' 8 lanes in one register, the rows packed in pairs and the weights read
// once from where they are, 8 rows by 6 outputs per tile. All give the same bits (the tests
// compare them).
// May call cpu_parallel.h; stateless apart from the thread-local RowInvariantProducts switch.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace gpueval {

// kBest: an AVX-512 body for 2 rows or more where row_invariant_avx512_code(), else the AVX2 body
// where row_invariant_vector_code(), else the scalar one. kScalar, kAvx2, kAvx512: that body
// whatever the rows (kAvx512: rows paired below kAvx512PackedMinRows rows, outputs paired from there; the
// tests compare them; a vector body the CPU lacks is an Error).
enum class RowInvariantCode { kBest, kScalar, kAvx2, kAvx512 };
// Rows from which the AVX-512 body with packed weights takes over from the one with paired rows:
// below it, packing the weights costs more than it saves (measured: paired rows 1.1-1.4x faster from
// 8 to 64 rows, equal at 128, on 48-output chunks of a 768-wide product).
constexpr int64_t kAvx512PackedMinRows = 128;

// Whether the AVX2+FMA body runs here (built for x86-64, and the CPU has AVX2 and FMA).
bool row_invariant_vector_code();
// Whether the AVX-512 body runs here (that, and the CPU has AVX-512F; the environment's
// GPUEVAL_ROW_INVARIANT_AVX512=0 turns it off, to measure it against the AVX2 body).
bool row_invariant_avx512_code();

// y[i * ldy + j] = x[i] · w[j] for i < m, j < n, each in the fixed order above; x rows of k floats
// ldx apart, w rows ldw apart. On the calling thread alone.
void row_invariant_multiply(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                            float* y, int64_t ldy, RowInvariantCode code = RowInvariantCode::kBest);

// y[i * ldy + j] = sum over c < k of x[i * ldx + c] * w[c * ldw + j], for i < m, j < n: w not
// transposed (attention's probabilities times the values, cpu_attention.h). Each output is one chain
// of fused multiply-adds over c in index order, from +0, or from y[i * ldy + j] when `accumulate`
// (a sum over two lists of values continued as one chain), in every body (AVX-512: 6 rows by 64
// columns per tile, AVX2: 4 by 16, scalar: std::fma), so a row's bits depend neither on the other
// rows nor on the body. kBest: AVX-512 where row_invariant_avx512_code(), else AVX2 where
// row_invariant_vector_code(), else scalar. On the calling thread alone.
void row_invariant_weighted_sum(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                                int64_t ldw, float* y, int64_t ldy, bool accumulate = false,
                                RowInvariantCode code = RowInvariantCode::kBest);

// x [..., in] · weight [out, in]ᵀ + bias [out] (bias may be undefined) -> [..., out], the threads
// sharing the outputs (a row's bits do not depend on them). CPU float32 only (row_invariant_project_applies).
at::Tensor row_invariant_project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});
bool row_invariant_project_applies(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// x [n, d] · w [e, d]ᵀ -> [n, e] as row_invariant_project without a bias: a MoE router's logits.
at::Tensor row_invariant_product(const at::Tensor& x, const at::Tensor& w);
bool row_invariant_product_applies(const at::Tensor& x, const at::Tensor& w);

// While an object lives on a thread, cpu_matmul.h's project() on that thread (a model's projections
// and LM head) multiplies with row_invariant_project where row_invariant_vector_code() (else it keeps
// its fastest product, and a row's bits may depend on its batch). The generation engine holds one
// (generate.h), and so does whoever computes a prefix it will decode from. Nestable.
class RowInvariantProducts {
 public:
  RowInvariantProducts();
  ~RowInvariantProducts();
  RowInvariantProducts(const RowInvariantProducts&) = delete;
  RowInvariantProducts& operator=(const RowInvariantProducts&) = delete;
};

// Whether project() on this thread multiplies with row_invariant_project now. The environment's
// GPUEVAL_ROW_INVARIANT_PRODUCTS=0 keeps it off everywhere (to measure what invariance costs).
bool row_invariant_products_on();

}  // namespace gpueval
