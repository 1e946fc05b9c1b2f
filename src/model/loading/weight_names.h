// The names and shapes of a checkpoint's tensors, for every family ModelConfig reads: the one table the
// loader (loading/load_model.cpp), the random-weight writer (cli/random_model.cpp), the llama2.c converter and the
// tests' tiny model all read, so that a name is spelled once.
//
// A weight is named by its kind and, for the kinds inside a decoder layer, the layer's index:
// weight_name(WeightKind::kQProj, 3) is "model.layers.3.self_attn.q_proj.weight", the name of the
// module that holds it (Llama's Hugging Face names, the same for every family). Its shape follows from the
// ModelConfig, and which kinds a checkpoint holds from its Architecture (OLMo 2 has no input_layernorm
// but a post_feedforward_layernorm; Qwen3 and OLMo 2 have q_norm and k_norm; GPT-NeoX and GPT-2 no
// gate_proj). A family whose checkpoints name or lay out a weight otherwise (Phi-3's fused qkv_proj,
// GPT-NeoX's gpt_neox.layers.N.attention.query_key_value, GPT-2's transposed transformer.h.N.attn.c_attn,
// Gemma 3's language_model.model.layers.N...) has it read from there: stored_layout says where, one
// table row per WeightLayout.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpueval/model_config.h"

namespace gpueval {

enum class WeightKind {
  kEmbedTokens,  // [V, D]
  kPositionEmbedding,  // [max_position_embeddings, D]   with arch.learned_positions (GPT-2)
  kInputLayernorm,  // [D]            per layer
  kQProj,  // [H * hd, D]    per layer
  kKProj,  // [KV * hd, D]   per layer
  kQNorm,  // [hd] or [H * hd]   per layer, with arch.qk_norm
  kKNorm,  // [hd] or [KV * hd]  per layer, with arch.qk_norm
  kVProj,  // [KV * hd, D]   per layer
  // Latent attention (ModelConfig::latent_attention; no k_proj, v_proj): q_proj [H * qk, D] without a
  // q_lora_rank, else q_a_proj, q_a_layernorm, q_b_proj; qk = qk_nope_head_dim + qk_rope_head_dim.
  kQAProj,  // [q_lora_rank, D]
  kQALayernorm,  // [q_lora_rank]
  kQBProj,  // [H * qk, q_lora_rank]
  kKvAProj,  // [kv_lora_rank + qk_rope_head_dim, D]   kv_a_proj_with_mqa
  kKvALayernorm,  // [kv_lora_rank]
  kKvBProj,  // [H * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  kOProj,  // [D, H * hd]    per layer (latent attention: [D, H * v_head_dim])
  kPostAttentionLayernorm,  // [D]            per layer
  kPreFeedforwardLayernorm,  // [D]           per layer, with NormPlacement::kSandwich
  kGateProj,  // [F, D]         per layer, with arch.gated_mlp
  kUpProj,  // [F, D]         per layer
  kDownProj,  // [D, F]         per layer
  kPostFeedforwardLayernorm,  // [D]          per layer, with NormPlacement::kPostSublayer or kSandwich
  kRouter,  // [E, D]         per sparse layer (arch.sparse): mlp.gate
  kExpertGateProj,  // [Fe, D]        per expert of a sparse layer: mlp.experts.E.gate_proj
  kExpertUpProj,  // [Fe, D]        per expert
  kExpertDownProj,  // [D, Fe]        per expert
  kRouterCorrection,  // [E]            with arch.moe.correction_bias: mlp.gate.e_score_correction_bias
  kSharedGateProj,  // [Fs, D]        with arch.moe.shared_intermediate_size: mlp.shared_experts.gate_proj
  kSharedUpProj,  // [Fs, D]
  kSharedDownProj,  // [D, Fs]
  kNorm,  // [D]
  kLmHead,  // [V, D]         absent when tie_word_embeddings
};

// The checkpoint name of a weight; `layer` is read only for the per-layer kinds, `expert` only for the
// expert kinds.
std::string weight_name(WeightKind weight, int64_t layer = 0, int64_t expert = 0);
bool is_expert(WeightKind weight);  // one tensor per expert of a sparse layer
// "x.q_proj.weight" -> "x.q_proj.bias" (q, k and v carry a bias when config.attention_bias).
std::string bias_name(const std::string& weight_name);
std::vector<int64_t> weight_shape(const ModelConfig& config, WeightKind weight);
bool is_per_layer(WeightKind weight);  // one tensor per decoder layer
bool is_norm(WeightKind weight);  // an RMSNorm scale: [D], 1 at initialisation
// q, k, v with attention_bias; o with arch.o_proj_bias; gate, up and down with arch.mlp_bias; every
// norm with NormKind::kLayerNorm.
bool has_bias(const ModelConfig& config, WeightKind weight);

struct WeightSpec {
  WeightKind kind;
  int64_t layer;  // 0 for the kinds outside a layer
  std::string name;
  std::vector<int64_t> shape;
  int64_t expert = 0;  // the expert of the expert kinds
};

// Every weight (not bias) a checkpoint for `config` holds, in the order of the modules: the
// embedding, each layer's input norm (pre-norm and sandwich families), q, k, v, q and k norms (where
// the family has them), o, post-attention norm, pre-feedforward norm (sandwich), gate, up, down (a
// sparse layer: the router and its correction bias, then each expert's gate, up and down, then the shared
// experts' gate, up and down), post-feedforward norm (post-sublayer and sandwich families), the final norm and, unless
// tied, the LM head.
std::vector<WeightSpec> llama_weights(const ModelConfig& config);

// Where a checkpoint of `config`'s layout keeps a weight or bias that is not stored under its own
// (module) name: the stored tensor's name, and which of its rows are this weight's. The stored tensor
// (transposed first where the family stores [in, out]) has stored_rows rows in `groups` equal blocks;
// the weight is rows [begin, begin + rows) of each block, the blocks' pieces stacked in order. A tensor
// stored whole under another name is one block, all its rows; Phi-3's q is block 0 of qkv_proj, rows
// [0, H * hd); GPT-NeoX's q is rows [0, hd) of each of H blocks of query_key_value.
struct StoredAs {
  std::string stored;
  // `stored` as other files of the family spell it, or "": GPT-2's hub files drop "transformer."
  // (h.0.attn.c_attn.weight); Gemma 3's in-memory names read model.language_model. for language_model.model.
  std::string bare;
  bool transposed = false;
  int64_t stored_rows = 0, groups = 1, begin = 0, rows = 0;
};
// Every weight and bias of `config` that its checkpoints keep elsewhere, by its module name; empty for
// the families that store each under Llama's names.
std::map<std::string, StoredAs> stored_layout(const ModelConfig& config);

}  // namespace gpueval
