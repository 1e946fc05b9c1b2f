#include "gpueval/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <c10/core/InferenceMode.h>
#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <torch/nn/modules/container/modulelist.h>
#include <torch/version.h>

#include "gpueval/error.h"
#include "model/checkpoint.h"
#include "model/cpu_attention.h"
#include "model/cpu_matmul.h"
#include "model/cpu_parallel.h"
#include "model/generation_config.h"
#include "model/kernels.h"
#include "model/rope.h"
#include "model/row_invariant.h"
#include "model/weight_names.h"

namespace gpueval {
namespace {

std::string shape_str(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// allowed: [B, T, S] bool -> [B, 1, 1, T, S] float32, 0 where allowed.
at::Tensor additive_mask(const at::Tensor& allowed) {
  const int64_t b = allowed.size(0), t = allowed.size(1), s = allowed.size(2);
  // A lowest-finite fill (not -inf) keeps fully masked query rows finite.
  return at::zeros({b, t, s}, at::TensorOptions().dtype(at::kFloat).device(allowed.device()))
      .masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest())
      .view({b, 1, 1, t, s});
}

// Fused attention (at::scaled_dot_product_attention) runs where LibTorch has it (2.x) and the tensors
// are on a GPU; CPU runs keep the explicit path below, so their results are the same on every LibTorch.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kHaveSdpa = true;
#else
constexpr bool kHaveSdpa = false;
#endif
bool use_sdpa(const at::Tensor& x) { return kHaveSdpa && x.is_cuda(); }

// The additive mask as SDPA takes it: [B, 1, 1, T, S] float32 -> [B, 1, T, S] in the model's dtype (a
// float mask must match the query's). lowest() of float32 would overflow bf16/fp16 to -inf, and a row
// of padding queries that sees no key must stay finite, so the fill is the dtype's own lowest.
at::Tensor sdpa_mask(const at::Tensor& mask, at::ScalarType dtype) {
  at::Tensor m = mask.squeeze(1);  // [B, 1, T, S]
  if (dtype == at::kFloat || dtype == at::kDouble) return m.to(dtype);
  const double low = dtype == at::kHalf ? -65504.0 : -3.3895313892515355e38;  // lowest finite fp16 / bf16
  return m.clamp_min(low).to(dtype);
}

at::Tensor as_parameter(torch::nn::Module& m, const std::string& name, at::Tensor t) {
  return m.register_parameter(name, std::move(t), /*requires_grad=*/false);
}

}  // namespace

ProjectionImpl::ProjectionImpl(const WeightSource& source, const std::string& weight, int64_t in, int64_t out,
                               bool bias) {
  weight_ = as_parameter(*this, "weight", source(weight, {out, in}));
  if (bias) bias_ = as_parameter(*this, "bias", source(bias_name(weight), {out}));
}

at::Tensor ProjectionImpl::forward(const at::Tensor& x) const {
  if (row_invariant_products_on() && row_invariant_project_applies(x, weight_, bias_))
    return row_invariant_project(x, weight_, bias_);
  if (packed_ && project_uses_packed(x, *packed_, bias_)) return project(x, *packed_, bias_);
  return project(x, weight_, bias_);
}

int64_t ProjectionImpl::pack_for_cpu() {
  packed_ = PackedWeight::pack(weight_);
  return packed_ ? packed_->bytes() : 0;
}

EmbeddingImpl::EmbeddingImpl(const WeightSource& source, const std::string& name, int64_t vocab, int64_t dim) {
  weight_ = as_parameter(*this, "weight", source(name, {vocab, dim}));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& tokens) const { return at::embedding(weight_, tokens); }

NormImpl::NormImpl(const WeightSource& source, const std::string& name, int64_t dim, double eps, NormKind kind,
                   bool unit_offset)
    : eps_(eps) {
  weight_ = as_parameter(*this, "weight", source(name, {dim}));
  if (kind == NormKind::kLayerNorm) bias_ = as_parameter(*this, "bias", source(bias_name(name), {dim}));
  if (unit_offset) scale_ = 1.0 + weight_.to(at::promote_types(weight_.scalar_type(), at::kFloat));
}

at::Tensor NormImpl::forward(const at::Tensor& x) const {
  if (bias_.defined()) return at::layer_norm(x, {weight_.size(0)}, weight_, bias_, eps_);
  if (!scale_.defined()) return rms_norm(x, weight_, eps_);
  const at::Tensor xf = x.to(scale_.scalar_type());
  return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_) * scale_).to(x.scalar_type());
}

namespace {

// The projection of kind `w` in `layer`: its in and out sizes and its bias from the one weight table.
Projection projection(const ModelConfig& c, const WeightSource& source, LlamaWeight w, int64_t layer,
                      int64_t expert = 0) {
  const std::vector<int64_t> shape = weight_shape(c, w);  // [out, in]
  return Projection(source, weight_name(w, layer, expert), shape[1], shape[0], has_bias(c, w));
}

}  // namespace

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
    const auto norm = [&](LlamaWeight w) {
      return Norm(source, weight_name(w, layer), weight_shape(c, w)[0], kLatentNormEps, c.arch.norm,
                  c.arch.norm_unit_offset);
    };
    if (mla_.q_lora_rank > 0) {
      q_a_proj_ = register_module("q_a_proj", projection(c, source, LlamaWeight::kQAProj, layer));
      q_a_layernorm_ = register_module("q_a_layernorm", norm(LlamaWeight::kQALayernorm));
      q_b_proj_ = register_module("q_b_proj", projection(c, source, LlamaWeight::kQBProj, layer));
    } else {
      q_proj_ = register_module("q_proj", projection(c, source, LlamaWeight::kQProj, layer));
    }
    kv_a_proj_ = register_module("kv_a_proj_with_mqa", projection(c, source, LlamaWeight::kKvAProj, layer));
    kv_a_layernorm_ = register_module("kv_a_layernorm", norm(LlamaWeight::kKvALayernorm));
    // kv_b_proj is never multiplied as a projection: its rows per head, [nope keys; values] x r.
    auto kv_b = register_module("kv_b_proj", std::make_shared<torch::nn::Module>("LatentExpansion"));
    const at::Tensor up = as_parameter(*kv_b, "weight",
                                       source(weight_name(LlamaWeight::kKvBProj, layer), weight_shape(c, LlamaWeight::kKvBProj)))
                              .view({n_heads_, mla_.qk_nope_head_dim + mla_.v_head_dim, mla_.kv_lora_rank});
    key_up_ = up.narrow(1, 0, mla_.qk_nope_head_dim).contiguous();                                  // [H, nope, r]
    value_up_ = up.narrow(1, mla_.qk_nope_head_dim, mla_.v_head_dim).transpose(1, 2).contiguous();  // [H, r, v]
    o_proj_ = register_module("o_proj", projection(c, source, LlamaWeight::kOProj, layer));
    return;
  }
  q_proj_ = register_module("q_proj", projection(c, source, LlamaWeight::kQProj, layer));
  k_proj_ = register_module("k_proj", projection(c, source, LlamaWeight::kKProj, layer));
  v_proj_ = register_module("v_proj", projection(c, source, LlamaWeight::kVProj, layer));
  o_proj_ = register_module("o_proj", projection(c, source, LlamaWeight::kOProj, layer));
  if (qk_norm_ != QkNorm::kNone) {
    const auto norm = [&](LlamaWeight w) {
      return Norm(source, weight_name(w, layer), weight_shape(c, w)[0], c.rms_norm_eps, c.arch.norm,
                  c.arch.norm_unit_offset);
    };
    q_norm_ = register_module("q_norm", norm(LlamaWeight::kQNorm));
    k_norm_ = register_module("k_norm", norm(LlamaWeight::kKNorm));
  }
}

at::Tensor AttentionImpl::heads(at::Tensor x, int64_t n, const Norm& norm, const RopeTables& rope) const {
  const int64_t b = x.size(0), t = x.size(1);
  if (qk_norm_ == QkNorm::kWholeProjection) x = norm->forward(x);           // over [B, T, n * hd]
  x = x.view({b, t, n, head_dim_});
  if (qk_norm_ == QkNorm::kPerHead) x = norm->forward(x);                   // over each head's hd
  if (clip_) x = x.clamp(-*clip_, *clip_);
  x = x.transpose(1, 2);                                                    // [B, n, T, hd]
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
    const at::Tensor full = q_a_proj_ ? q_b_proj_->forward(q_a_layernorm_->forward(q_a_proj_->forward(x)))
                                      : q_proj_->forward(x);
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
  const at::Tensor latent = attended.view({b * t, n_heads_, head_dim_}).narrow(-1, 0, mla_.kv_lora_rank).transpose(0, 1);
  return batched_product(latent, value_up_).transpose(0, 1).reshape({b, t, n_heads_ * mla_.v_head_dim});
}

std::pair<at::Tensor, at::Tensor> AttentionImpl::keys_values(const at::Tensor& x, const RopeTables& rope) const {
  if (mla_.kv_lora_rank > 0) {
    // One key per token, the latent and the shared RoPE key: [B, 1, T, r + rope]; the values are the keys
    // (attention_output reads their latent part).
    const at::Tensor compressed = kv_a_proj_->forward(x);  // [B, T, r + rope]
    const at::Tensor latent = kv_a_layernorm_->forward(compressed.narrow(-1, 0, mla_.kv_lora_rank).contiguous());
    const at::Tensor shared = rotate(compressed.narrow(-1, mla_.kv_lora_rank, mla_.qk_rope_head_dim).unsqueeze(1), rope);
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

at::Tensor AttentionImpl::forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask,
                                  KVCache* cache, int64_t layer, const PrefixKV* prefix) const {
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

at::Tensor AttentionImpl::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, const PrefixKV* prefix, int64_t layer) const {
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
  if (const at::Tensor pk = p > 0 ? prefix->keys[layer] : at::Tensor(), pv = p > 0 ? prefix->values[layer] : at::Tensor();
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
  at::Tensor q_rows;                                                  // [KV, B*G*T, hd]
  if (p > 0) {
    // Every query of every row against the one copy of the prefix: [KV, B*G*T, hd] x [KV, hd, P].
    q_rows = qg.permute({1, 0, 2, 3, 4}).reshape({n_kv_heads_, rows, head_dim_});
    at::Tensor prefix_scores = batched_product(q_rows, prefix->keys[layer][0].transpose(1, 2));  // [KV, B*G*T, P]
    prefix_scores = prefix_scores.view({n_kv_heads_, b, groups, t, p}).permute({1, 0, 2, 3, 4});
    scores = at::cat({prefix_scores, scores}, -1);                                       // [B, KV, G, T, S]
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

MlpImpl::MlpImpl(const ModelConfig& c, const WeightSource& source, int64_t layer, MlpRole role, int64_t expert)
    : activation_(c.arch.activation) {
  using W = LlamaWeight;
  const auto [gate, up, down] = role == MlpRole::kExpert   ? std::tuple{W::kExpertGateProj, W::kExpertUpProj, W::kExpertDownProj}
                                : role == MlpRole::kShared ? std::tuple{W::kSharedGateProj, W::kSharedUpProj, W::kSharedDownProj}
                                                           : std::tuple{W::kGateProj, W::kUpProj, W::kDownProj};
  if (role != MlpRole::kDense || c.arch.gated_mlp)
    gate_proj_ = register_module("gate_proj", projection(c, source, gate, layer, expert));
  up_proj_ = register_module("up_proj", projection(c, source, up, layer, expert));
  down_proj_ = register_module("down_proj", projection(c, source, down, layer, expert));
}

MoeImpl::MoeImpl(const ModelConfig& c, const WeightSource& source, int64_t layer) : layer_(layer), moe_(c.arch.moe) {
  router_ = register_module("gate", projection(c, source, LlamaWeight::kRouter, layer));
  if (moe_.score == RouterScore::kSigmoid) router_float_ = router_->weight().to(at::kFloat);
  if (moe_.correction_bias)
    correction_ = router_->register_parameter(
        "e_score_correction_bias",
        source(weight_name(LlamaWeight::kRouterCorrection, layer), weight_shape(c, LlamaWeight::kRouterCorrection))
            .to(at::kFloat),
        /*requires_grad=*/false);
  // Registered as "experts.E" under "mlp": each parameter is named as the checkpoint names it.
  torch::nn::ModuleList list;
  for (int64_t e = 0; e < moe_.num_experts; ++e) {
    experts_.push_back(Mlp(c, source, layer, MlpRole::kExpert, e));
    list->push_back(experts_.back());
  }
  register_module("experts", list);
  if (moe_.shared_intermediate_size > 0)
    shared_ = register_module("shared_experts", Mlp(c, source, layer, MlpRole::kShared));
}

namespace {

// torch.sigmoid's formula, 1 / (1 + exp(-x)), with the same scalar code for every element on the CPU:
// at::sigmoid takes a vectorised exp for most of a tensor and a scalar one for its tail, whose bits can
// differ, so a token's scores would depend on how many rows share its tensor.
at::Tensor sigmoid_per_element(const at::Tensor& x) {
  if (!x.device().is_cpu() || x.scalar_type() != at::kFloat) return x.sigmoid();
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0, n = in.numel(); i < n; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  return out;
}

}  // namespace

at::Tensor MoeImpl::router_logits(const at::Tensor& x) const {
  // A softmax router multiplies in the model's dtype (transformers' nn.Linear), a sigmoid one in float32.
  const at::Tensor& w = router_float_.defined() ? router_float_ : router_->weight();
  const at::Tensor in = router_float_.defined() ? x.to(at::kFloat) : x;
  if (row_invariant_product_applies(in, w)) return row_invariant_product(in, w);
  return at::linear(in, w).to(at::kFloat);
}

at::Tensor MoeImpl::choose(const at::Tensor& x, at::Tensor* weights) const {
  const at::Tensor logits = router_logits(x);  // [N, E] float32
  at::Tensor top, chosen;
  if (moe_.score == RouterScore::kSoftmax) {
    // transformers: softmax in float32, topk of the probabilities (its order), renormalised with
    // norm_topk_prob (Mixtral: always).
    std::tie(top, chosen) = at::topk(at::softmax(logits, -1), moe_.top_k, -1);
    if (moe_.normalize_top_k) top.div_(top.sum(-1, /*keepdim=*/true));
    if (moe_.weights_in_model_dtype) top = top.to(x.scalar_type());
  } else {
    // DeepSeek-V3 (transformers' DeepseekV3TopkRouter): sigmoid scores; the choice reads them plus the
    // correction bias, within the top_groups groups ranked by their two best; the weights are the
    // uncorrected scores, renormalised, times routed_scaling.
    const at::Tensor scores = sigmoid_per_element(logits);
    at::Tensor choice = correction_.defined() ? scores + correction_ : scores;
    const int64_t n = choice.size(0), per_group = moe_.num_experts / moe_.groups;
    const at::Tensor group_scores = std::get<0>(choice.view({n, moe_.groups, per_group}).topk(2, -1)).sum(-1);
    const at::Tensor best_groups = std::get<1>(at::topk(group_scores, moe_.top_groups, -1, true, /*sorted=*/false));
    const at::Tensor in_group = at::zeros_like(group_scores)
                                    .scatter_(1, best_groups, 1.0)
                                    .unsqueeze(-1)
                                    .expand({n, moe_.groups, per_group})
                                    .reshape({n, moe_.num_experts});
    choice = choice.masked_fill(in_group.logical_not(), -std::numeric_limits<float>::infinity());
    chosen = std::get<1>(at::topk(choice, moe_.top_k, -1, true, /*sorted=*/false));
    top = scores.gather(1, chosen);
    if (moe_.normalize_top_k) top.div_(top.sum(-1, /*keepdim=*/true) + 1e-20);
    top = top * moe_.routed_scaling;
  }
  if (weights) *weights = top;
  return chosen;
}

namespace {

// Consecutive runs of experts with about equal rows, at most `threads` of them: run r is experts
// [runs[r], runs[r + 1]). A function of the counts and the thread count.
std::vector<size_t> expert_runs(const int64_t* count, size_t experts, int64_t threads) {
  int64_t total = 0;
  for (size_t e = 0; e < experts; ++e) total += count[e];
  std::vector<size_t> runs{0};
  int64_t rows = 0;
  for (size_t e = 0; e < experts; ++e) {
    rows += count[e];
    // Cut after expert e once the runs so far hold their share of the rows.
    const int64_t share = total * static_cast<int64_t>(runs.size()) / std::max<int64_t>(threads, 1);
    if (e + 1 < experts && rows >= share && static_cast<int64_t>(runs.size()) < threads) runs.push_back(e + 1);
  }
  runs.push_back(experts);
  return runs;
}

}  // namespace

at::Tensor MoeImpl::forward(const at::Tensor& x) const {
  const int64_t d = x.size(-1);
  const at::Tensor flat = x.reshape({-1, d});
  at::Tensor weights;
  const at::Tensor chosen = choose(flat, &weights);  // [N, k]
  if (observer_) observer_(layer_, chosen, weights);
  const int64_t top_k = moe_.top_k;
  // Each expert's tokens in one product; each (token, slot) output times its weight (float32, or the
  // model's dtype with weights_in_model_dtype) kept in its slot, then a token's top_k slots summed in
  // their topk order and cast to the model's dtype once: transformers 5's default (grouped_mm) experts
  // path, whose order no other token changes.
  const at::Tensor flat_chosen = chosen.reshape({-1});
  const at::Tensor order = at::argsort(flat_chosen, /*stable=*/true);
  const at::Tensor counts = at::bincount(flat_chosen, {}, static_cast<int64_t>(experts_.size())).cpu();
  const int64_t* count = counts.data_ptr<int64_t>();
  at::Tensor slot_out = at::empty({flat_chosen.size(0), d}, flat.options().dtype(at::promote_types(flat.scalar_type(), weights.scalar_type())));
  const size_t n_experts = experts_.size();
  std::vector<int64_t> first(n_experts + 1, 0);  // expert e's slots: order[first[e], first[e + 1])
  for (size_t e = 0; e < n_experts; ++e) first[e + 1] = first[e] + count[e];
  const at::Tensor flat_weights = weights.reshape({-1});
  std::vector<at::Tensor> weighted(n_experts);  // expert e's outputs times their weights, [count[e], d]
  const auto run_expert = [&](size_t e) {
    const at::Tensor slots = order.narrow(0, first[e], count[e]);  // positions in [N * k]
    const at::Tensor y = experts_[e]->forward(flat.index_select(0, at::floor_divide(slots, top_k)));
    weighted[e] = y * flat_weights.index_select(0, slots).unsqueeze(1);
  };
  if (flat.device().is_cpu()) {
    // The worker's threads share the experts, each expert's products on one thread (cut by its own
    // rows alone, so the bits do not depend on the threads): runs of consecutive experts with about
    // equal rows, one per thread. An expert's 512 rows or fewer are one block of project(), one thread.
    // The products a pool thread takes follow the caller's: RowInvariantProducts is per thread.
    const std::vector<size_t> runs = expert_runs(count, n_experts, at::get_num_threads());
    const bool invariant = row_invariant_products_on();
    cpu_parallel_for(0, static_cast<int64_t>(runs.size()) - 1, 1, [&](int64_t b, int64_t end) {
      std::optional<RowInvariantProducts> as_the_caller;
      if (invariant) as_the_caller.emplace();
      for (int64_t r = b; r < end; ++r)
        for (size_t e = runs[static_cast<size_t>(r)]; e < runs[static_cast<size_t>(r) + 1]; ++e)
          if (count[e] > 0) run_expert(e);
    });
  } else {
    for (size_t e = 0; e < n_experts; ++e)
      if (count[e] > 0) run_expert(e);
  }
  for (size_t e = 0; e < n_experts; ++e)
    if (count[e] > 0) slot_out.index_copy_(0, order.narrow(0, first[e], count[e]), weighted[e]);
  at::Tensor out = slot_out.view({flat.size(0), top_k, d}).sum(1).to(flat.scalar_type());
  if (shared_) out.add_(shared_->forward(flat));  // transformers: routed + shared_experts(x)
  return out.view(x.sizes());
}

at::Tensor MlpImpl::forward(const at::Tensor& x) const {
  // In place on the fresh projections: the same bits as silu(gate) * up without two more tensors.
  at::Tensor gate = (gate_proj_ ? gate_proj_ : up_proj_)->forward(x);
  switch (activation_) {
    case Activation::kSilu: at::silu_(gate); break;
    case Activation::kGeluTanh: gate = at::gelu(gate, "tanh"); break;
    case Activation::kGelu: gate = at::gelu(gate); break;
  }
  if (gate_proj_) gate.mul_(up_proj_->forward(x));
  return down_proj_->forward(gate);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const WeightSource& source, int64_t index)
    : index_(index),
      placement_(c.arch.norm_placement),
      parallel_residual_(c.arch.parallel_residual),
      residual_multiplier_(c.arch.residual_multiplier) {
  const auto norm = [&](LlamaWeight w) {
    return Norm(source, weight_name(w, index), c.hidden_size, c.rms_norm_eps, c.arch.norm, c.arch.norm_unit_offset);
  };
  if (placement_ != NormPlacement::kPostSublayer)
    input_layernorm_ = register_module("input_layernorm", norm(LlamaWeight::kInputLayernorm));
  self_attn_ = register_module("self_attn", Attention(c, source, index));
  post_attention_layernorm_ = register_module("post_attention_layernorm", norm(LlamaWeight::kPostAttentionLayernorm));
  if (placement_ == NormPlacement::kSandwich)
    pre_feedforward_layernorm_ = register_module("pre_feedforward_layernorm", norm(LlamaWeight::kPreFeedforwardLayernorm));
  if (c.arch.sparse(index)) moe_ = register_module("mlp", Moe(c, source, index));
  else mlp_ = register_module("mlp", Mlp(c, source, index));
  if (placement_ != NormPlacement::kPreNorm)
    post_feedforward_layernorm_ =
        register_module("post_feedforward_layernorm", norm(LlamaWeight::kPostFeedforwardLayernorm));
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

LlamaModelImpl::LlamaModelImpl(const ModelConfig& c, const WeightSource& source, LoadOptions options)
    : config_(c), options_(options) {
  // Module names cannot contain dots, so the Hugging Face hierarchy is built from plain containers.
  auto body = register_module("model", std::make_shared<torch::nn::Module>("LlamaDecoder"));
  embed_tokens_ = body->register_module(
      "embed_tokens", Embedding(source, weight_name(LlamaWeight::kEmbedTokens), c.vocab_size, c.hidden_size));
  if (c.arch.learned_positions)
    embed_positions_ = body->register_module(
        "embed_positions",
        Embedding(source, weight_name(LlamaWeight::kPositionEmbedding), c.max_position_embeddings, c.hidden_size));
  auto layers = body->register_module("layers", std::make_shared<torch::nn::Module>("Layers"));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(layers->register_module(std::to_string(i), DecoderLayer(c, source, i)));
  norm_ = body->register_module("norm", Norm(source, weight_name(LlamaWeight::kNorm), c.hidden_size, c.rms_norm_eps,
                                             c.arch.norm, c.arch.norm_unit_offset));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_->weight();
  } else {
    auto head = register_module("lm_head", std::make_shared<torch::nn::Module>("LmHead"));
    lm_head_ = head->register_parameter("weight", source(weight_name(LlamaWeight::kLmHead), weight_shape(c, LlamaWeight::kLmHead)),
                                        /*requires_grad=*/false);
  }
  rope_ = std::make_shared<const RotaryEmbedding>(RotaryEmbedding::from_config(c, options.device));
  if (c.arch.sliding_rope_theta)  // the sliding layers' RoPE: the default type at their own base
    sliding_rope_ = std::make_shared<const RotaryEmbedding>(c.head_dim, c.rotary_dim(), *c.arch.sliding_rope_theta,
                                                            RopeScaling{}, c.max_position_embeddings, options.device);
  // On the CPU in float32 the projections and the LM head multiply packed copies of their weights
  // (cpu_matmul.h's PackedWeight: no product repacks them), where the machine has room for a copy.
  if (options.device.is_cpu() && options.dtype == at::kFloat) {
    std::vector<ProjectionImpl*> projections;
    int64_t bytes = lm_head_.numel() * static_cast<int64_t>(sizeof(float));
    for (const std::shared_ptr<torch::nn::Module>& m : modules(/*include_self=*/false)) {
      if (auto* p = dynamic_cast<ProjectionImpl*>(m.get())) {
        projections.push_back(p);
        bytes += p->weight().numel() * static_cast<int64_t>(sizeof(float));
      }
    }
    if (pack_cpu_weights(bytes)) {
      for (ProjectionImpl* p : projections) packed_bytes_ += p->pack_for_cpu();
      lm_head_packed_ = PackedWeight::pack(lm_head_);
      if (lm_head_packed_) packed_bytes_ += lm_head_packed_->bytes();
    }
  }
}

void LlamaModelImpl::fill_cache(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                KVCache& cache) const {
  forward(tokens, positions, valid, &cache, /*keys_only=*/true);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                   KVCache* cache) const {
  return forward(tokens, positions, valid, cache, /*keys_only=*/false);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                   KVCache* cache, const PrefixKV* prefix) const {
  return forward(tokens, positions, valid, cache, /*keys_only=*/false, prefix);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                   KVCache* cache, bool keys_only, const PrefixKV* prefix) const {
  const LayerMasks masks = step_masks(tokens, positions, valid, cache, prefix);
  at::Tensor h = run_layers(tokens, positions, masks, cache, prefix && prefix->length() > 0 ? prefix : nullptr, {},
                            keys_only);
  if (cache) cache->commit(valid, positions);
  return h;
}

std::vector<at::Tensor> LlamaModelImpl::forward_ragged(const std::vector<ForwardGroup>& groups,
                                                       const PrefixKV* prefix) const {
  if (groups.empty()) return {};
  if (prefix && prefix->length() == 0) prefix = nullptr;
  // Per group: its masks, RoPE tables (a length-dependent RoPE takes each row's own length) and place
  // among the tokens laid side by side.
  struct Group {
    LayerMasks masks;
    RopeTables rope, sliding_rope;
    int64_t offset = 0, rows = 0, length = 0;
  };
  std::vector<Group> prepared;
  std::vector<at::Tensor> tokens, positions;
  int64_t n = 0;
  for (const ForwardGroup& g : groups) {
    if (g.tokens.dim() != 2 || !g.positions.sizes().equals(g.tokens.sizes()) || !g.valid.sizes().equals(g.tokens.sizes()))
      throw Error(fmt::format("forward_ragged: a group's tokens are {}, its positions {} and valid {}",
                              shape_str(g.tokens.sizes()), shape_str(g.positions.sizes()), shape_str(g.valid.sizes())));
    Group p;
    p.masks = attention_masks(step_masks(g.tokens, g.positions, g.valid, g.cache, prefix), g.tokens);
    p.rope = rope_->tables(g.positions, options_.dtype);
    p.sliding_rope = sliding_rope_ ? sliding_rope_->tables(g.positions, options_.dtype) : p.rope;
    p.offset = n;
    p.rows = g.tokens.size(0);
    p.length = g.tokens.size(1);
    n += p.rows * p.length;
    tokens.push_back(g.tokens.reshape({1, -1}));
    positions.push_back(g.positions.reshape({1, -1}));
    prepared.push_back(std::move(p));
  }
  at::Tensor h = embed(at::cat(tokens, 1), at::cat(positions, 1));  // [1, N, D]
  std::vector<AttentionGroup> layer_groups(groups.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const bool slides = config_.arch.slides(static_cast<int64_t>(i));
    for (size_t k = 0; k < groups.size(); ++k) {
      const Group& p = prepared[k];
      layer_groups[k] = AttentionGroup{p.offset, p.rows, p.length, slides ? &p.sliding_rope : &p.rope,
                                       slides ? &p.masks.window : &p.masks.full, groups[k].cache};
    }
    h = layers_[i]->forward_ragged(h, layer_groups, prefix);
  }
  h = norm_->forward(h);
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < groups.size(); ++k) {
    const Group& p = prepared[k];
    if (groups[k].cache) groups[k].cache->commit(groups[k].valid, groups[k].positions);
    out.push_back(h.narrow(1, p.offset, p.rows * p.length).view({p.rows, p.length, h.size(2)}));
  }
  return out;
}

LlamaModelImpl::LayerMasks LlamaModelImpl::step_masks(const at::Tensor& tokens, const at::Tensor& positions,
                                                      const at::Tensor& valid, KVCache* cache,
                                                      const PrefixKV* prefix) const {
  const int64_t t = tokens.size(1);
  const int64_t p = prefix ? prefix->length() : 0;
  if (p > 0 && static_cast<int64_t>(prefix->keys.size()) != config_.num_hidden_layers)
    throw Error(fmt::format("forward: the prefix has {} layers, the model {}", prefix->keys.size(),
                            config_.num_hidden_layers));
  const int64_t past = cache ? cache->length() : 0;
  at::Tensor key_valid = valid, key_positions = positions;  // [B, S]
  if (cache) {
    cache->set_pending(valid, positions);
    key_valid = cache->key_valid(t);
    key_positions = cache->key_positions(t);
  }
  const int64_t s = past + t;
  // Query t (absolute slot past + t) sees key slot j when j <= past + t and j is a real token.
  at::Tensor q_slot = at::arange(past, s, at::TensorOptions().dtype(at::kLong).device(tokens.device()));  // [T]
  at::Tensor k_slot = at::arange(0, s, at::TensorOptions().dtype(at::kLong).device(tokens.device()));     // [S]
  at::Tensor allowed = k_slot.unsqueeze(0).le(q_slot.unsqueeze(1)).unsqueeze(0).logical_and(key_valid.unsqueeze(1));
  if (p > 0) {  // every query sees the whole prefix (but for a window's reach), its keys at positions 0..P-1
    const int64_t b = tokens.size(0);
    allowed = at::cat({at::ones({b, t, p}, allowed.options()), allowed.expand({b, t, s})}, -1);  // [B, T, P + S]
    key_positions = at::cat({at::arange(p, key_positions.options()).expand({b, p}), key_positions}, 1);
  }
  return layer_masks(allowed, positions, key_positions);
}

LlamaModelImpl::LayerMasks LlamaModelImpl::attention_masks(const LayerMasks& masks, const at::Tensor& tokens) const {
  if (!use_sdpa(tokens)) return masks;
  // [B, 1, T, S] in the model's dtype on the SDPA path.
  return LayerMasks{sdpa_mask(masks.full, options_.dtype),
                    masks.window.defined() ? sdpa_mask(masks.window, options_.dtype) : at::Tensor()};
}

at::Tensor LlamaModelImpl::embed(const at::Tensor& tokens, const at::Tensor& positions) const {
  at::Tensor h = embed_tokens_->forward(tokens);  // [B, T, D]
  if (embed_positions_) {  // GPT-2's table has a row per position up to its context and none past it
    if (const int64_t last = positions.max().item<int64_t>(); last >= config_.max_position_embeddings)
      throw Error(fmt::format("position {} is past the model's {} learned positions (max_position_embeddings)", last,
                              config_.max_position_embeddings));
    h.add_(embed_positions_->forward(positions));
  }
  if (config_.arch.embedding_multiplier_in_dtype)  // Gemma: the multiplier rounded to the model dtype first
    return h * at::scalar_tensor(config_.arch.embedding_multiplier, h.options());
  if (config_.arch.embedding_multiplier != 1.0) return h * config_.arch.embedding_multiplier;
  return h;
}

LlamaModelImpl::LayerMasks LlamaModelImpl::layer_masks(const at::Tensor& allowed, const at::Tensor& query_positions,
                                                       const at::Tensor& key_positions) const {
  LayerMasks m;
  m.full = additive_mask(allowed);
  if (!config_.arch.sliding_layers.empty()) {
    // Key q is in the window of query p when p - q < sliding_window (transformers: kv_idx > q_idx - window).
    const at::Tensor near = query_positions.unsqueeze(2).sub(key_positions.unsqueeze(1)).lt(*config_.sliding_window);
    m.window = additive_mask(allowed.logical_and(near));
  }
  return m;
}

at::Tensor LlamaModelImpl::run_layers(const at::Tensor& tokens, const at::Tensor& positions, const LayerMasks& masks,
                                      KVCache* cache, const PrefixKV* prefix, const at::Tensor& columns,
                                      bool keys_only) const {
  const RopeTables rope = rope_->tables(positions, options_.dtype);
  const RopeTables sliding_rope = sliding_rope_ ? sliding_rope_->tables(positions, options_.dtype) : rope;
  at::Tensor h = embed(tokens, positions);  // [B, T, D]
  const LayerMasks converted = attention_masks(masks, tokens);  // once for all layers
  const at::Tensor &full = converted.full, &window = converted.window;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const bool slides = config_.arch.slides(static_cast<int64_t>(i));
    const at::Tensor& layer_mask = slides ? window : full;
    const RopeTables& layer_rope = slides ? sliding_rope : rope;
    if (keys_only && cache && i + 1 == layers_.size()) {
      layers_[i]->append_keys_values(h, layer_rope, *cache);
      return {};
    }
    if (columns.defined() && i + 1 == layers_.size())
      return norm_->forward(layers_[i]->forward_at(h, layer_rope, layer_mask, prefix, columns));  // [B, T', D]
    h = layers_[i]->forward(h, layer_rope, layer_mask, cache, prefix);
  }
  if (columns.defined())  // no layers: the embedding's states at the columns
    h = h.gather(1, columns.unsqueeze(-1).expand({h.size(0), columns.size(1), h.size(2)}));
  return norm_->forward(h);
}

PrefixKV LlamaModelImpl::prefill(const std::vector<int32_t>& tokens) const {
  const int64_t p = static_cast<int64_t>(tokens.size());
  if (p == 0) throw Error("prefill: the prefix has no tokens");
  if (p > config_.max_position_embeddings)
    throw Error(fmt::format("prefill: the prefix has {} tokens, more than max_position_embeddings {}", p,
                            config_.max_position_embeddings));
  for (int32_t id : tokens)
    if (id < 0 || id >= config_.vocab_size)
      throw Error(fmt::format("prefill: token id {} is outside the vocabulary of {}", id, config_.vocab_size));
  c10::InferenceMode guard;
  const auto on_device = at::TensorOptions().device(options_.device);
  at::Tensor ids = at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong).view({1, p});
  // The cache holds exactly P positions, so its committed views are the whole storage: nothing to clone.
  KVCache cache = make_cache(1, p);
  fill_cache(ids.to(options_.device), at::arange(p, on_device.dtype(at::kLong)).view({1, p}),
             at::ones({1, p}, on_device.dtype(at::kBool)), cache);
  PrefixKV prefix;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    prefix.keys.push_back(cache.keys(l));
    prefix.values.push_back(cache.values(l));
  }
  return prefix;
}

at::Tensor LlamaModelImpl::forward_packed(const at::Tensor& tokens, const at::Tensor& positions,
                                          const at::Tensor& valid, const at::Tensor& segments,
                                          const PrefixKV* prefix, const at::Tensor& columns) const {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  for (const at::Tensor* x : {&positions, &valid, &segments})
    if (!x->sizes().equals(tokens.sizes()))
      throw Error(fmt::format("forward_packed: tokens are {} but positions, valid or segments are {}",
                              shape_str(tokens.sizes()), shape_str(x->sizes())));
  const int64_t p = prefix ? prefix->length() : 0;
  if (p > 0 && static_cast<int64_t>(prefix->keys.size()) != config_.num_hidden_layers)
    throw Error(fmt::format("forward_packed: the prefix has {} layers, the model {}", prefix->keys.size(),
                            config_.num_hidden_layers));
  // Within a sequence: key j <= query i, a real token, in the query's part, and in that part's trunk or in the
  // query's own branch.
  at::Tensor idx = at::arange(t, at::TensorOptions().dtype(at::kLong).device(tokens.device()));
  at::Tensor causal = idx.unsqueeze(0).le(idx.unsqueeze(1)).unsqueeze(0);                         // [1, T, T]
  at::Tensor part = at::floor_divide(segments, kSegmentsPerPart);                                   // [B, T]
  at::Tensor same_branch = segments.unsqueeze(2).eq(segments.unsqueeze(1));                          // [B, T, T]
  at::Tensor trunk_of_part = part.unsqueeze(2).eq(part.unsqueeze(1))
                                 .logical_and(at::remainder(segments, kSegmentsPerPart).eq(0).unsqueeze(1));
  at::Tensor allowed = causal.logical_and(valid.unsqueeze(1)).logical_and(same_branch.logical_or(trunk_of_part));
  // Every query sees the whole prefix (but for a window's reach); the prefix's keys are at positions 0..P-1.
  at::Tensor key_positions = positions;
  if (p > 0) {
    allowed = at::cat({at::ones({b, t, p}, allowed.options()), allowed}, -1);  // [B, T, P + T]
    key_positions = at::cat({at::arange(p, positions.options()).expand({b, p}), positions}, 1);
  }
  if (columns.defined() && (columns.dim() != 2 || columns.size(0) != b || columns.scalar_type() != at::kLong))
    throw Error(fmt::format("forward_packed: columns are {} {}, expected [{}, T'] int64", shape_str(columns.sizes()),
                            c10::toString(columns.scalar_type()), b));
  return run_layers(tokens, positions, layer_masks(allowed, positions, key_positions), nullptr,
                    p > 0 ? prefix : nullptr, columns);
}

int64_t PrefixKV::length() const { return keys.empty() ? 0 : keys[0].size(2); }

int64_t PrefixKV::bytes() const {
  int64_t n = 0;
  for (const at::Tensor& k : keys) n += static_cast<int64_t>(k.storage().nbytes());
  for (size_t l = 0; l < values.size(); ++l)  // latent attention's values are its keys: counted once
    if (l >= keys.size() || !values[l].is_alias_of(keys[l])) n += static_cast<int64_t>(values[l].storage().nbytes());
  return n;
}

at::Tensor LlamaModelImpl::logits(const at::Tensor& hidden) const {
  at::Tensor out = row_invariant_products_on() && row_invariant_project_applies(hidden, lm_head_)
                       ? row_invariant_project(hidden, lm_head_)
                   : lm_head_packed_ && project_uses_packed(hidden, *lm_head_packed_) ? project(hidden, *lm_head_packed_)
                                                                                      : project(hidden, lm_head_);
  if (config_.arch.logits_divisor != 1.0) out.div_(config_.arch.logits_divisor);
  if (config_.arch.logit_softcap) out.div_(*config_.arch.logit_softcap).tanh_().mul_(*config_.arch.logit_softcap);
  return out;
}

KVCache LlamaModelImpl::make_cache(int64_t batch, int64_t capacity) const {
  return KVCache(config_, batch, capacity, options_.dtype, options_.device);
}

namespace {

LlamaModel build_with_source(const ModelConfig& config, LoadOptions options,
                             const std::function<at::Tensor(const std::string&)>& lookup,
                             const std::function<std::string(const std::string&)>& where_of) {
  WeightSource source = [&](const std::string& name, const std::vector<int64_t>& shape) {
    at::Tensor t = lookup(name);
    if (!t.sizes().equals(shape))
      fail(where_of(name), "tensor '{}' has shape {}, but config.json implies {}", name, shape_str(t.sizes()),
           shape_str(shape));
    if (!at::isFloatingType(t.scalar_type()))
      fail(where_of(name), "tensor '{}' has dtype {}, expected a floating-point type", name,
           dtype_name(t.scalar_type()));
    return t.to(options.device, options.dtype);
  };
  c10::InferenceMode guard;
  return LlamaModel(config, source, options);
}

// A checkpoint's tensors as the modules ask for them, by module name, through the family's
// stored_layout (weight_names.h): under the module's own name, else the layout's name or its bare form,
// transposed and sliced as the layout says. `contains` and `tensor` look names up in the checkpoint.
class StoredTensors {
 public:
  StoredTensors(const ModelConfig& config, std::function<bool(const std::string&)> contains,
                std::function<at::Tensor(const std::string&)> tensor, std::function<std::string(const std::string&)> file_of,
                std::string where)
      : layout_(stored_layout(config)),
        contains_(std::move(contains)),
        tensor_(std::move(tensor)),
        file_of_(std::move(file_of)),
        where_(std::move(where)) {}

  // The checkpoint name that holds `module`'s tensor; "" when none does.
  std::string holder(const std::string& module) const {
    if (contains_(module)) return module;
    const auto it = layout_.find(module);
    if (it == layout_.end()) return "";
    if (contains_(it->second.stored)) return it->second.stored;
    if (!it->second.bare.empty() && contains_(it->second.bare)) return it->second.bare;
    return "";
  }
  // The name a checkpoint of this family should hold `module`'s tensor under, for messages.
  std::string expected(const std::string& module) const {
    const auto it = layout_.find(module);
    return it == layout_.end() ? module : it->second.stored;
  }
  // The file that holds `module`'s tensor (or the directory when none does).
  std::string file_of(const std::string& module) const {
    const std::string name = holder(module);
    return name.empty() ? where_ : file_of_(name);
  }

  at::Tensor read(const std::string& module) const {
    const std::string name = holder(module);
    if (name.empty()) fail(where_, "checkpoint is missing tensor '{}'", expected(module));
    at::Tensor t = tensor_(name);
    if (name == module) return t;
    const StoredAs& s = layout_.at(module);
    const std::string stored_shape = shape_str(t.sizes());
    if (s.transposed) {
      if (t.dim() != 2) fail(file_of_(name), "tensor '{}' has shape {}, expected 2 dimensions", name, shape_str(t.sizes()));
      t = t.t();
    }
    if (t.dim() < 1 || t.size(0) != s.stored_rows)
      fail(file_of_(name), "tensor '{}' has shape {}, but config.json implies {} {}", name, stored_shape, s.stored_rows,
           s.transposed ? "columns (stored [in, out], as Conv1D)" : "rows");
    if (s.groups > 1) {  // [groups * block, ...] -> [groups, block, ...], this weight's rows of each block
      std::vector<int64_t> blocks = t.sizes().vec(), out = t.sizes().vec();
      blocks[0] = s.groups;
      blocks.insert(blocks.begin() + 1, s.stored_rows / s.groups);
      out[0] = s.groups * s.rows;
      return t.reshape(blocks).narrow(1, s.begin, s.rows).reshape(out);
    }
    t = s.rows == s.stored_rows ? t : t.narrow(0, s.begin, s.rows);
    return s.transposed ? t.contiguous() : t;
  }

 private:
  std::map<std::string, StoredAs> layout_;
  std::function<bool(const std::string&)> contains_;
  std::function<at::Tensor(const std::string&)> tensor_;
  std::function<std::string(const std::string&)> file_of_;
  std::string where_;
};

}  // namespace

LlamaModel load_model(const std::string& dir, LoadOptions options) {
  ModelConfig config = ModelConfig::load(dir + "/config.json");
  if (std::optional<std::vector<int64_t>> eos = generation_eos_token_ids(dir)) config.eos_token_ids = std::move(*eos);
  CheckpointFiles ckpt = CheckpointFiles::open(dir);
  const StoredTensors stored(
      config, [&](const std::string& n) { return ckpt.contains(n); },
      [&](const std::string& n) { return ckpt.tensor(n); }, [&](const std::string& n) { return ckpt.file_of(n); },
      dir);
  const std::string lm_head = weight_name(LlamaWeight::kLmHead);
  if (!config.tie_word_embeddings && stored.holder(lm_head).empty() &&
      !stored.holder(weight_name(LlamaWeight::kEmbedTokens)).empty())
    fail(dir, "checkpoint has no '{}' and config.json does not set tie_word_embeddings", stored.expected(lm_head));
  return build_with_source(
      config, options, [&](const std::string& name) { return stored.read(name); },
      [&](const std::string& name) { return stored.file_of(name); });
}

LlamaModel build_model(const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
                       LoadOptions options, const std::string& where) {
  const StoredTensors stored(
      config, [&](const std::string& n) { return weights.count(n) > 0; },
      [&](const std::string& n) { return weights.at(n); }, [&](const std::string&) { return where; }, where);
  return build_with_source(
      config, options, [&](const std::string& name) { return stored.read(name); },
      [&](const std::string&) { return where; });
}


at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return at::kHalf;
  throw Error(fmt::format("unknown dtype '{}' (expected float32, bfloat16 or float16)", name));
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return c10::toString(dtype);
  }
}

}  // namespace gpueval
