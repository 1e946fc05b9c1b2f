#include "gpueval/model.h"

#include <limits>

#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"
#include "gpueval/rope.h"
#include "gpueval/checkpoint.h"

namespace gpueval {
namespace {

std::string shape_str(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

at::Tensor as_parameter(torch::nn::Module& m, const std::string& name, at::Tensor t) {
  return m.register_parameter(name, std::move(t), /*requires_grad=*/false);
}

}  // namespace

ProjectionImpl::ProjectionImpl(const WeightSource& source, const std::string& prefix, int64_t in, int64_t out,
                               bool bias) {
  weight_ = as_parameter(*this, "weight", source(prefix + ".weight", {out, in}));
  if (bias) bias_ = as_parameter(*this, "bias", source(prefix + ".bias", {out}));
}

at::Tensor ProjectionImpl::forward(const at::Tensor& x) const { return at::linear(x, weight_, bias_); }

EmbeddingImpl::EmbeddingImpl(const WeightSource& source, const std::string& name, int64_t vocab, int64_t dim) {
  weight_ = as_parameter(*this, "weight", source(name, {vocab, dim}));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& tokens) const { return at::embedding(weight_, tokens); }

RMSNormImpl::RMSNormImpl(const WeightSource& source, const std::string& name, int64_t dim, double eps) : eps_(eps) {
  weight_ = as_parameter(*this, "weight", source(name, {dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) const {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight_ * normed.to(x.scalar_type());
}

AttentionImpl::AttentionImpl(const ModelConfig& c, const WeightSource& source, const std::string& prefix)
    : n_heads_(c.num_attention_heads), n_kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  const int64_t d = c.hidden_size;
  q_proj_ = register_module("q_proj", Projection(source, prefix + ".q_proj", d, n_heads_ * head_dim_, c.attention_bias));
  k_proj_ = register_module("k_proj", Projection(source, prefix + ".k_proj", d, n_kv_heads_ * head_dim_, c.attention_bias));
  v_proj_ = register_module("v_proj", Projection(source, prefix + ".v_proj", d, n_kv_heads_ * head_dim_, c.attention_bias));
  o_proj_ = register_module("o_proj", Projection(source, prefix + ".o_proj", n_heads_ * head_dim_, d, false));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask,
                                  KVCache* cache, int64_t layer) const {
  const int64_t b = x.size(0), t = x.size(1), groups = n_heads_ / n_kv_heads_;
  at::Tensor q = q_proj_->forward(x).view({b, t, n_heads_, head_dim_}).transpose(1, 2);     // [B, H, T, hd]
  at::Tensor k = k_proj_->forward(x).view({b, t, n_kv_heads_, head_dim_}).transpose(1, 2);  // [B, KV, T, hd]
  at::Tensor v = v_proj_->forward(x).view({b, t, n_kv_heads_, head_dim_}).transpose(1, 2);  // [B, KV, T, hd]
  q = apply_rope(q, rope);
  k = apply_rope(k, rope);
  if (cache) std::tie(k, v) = cache->append(layer, k, v);  // [B, KV, S, hd]
  // Grouped-query attention without copying keys: query heads of one group share a kv head.
  at::Tensor qg = q.reshape({b, n_kv_heads_, groups, t, head_dim_});                          // [B, KV, G, T, hd]
  // Scaling q ([.., T, hd]) is cheaper than scaling the scores ([.., T, S]).
  at::Tensor scores = at::matmul(qg * (1.0 / std::sqrt(double(head_dim_))), k.unsqueeze(2).transpose(-1, -2));
  // scores: [B, KV, G, T, S], a fresh tensor, so the mask is added in place; softmax in float32.
  scores = scores.to(at::kFloat);
  scores.add_(mask);
  at::Tensor probs = at::softmax(scores, -1).to(x.scalar_type());
  at::Tensor out = at::matmul(probs, v.unsqueeze(2));                                          // [B, KV, G, T, hd]
  out = out.reshape({b, n_heads_, t, head_dim_}).transpose(1, 2).reshape({b, t, n_heads_ * head_dim_});
  return o_proj_->forward(out);
}

MlpImpl::MlpImpl(const ModelConfig& c, const WeightSource& source, const std::string& prefix) {
  gate_proj_ = register_module("gate_proj", Projection(source, prefix + ".gate_proj", c.hidden_size, c.intermediate_size, false));
  up_proj_ = register_module("up_proj", Projection(source, prefix + ".up_proj", c.hidden_size, c.intermediate_size, false));
  down_proj_ = register_module("down_proj", Projection(source, prefix + ".down_proj", c.intermediate_size, c.hidden_size, false));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) const {
  return down_proj_->forward(at::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const WeightSource& source, int64_t index) : index_(index) {
  const std::string prefix = fmt::format("model.layers.{}", index);
  input_layernorm_ = register_module(
      "input_layernorm", RMSNorm(source, prefix + ".input_layernorm.weight", c.hidden_size, c.rms_norm_eps));
  self_attn_ = register_module("self_attn", Attention(c, source, prefix + ".self_attn"));
  post_attention_layernorm_ = register_module(
      "post_attention_layernorm",
      RMSNorm(source, prefix + ".post_attention_layernorm.weight", c.hidden_size, c.rms_norm_eps));
  mlp_ = register_module("mlp", Mlp(c, source, prefix + ".mlp"));
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask,
                                     KVCache* cache) const {
  at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), rope, mask, cache, index_);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

LlamaModelImpl::LlamaModelImpl(const ModelConfig& c, const WeightSource& source, LoadOptions options)
    : config_(c), options_(options) {
  // Module names cannot contain dots, so the Hugging Face hierarchy is built from plain containers.
  auto body = register_module("model", std::make_shared<torch::nn::Module>("LlamaDecoder"));
  embed_tokens_ = body->register_module(
      "embed_tokens", Embedding(source, "model.embed_tokens.weight", c.vocab_size, c.hidden_size));
  auto layers = body->register_module("layers", std::make_shared<torch::nn::Module>("Layers"));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(layers->register_module(std::to_string(i), DecoderLayer(c, source, i)));
  norm_ = body->register_module("norm", RMSNorm(source, "model.norm.weight", c.hidden_size, c.rms_norm_eps));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_->weight();
  } else {
    auto head = register_module("lm_head", std::make_shared<torch::nn::Module>("LmHead"));
    lm_head_ = head->register_parameter("weight", source("lm_head.weight", {c.vocab_size, c.hidden_size}),
                                        /*requires_grad=*/false);
  }
  inv_freq_ = rope_inv_freq(c, options.device);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                                   KVCache* cache) const {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  const int64_t past = cache ? cache->length() : 0;
  at::Tensor key_valid;  // [B, S]
  if (cache) {
    cache->set_pending_valid(valid);
    key_valid = cache->key_valid(t);
  } else {
    key_valid = valid;
  }
  const int64_t s = past + t;
  // Query t (absolute slot past + t) sees key slot j when j <= past + t and j is a real token.
  at::Tensor q_slot = at::arange(past, s, at::TensorOptions().dtype(at::kLong).device(tokens.device()));  // [T]
  at::Tensor k_slot = at::arange(0, s, at::TensorOptions().dtype(at::kLong).device(tokens.device()));     // [S]
  at::Tensor allowed = k_slot.unsqueeze(0).le(q_slot.unsqueeze(1)).unsqueeze(0).logical_and(key_valid.unsqueeze(1));
  // A lowest-finite fill (not -inf) keeps fully padded query rows finite.
  at::Tensor mask = at::zeros({b, t, s}, at::TensorOptions().dtype(at::kFloat).device(tokens.device()))
                        .masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest())
                        .view({b, 1, 1, t, s});
  RopeTables rope = rope_tables(inv_freq_, positions, options_.dtype);
  at::Tensor h = embed_tokens_->forward(tokens);  // [B, T, D]
  for (const auto& layer : layers_) h = layer->forward(h, rope, mask, cache);
  if (cache) cache->commit(valid);
  return norm_->forward(h);
}

at::Tensor LlamaModelImpl::logits(const at::Tensor& hidden) const { return at::linear(hidden, lm_head_); }

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

}  // namespace

LlamaModel load_model(const std::string& dir, LoadOptions options) {
  ModelConfig config = ModelConfig::load(dir + "/config.json");
  Checkpoint ckpt = Checkpoint::open(dir);
  if (!config.tie_word_embeddings && !ckpt.contains("lm_head.weight") && ckpt.contains("model.embed_tokens.weight"))
    fail(dir, "checkpoint has no 'lm_head.weight' and config.json does not set tie_word_embeddings");
  return build_with_source(
      config, options,
      [&](const std::string& name) {
        if (!ckpt.contains(name)) fail(dir, "checkpoint is missing tensor '{}'", name);
        return ckpt.tensor(name);
      },
      [&](const std::string& name) { return ckpt.file_of(name); });
}

LlamaModel build_model(const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
                       LoadOptions options, const std::string& where) {
  return build_with_source(
      config, options,
      [&](const std::string& name) {
        auto it = weights.find(name);
        if (it == weights.end()) fail(where, "missing tensor '{}'", name);
        return it->second;
      },
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
