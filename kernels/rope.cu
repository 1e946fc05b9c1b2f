// RoPE in the rotate-half layout, reference: apply_rope in src/model/decoder/rope.cpp, i.e.
//   out = x * cos + cat(-x2, x1) * sin
// with each product and the sum a separate elementwise op in the storage dtype (float32 arithmetic
// rounded to the dtype), so the result matches the reference bit for bit. One thread per rotated
// pair (x[i], x[i + half]): it reads both before writing both, so out may alias x.
#include "common.cuh"

namespace gpueval::kernels {
namespace {

using detail::add_as;
using detail::from_float;
using detail::mul_as;
using detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const T* x, Strides4 xs, const T* __restrict__ cos, const T* __restrict__ sin, Strides4 ts, T* out,
                Strides4 os, int64_t heads, int64_t seq, int64_t half, int64_t pairs) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t row = p / half;  // over [B, H, T]
    const int64_t t = row % seq, h = (row / seq) % heads, b = row / (seq * heads);
    const T* in = x + b * xs.b + h * xs.h + t * xs.t;
    const T* c = cos + b * ts.b + t * ts.t;
    const T* s = sin + b * ts.b + t * ts.t;
    T* o = out + b * os.b + h * os.h + t * os.t;
    const float x1 = to_float(in[i]), x2 = to_float(in[i + half]);
    const float first = add_as<T>(mul_as<T>(x1, to_float(c[i])), mul_as<T>(-x2, to_float(s[i])));
    const float second = add_as<T>(mul_as<T>(x2, to_float(c[i + half])), mul_as<T>(x1, to_float(s[i + half])));
    o[i] = from_float<T>(first);
    o[i + half] = from_float<T>(second);
  }
}

}  // namespace

int rope(const void* x, Strides4 x_strides, const void* cos, const void* sin, Strides4 table, void* out,
         Strides4 out_strides, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
         cudaStream_t stream) {
  if (batch < 0 || heads < 0 || seq < 0 || head_dim <= 0 || head_dim % 2 != 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const int64_t half = head_dim / 2, pairs = batch * heads * seq * half;
  if (pairs == 0) return 0;
  return detail::dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<detail::grid_for(pairs, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), x_strides, static_cast<const T*>(cos), static_cast<const T*>(sin), table,
        static_cast<T*>(out), out_strides, heads, seq, half, pairs);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace gpueval::kernels
