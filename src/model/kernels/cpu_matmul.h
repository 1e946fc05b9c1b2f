// The model's float32 matrix products on the CPU (its projections y = x·Wᵀ + b, and attention's
// batched products), which library multiplies them, and the projections' weights packed once for
// oneDNN's matmul (PackedWeight) where that is faster.
// at::linear on the CPU goes to the BLAS LibTorch was built with: OpenBLAS for Debian's, whose
// kernels are chosen by CPU model and can be AVX2 where the CPU has AVX-512 (OpenBLAS 0.3.21 is
// pinned to its AVX2 "Haswell" kernels on machines where its own choice is known to miscompute).
// oneDNN, which Debian's LibTorch itself links, chooses its JIT kernels by the CPU's features: on
// one Zen 5 core its sgemm multiplies 256x768 by 768x2048 at about 200 GFLOPS against OpenBLAS's
// 100. With GPUEVAL_WITH_ONEDNN (cmake/cpu_options.cmake) project() sends CPU float32 products to
// dnnl_sgemm; everything else (other dtypes, CUDA tensors, a build without oneDNN) is at::linear.
//
// Same bits whatever the thread count: the rows of x are cut into blocks by their number alone,
// never by the threads, and each block is one single-threaded dnnl_sgemm call. A row's result
// depends on the batch's shape (as with any BLAS: a one-row product takes a different kernel),
// but not on how many threads a worker has (cpu_threads) nor on how many workers share the run:
// cpu:1 and cpu:2 agree bit for bit.
// Stateless; callable from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace gpueval {

// x [..., in] · weight [out, in]ᵀ + bias [out] (bias may be undefined) -> [..., out], as at::linear.
at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// Whether project(x, weight, bias) multiplies with oneDNN (else at::linear).
bool project_uses_onednn(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// a [n, m, k] · b [n, k, p] -> [n, m, p], as at::bmm. CPU float32 with oneDNN: one single-threaded
// dnnl_sgemm per matrix of the batch (the threads share the n matrices), each operand read in place
// when one of its two last strides is 1 (a transposed view included); else at::bmm.
at::Tensor batched_product(const at::Tensor& a, const at::Tensor& b);
bool batched_product_uses_onednn(const at::Tensor& a, const at::Tensor& b);

// One row-major float32 product C = alpha·op(A)·op(B) + beta·C ([m, k]·[k, n] -> [m, n]) on the
// calling thread alone: op is 'N' or 'T' (then A is stored [k, m], B [n, k]), lda, ldb and ldc are
// row strides. For kernels that cut their own work into tiles (cpu_attention.h). Only in builds
// with oneDNN (cpu_matmul_description() is not empty); throws Error if oneDNN fails or is absent.
void sgemm_on_this_thread(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The row blocks project() cuts m rows into: {first row, rows} pairs, a function of m alone, each at
// most kProjectBlockRows rows. A worker's threads share the blocks, so a worker of T threads uses
// them all on batches of T * kProjectBlockRows tokens or more (its probed budget finds that).
constexpr int64_t kProjectBlockRows = 512;
std::vector<std::pair<int64_t, int64_t>> project_row_blocks(int64_t m);

// "oneDNN 2.6.3 (avx512_core_bf16)" when project() can multiply with oneDNN, else "".
std::string cpu_matmul_description();

// A projection's float32 weight [out, in] laid out once in the blocked format of oneDNN's brgemm
// matmul kernels, so that no product packs it again: dnnl_sgemm repacks its B operand (the whole
// weight) on every call. On a Zen 4 core the model's seven projections at 256 to 443 rows run
// 5-10% faster (about 105 GFLOPS against 95), and the MMLU bench's cpu:2 run about 7%. The packed
// copy is the worker's own memory, as large as the weight (whose file-backed pages the workers
// share); model.cpp packs only where pack_cpu_weights() says so. A product's kernel depends on
// its number of rows alone (one primitive per row count and weight shape, made on first use, kept,
// and shared by every weight of that shape: a mixture's experts meet every row count, and kernels
// kept per weight grew a MoE model's memory with every batch), so, as with project(), the bits
// depend on the batch's shape but not on the threads or the workers.
// Thread-safe.
class PackedWeight {
 public:
  // The packed copy of `weight` (CPU float32 [out, in], contiguous), or null where it does not
  // apply: another dtype, device or layout, a build without oneDNN, or oneDNN's matmul choosing a
  // kernel other than brgemm here (then dnnl_sgemm is as fast). The weight is kept (referenced),
  // for row counts whose kernel would want another layout.
  static std::shared_ptr<const PackedWeight> pack(const at::Tensor& weight);
  ~PackedWeight();
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  int64_t in() const;
  int64_t out() const;
  int64_t bytes() const;  // of the packed copy
  // y [m, out] = x [m, in] · Wᵀ, rows contiguous, on the calling thread alone. Throws Error if oneDNN fails.
  void multiply(int64_t m, const float* x, float* y) const;

 private:
  struct Impl;
  explicit PackedWeight(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// project(x, weight, bias) with the packed weight: the same row blocks (project_row_blocks), each
// one PackedWeight::multiply. x: CPU float32 [..., in]; bias [out] or undefined.
at::Tensor project(const at::Tensor& x, const PackedWeight& weight, const at::Tensor& bias = {});
bool project_uses_packed(const at::Tensor& x, const PackedWeight& weight, const at::Tensor& bias = {});

// Products whose bits must not depend on the number of rows (generation, a MoE router): row_invariant.h.

// Whether a CPU float32 model packs its projections (PackedWeight), their packed copies taking
// `bytes`: GPUEVAL_CPU_PACKED_WEIGHTS=1 always, =0 never; else (auto) when they take at most
// an eighth of this machine's physical memory, so that a model too large for a copy per worker is
// left as it is. A function of the model and the machine alone: every worker of a run decides alike.
bool pack_cpu_weights(int64_t bytes);

}  // namespace gpueval
