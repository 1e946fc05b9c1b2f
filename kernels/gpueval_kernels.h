// C API of the CUDA kernels in kernels/*.cu. Plain C++ on purpose: no LibTorch, ATen or CUDA
// headers, so the device code compiles with a bare nvcc and src/model/kernels/cuda_kernels.cpp (the LibTorch
// dispatcher) is the only place that knows about at::Tensor. Every launcher enqueues one kernel on
// `stream` and returns the cudaError_t of the launch as an int (0 = cudaSuccess); it neither
// synchronises nor allocates. Pointers are device pointers; strides are in elements; the last
// dimension of every tensor is contiguous. Each kernel reproduces a plain-LibTorch reference
// (kernels/README.md) and is tested against it (tests/model/kernels_test.cpp).
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace gpueval::kernels {

enum class DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Fused log-softmax + gather, one block per row, one pass over the vocabulary with an online
// max / sum-exp in float32 registers (no float32 [N, V] is written).
// logits: [N, V] of `dtype`, row r at logits + r * row_stride; targets: [N] int64.
// logprob[r] = logits[r, t] - max - log(sum exp(logits[r, :] - max)), t = targets[r] (float32);
// is_greedy[r] = 1 when t is the first argmax of the row (NaN counts as the maximum), else 0.
// A row holding NaN or +inf gets a NaN logprob (as log_softmax does); a target outside [0, V)
// gets a NaN logprob and is_greedy 0 (the reference throws instead).
int logprob_gather(const void* logits, int64_t row_stride, const int64_t* targets, int64_t n, int64_t vocab,
                   DType dtype, float* logprob, uint8_t* is_greedy, cudaStream_t stream);

// RMSNorm, one block per row: out = weight * to_dtype(x * rsqrt(mean(x^2) + eps)), the statistics and
// the normalisation in float32, then the product with the weight rounded to `dtype` (as
// RMSNormImpl::forward). x: [rows, dim] with row stride `x_stride`; weight: [dim]; out: [rows, dim]
// contiguous; all of `dtype`.
int rms_norm(const void* x, int64_t x_stride, const void* weight, void* out, int64_t rows, int64_t dim, double eps,
             DType dtype, cudaStream_t stream);

// Strides of a [B, H, T, head_dim] tensor whose last dimension is contiguous.
struct Strides4 {
  int64_t b, h, t;
};

// RoPE, rotate-half layout: out = x * cos + cat(-x2, x1) * sin with x1, x2 the two halves of the
// head dimension, each product and the sum rounded to `dtype` (as apply_rope). x, out: [B, H, T,
// head_dim] (out may alias x); cos, sin: [B, 1, T, head_dim] with strides `table` (table.h unused,
// table.b may be 0 for a broadcast batch); all of `dtype`. head_dim must be even.
int rope(const void* x, Strides4 x_strides, const void* cos, const void* sin, Strides4 table, void* out,
         Strides4 out_strides, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
         cudaStream_t stream);

// KV-cache append: k_cache[b, h, offset_b + t, :] = k[b, h, t, :] and the same for v, for t in [0, T).
// k, v: [B, KV, T, head_dim] with strides k_strides / v_strides; k_cache, v_cache: [B, KV, capacity,
// head_dim] contiguous; offset_b = row_offsets[b] when row_offsets (device, [B] int64) is non-null,
// else `offset`. The caller checks that offset + T fits in the capacity.
int kv_append(void* k_cache, void* v_cache, const void* k, Strides4 k_strides, const void* v, Strides4 v_strides,
              int64_t batch, int64_t kv_heads, int64_t seq, int64_t capacity, int64_t head_dim, int64_t offset,
              const int64_t* row_offsets, DType dtype, cudaStream_t stream);

// cudaGetErrorString of a launcher's return value.
const char* error_string(int error);

}  // namespace gpueval::kernels
