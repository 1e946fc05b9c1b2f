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

namespace {

constexpr double kLatentNormEps = 1e-6;  // q_a_layernorm's and kv_a_layernorm's

// The softmax scale of q kᵀ: 1 / sqrt(head_dim), a family's own (Granite, Gemma), or latent attention's
// qk_head_dim^-1/2 times yarn's mscale(factor, mscale_all_dim)^2 (transformers' yarn_apply_mscale).
double softmax_scale(const ModelConfig& c) {
  if (c.arch.attention_scale) return *c.arch.attention_scale;
  if (!c.latent_attention()) return 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  double scale = 1.0 / std::sqrt(static_cast<double>(c.arch.mla.qk_head_dim()));
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::kNone && s.mscale_all_dim != 0 && s.factor > 1) {
    const double m = 0.1 * s.mscale_all_dim * std::log(s.factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& c, const WeightSource& source, int64_t layer)
    : n_heads_(c.num_attention_heads),
      n_kv_heads_(c.cache_heads()),
      head_dim_(c.cache_head_dim()),
      qk_norm_(c.arch.qk_norm),
      use_rope_(c.arch.uses_rope(layer)),
      softcap_(c.arch.attention_softcap),
      clip_(c.arch.clip_qkv),
      // The attention kernels scale q kᵀ by 1 / sqrt(hd); another scale s is that times s * sqrt(hd) on q.
      query_scale_(c.arch.attention_scale || c.latent_attention()
                       ? softmax_scale(c) * std::sqrt(static_cast<double>(c.cache_head_dim()))
                       : 1.0),
      mla_(c.arch.mla) {
  if (c.latent_attention()) {
    // transformers' DeepseekV3RMSNorm(width): eps 1e-6 whatever rms_norm_eps says.
    const auto norm = [&](WeightKind w) {
      return Norm(source, weight_name(w, layer), weight_shape(c, w)[0], kLatentNormEps, c.arch.norm,
                  c.arch.norm_unit_offset);
    };
    if (mla_.q_lora_rank > 0) {
      q_a_proj_ = register_module("q_a_proj", projection(c, source, WeightKind::kQAProj, layer));
      q_a_layernorm_ = register_module("q_a_layernorm", norm(WeightKind::kQALayernorm));
      q_b_proj_ = register_module("q_b_proj", projection(c, source, WeightKind::kQBProj, layer));
    } else {
      q_proj_ = register_module("q_proj", projection(c, source, WeightKind::kQProj, layer));
    }
    kv_a_proj_ = register_module("kv_a_proj_with_mqa", projection(c, source, WeightKind::kKvAProj, layer));
    kv_a_layernorm_ = register_module("kv_a_layernorm", norm(WeightKind::kKvALayernorm));
    // kv_b_proj is never multiplied as a projection: its rows per head, [nope keys; values] x r.
    auto kv_b = register_module("kv_b_proj", std::make_shared<torch::nn::Module>("LatentExpansion"));
    const at::Tensor up =
        as_parameter(*kv_b, "weight",
                     source(weight_name(WeightKind::kKvBProj, layer), weight_shape(c, WeightKind::kKvBProj)))
            .view({n_heads_, mla_.qk_nope_head_dim + mla_.v_head_dim, mla_.kv_lora_rank});
    key_up_ = up.narrow(1, 0, mla_.qk_nope_head_dim).contiguous();  // [H, nope, r]
    value_up_ = up.narrow(1, mla_.qk_nope_head_dim, mla_.v_head_dim).transpose(1, 2).contiguous();  // [H, r, v]
    o_proj_ = register_module("o_proj", projection(c, source, WeightKind::kOProj, layer));
    return;
  }
  q_proj_ = register_module("q_proj", projection(c, source, WeightKind::kQProj, layer));
  k_proj_ = register_module("k_proj", projection(c, source, WeightKind::kKProj, layer));
  v_proj_ = register_module("v_proj", projection(c, source, WeightKind::kVProj, layer));
  o_proj_ = register_module("o_proj", projection(c, source, WeightKind::kOProj, layer));
  if (qk_norm_ != QkNorm::kNone) {
    const auto norm = [&](WeightKind w) {
      return Norm(source, weight_name(w, layer), weight_shape(c, w)[0], c.rms_norm_eps, c.arch.norm,
                  c.arch.norm_unit_offset);
    };
    q_norm_ = register_module("q_norm", norm(WeightKind::kQNorm));
    k_norm_ = register_module("k_norm", norm(WeightKind::kKNorm));
  }
}

at::Tensor AttentionImpl::heads(at::Tensor x, int64_t n, const Norm& norm, const RopeTables& rope) const {
  const int64_t b = x.size(0), t = x.size(1);
  if (qk_norm_ == QkNorm::kWholeProjection) x = norm->forward(x);  // over [B, T, n * hd]
  x = x.view({b, t, n, head_dim_});
  if (qk_norm_ == QkNorm::kPerHead) x = norm->forward(x);  // over each head's hd
  if (clip_) x = x.clamp(-*clip_, *clip_);
  x = x.transpose(1, 2);  // [B, n, T, hd]
  return use_rope_ ? rotary_embedding(x, rope) : x;
}

at::Tensor AttentionImpl::rotate(const at::Tensor& x, const RopeTables& rope) const {
  if (!mla_.rope_interleave) return rotary_embedding(x.contiguous(), rope);
  // Pairs (x0, x1), (x2, x3), ... -> (x0, x2, ..., x1, x3, ...), then the halves rotated as usual: the
  // same values as transformers' rotation of the even and odd slices, in its output order.
  std::vector<int64_t> pairs = x.sizes().vec();
  pairs.back() /= 2;
  pairs.push_back(2);
  return rotary_embedding(x.reshape(pairs).transpose(-1, -2).reshape(x.sizes()), rope);
}

at::Tensor AttentionImpl::queries(const at::Tensor& x, const RopeTables& rope) const {
  if (mla_.kv_lora_rank > 0) {
    const int64_t b = x.size(0), t = x.size(1);
    const at::Tensor full =
        q_a_proj_ ? q_b_proj_->forward(q_a_layernorm_->forward(q_a_proj_->forward(x))) : q_proj_->forward(x);
    const at::Tensor q = full.view({b, t, n_heads_, mla_.qk_head_dim()}).transpose(1, 2);  // [B, H, T, qk]
    // Each head's non-rotary part carried into the latent: q_nope · W_UK[h], one product per head over
    // all B·T rows (batched_product: oneDNN on the CPU, read in place), [B, H, T, r].
    const at::Tensor q_nope =
        full.view({b * t, n_heads_, mla_.qk_head_dim()}).narrow(-1, 0, mla_.qk_nope_head_dim).transpose(0, 1);
    const at::Tensor latent =
        batched_product(q_nope, key_up_).view({n_heads_, b, t, mla_.kv_lora_rank}).transpose(0, 1);
    const at::Tensor out =
        at::cat({latent, rotate(q.narrow(-1, mla_.qk_nope_head_dim, mla_.qk_rope_head_dim), rope)}, -1);
    return query_scale_ == 1.0 ? out : out.mul_(query_scale_);
  }
  return query_heads(q_proj_->forward(x), rope);
}

at::Tensor AttentionImpl::query_heads(const at::Tensor& q, const RopeTables& rope) const {
  at::Tensor out = heads(q, n_heads_, q_norm_, rope);
  return query_scale_ == 1.0 ? out : out * query_scale_;
}

at::Tensor AttentionImpl::attention_output(const at::Tensor& attended) const {
  if (mla_.kv_lora_rank == 0) return attended;
  const int64_t b = attended.size(0), t = attended.size(1);
  // One product per head over all B·T rows: [H, BT, r] · W_UV[h] -> [H, BT, v] -> [B, T, H * v].
  const at::Tensor latent =
      attended.view({b * t, n_heads_, head_dim_}).narrow(-1, 0, mla_.kv_lora_rank).transpose(0, 1);
  return batched_product(latent, value_up_).transpose(0, 1).reshape({b, t, n_heads_ * mla_.v_head_dim});
}

std::pair<at::Tensor, at::Tensor> AttentionImpl::keys_values(const at::Tensor& x, const RopeTables& rope) const {
  if (mla_.kv_lora_rank > 0) {
    // One key per token, the latent and the shared RoPE key: [B, 1, T, r + rope]; the values are the keys
    // (attention_output reads their latent part).
    const at::Tensor compressed = kv_a_proj_->forward(x);  // [B, T, r + rope]
    const at::Tensor latent = kv_a_layernorm_->forward(compressed.narrow(-1, 0, mla_.kv_lora_rank).contiguous());
    const at::Tensor shared =
        rotate(compressed.narrow(-1, mla_.kv_lora_rank, mla_.qk_rope_head_dim).unsqueeze(1), rope);
    const at::Tensor k = at::cat({latent.unsqueeze(1), shared}, -1);
    return {k, k};
  }
  return key_value_heads(k_proj_->forward(x), v_proj_->forward(x), rope);
}

std::pair<at::Tensor, at::Tensor> AttentionImpl::key_value_heads(const at::Tensor& k, at::Tensor v,
                                                                 const RopeTables& rope) const {
  const int64_t b = k.size(0), t = k.size(1);
  at::Tensor keys = heads(k, n_kv_heads_, k_norm_, rope);  // [B, KV, T, hd]
  if (clip_) v.clamp_(-*clip_, *clip_);
  return {keys, v.view({b, t, n_kv_heads_, head_dim_}).transpose(1, 2)};  // [B, KV, T, hd] each
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask, KVCache* cache,
                                  int64_t layer, const PrefixKV* prefix) const {
  const at::Tensor q = queries(x, rope);
  auto [k, v] = keys_values(x, rope);
  if (cache) std::tie(k, v) = cache->append(layer, k, v);  // [B, KV, S', hd]
  return o_proj_->forward(attention_output(attend(q, k, v, mask, prefix, layer)));
}

at::Tensor AttentionImpl::forward_ragged(const at::Tensor& x, const std::vector<AttentionGroup>& groups, int64_t layer,
                                         const PrefixKV* prefix) const {
  // Group g's rows of a [1, N, C] tensor, as [rows, length, C].
  auto part = [](const at::Tensor& a, const AttentionGroup& g) {
    return a.narrow(1, g.offset, g.rows * g.length).view({g.rows, g.length, a.size(2)});
  };
  std::vector<at::Tensor> attended;
  attended.reserve(groups.size());
  if (mla_.kv_lora_rank > 0) {  // its query and key products are per head and per group
    for (const AttentionGroup& g : groups) {
      const at::Tensor xg = part(x, g);
      const at::Tensor q = queries(xg, *g.rope);
      auto [k, v] = keys_values(xg, *g.rope);
      if (g.cache) std::tie(k, v) = g.cache->append(layer, k, v);
      const at::Tensor out = attention_output(attend(q, k, v, *g.mask, prefix, layer));
      attended.push_back(out.view({1, g.rows * g.length, out.size(2)}));
    }
    return o_proj_->forward(at::cat(attended, 1));
  }
  const at::Tensor q_all = q_proj_->forward(x), k_all = k_proj_->forward(x), v_all = v_proj_->forward(x);
  for (const AttentionGroup& g : groups) {
    const at::Tensor q = query_heads(part(q_all, g), *g.rope);
    auto [k, v] = key_value_heads(part(k_all, g), part(v_all, g), *g.rope);
    if (g.cache) std::tie(k, v) = g.cache->append(layer, k, v);
    const at::Tensor out = attend(q, k, v, *g.mask, prefix, layer);  // [rows, length, H * hd]
    attended.push_back(out.view({1, g.rows * g.length, out.size(2)}));
  }
  return o_proj_->forward(at::cat(attended, 1));
}

at::Tensor AttentionImpl::forward_at(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask, int64_t layer,
                                     const PrefixKV* prefix, const at::Tensor& columns) const {
  const int64_t b = x.size(0), picked = columns.size(1);
  const at::Tensor q =
      queries(x, rope).gather(2, columns.view({b, 1, picked, 1}).expand({b, n_heads_, picked, head_dim_}));
  const auto [k, v] = keys_values(x, rope);
  // The mask's query rows at the same columns: dimension -2 of [B, 1, 1, T, S] (or SDPA's [B, 1, T, S]).
  std::vector<int64_t> shape = mask.sizes().vec(), view(mask.dim(), 1);
  shape[shape.size() - 2] = picked;
  view[0] = b;
  view[view.size() - 2] = picked;
  const at::Tensor picked_mask = mask.gather(-2, columns.view(view).expand(shape));
  return o_proj_->forward(attention_output(attend(q, k, v, picked_mask, prefix, layer)));
}

void AttentionImpl::append_keys_values(const at::Tensor& x, const RopeTables& rope, KVCache& cache,
                                       int64_t layer) const {
  const auto [k, v] = keys_values(x, rope);
  cache.append(layer, k, v);
}

at::Tensor AttentionImpl::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                                 const PrefixKV* prefix, int64_t layer) const {
  const int64_t b = q.size(0), t = q.size(2), groups = n_heads_ / n_kv_heads_;
  const int64_t p = prefix ? prefix->length() : 0, rows = b * groups * t;
#if TORCH_VERSION_MAJOR >= 2
  if (use_sdpa(q) && !softcap_) {
    // The shared prefix is expanded to every row here (SDPA takes one key sequence per row); the
    // explicit path below avoids that copy, the fused kernel more than pays for it on a GPU.
    at::Tensor keys = k, values = v;  // [B, KV, S, hd]
    if (p > 0) {
      keys = at::cat({prefix->keys[layer].expand({b, n_kv_heads_, p, head_dim_}), k}, 2);
      values = at::cat({prefix->values[layer].expand({b, n_kv_heads_, p, head_dim_}), v}, 2);
    }
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    at::Tensor out = at::scaled_dot_product_attention(q, keys, values, mask, 0.0, false, std::nullopt,
                                                      /*enable_gqa=*/groups > 1);  // [B, H, T, hd]
#else
    // Before 2.5 SDPA has no grouped-query mode: each kv head is repeated for its query heads.
    if (groups > 1) {
      keys = keys.repeat_interleave(groups, 1);
      values = values.repeat_interleave(groups, 1);
    }
    at::Tensor out = at::scaled_dot_product_attention(q, keys, values, mask);  // [B, H, T, hd]
#endif
    return out.transpose(1, 2).reshape({b, t, n_heads_ * head_dim_});
  }
#endif
  // CPU float32: in tiles that stay in cache, each scoring only the keys its queries may see (cpu_attention.h).
  if (const at::Tensor pk = p > 0 ? prefix->keys[layer] : at::Tensor(),
      pv = p > 0 ? prefix->values[layer] : at::Tensor();
      tiled_attention_applies(q, k, v, mask, pk, pv))
    return tiled_attention(q, k, v, mask, pk, pv, TileSoftmax::kBest, softcap_.value_or(0.0));
  // Grouped-query attention without copying keys: query heads of one group share a kv head.
  // Scaling q ([.., T, hd]) is cheaper than scaling the scores ([.., T, S]).
  // The products are batched over (row, kv head) as [B*KV, G*T, ..] matrices (batched_product:
  // oneDNN on the CPU, cpu_matmul.h).
  const int64_t s_own = k.size(2);
  at::Tensor qg = q.reshape({b, n_kv_heads_, groups, t, head_dim_}) * (1.0 / std::sqrt(double(head_dim_)));
  at::Tensor scores = batched_product(qg.reshape({b * n_kv_heads_, groups * t, head_dim_}),
                                      k.reshape({b * n_kv_heads_, s_own, head_dim_}).transpose(1, 2))
                          .view({b, n_kv_heads_, groups, t, s_own});  // [B, KV, G, T, S']
  at::Tensor q_rows;  // [KV, B*G*T, hd]
  if (p > 0) {
    // Every query of every row against the one copy of the prefix: [KV, B*G*T, hd] x [KV, hd, P].
    q_rows = qg.permute({1, 0, 2, 3, 4}).reshape({n_kv_heads_, rows, head_dim_});
    at::Tensor prefix_scores = batched_product(q_rows, prefix->keys[layer][0].transpose(1, 2));  // [KV, B*G*T, P]
    prefix_scores = prefix_scores.view({n_kv_heads_, b, groups, t, p}).permute({1, 0, 2, 3, 4});
    scores = at::cat({prefix_scores, scores}, -1);  // [B, KV, G, T, S]
  }
  // scores is a fresh tensor (or becomes one in float32), so the mask is added in place; softmax in
  // float32 (float64 for a float64 model, the reference the others are checked against).
  scores = scores.to(at::promote_types(q.scalar_type(), at::kFloat));
  if (softcap_) scores.div_(*softcap_).tanh_().mul_(*softcap_);
  scores.add_(mask);
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  at::Tensor out = batched_product(probs.narrow(-1, p, s_own).reshape({b * n_kv_heads_, groups * t, s_own}),
                                   v.reshape({b * n_kv_heads_, s_own, head_dim_}))
                       .view({b, n_kv_heads_, groups, t, head_dim_});  // [B, KV, G, T, hd]
  if (p > 0) {
    at::Tensor prefix_probs = probs.narrow(-1, 0, p).permute({1, 0, 2, 3, 4}).reshape({n_kv_heads_, rows, p});
    at::Tensor prefix_out = batched_product(prefix_probs, prefix->values[layer][0]);  // [KV, B*G*T, hd]
    out.add_(prefix_out.view({n_kv_heads_, b, groups, t, head_dim_}).permute({1, 0, 2, 3, 4}));
  }
  return out.reshape({b, n_heads_, t, head_dim_}).transpose(1, 2).reshape({b, t, n_heads_ * head_dim_});
}

}  // namespace gpueval
