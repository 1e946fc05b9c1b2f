#include "model/loading/weight_names.h"

#include <fmt/format.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

constexpr WeightKind kLayerWeights[] = {WeightKind::kInputLayernorm,
                                        WeightKind::kQProj,
                                        WeightKind::kKProj,
                                        WeightKind::kVProj,
                                        WeightKind::kQAProj,
                                        WeightKind::kQALayernorm,
                                        WeightKind::kQBProj,
                                        WeightKind::kKvAProj,
                                        WeightKind::kKvALayernorm,
                                        WeightKind::kKvBProj,
                                        WeightKind::kQNorm,
                                        WeightKind::kKNorm,
                                        WeightKind::kOProj,
                                        WeightKind::kPostAttentionLayernorm,
                                        WeightKind::kPreFeedforwardLayernorm,
                                        WeightKind::kGateProj,
                                        WeightKind::kUpProj,
                                        WeightKind::kDownProj,
                                        WeightKind::kPostFeedforwardLayernorm};

// Whether a checkpoint of `c` holds the per-layer weight `w`.
bool layer_has(const ModelConfig& c, WeightKind w) {
  const NormPlacement placement = c.arch.norm_placement;
  switch (w) {
    case WeightKind::kInputLayernorm: return placement != NormPlacement::kPostSublayer;
    case WeightKind::kPreFeedforwardLayernorm: return placement == NormPlacement::kSandwich;
    case WeightKind::kPostFeedforwardLayernorm: return placement != NormPlacement::kPreNorm;
    case WeightKind::kQNorm:
    case WeightKind::kKNorm: return c.arch.qk_norm != QkNorm::kNone;
    case WeightKind::kGateProj: return c.arch.gated_mlp;
    case WeightKind::kQProj: return !c.latent_attention() || c.arch.mla.q_lora_rank == 0;
    case WeightKind::kKProj:
    case WeightKind::kVProj: return !c.latent_attention();
    case WeightKind::kQAProj:
    case WeightKind::kQALayernorm:
    case WeightKind::kQBProj: return c.latent_attention() && c.arch.mla.q_lora_rank > 0;
    case WeightKind::kKvAProj:
    case WeightKind::kKvALayernorm:
    case WeightKind::kKvBProj: return c.latent_attention();
    default: return true;
  }
}

// The name inside a layer ("self_attn.q_proj.weight"), or nullptr for the kinds outside one.
const char* layer_suffix(WeightKind w) {
  switch (w) {
    case WeightKind::kInputLayernorm: return "input_layernorm.weight";
    case WeightKind::kQProj: return "self_attn.q_proj.weight";
    case WeightKind::kKProj: return "self_attn.k_proj.weight";
    case WeightKind::kQNorm: return "self_attn.q_norm.weight";
    case WeightKind::kKNorm: return "self_attn.k_norm.weight";
    case WeightKind::kVProj: return "self_attn.v_proj.weight";
    case WeightKind::kQAProj: return "self_attn.q_a_proj.weight";
    case WeightKind::kQALayernorm: return "self_attn.q_a_layernorm.weight";
    case WeightKind::kQBProj: return "self_attn.q_b_proj.weight";
    case WeightKind::kKvAProj: return "self_attn.kv_a_proj_with_mqa.weight";
    case WeightKind::kKvALayernorm: return "self_attn.kv_a_layernorm.weight";
    case WeightKind::kKvBProj: return "self_attn.kv_b_proj.weight";
    case WeightKind::kOProj: return "self_attn.o_proj.weight";
    case WeightKind::kPostAttentionLayernorm: return "post_attention_layernorm.weight";
    case WeightKind::kPreFeedforwardLayernorm: return "pre_feedforward_layernorm.weight";
    case WeightKind::kGateProj: return "mlp.gate_proj.weight";
    case WeightKind::kUpProj: return "mlp.up_proj.weight";
    case WeightKind::kDownProj: return "mlp.down_proj.weight";
    case WeightKind::kPostFeedforwardLayernorm: return "post_feedforward_layernorm.weight";
    case WeightKind::kRouter: return "mlp.gate.weight";
    case WeightKind::kExpertGateProj: return "mlp.experts.{}.gate_proj.weight";
    case WeightKind::kExpertUpProj: return "mlp.experts.{}.up_proj.weight";
    case WeightKind::kExpertDownProj: return "mlp.experts.{}.down_proj.weight";
    case WeightKind::kRouterCorrection: return "mlp.gate.e_score_correction_bias";
    case WeightKind::kSharedGateProj: return "mlp.shared_experts.gate_proj.weight";
    case WeightKind::kSharedUpProj: return "mlp.shared_experts.up_proj.weight";
    case WeightKind::kSharedDownProj: return "mlp.shared_experts.down_proj.weight";
    default: return nullptr;
  }
}

}  // namespace

bool is_expert(WeightKind w) {
  return w == WeightKind::kExpertGateProj || w == WeightKind::kExpertUpProj || w == WeightKind::kExpertDownProj;
}

std::string weight_name(WeightKind w, int64_t layer, int64_t expert) {
  if (const char* suffix = layer_suffix(w)) {
    const std::string inside = is_expert(w) ? fmt::format(fmt::runtime(suffix), expert) : std::string(suffix);
    return fmt::format("model.layers.{}.{}", layer, inside);
  }
  switch (w) {
    case WeightKind::kEmbedTokens: return "model.embed_tokens.weight";
    case WeightKind::kPositionEmbedding: return "model.embed_positions.weight";
    case WeightKind::kNorm: return "model.norm.weight";
    case WeightKind::kLmHead: return "lm_head.weight";
    default: break;
  }
  throw Error(fmt::format("weight_name: unknown weight kind {}", static_cast<int>(w)));
}

std::string bias_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() < suffix.size() ||
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw Error(fmt::format("bias_name: '{}' does not end in {}", weight_name, suffix));
  return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
}

std::vector<int64_t> weight_shape(const ModelConfig& c, WeightKind w) {
  const int64_t d = c.hidden_size, f = c.intermediate_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim;
  const LatentAttention& a = c.arch.mla;
  switch (w) {
    case WeightKind::kEmbedTokens:
    case WeightKind::kLmHead: return {c.vocab_size, d};
    case WeightKind::kPositionEmbedding: return {c.max_position_embeddings, d};
    case WeightKind::kInputLayernorm:
    case WeightKind::kPostAttentionLayernorm:
    case WeightKind::kPreFeedforwardLayernorm:
    case WeightKind::kPostFeedforwardLayernorm:
    case WeightKind::kNorm: return {d};
    case WeightKind::kQNorm: return {c.arch.qk_norm == QkNorm::kWholeProjection ? q : c.head_dim};
    case WeightKind::kKNorm: return {c.arch.qk_norm == QkNorm::kWholeProjection ? kv : c.head_dim};
    case WeightKind::kQProj: return {c.latent_attention() ? c.num_attention_heads * a.qk_head_dim() : q, d};
    case WeightKind::kKProj:
    case WeightKind::kVProj: return {kv, d};
    case WeightKind::kOProj: return {d, c.latent_attention() ? c.num_attention_heads * a.v_head_dim : q};
    case WeightKind::kQAProj: return {a.q_lora_rank, d};
    case WeightKind::kQALayernorm: return {a.q_lora_rank};
    case WeightKind::kQBProj: return {c.num_attention_heads * a.qk_head_dim(), a.q_lora_rank};
    case WeightKind::kKvAProj: return {a.kv_lora_rank + a.qk_rope_head_dim, d};
    case WeightKind::kKvALayernorm: return {a.kv_lora_rank};
    case WeightKind::kKvBProj: return {c.num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank};
    case WeightKind::kGateProj:
    case WeightKind::kUpProj: return {f, d};
    case WeightKind::kDownProj: return {d, f};
    case WeightKind::kRouter: return {c.arch.moe.num_experts, d};
    case WeightKind::kExpertGateProj:
    case WeightKind::kExpertUpProj: return {c.arch.moe.intermediate_size, d};
    case WeightKind::kExpertDownProj: return {d, c.arch.moe.intermediate_size};
    case WeightKind::kRouterCorrection: return {c.arch.moe.num_experts};
    case WeightKind::kSharedGateProj:
    case WeightKind::kSharedUpProj: return {c.arch.moe.shared_intermediate_size, d};
    case WeightKind::kSharedDownProj: return {d, c.arch.moe.shared_intermediate_size};
  }
  throw Error(fmt::format("weight_shape: unknown weight kind {}", static_cast<int>(w)));
}

bool is_per_layer(WeightKind w) { return layer_suffix(w) != nullptr; }

bool is_norm(WeightKind w) {
  return w == WeightKind::kInputLayernorm || w == WeightKind::kPostAttentionLayernorm || w == WeightKind::kNorm ||
         w == WeightKind::kPreFeedforwardLayernorm || w == WeightKind::kPostFeedforwardLayernorm ||
         w == WeightKind::kQNorm || w == WeightKind::kKNorm || w == WeightKind::kQALayernorm ||
         w == WeightKind::kKvALayernorm;
}

bool has_bias(const ModelConfig& c, WeightKind w) {
  switch (w) {
    case WeightKind::kQProj:
    case WeightKind::kKProj:
    case WeightKind::kVProj: return c.attention_bias;
    case WeightKind::kOProj: return c.arch.o_proj_bias;
    case WeightKind::kGateProj:
    case WeightKind::kUpProj:
    case WeightKind::kDownProj: return c.arch.mlp_bias;
    default: return is_norm(w) && c.arch.norm == NormKind::kLayerNorm;
  }
}

std::vector<WeightSpec> llama_weights(const ModelConfig& c) {
  std::vector<WeightSpec> out;
  auto add = [&](WeightKind w, int64_t layer) { out.push_back({w, layer, weight_name(w, layer), weight_shape(c, w)}); };
  add(WeightKind::kEmbedTokens, 0);
  if (c.arch.learned_positions) add(WeightKind::kPositionEmbedding, 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (WeightKind w : kLayerWeights) {
      const bool dense_mlp = w == WeightKind::kGateProj || w == WeightKind::kUpProj || w == WeightKind::kDownProj;
      if (dense_mlp && c.arch.sparse(l)) {
        if (w != WeightKind::kGateProj) continue;
        add(WeightKind::kRouter, l);
        if (c.arch.moe.correction_bias) add(WeightKind::kRouterCorrection, l);
        for (int64_t e = 0; e < c.arch.moe.num_experts; ++e)
          for (WeightKind x : {WeightKind::kExpertGateProj, WeightKind::kExpertUpProj, WeightKind::kExpertDownProj})
            out.push_back({x, l, weight_name(x, l, e), weight_shape(c, x), e});
        if (c.arch.moe.shared_intermediate_size > 0)
          for (WeightKind x : {WeightKind::kSharedGateProj, WeightKind::kSharedUpProj, WeightKind::kSharedDownProj})
            add(x, l);
        continue;
      }
      if (layer_has(c, w)) add(w, l);
    }
  add(WeightKind::kNorm, 0);
  if (!c.tie_word_embeddings) add(WeightKind::kLmHead, 0);
  return out;
}

namespace {

// A family's own name (without ".weight") for a weight kind: inside its layer prefix for the per-layer
// kinds. Per-layer kinds that share a name are fused into that one tensor, as consecutive row blocks in
// this order (or, with Layout::per_head, interleaved head by head).
struct StoredName {
  WeightKind kind;
  const char* name;
};

struct Layout {
  WeightLayout layout;
  const char* wrap;  // prefixed to the module name of every kind `names` does not list
  // The names' other spelling: a stored name beginning with `from` may be stored beginning with `to`
  // instead (GPT-2's hub files: without "transformer."; Gemma 3's: model.language_model.).
  const char* from;
  const char* to;
  const char* layer;  // the per-layer prefix, "{}" for the index
  bool per_head;  // fused q, k, v interleaved per head: [H][q k v][hd] rows (GPT-NeoX)
  bool conv1d;  // projections stored [in, out] (GPT-2's Conv1D)
  std::vector<StoredName> names;
};

const std::vector<Layout>& layouts() {
  using W = WeightKind;
  static const std::vector<Layout> kLayouts = {
      {WeightLayout::kPhi3,
       "",
       "",
       "",
       "model.layers.{}.",
       false,
       false,
       {{W::kQProj, "self_attn.qkv_proj"},
        {W::kKProj, "self_attn.qkv_proj"},
        {W::kVProj, "self_attn.qkv_proj"},
        {W::kGateProj, "mlp.gate_up_proj"},
        {W::kUpProj, "mlp.gate_up_proj"}}},
      {WeightLayout::kGptNeoX,
       "",
       "gpt_neox.",
       "",
       "gpt_neox.layers.{}.",
       true,
       false,
       {{W::kEmbedTokens, "gpt_neox.embed_in"},
        {W::kInputLayernorm, "input_layernorm"},
        {W::kQProj, "attention.query_key_value"},
        {W::kKProj, "attention.query_key_value"},
        {W::kVProj, "attention.query_key_value"},
        {W::kOProj, "attention.dense"},
        {W::kPostAttentionLayernorm, "post_attention_layernorm"},
        {W::kUpProj, "mlp.dense_h_to_4h"},
        {W::kDownProj, "mlp.dense_4h_to_h"},
        {W::kNorm, "gpt_neox.final_layer_norm"},
        {W::kLmHead, "embed_out"}}},
      {WeightLayout::kGpt2,
       "",
       "transformer.",
       "",
       "transformer.h.{}.",
       false,
       true,
       {{W::kEmbedTokens, "transformer.wte"},
        {W::kPositionEmbedding, "transformer.wpe"},
        {W::kInputLayernorm, "ln_1"},
        {W::kQProj, "attn.c_attn"},
        {W::kKProj, "attn.c_attn"},
        {W::kVProj, "attn.c_attn"},
        {W::kOProj, "attn.c_proj"},
        {W::kPostAttentionLayernorm, "ln_2"},
        {W::kUpProj, "mlp.c_fc"},
        {W::kDownProj, "mlp.c_proj"},
        {W::kNorm, "transformer.ln_f"},
        {W::kLmHead, "lm_head"}}},
      {WeightLayout::kGemma3Multimodal,
       "language_model.",
       "language_model.model.",
       "model.language_model.",
       "",
       false,
       false,
       {}},
      {WeightLayout::kGlm4,
       "",
       "",
       "",
       "model.layers.{}.",
       false,
       false,
       {{W::kPostAttentionLayernorm, "post_self_attn_layernorm"},
        {W::kPreFeedforwardLayernorm, "post_attention_layernorm"},
        {W::kPostFeedforwardLayernorm, "post_mlp_layernorm"},
        {W::kGateProj, "mlp.gate_up_proj"},
        {W::kUpProj, "mlp.gate_up_proj"}}},
      {WeightLayout::kMixtral,
       "",
       "",
       "",
       "model.layers.{}.",
       false,
       false,
       {{W::kRouter, "block_sparse_moe.gate"},
        {W::kExpertGateProj, "block_sparse_moe.experts.{}.w1"},
        {W::kExpertUpProj, "block_sparse_moe.experts.{}.w3"},
        {W::kExpertDownProj, "block_sparse_moe.experts.{}.w2"}}},
  };
  return kLayouts;
}

bool is_projection(WeightKind w) { return !is_norm(w) && is_per_layer(w); }

}  // namespace

std::map<std::string, StoredAs> stored_layout(const ModelConfig& c) {
  std::map<std::string, StoredAs> out;
  const Layout* layout = nullptr;
  for (const Layout& l : layouts())
    if (l.layout == c.arch.layout) layout = &l;
  if (!layout) return out;  // Llama's names
  const std::string from = layout->from;
  const auto add = [&](const std::string& module, const std::string& stored, StoredAs s) {
    s.stored = stored;
    if (!from.empty() && stored.compare(0, from.size(), from) == 0) s.bare = layout->to + stored.substr(from.size());
    if (module != stored || s.rows != s.stored_rows) out[module] = s;
  };
  const auto listed = [&](WeightKind w) -> const StoredName* {
    for (const StoredName& n : layout->names)
      if (n.kind == w) return &n;
    return nullptr;
  };
  for (const WeightSpec& spec : llama_weights(c)) {
    const WeightKind w = spec.kind;
    const StoredName* n = listed(w);
    StoredAs s;
    s.rows = s.stored_rows = spec.shape[0];
    std::string stored = layout->wrap + spec.name;
    if (n) {
      const std::string prefix = is_per_layer(w) ? fmt::format(fmt::runtime(layout->layer), spec.layer) : "";
      stored =
          prefix + (is_expert(w) ? fmt::format(fmt::runtime(n->name), spec.expert) : std::string(n->name)) + ".weight";
      // The parts fused with this one: every kind of the layer under the same name, in table order.
      int64_t total = 0, parts = 0;
      for (const StoredName& m : layout->names)
        if (std::string(m.name) == n->name && layer_has(c, m.kind)) {
          if (m.kind == w) s.begin = total;
          total += weight_shape(c, m.kind)[0];
          ++parts;
        }
      s.stored_rows = total;
      s.transposed = layout->conv1d && is_projection(w);
      if (layout->per_head && parts > 1) {  // [H][parts][hd]: each block holds every part's rows of one head
        s.groups = c.num_attention_heads;
        s.rows = c.head_dim;
        s.begin /= c.num_attention_heads;
      }
    }
    add(spec.name, stored, s);
    if (has_bias(c, w)) {
      StoredAs b = s;
      b.transposed = false;
      add(bias_name(spec.name), bias_name(stored), b);
    }
  }
  return out;
}

}  // namespace gpueval
