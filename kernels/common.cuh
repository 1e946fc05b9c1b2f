// Device-side helpers shared by the kernels: conversions between the storage dtypes and float32
// with the rounding LibTorch uses (round to nearest even), and the dtype switch of the launchers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpueval_kernels.h"

namespace gpueval::kernels::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// a * b and a + b computed in float32 and rounded to T, as one LibTorch elementwise op does
// (the _rn intrinsics keep nvcc from fusing a product and a sum into one FMA).
template <typename T>
__device__ __forceinline__ float mul_as(float a, float b) {
  return to_float(from_float<T>(__fmul_rn(a, b)));
}
template <typename T>
__device__ __forceinline__ float add_as(float a, float b) {
  return to_float(from_float<T>(__fadd_rn(a, b)));
}

// Calls body.template operator()<T>() with T the storage type of `dtype`; -1 for an unknown dtype
// (reported as cudaErrorInvalidValue by the launchers).
template <typename Body>
int dispatch(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::kF32: return body(float{});
    case DType::kF16: return body(__half{});
    case DType::kBF16: return body(__nv_bfloat16{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `n` items: enough to fill the GPU, within the grid limit.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = ceil_div(n, threads);
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace gpueval::kernels::detail
