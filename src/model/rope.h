// Rotary position embeddings in the Hugging Face "rotate halves" layout: the
// pair rotated together is (x[i], x[i + head_dim/2]). The inverse frequencies
// follow the config's rope_theta and rope_scaling (linear or llama3). This is
// the plain LibTorch reference of the RoPE kernel, and the CPU path.
#pragma once

#include <ATen/ATen.h>

#include "gpueval/model_config.h"

namespace gpueval {

// [head_dim / 2] float32 on `device`.
at::Tensor rope_inv_freq(const ModelConfig& config, at::Device device);

struct RopeTables {
  at::Tensor cos;  // [B, 1, T, head_dim] in the activation dtype
  at::Tensor sin;  // [B, 1, T, head_dim]
};

// positions: [B, T] int64. Angles are computed in float32 (as Hugging Face does)
// and cast to `dtype` at the end.
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype);

// x: [B, H, T, head_dim] -> same shape.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables);

// The same function for CPU float32 in one pass, each element x·cos ± x'·sin rounded after each
// product and after the sum exactly as apply_rope's separate ops round (no fused multiply-add):
// the same bits. The output has x's strides (a transposed q stays transposed). Applies when x is
// [B, H, T, hd] with unit last stride and the tables are [B or 1, 1, T, hd] float32, unit last stride.
bool apply_rope_cpu_applies(const at::Tensor& x, const RopeTables& tables);
at::Tensor apply_rope_cpu(const at::Tensor& x, const RopeTables& tables);

}  // namespace gpueval
