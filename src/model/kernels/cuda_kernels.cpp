#include "model/kernels/cuda_kernels.h"

#include "gpueval/error.h"

#ifdef GPUEVAL_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpueval_kernels.h"
#endif

namespace gpueval {
namespace {

bool supported_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

// A CUDA tensor of a kernel dtype, when the build has the kernels.
bool kernel_tensor(const at::Tensor& t) {
  return cuda_kernels_built() && t.defined() && t.is_cuda() && supported_dtype(t.scalar_type());
}

bool same_place(const at::Tensor& a, const at::Tensor& b) {
  return b.defined() && a.device() == b.device() && a.scalar_type() == b.scalar_type();
}

#ifdef GPUEVAL_WITH_CUDA_KERNELS
kernels::DType kernel_dtype(at::ScalarType t) {
  return t == at::kFloat ? kernels::DType::kF32 : t == at::kHalf ? kernels::DType::kF16 : kernels::DType::kBF16;
}

cudaStream_t stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void check(int error, const char* kernel) {
  if (error != 0) throw Error(fmt::format("CUDA kernel {}: {}", kernel, kernels::error_string(error)));
}

kernels::Strides4 strides4(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }
#endif

}  // namespace

bool cuda_kernels_built() {
#ifdef GPUEVAL_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::promote_types(x.scalar_type(), at::kFloat));
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

bool rms_norm_uses_kernel(const at::Tensor& x, const at::Tensor& weight) {
  return kernel_tensor(x) && same_place(x, weight) && x.dim() >= 1 && x.is_contiguous() && weight.dim() == 1 &&
         weight.is_contiguous() && weight.size(0) == x.size(-1) && x.size(-1) > 0;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!rms_norm_uses_kernel(x, weight)) return rms_norm_reference(x, weight, eps);
#ifdef GPUEVAL_WITH_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t dim = x.size(-1);
  check(kernels::rms_norm(x.data_ptr(), dim, weight.data_ptr(), out.data_ptr(), x.numel() / dim, dim, eps,
                          kernel_dtype(x.scalar_type()), stream_of(x)),
        "rms_norm");
  return out;
#else
  return {};
#endif
}

bool logprob_gather_uses_kernel(const at::Tensor& logits, const at::Tensor& targets) {
  return kernel_tensor(logits) && targets.defined() && targets.device() == logits.device() &&
         targets.scalar_type() == at::kLong && logits.dim() == 2 && targets.dim() == 1 &&
         targets.size(0) == logits.size(0) && targets.is_contiguous() && logits.size(1) > 0 && logits.stride(1) == 1;
}

TargetScores logprob_gather(const at::Tensor& logits, const at::Tensor& targets) {
  if (!logprob_gather_uses_kernel(logits, targets)) return logprob_gather_reference(logits, targets);
#ifdef GPUEVAL_WITH_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(logits.device());
  const int64_t n = logits.size(0);
  at::Tensor logprobs = at::empty({n}, logits.options().dtype(at::kFloat));
  // bool is one byte holding 0 or 1, which is what the kernel writes.
  at::Tensor greedy = at::empty({n}, logits.options().dtype(at::kBool));
  check(kernels::logprob_gather(logits.data_ptr(), logits.stride(0), targets.data_ptr<int64_t>(), n, logits.size(1),
                                kernel_dtype(logits.scalar_type()), logprobs.data_ptr<float>(),
                                reinterpret_cast<uint8_t*>(greedy.data_ptr<bool>()), stream_of(logits)),
        "logprob_gather");
  return {logprobs, greedy};
#else
  return {};
#endif
}

bool rotary_embedding_uses_kernel(const at::Tensor& x, const RopeTables& t) {
  if (!kernel_tensor(x) || !same_place(x, t.cos) || !same_place(x, t.sin) || x.dim() != 4) return false;
  const int64_t b = x.size(0), seq = x.size(2), hd = x.size(3);
  auto table_ok = [&](const at::Tensor& table) {
    return table.dim() == 4 && (table.size(0) == b || table.size(0) == 1) && table.size(1) == 1 &&
           table.size(2) == seq && table.size(3) == hd && table.stride(3) == 1;
  };
  return hd % 2 == 0 && hd > 0 && x.stride(3) == 1 && table_ok(t.cos) && table_ok(t.sin) &&
         t.cos.strides() == t.sin.strides() && t.cos.size(0) == t.sin.size(0);
}

at::Tensor rotary_embedding(const at::Tensor& x, const RopeTables& t) {
  if (x.dim() == 4 && t.cos.defined() && t.cos.dim() == 4 && t.cos.size(3) < x.size(3)) {
    // Partial rotary: the kernel and the CPU loop rotate whole heads, so they take the first
    // rotary_dim dimensions as a view; the rest pass through (apply_rope's result, bit for bit).
    const int64_t rotary = t.cos.size(3);
    return at::cat({rotary_embedding(x.narrow(3, 0, rotary), t), x.narrow(3, rotary, x.size(3) - rotary)}, 3);
  }
  if (!rotary_embedding_uses_kernel(x, t))
    return apply_rope_cpu_applies(x, t) ? apply_rope_cpu(x, t) : apply_rope(x, t);
#ifdef GPUEVAL_WITH_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(x.device());
  // The same strides as x (a transposed q/k stays transposed), as the reference's elementwise ops give.
  at::Tensor out = at::empty_like(x);
  if (out.stride(3) != 1) out = at::empty_like(x, at::MemoryFormat::Contiguous);
  kernels::Strides4 table{t.cos.size(0) == 1 ? 0 : t.cos.stride(0), 0, t.cos.stride(2)};
  check(
      kernels::rope(x.data_ptr(), strides4(x), t.cos.data_ptr(), t.sin.data_ptr(), table, out.data_ptr(), strides4(out),
                    x.size(0), x.size(1), x.size(2), x.size(3), kernel_dtype(x.scalar_type()), stream_of(x)),
      "rope");
  return out;
#else
  return {};
#endif
}

bool kv_append_uses_kernel(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& k,
                           const at::Tensor& v) {
  if (!kernel_tensor(k_cache) || !same_place(k_cache, v_cache) || !same_place(k_cache, k) || !same_place(k_cache, v))
    return false;
  if (k_cache.dim() != 4 || k.dim() != 4 || k_cache.sizes() != v_cache.sizes() || k.sizes() != v.sizes()) return false;
  return k_cache.is_contiguous() && v_cache.is_contiguous() && k.stride(3) == 1 && v.stride(3) == 1 &&
         k.size(0) == k_cache.size(0) && k.size(1) == k_cache.size(1) && k.size(3) == k_cache.size(3);
}

void kv_append(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& k, const at::Tensor& v,
               int64_t offset) {
  const int64_t t = k.size(2), capacity = k_cache.size(2);
  if (offset < 0 || offset + t > capacity)
    throw Error(fmt::format("KV cache: {} + {} positions exceed its capacity of {}", offset, t, capacity));
  if (!kv_append_uses_kernel(k_cache, v_cache, k, v)) {
    k_cache.narrow(2, offset, t).copy_(k);
    v_cache.narrow(2, offset, t).copy_(v);
    return;
  }
#ifdef GPUEVAL_WITH_CUDA_KERNELS
  c10::cuda::CUDAGuard guard(k_cache.device());
  check(kernels::kv_append(k_cache.data_ptr(), v_cache.data_ptr(), k.data_ptr(), strides4(k), v.data_ptr(), strides4(v),
                           k.size(0), k.size(1), t, capacity, k.size(3), offset, nullptr, kernel_dtype(k.scalar_type()),
                           stream_of(k_cache)),
        "kv_append");
#endif
}

}  // namespace gpueval
