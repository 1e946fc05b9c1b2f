// Dispatch to the CUDA kernels of kernels/ (C API in kernels/gpueval_kernels.h). Each function runs
// its kernel when the build has them (GPUEVAL_WITH_CUDA_KERNELS) and the tensors are CUDA tensors of
// float32, float16 or bfloat16 in a layout the kernel takes (the *_uses_kernel predicates say
// exactly when); otherwise it runs the plain-LibTorch reference, so the CPU path is the reference,
// bit for bit. The kernel runs on the current CUDA stream of the tensors' device. Stateless;
// callable from any thread.
#pragma once

#include <ATen/ATen.h>

#include "model/decoder/logprob_gather.h"
#include "model/decoder/rope.h"

namespace gpueval {

// Whether this build compiled kernels/*.cu in (GPUEVAL_WITH_CUDA_KERNELS).
bool cuda_kernels_built();

// RMSNorm: x [..., dim], weight [dim] -> [..., dim], statistics in float32 (float64 for float64),
// the normalised value cast to x's dtype before the product with the weight.
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
bool rms_norm_uses_kernel(const at::Tensor& x, const at::Tensor& weight);

// Fused log-softmax + gather: logits [N, V], targets [N] int64 -> logprobs [N] float32, is_greedy
// [N] bool; reference logprob_gather_reference. The kernel never forms a float32 [N, V] tensor.
TargetScores logprob_gather(const at::Tensor& logits, const at::Tensor& targets);
bool logprob_gather_uses_kernel(const at::Tensor& logits, const at::Tensor& targets);

// RoPE: x [B, H, T, head_dim] -> same shape and dtype; reference apply_rope. Off the kernel, CPU
// float32 takes apply_rope_cpu (one pass, the reference's bits). Tables narrower than the head
// (partial rotary) rotate x's first rotary_dim dimensions, a view the kernel or loop takes, and the
// rest of each head is copied: the kernel itself only ever sees tables as wide as its x.
at::Tensor rotary_embedding(const at::Tensor& x, const RopeTables& tables);
bool rotary_embedding_uses_kernel(const at::Tensor& x, const RopeTables& tables);

// KV-cache append: k_cache[:, :, offset:offset+T] = k and v_cache[:, :, offset:offset+T] = v.
// k_cache, v_cache: [B, KV, capacity, head_dim]; k, v: [B, KV, T, head_dim]. Throws gpueval::Error
// when offset + T exceeds the capacity.
void kv_append(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& k, const at::Tensor& v,
               int64_t offset);
bool kv_append_uses_kernel(const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& k,
                           const at::Tensor& v);

}  // namespace gpueval
