// RMSNorm, reference: RMSNormImpl::forward in src/model/decoder/model.cpp, i.e.
//   weight * to_dtype(x * rsqrt(mean(x^2) + eps))   (statistics in float32)
// One block per row: the sum of squares is reduced in float32, then each element is normalised in
// float32, rounded to the storage dtype, and multiplied by the weight as one elementwise op (float32
// product rounded to the dtype), which is where the reference rounds too.
#include <climits>

#include "common.cuh"

namespace gpueval::kernels {
namespace {

using detail::from_float;
using detail::mul_as;
using detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ weight, T* __restrict__ out,
                    int64_t dim, float eps) {
  const T* in = x + static_cast<int64_t>(blockIdx.x) * x_stride;
  T* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  float squares = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = to_float(in[i]);
    squares += v * v;
  }
  for (unsigned offset = 16; offset > 0; offset /= 2) squares += __shfl_down_sync(0xffffffffu, squares, offset);
  __shared__ float warps[kThreads / 32];
  __shared__ float inv_rms;
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = squares;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warps[w];
    // Correctly rounded division and square root (nvcc's defaults), like the CPU reference's rsqrt.
    inv_rms = 1.f / sqrtf(__fadd_rn(total / static_cast<float>(dim), eps));
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float normed = to_float(from_float<T>(__fmul_rn(to_float(in[i]), inv_rms)));
    o[i] = from_float<T>(mul_as<T>(to_float(weight[i]), normed));
  }
}

}  // namespace

int rms_norm(const void* x, int64_t x_stride, const void* weight, void* out, int64_t rows, int64_t dim, double eps,
             DType dtype, cudaStream_t stream) {
  if (rows == 0) return 0;
  if (rows < 0 || dim <= 0 || rows > INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
  return detail::dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), x_stride, static_cast<const T*>(weight), static_cast<T*>(out), dim,
        static_cast<float>(eps));
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace gpueval::kernels
