#include "model/weight_names.h"

#include <fmt/format.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

constexpr LlamaWeight kLayerWeights[] = {
    LlamaWeight::kInputLayernorm, LlamaWeight::kQProj,    LlamaWeight::kKProj,     LlamaWeight::kVProj,
    LlamaWeight::kQNorm,          LlamaWeight::kKNorm,    LlamaWeight::kOProj,     LlamaWeight::kPostAttentionLayernorm,
    LlamaWeight::kPreFeedforwardLayernorm,
    LlamaWeight::kGateProj,       LlamaWeight::kUpProj,   LlamaWeight::kDownProj,  LlamaWeight::kPostFeedforwardLayernorm};

// Whether a checkpoint of `c` holds the per-layer weight `w`.
bool layer_has(const ModelConfig& c, LlamaWeight w) {
  const NormPlacement placement = c.arch.norm_placement;
  switch (w) {
    case LlamaWeight::kInputLayernorm: return placement != NormPlacement::kPostSublayer;
    case LlamaWeight::kPreFeedforwardLayernorm: return placement == NormPlacement::kSandwich;
    case LlamaWeight::kPostFeedforwardLayernorm: return placement != NormPlacement::kPreNorm;
    case LlamaWeight::kQNorm:
    case LlamaWeight::kKNorm: return c.arch.qk_norm != QkNorm::kNone;
    default: return true;
  }
}

// The name inside a layer ("self_attn.q_proj.weight"), or nullptr for the kinds outside one.
const char* layer_suffix(LlamaWeight w) {
  switch (w) {
    case LlamaWeight::kInputLayernorm: return "input_layernorm.weight";
    case LlamaWeight::kQProj: return "self_attn.q_proj.weight";
    case LlamaWeight::kKProj: return "self_attn.k_proj.weight";
    case LlamaWeight::kQNorm: return "self_attn.q_norm.weight";
    case LlamaWeight::kKNorm: return "self_attn.k_norm.weight";
    case LlamaWeight::kVProj: return "self_attn.v_proj.weight";
    case LlamaWeight::kOProj: return "self_attn.o_proj.weight";
    case LlamaWeight::kPostAttentionLayernorm: return "post_attention_layernorm.weight";
    case LlamaWeight::kPreFeedforwardLayernorm: return "pre_feedforward_layernorm.weight";
    case LlamaWeight::kGateProj: return "mlp.gate_proj.weight";
    case LlamaWeight::kUpProj: return "mlp.up_proj.weight";
    case LlamaWeight::kDownProj: return "mlp.down_proj.weight";
    case LlamaWeight::kPostFeedforwardLayernorm: return "post_feedforward_layernorm.weight";
    default: return nullptr;
  }
}

}  // namespace

std::string weight_name(LlamaWeight w, int64_t layer) {
  if (const char* suffix = layer_suffix(w)) return fmt::format("model.layers.{}.{}", layer, suffix);
  switch (w) {
    case LlamaWeight::kEmbedTokens: return "model.embed_tokens.weight";
    case LlamaWeight::kNorm: return "model.norm.weight";
    case LlamaWeight::kLmHead: return "lm_head.weight";
    default: break;
  }
  throw Error(fmt::format("weight_name: unknown weight kind {}", static_cast<int>(w)));
}

std::string bias_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() < suffix.size() || weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw Error(fmt::format("bias_name: '{}' does not end in {}", weight_name, suffix));
  return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
}

std::vector<int64_t> weight_shape(const ModelConfig& c, LlamaWeight w) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim;
  switch (w) {
    case LlamaWeight::kEmbedTokens:
    case LlamaWeight::kLmHead: return {c.vocab_size, d};
    case LlamaWeight::kInputLayernorm:
    case LlamaWeight::kPostAttentionLayernorm:
    case LlamaWeight::kPreFeedforwardLayernorm:
    case LlamaWeight::kPostFeedforwardLayernorm:
    case LlamaWeight::kNorm: return {d};
    case LlamaWeight::kQNorm: return {c.arch.qk_norm == QkNorm::kWholeProjection ? q : c.head_dim};
    case LlamaWeight::kKNorm: return {c.arch.qk_norm == QkNorm::kWholeProjection ? kv : c.head_dim};
    case LlamaWeight::kQProj: return {q, d};
    case LlamaWeight::kKProj:
    case LlamaWeight::kVProj: return {kv, d};
    case LlamaWeight::kOProj: return {d, q};
    case LlamaWeight::kGateProj:
    case LlamaWeight::kUpProj: return {f, d};
    case LlamaWeight::kDownProj: return {d, f};
  }
  throw Error(fmt::format("weight_shape: unknown weight kind {}", static_cast<int>(w)));
}

bool is_per_layer(LlamaWeight w) { return layer_suffix(w) != nullptr; }

bool is_norm(LlamaWeight w) {
  return w == LlamaWeight::kInputLayernorm || w == LlamaWeight::kPostAttentionLayernorm || w == LlamaWeight::kNorm ||
         w == LlamaWeight::kPreFeedforwardLayernorm || w == LlamaWeight::kPostFeedforwardLayernorm ||
         w == LlamaWeight::kQNorm || w == LlamaWeight::kKNorm;
}

bool has_bias(const ModelConfig& c, LlamaWeight w) {
  if (w == LlamaWeight::kOProj) return c.arch.o_proj_bias;
  return c.attention_bias && (w == LlamaWeight::kQProj || w == LlamaWeight::kKProj || w == LlamaWeight::kVProj);
}

std::vector<WeightSpec> llama_weights(const ModelConfig& c) {
  std::vector<WeightSpec> out;
  auto add = [&](LlamaWeight w, int64_t layer) { out.push_back({w, layer, weight_name(w, layer), weight_shape(c, w)}); };
  add(LlamaWeight::kEmbedTokens, 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (LlamaWeight w : kLayerWeights)
      if (layer_has(c, w)) add(w, l);
  add(LlamaWeight::kNorm, 0);
  if (!c.tie_word_embeddings) add(LlamaWeight::kLmHead, 0);
  return out;
}

std::map<std::string, FusedSlice> fused_slices(const ModelConfig& c) {
  std::map<std::string, FusedSlice> out;
  // Consecutive row blocks of one stored tensor, in order: each weight's rows follow the last one's.
  const auto fuse = [&](int64_t layer, const char* stored, std::initializer_list<LlamaWeight> parts) {
    int64_t total = 0;
    for (LlamaWeight w : parts) total += weight_shape(c, w)[0];
    int64_t begin = 0;
    for (LlamaWeight w : parts) {
      const int64_t rows = weight_shape(c, w)[0];
      out[weight_name(w, layer)] = {fmt::format("model.layers.{}.{}", layer, stored), total, begin, rows};
      begin += rows;
    }
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.arch.fused_qkv)
      fuse(l, "self_attn.qkv_proj.weight", {LlamaWeight::kQProj, LlamaWeight::kKProj, LlamaWeight::kVProj});
    if (c.arch.fused_gate_up) fuse(l, "mlp.gate_up_proj.weight", {LlamaWeight::kGateProj, LlamaWeight::kUpProj});
  }
  return out;
}

}  // namespace gpueval
