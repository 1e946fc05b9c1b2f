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

// allowed: [B, T, S] bool -> [B, 1, 1, T, S] float32, 0 where allowed.
at::Tensor additive_mask(const at::Tensor& allowed) {
  const int64_t b = allowed.size(0), t = allowed.size(1), s = allowed.size(2);
  // A lowest-finite fill (not -inf) keeps fully masked query rows finite.
  return at::zeros({b, t, s}, at::TensorOptions().dtype(at::kFloat).device(allowed.device()))
      .masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest())
      .view({b, 1, 1, t, s});
}

// The additive mask as SDPA takes it: [B, 1, 1, T, S] float32 -> [B, 1, T, S] in the model's dtype (a
// float mask must match the query's). lowest() of float32 would overflow bf16/fp16 to -inf, and a row
// of padding queries that sees no key must stay finite, so the fill is the dtype's own lowest.
at::Tensor sdpa_mask(const at::Tensor& mask, at::ScalarType dtype) {
  at::Tensor m = mask.squeeze(1);  // [B, 1, T, S]
  if (dtype == at::kFloat || dtype == at::kDouble) return m.to(dtype);
  const double low = dtype == at::kHalf ? -65504.0 : -3.3895313892515355e38;  // lowest finite fp16 / bf16
  return m.clamp_min(low).to(dtype);
}

}  // namespace

DecoderModelImpl::DecoderModelImpl(const ModelConfig& c, const WeightSource& source, LoadOptions options)
    : config_(c), options_(options) {
  // Module names cannot contain dots, so the Hugging Face hierarchy is built from plain containers.
  auto body = register_module("model", std::make_shared<torch::nn::Module>("LlamaDecoder"));
  embed_tokens_ = body->register_module(
      "embed_tokens", Embedding(source, weight_name(WeightKind::kEmbedTokens), c.vocab_size, c.hidden_size));
  if (c.arch.learned_positions)
    embed_positions_ = body->register_module(
        "embed_positions",
        Embedding(source, weight_name(WeightKind::kPositionEmbedding), c.max_position_embeddings, c.hidden_size));
  auto layers = body->register_module("layers", std::make_shared<torch::nn::Module>("Layers"));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(layers->register_module(std::to_string(i), DecoderLayer(c, source, i)));
  norm_ = body->register_module("norm", Norm(source, weight_name(WeightKind::kNorm), c.hidden_size, c.rms_norm_eps,
                                             c.arch.norm, c.arch.norm_unit_offset));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_->weight();
  } else {
    auto head = register_module("lm_head", std::make_shared<torch::nn::Module>("LmHead"));
    lm_head_ = head->register_parameter("weight",
                                        source(weight_name(WeightKind::kLmHead), weight_shape(c, WeightKind::kLmHead)),
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

void DecoderModelImpl::fill_cache(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                  KVCache& cache) const {
  forward(tokens, positions, valid, &cache, /*keys_only=*/true);
}

at::Tensor DecoderModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                     KVCache* cache) const {
  return forward(tokens, positions, valid, cache, /*keys_only=*/false);
}

at::Tensor DecoderModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                     KVCache* cache, const PrefixKV* prefix) const {
  return forward(tokens, positions, valid, cache, /*keys_only=*/false, prefix);
}

at::Tensor DecoderModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                     KVCache* cache, bool keys_only, const PrefixKV* prefix) const {
  const LayerMasks masks = step_masks(tokens, positions, valid, cache, prefix);
  at::Tensor h =
      run_layers(tokens, positions, masks, cache, prefix && prefix->length() > 0 ? prefix : nullptr, {}, keys_only);
  if (cache) cache->commit(valid, positions);
  return h;
}

std::vector<at::Tensor> DecoderModelImpl::forward_ragged(const std::vector<ForwardGroup>& groups,
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
    if (g.tokens.dim() != 2 || !g.positions.sizes().equals(g.tokens.sizes()) ||
        !g.valid.sizes().equals(g.tokens.sizes()))
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
      layer_groups[k] = AttentionGroup{p.offset,
                                       p.rows,
                                       p.length,
                                       slides ? &p.sliding_rope : &p.rope,
                                       slides ? &p.masks.window : &p.masks.full,
                                       groups[k].cache};
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

DecoderModelImpl::LayerMasks DecoderModelImpl::step_masks(const at::Tensor& tokens, const at::Tensor& positions,
                                                          const at::Tensor& valid, KVCache* cache,
                                                          const PrefixKV* prefix) const {
  const int64_t t = tokens.size(1);
  const int64_t p = prefix ? prefix->length() : 0;
  if (p > 0 && static_cast<int64_t>(prefix->keys.size()) != config_.num_hidden_layers)
    throw Error(
        fmt::format("forward: the prefix has {} layers, the model {}", prefix->keys.size(), config_.num_hidden_layers));
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
  at::Tensor k_slot = at::arange(0, s, at::TensorOptions().dtype(at::kLong).device(tokens.device()));  // [S]
  at::Tensor allowed = k_slot.unsqueeze(0).le(q_slot.unsqueeze(1)).unsqueeze(0).logical_and(key_valid.unsqueeze(1));
  if (p > 0) {  // every query sees the whole prefix (but for a window's reach), its keys at positions 0..P-1
    const int64_t b = tokens.size(0);
    allowed = at::cat({at::ones({b, t, p}, allowed.options()), allowed.expand({b, t, s})}, -1);  // [B, T, P + S]
    key_positions = at::cat({at::arange(p, key_positions.options()).expand({b, p}), key_positions}, 1);
  }
  return layer_masks(allowed, positions, key_positions);
}

DecoderModelImpl::LayerMasks DecoderModelImpl::attention_masks(const LayerMasks& masks,
                                                               const at::Tensor& tokens) const {
  if (!use_sdpa(tokens)) return masks;
  // [B, 1, T, S] in the model's dtype on the SDPA path.
  return LayerMasks{sdpa_mask(masks.full, options_.dtype),
                    masks.window.defined() ? sdpa_mask(masks.window, options_.dtype) : at::Tensor()};
}

at::Tensor DecoderModelImpl::embed(const at::Tensor& tokens, const at::Tensor& positions) const {
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

DecoderModelImpl::LayerMasks DecoderModelImpl::layer_masks(const at::Tensor& allowed, const at::Tensor& query_positions,
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

at::Tensor DecoderModelImpl::run_layers(const at::Tensor& tokens, const at::Tensor& positions, const LayerMasks& masks,
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

PrefixKV DecoderModelImpl::prefill(const std::vector<int32_t>& tokens) const {
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

at::Tensor DecoderModelImpl::forward_packed(const at::Tensor& tokens, const at::Tensor& positions,
                                            const at::Tensor& valid, const at::Tensor& segments, const PrefixKV* prefix,
                                            const at::Tensor& columns) const {
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
  at::Tensor causal = idx.unsqueeze(0).le(idx.unsqueeze(1)).unsqueeze(0);  // [1, T, T]
  at::Tensor part = at::floor_divide(segments, kSegmentsPerPart);  // [B, T]
  at::Tensor same_branch = segments.unsqueeze(2).eq(segments.unsqueeze(1));  // [B, T, T]
  at::Tensor trunk_of_part =
      part.unsqueeze(2).eq(part.unsqueeze(1)).logical_and(at::remainder(segments, kSegmentsPerPart).eq(0).unsqueeze(1));
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

at::Tensor DecoderModelImpl::logits(const at::Tensor& hidden) const {
  at::Tensor out = row_invariant_products_on() && row_invariant_project_applies(hidden, lm_head_)
                       ? row_invariant_project(hidden, lm_head_)
                   : lm_head_packed_ && project_uses_packed(hidden, *lm_head_packed_)
                       ? project(hidden, *lm_head_packed_)
                       : project(hidden, lm_head_);
  if (config_.arch.logits_divisor != 1.0) out.div_(config_.arch.logits_divisor);
  if (config_.arch.logit_softcap) out.div_(*config_.arch.logit_softcap).tanh_().mul_(*config_.arch.logit_softcap);
  return out;
}

KVCache DecoderModelImpl::make_cache(int64_t batch, int64_t capacity) const {
  return KVCache(config_, batch, capacity, options_.dtype, options_.device);
}

}  // namespace gpueval
