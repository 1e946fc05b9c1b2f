// KV-cache append, reference: KVCache::append in src/model/decoder/kv_cache.cpp, i.e.
//   cache.narrow(2, offset, T).copy_(k)   for the keys and for the values.
// A copy, so exact. blockIdx.y picks keys (0) or values (1); a grid-stride loop walks the
// [B, KV, T] rows and their head_dim elements, moving 16 bytes at a time when every row start is
// 16-byte aligned, else one element at a time.
#include <climits>

#include "common.cuh"

namespace gpueval::kernels {
namespace {

constexpr int kThreads = 256;

struct Side {
  char* cache;
  const char* src;
  Strides4 strides;  // of src, in units
};

// U is the unit moved (uint4 for 16 bytes, else the element's own size); strides and head_dim in units.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    kv_append_kernel(Side k, Side v, int64_t kv_heads, int64_t seq, int64_t capacity, int64_t units, int64_t offset,
                     const int64_t* __restrict__ row_offsets, int64_t total) {
  const Side& side = blockIdx.y == 0 ? k : v;
  const U* src = reinterpret_cast<const U*>(side.src);
  U* cache = reinterpret_cast<U*>(side.cache);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % units;
    const int64_t row = e / units;  // over [B, KV, T]
    const int64_t t = row % seq, h = (row / seq) % kv_heads, b = row / (seq * kv_heads);
    const int64_t start = row_offsets ? row_offsets[b] : offset;
    cache[((b * kv_heads + h) * capacity + start + t) * units + d] =
        src[b * side.strides.b + h * side.strides.h + t * side.strides.t + d];
  }
}

template <typename U>
int launch(const Side& k, const Side& v, int64_t batch, int64_t kv_heads, int64_t seq, int64_t capacity, int64_t units,
           int64_t offset, const int64_t* row_offsets, cudaStream_t stream) {
  const int64_t total = batch * kv_heads * seq * units;
  const dim3 grid(detail::grid_for(total, kThreads), 2);
  kv_append_kernel<U><<<grid, kThreads, 0, stream>>>(k, v, kv_heads, seq, capacity, units, offset, row_offsets, total);
  return static_cast<int>(cudaGetLastError());
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int kv_append(void* k_cache, void* v_cache, const void* k, Strides4 k_strides, const void* v, Strides4 v_strides,
              int64_t batch, int64_t kv_heads, int64_t seq, int64_t capacity, int64_t head_dim, int64_t offset,
              const int64_t* row_offsets, DType dtype, cudaStream_t stream) {
  if (batch < 0 || kv_heads < 0 || seq < 0 || head_dim <= 0 || capacity < 0 || offset < 0)
    return static_cast<int>(cudaErrorInvalidValue);
  if (batch * kv_heads * seq == 0) return 0;
  const int64_t size = dtype == DType::kF32 ? 4 : 2;
  const int64_t row_bytes = head_dim * size;
  const bool vectors = row_bytes % 16 == 0 && aligned16(k_cache) && aligned16(v_cache) && aligned16(k) &&
                       aligned16(v) && (k_strides.b * size) % 16 == 0 && (k_strides.h * size) % 16 == 0 &&
                       (k_strides.t * size) % 16 == 0 && (v_strides.b * size) % 16 == 0 &&
                       (v_strides.h * size) % 16 == 0 && (v_strides.t * size) % 16 == 0;
  const int64_t unit = vectors ? 16 : size;
  auto in_units = [&](Strides4 s) { return Strides4{s.b * size / unit, s.h * size / unit, s.t * size / unit}; };
  const Side ks{static_cast<char*>(k_cache), static_cast<const char*>(k), in_units(k_strides)};
  const Side vs{static_cast<char*>(v_cache), static_cast<const char*>(v), in_units(v_strides)};
  const int64_t units = row_bytes / unit;
  if (vectors) return launch<uint4>(ks, vs, batch, kv_heads, seq, capacity, units, offset, row_offsets, stream);
  if (size == 4) return launch<uint32_t>(ks, vs, batch, kv_heads, seq, capacity, units, offset, row_offsets, stream);
  return launch<uint16_t>(ks, vs, batch, kv_heads, seq, capacity, units, offset, row_offsets, stream);
}

}  // namespace gpueval::kernels
