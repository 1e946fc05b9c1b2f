// The Hugging Face names and shapes of a checkpoint's tensors, for every family ModelConfig reads: the one table the
// loader (model.cpp), the random-weight writer (random_model.cpp), the llama2.c converter and the
// tests' tiny model all read, so that a name is spelled once.
//
// A weight is named by its kind and, for the kinds inside a decoder layer, the layer's index:
// weight_name(LlamaWeight::kQProj, 3) is "model.layers.3.self_attn.q_proj.weight". Its shape
// follows from the ModelConfig, and which kinds a checkpoint holds from its Architecture (OLMo 2 has
// no input_layernorm but a post_feedforward_layernorm; Qwen3 and OLMo 2 have q_norm and k_norm).
// A family that stores some weights fused (Phi-3) has them read as slices of the fused tensor.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpueval/model_config.h"

namespace gpueval {

enum class LlamaWeight {
  kEmbedTokens,             // [V, D]
  kInputLayernorm,          // [D]            per layer
  kQProj,                   // [H * hd, D]    per layer
  kKProj,                   // [KV * hd, D]   per layer
  kQNorm,                   // [hd] or [H * hd]   per layer, with arch.qk_norm
  kKNorm,                   // [hd] or [KV * hd]  per layer, with arch.qk_norm
  kVProj,                   // [KV * hd, D]   per layer
  kOProj,                   // [D, H * hd]    per layer
  kPostAttentionLayernorm,  // [D]            per layer
  kPreFeedforwardLayernorm,  // [D]           per layer, with NormPlacement::kSandwich
  kGateProj,                // [F, D]         per layer
  kUpProj,                  // [F, D]         per layer
  kDownProj,                // [D, F]         per layer
  kPostFeedforwardLayernorm,  // [D]          per layer, with NormPlacement::kPostSublayer or kSandwich
  kNorm,                    // [D]
  kLmHead,                  // [V, D]         absent when tie_word_embeddings
};

// The checkpoint name of a weight; `layer` is read only for the per-layer kinds.
std::string weight_name(LlamaWeight weight, int64_t layer = 0);
// "x.q_proj.weight" -> "x.q_proj.bias" (q, k and v carry a bias when config.attention_bias).
std::string bias_name(const std::string& weight_name);
std::vector<int64_t> weight_shape(const ModelConfig& config, LlamaWeight weight);
bool is_per_layer(LlamaWeight weight);  // one tensor per decoder layer
bool is_norm(LlamaWeight weight);       // an RMSNorm scale: [D], 1 at initialisation
// q, k, v with attention_bias; o with arch.o_proj_bias.
bool has_bias(const ModelConfig& config, LlamaWeight weight);

struct WeightSpec {
  LlamaWeight kind;
  int64_t layer;  // 0 for the kinds outside a layer
  std::string name;
  std::vector<int64_t> shape;
};

// Every weight (not bias) a checkpoint for `config` holds, in the order of the modules: the
// embedding, each layer's input norm (pre-norm and sandwich families), q, k, v, q and k norms (where
// the family has them), o, post-attention norm, pre-feedforward norm (sandwich), gate, up, down,
// post-feedforward norm (post-sublayer and sandwich families), the final norm and, unless tied, the
// LM head.
std::vector<WeightSpec> llama_weights(const ModelConfig& config);

// A weight a family stores fused with others (Phi-3's qkv_proj and gate_up_proj): the stored
// tensor's name, its row count, and this weight's rows [begin, begin + rows) of it.
struct FusedSlice {
  std::string stored;
  int64_t stored_rows = 0, begin = 0, rows = 0;
};
// Every weight of `config` that its checkpoints store fused, by the weight's own name; empty for
// the families that store each weight apart.
std::map<std::string, FusedSlice> fused_slices(const ModelConfig& config);

}  // namespace gpueval
