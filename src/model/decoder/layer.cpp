#include "gpueval/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <c10/core/InferenceMode.h>
#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <torch/nn/modules/container/modulelist.h>

#include "gpueval/error.h"
#include "model/decoder/module_parts.h"
#include "model/decoder/rope.h"
#include "model/kernels/cpu_attention.h"
#include "model/kernels/cpu_matmul.h"
#include "model/kernels/cpu_parallel.h"
#include "model/kernels/cuda_kernels.h"
#include "model/kernels/row_invariant.h"
#include "model/loading/weight_names.h"

namespace gpueval {

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const WeightSource& source, int64_t index)
    : index_(index),
      placement_(c.arch.norm_placement),
      parallel_residual_(c.arch.parallel_residual),
      residual_multiplier_(c.arch.residual_multiplier) {
  const auto norm = [&](WeightKind w) {
    return Norm(source, weight_name(w, index), c.hidden_size, c.rms_norm_eps, c.arch.norm, c.arch.norm_unit_offset);
  };
  if (placement_ != NormPlacement::kPostSublayer)
    input_layernorm_ = register_module("input_layernorm", norm(WeightKind::kInputLayernorm));
  self_attn_ = register_module("self_attn", Attention(c, source, index));
  post_attention_layernorm_ = register_module("post_attention_layernorm", norm(WeightKind::kPostAttentionLayernorm));
  if (placement_ == NormPlacement::kSandwich)
    pre_feedforward_layernorm_ =
        register_module("pre_feedforward_layernorm", norm(WeightKind::kPreFeedforwardLayernorm));
  if (c.arch.sparse(index))
    moe_ = register_module("mlp", Moe(c, source, index));
  else
    mlp_ = register_module("mlp", Mlp(c, source, index));
  if (placement_ != NormPlacement::kPreNorm)
    post_feedforward_layernorm_ =
        register_module("post_feedforward_layernorm", norm(WeightKind::kPostFeedforwardLayernorm));
}

at::Tensor DecoderLayerImpl::attention_input(const at::Tensor& x) const {
  return placement_ == NormPlacement::kPostSublayer ? x : input_layernorm_->forward(x);
}

// Residuals added in place into the fresh sublayer outputs (addition commutes: the same bits as x + a).
at::Tensor DecoderLayerImpl::attention_residual(at::Tensor attended, const at::Tensor& x) const {
  if (placement_ != NormPlacement::kPreNorm) attended = post_attention_layernorm_->forward(attended);
  if (residual_multiplier_ != 1.0) attended.mul_(residual_multiplier_);
  return attended.add_(x);
}

at::Tensor DecoderLayerImpl::mlp_residual(const at::Tensor& h) const {
  at::Tensor m;
  switch (placement_) {
    case NormPlacement::kPreNorm: m = feed_forward(post_attention_layernorm_->forward(h)); break;
    case NormPlacement::kPostSublayer: m = post_feedforward_layernorm_->forward(feed_forward(h)); break;
    case NormPlacement::kSandwich:
      m = post_feedforward_layernorm_->forward(feed_forward(pre_feedforward_layernorm_->forward(h)));
      break;
  }
  if (residual_multiplier_ != 1.0) m.mul_(residual_multiplier_);
  return m.add_(h);
}

at::Tensor DecoderLayerImpl::residuals(at::Tensor attended, const at::Tensor& x) const {
  if (!parallel_residual_) return mlp_residual(attention_residual(std::move(attended), x));
  // GPT-NeoX: (mlp + attn) + x, in transformers' order of additions.
  return feed_forward(post_attention_layernorm_->forward(x)).add_(attended).add_(x);
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask,
                                     KVCache* cache, const PrefixKV* prefix) const {
  return residuals(self_attn_->forward(attention_input(x), rope, mask, cache, index_, prefix), x);
}

at::Tensor DecoderLayerImpl::forward_ragged(const at::Tensor& x, const std::vector<AttentionGroup>& groups,
                                            const PrefixKV* prefix) const {
  return residuals(self_attn_->forward_ragged(attention_input(x), groups, index_, prefix), x);
}

at::Tensor DecoderLayerImpl::forward_at(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask,
                                        const PrefixKV* prefix, const at::Tensor& columns) const {
  const int64_t b = x.size(0), picked = columns.size(1), d = x.size(2);
  return residuals(self_attn_->forward_at(attention_input(x), rope, mask, index_, prefix, columns),
                   x.gather(1, columns.unsqueeze(-1).expand({b, picked, d})));
}

void DecoderLayerImpl::append_keys_values(const at::Tensor& x, const RopeTables& rope, KVCache& cache) const {
  self_attn_->append_keys_values(attention_input(x), rope, cache, index_);
}

}  // namespace gpueval
