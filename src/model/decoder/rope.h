// Rotary position embeddings in the Hugging Face "rotate halves" layout: the pair rotated together
// is (x[i], x[i + rotary_dim/2]) over the first rotary_dim dimensions of a head; the others pass
// through unchanged (phi3's partial_rotary_factor, gpt_neox's rotary_pct).
//
// RotaryEmbedding computes the inverse frequencies and the attention factor of every rope_scaling
// type transformers' modeling_rope_utils computes, as it computes them (float32 where it is float32):
//   default   1 / theta^(2j / rotary_dim)
//   linear    default / factor
//   llama3    long wavelengths / factor, short ones kept, the band between blended
//   yarn      NTK-by-parts blend of default and default / factor (beta_fast, beta_slow, truncate);
//             cos and sin times attention_factor (0.1 ln(factor) + 1, or the mscale ratio)
//   dynamic   default up to max_position_embeddings; for a sequence of L > max_position_embeddings
//             tokens theta becomes theta * (factor L / max - (factor - 1))^(d / (d - 2))
//   longrope  1 / (short_factor[j] theta^(2j/d)) up to original_max_position_embeddings, long_factor
//             past it; cos and sin times attention_factor (sqrt(1 + ln f / ln original))
// dynamic and longrope depend on the length: each row of a call takes its own largest position + 1
// as the sequence length (transformers: max(position_ids) + 1 of a call, for a batch of one), see
// ModelConfig::rope_length_threshold().
//
// This file is also the plain LibTorch reference of the RoPE kernel, and the CPU path. A
// RotaryEmbedding is an immutable value (its tensors are never written after construction): copy it
// and call it from any thread.
#pragma once

#include <optional>

#include <ATen/ATen.h>

#include "gpueval/model_config.h"

namespace gpueval {

struct RopeTables {
  at::Tensor cos;  // [B or 1, 1, T, rotary_dim] in the activation dtype
  at::Tensor sin;  // [B or 1, 1, T, rotary_dim]
};

class RotaryEmbedding {
 public:
  // Checks what ModelConfig::from_json checks (rotary_dim even, in (0, head_dim], longrope's factor
  // lists of rotary_dim / 2 values); throws gpueval::Error otherwise.
  RotaryEmbedding(int64_t head_dim, int64_t rotary_dim, double theta, const RopeScaling& scaling,
                  int64_t max_position_embeddings, at::Device device = at::kCPU);
  // The model's RoPE: config.head_dim, rotary_dim(), rope_theta, rope_scaling, max_position_embeddings.
  static RotaryEmbedding from_config(const ModelConfig& config, at::Device device = at::kCPU);

  // [rotary_dim / 2] float32 on the device, for a sequence of `length` tokens (only dynamic and
  // longrope look at it).
  at::Tensor inv_freq(int64_t length) const;
  // What cos and sin are multiplied by (1 but for yarn and longrope).
  double attention_factor() const { return attention_factor_; }
  // Past this length the frequencies change (dynamic, longrope); none for the static types.
  std::optional<int64_t> length_threshold() const { return threshold_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t rotary_dim() const { return rotary_dim_; }

  // positions: [B, T] int64 on the device. Angles are computed in float32 (as transformers does) and
  // cast to `dtype` at the end; cos and sin are [B, 1, T, rotary_dim] (row b's frequencies chosen by
  // its largest position + 1).
  RopeTables tables(const at::Tensor& positions, at::ScalarType dtype) const;

 private:
  int64_t head_dim_, rotary_dim_;
  double theta_;
  RopeScaling scaling_;
  int64_t max_position_embeddings_;
  double attention_factor_ = 1.0;
  std::optional<int64_t> threshold_;
  at::Device device_;
  at::Tensor base_inv_freq_;  // [rotary_dim / 2]: every length up to the threshold (static types: every length)
  at::Tensor long_inv_freq_;  // [rotary_dim / 2]: longrope past the threshold; else undefined
};

// [rotary_dim / 2] float32 on `device`: RotaryEmbedding::from_config(c).inv_freq(0).
at::Tensor rope_inv_freq(const ModelConfig& config, at::Device device);

// positions: [B, T] int64; inv_freq: [rotary_dim / 2] or [B, 1, rotary_dim / 2]. cos and sin are
// emb.cos() * attention_factor (then emb.sin()), cast to `dtype`, emb = cat(angles, angles).
RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype,
                       double attention_factor = 1.0);

// x: [B, H, T, head_dim] -> same shape. Rotates the first tables.cos.size(-1) dimensions of each head
// and passes the rest through (transformers' apply_rotary_pos_emb of phi3 and gpt_neox).
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables);

// The same function for CPU float32 in one pass, each element x·cos ± x'·sin rounded after each
// product and after the sum exactly as apply_rope's separate ops round (no fused multiply-add):
// the same bits. The output has x's strides (a transposed q stays transposed). Applies when x is
// [B, H, T, hd] with unit last stride and the tables are [B or 1, 1, T, hd] float32, unit last
// stride: whole-head rotation only (kernels.cpp's rotary_embedding narrows x for a partial one).
bool apply_rope_cpu_applies(const at::Tensor& x, const RopeTables& tables);
at::Tensor apply_rope_cpu(const at::Tensor& x, const RopeTables& tables);

}  // namespace gpueval
