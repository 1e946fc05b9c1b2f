// Fused log-softmax + gather of target-token log-probabilities, reference:
// logprob_gather_reference in src/model/logprob_gather.cpp. One block per row; each thread walks its share
// of the vocabulary once (16-byte loads where the row is aligned) keeping, in float32 registers, an
// online maximum and sum of exp(x - max), whether a NaN or +inf was seen, and its first argmax. The
// block then merges the threads' states; nothing of size [N, V] is written.
#include <climits>
#include <cmath>

#include "common.cuh"

namespace gpueval::kernels {
namespace {

using detail::to_float;

constexpr int kThreads = 512;

struct RowState {
  float max;  // running maximum of the finite and -inf values
  float sum;  // sum of exp(x - max) over the values seen (0 while max is -inf)
  bool bad;  // a NaN or +inf was seen: the log-softmax of the whole row is NaN
  float best;  // the argmax value, NaN counting as the largest
  int64_t best_at;  // its index; the smallest index among equals

  __device__ void init() {
    max = -INFINITY;
    sum = 0.f;
    bad = false;
    best = -INFINITY;
    best_at = LLONG_MAX;
  }

  // Whether (v, i) comes before (best, best_at) as the first argmax.
  __device__ bool beats(float v, int64_t i) const {
    const bool v_nan = isnan(v), b_nan = isnan(best);
    if (v_nan || b_nan) return v_nan && (!b_nan || i < best_at);
    return v > best || (v == best && i < best_at);
  }

  __device__ void add(float x, int64_t i) {
    if (beats(x, i)) {
      best = x;
      best_at = i;
    }
    if (isnan(x) || x == INFINITY) {
      bad = true;
      return;
    }
    if (x == -INFINITY) return;  // adds exp(-inf) = 0; skipped so that -inf - -inf never makes a NaN
    if (x > max) {
      sum = sum * expf(max - x) + 1.f;
      max = x;
    } else {
      sum += expf(x - max);
    }
  }

  __device__ void merge(const RowState& o) {
    if (beats(o.best, o.best_at)) {
      best = o.best;
      best_at = o.best_at;
    }
    bad = bad || o.bad;
    const float m = fmaxf(max, o.max);
    if (m == -INFINITY) return;  // both saw only -inf (or nothing): sums are 0
    sum = sum * expf(max - m) + o.sum * expf(o.max - m);
    max = m;
  }

  __device__ void merge_from_lane(unsigned offset) {
    RowState o;
    o.max = __shfl_down_sync(0xffffffffu, max, offset);
    o.sum = __shfl_down_sync(0xffffffffu, sum, offset);
    o.bad = __shfl_down_sync(0xffffffffu, static_cast<int>(bad), offset) != 0;
    o.best = __shfl_down_sync(0xffffffffu, best, offset);
    o.best_at = __shfl_down_sync(0xffffffffu, best_at, offset);
    merge(o);
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    logprob_gather_kernel(const T* __restrict__ logits, int64_t row_stride, const int64_t* __restrict__ targets,
                          int64_t vocab, float* __restrict__ logprob, uint8_t* __restrict__ is_greedy) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  RowState st;
  st.init();

  // Scalar head up to the first 16-byte boundary, 16-byte vectors, scalar tail.
  constexpr int kVec = 16 / sizeof(T);
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(x) % 16;
  int64_t head = misalign % sizeof(T) != 0 ? vocab : static_cast<int64_t>((16 - misalign) % 16 / sizeof(T));
  if (head > vocab) head = vocab;
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) st.add(to_float(x[i]), i);
  const int64_t vectors = (vocab - head) / kVec;
  const uint4* xv = reinterpret_cast<const uint4*>(x + head);
  for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
    const uint4 raw = __ldg(xv + j);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kVec; ++k) st.add(to_float(e[k]), head + j * kVec + k);
  }
  for (int64_t i = head + vectors * kVec + threadIdx.x; i < vocab; i += blockDim.x) st.add(to_float(x[i]), i);

  for (unsigned offset = 16; offset > 0; offset /= 2) st.merge_from_lane(offset);
  __shared__ RowState warps[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = st;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) st.merge(warps[w]);

  const int64_t target = targets[row];
  if (target < 0 || target >= vocab) {
    logprob[row] = NAN;
    is_greedy[row] = 0;
    return;
  }
  const float xt = to_float(x[target]);
  logprob[row] = st.bad ? NAN : (xt - st.max) - logf(st.sum);
  is_greedy[row] = st.best_at == target ? 1 : 0;
}

}  // namespace

int logprob_gather(const void* logits, int64_t row_stride, const int64_t* targets, int64_t n, int64_t vocab,
                   DType dtype, float* logprob, uint8_t* is_greedy, cudaStream_t stream) {
  if (n == 0) return 0;
  if (n < 0 || vocab <= 0 || n > INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
  return detail::dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    logprob_gather_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        static_cast<const T*>(logits), row_stride, targets, vocab, logprob, is_greedy);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace gpueval::kernels
