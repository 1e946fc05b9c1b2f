// ModelConfig holds the hyper-parameters of a decoder-only model, read from a
// Hugging Face `config.json`: Llama 2/3, Mistral, Qwen2, TinyLlama, and the
// families that differ from Llama only in what Architecture describes (Qwen3,
// OLMo 2 and 3, Granite, SmolLM3, Gemma 2 and 3, Phi-3, GPT-NeoX, GPT-2), and the mixtures of
// experts (Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3 with its latent attention). Every field
// is validated when read: a missing, ill-typed or out-of-range value is a
// one-line gpueval::Error naming the file and the key. A ModelConfig is a
// plain value; copy it freely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

// config.json's rope_scaling (transformers 5: rope_parameters), the types transformers'
// modeling_rope_utils computes, with its defaults. What each does is in model/rope.h.
enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3, kYarn, kLongRope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  // linear, dynamic, llama3, yarn; longrope: only its attention_factor's default. yarn and longrope
  // without one (null): max_position_embeddings / original_max_position_embeddings.
  double factor = 1.0;
  double low_freq_factor = 1.0;  // llama3
  double high_freq_factor = 4.0;  // llama3
  // llama3, yarn, longrope: the pre-training context. A top-level original_max_position_embeddings
  // (Phi-3) wins; absent from both: max_position_embeddings.
  int64_t original_max_position_embeddings = 8192;
  // yarn, longrope: cos and sin are multiplied by it. Unset: derived as transformers derives it
  // (yarn: from factor, mscale, mscale_all_dim; longrope: from factor and the original context).
  std::optional<double> attention_factor;
  double beta_fast = 32.0;  // yarn
  double beta_slow = 1.0;  // yarn
  double mscale = 0.0;  // yarn; 0: unset
  double mscale_all_dim = 0.0;  // yarn; 0: unset
  bool truncate = true;  // yarn
  std::vector<double> short_factor;  // longrope: rotary_dim / 2 values, up to the original context
  std::vector<double> long_factor;  // longrope: rotary_dim / 2 values, past it
};

const char* rope_scaling_name(RopeScalingType type);  // "default", "linear", "dynamic", ...

// Where a family's norms sit around each sublayer. kPreNorm (Llama): x + f(norm(x)), norms named
// input_layernorm and post_attention_layernorm. kPostSublayer (OLMo 2): x + norm(f(x)), norms named
// post_attention_layernorm and post_feedforward_layernorm, no input_layernorm. kSandwich (Gemma 2/3):
// x + norm2(f(norm1(x))), four norms: input_layernorm and post_attention_layernorm around attention,
// pre_feedforward_layernorm and post_feedforward_layernorm around the MLP.
enum class NormPlacement { kPreNorm, kPostSublayer, kSandwich };

// The MLP's activation: silu (SwiGLU), GELU's tanh approximation (Gemma's gelu_pytorch_tanh, GPT-2's
// gelu_new) or the exact, erf GELU (GPT-NeoX's gelu).
enum class Activation { kSilu, kGeluTanh, kGelu };

// The norm every layer and the final one use: RMSNorm, x / rms(x) * w (weight only), or LayerNorm,
// (x - mean) / std * w + b (a weight and a bias: GPT-NeoX, GPT-2).
enum class NormKind { kRms, kLayerNorm };

// Where a family's checkpoints keep each weight (weight_names.cpp's tables): Llama's names
// (model.layers.N.self_attn.q_proj, most families); Phi-3's, with q, k, v fused in qkv_proj ([q; k; v]
// rows) and gate, up in gate_up_proj; GPT-NeoX's (gpt_neox.layers.N.attention.query_key_value, q, k and v
// interleaved per head); GPT-2's (transformer.h.N.attn.c_attn, Conv1D weights stored [in, out]); Gemma
// 3's multimodal checkpoints (model_type gemma3: Llama's names under language_model., beside a vision
// tower gpueval does not read); Mixtral's (block_sparse_moe.gate and block_sparse_moe.experts.E.w1/w2/w3
// where the others have mlp.gate and mlp.experts.E.gate_proj/down_proj/up_proj); GLM-4's (sandwich norms
// named post_self_attn_layernorm, post_attention_layernorm (before the MLP) and post_mlp_layernorm, gate
// and up fused in mlp.gate_up_proj).
enum class WeightLayout { kLlama, kPhi3, kGptNeoX, kGpt2, kGemma3Multimodal, kMixtral, kGlm4 };

// An RMSNorm on the queries and keys before RoPE (self_attn.q_norm / k_norm). kPerHead (Qwen3): over
// each head's head_dim, weight [head_dim]. kWholeProjection (OLMo 2): over the projection's full width
// before the split into heads, weights [H * head_dim] and [KV * head_dim].
enum class QkNorm { kNone, kPerHead, kWholeProjection };

// What one family's decoder does differently from Llama's, as data: the decoder (model/decoder/) and the
// weight-name table (weight_names.cpp) branch on these fields alone, never on model_type. A family is
// a row of the family table (src/model/config/families.cpp) (model_type -> how config.json fills this, its own key
// names) plus, where its checkpoints name tensors otherwise than Llama's, a row of weight_names.cpp's layouts. Mixture
// of experts (Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3): a sparse layer's MLP is num_experts gated MLPs of
// intermediate_size each, of which a linear router (no bias) picks top_k per token: softmax of the router's logits in
// float32, torch.topk's choice and order, the chosen probabilities renormalised to sum 1 with normalize_top_k; each
// token's expert outputs weighted by them and summed over its top_k slots in that order, as transformers 5's default
// (grouped) experts path sums them. DeepSeek-V3 scores each expert with its own sigmoid instead
// (RouterScore::kSigmoid), in float32 with float32 weights; a per-expert correction bias
// (mlp.gate.e_score_correction_bias) is added to the scores for the choice alone; the choice is limited to the
// top_groups of `groups` equal groups of experts (a group ranked by its two best corrected scores, summed); the chosen
// experts' uncorrected scores are renormalised (sum + 1e-20) with normalize_top_k and multiplied by routed_scaling; and
// a shared gated MLP of shared_intermediate_size, which every token passes through, is added to the routed experts'
// sum.
enum class RouterScore { kSoftmax, kSigmoid };

struct MixtureOfExperts {
  int64_t num_experts = 0;  // 0: a dense model
  int64_t top_k = 0;
  int64_t intermediate_size = 0;
  bool normalize_top_k = true;
  std::vector<bool> sparse_layers;  // per layer; empty with num_experts > 0: every layer is sparse
  RouterScore score = RouterScore::kSoftmax;
  bool correction_bias = false;  // mlp.gate.e_score_correction_bias (sigmoid routers)
  int64_t groups = 1;  // n_group
  int64_t top_groups = 1;  // topk_group
  double routed_scaling = 1.0;  // routed_scaling_factor
  int64_t shared_intermediate_size = 0;  // n_shared_experts * moe_intermediate_size; 0: no shared experts
  // Qwen3-MoE, OLMoE: the chosen weights are cast to the model's dtype before they scale the experts'
  // outputs (their routers' .to(router_logits.dtype)); Mixtral and DeepSeek-V3 keep them in float32.
  bool weights_in_model_dtype = false;
};

// DeepSeek-V3's multi-head latent attention (MLA). Queries: q_proj, or with a q_lora_rank
// q_b_proj(q_a_layernorm(q_a_proj(x))), qk_nope_head_dim + qk_rope_head_dim per head. Keys and values
// come from one compressed latent per token: kv_a_proj_with_mqa(x) is kv_lora_rank latent dimensions
// (normalised by kv_a_layernorm) and qk_rope_head_dim of a RoPE key shared by every head; kv_b_proj
// expands the latent into each head's qk_nope_head_dim key and v_head_dim value. RoPE turns the
// qk_rope_head_dim dimensions only (ModelConfig::head_dim is that width, as in transformers), their
// pairs interleaved with rope_interleave. The softmax scale is qk_head_dim^-1/2, times yarn's
// mscale(factor, mscale_all_dim)^2 under a yarn rope_scaling with mscale_all_dim.
// gpueval multiplies the expansion into the queries and the output instead ("absorbed"), so attention
// runs as one key-value head of kv_lora_rank + qk_rope_head_dim, the latent itself: that is what the
// KV cache holds (ModelConfig::cache_heads and cache_head_dim), its values the same tensor as its keys.
struct LatentAttention {
  int64_t kv_lora_rank = 0;  // 0: not latent attention
  int64_t q_lora_rank = 0;  // 0: q_proj straight from the hidden state
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = false;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct Architecture {
  NormPlacement norm_placement = NormPlacement::kPreNorm;
  QkNorm qk_norm = QkNorm::kNone;
  bool o_proj_bias = false;  // o_proj carries a bias (Llama-style attention_bias, not Qwen2's)
  double embedding_multiplier = 1.0;  // Granite: embeddings scaled before the first layer
  double residual_multiplier = 1.0;  // Granite: x + f(x) * m in both sublayers
  std::optional<double> attention_scale;  // Granite's attention_multiplier; unset: 1 / sqrt(head_dim)
  double logits_divisor = 1.0;  // Granite's logits_scaling: logits / d
  std::vector<bool> rope_layers;  // SmolLM3's no_rope_layers (true: RoPE); empty: every layer
  // Layers whose attention is windowed to ModelConfig::sliding_window (layer_types' sliding_attention;
  // every layer of a Mistral with a window); empty: none.
  std::vector<bool> sliding_layers;
  // Gemma: every RMSNorm scales by (1 + w), in float32, cast to the model dtype after the product.
  bool norm_unit_offset = false;
  Activation activation = Activation::kSilu;
  // Gemma: embedding_multiplier (sqrt(hidden_size)) rounded to the model dtype before the product.
  bool embedding_multiplier_in_dtype = false;
  // Gemma 2: tanh soft-capping, cap * tanh(x / cap), of the attention scores (before the mask) and
  // of the final logits. Unset: none.
  std::optional<double> attention_softcap;
  std::optional<double> logit_softcap;
  // Gemma 3, OLMo 3: the sliding layers' RoPE, of the default type with this base (the other
  // layers keep rope_theta and rope_scaling). Unset: every layer has the one RoPE.
  std::optional<double> sliding_rope_theta;
  WeightLayout layout = WeightLayout::kLlama;
  NormKind norm = NormKind::kRms;
  bool gated_mlp = true;  // down(act(gate(x)) * up(x)); false: down(act(up(x))), no gate_proj (GPT-NeoX, GPT-2)
  bool mlp_bias = false;  // gate, up and down carry biases (Llama's mlp_bias, GPT-NeoX, GPT-2)
  // GPT-NeoX's use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x)), both sublayers reading x.
  bool parallel_residual = false;
  // GPT-2: a learned position table (wpe) added to the token embeddings, and no RoPE anywhere.
  bool learned_positions = false;
  // GLM-4: RoPE rotates the pairs (x[2i], x[2i+1]) of the first rotary_dim dimensions by frequency i
  // (transformers' interleaved apply_rotary_pos_emb), not (x[i], x[i + rotary_dim/2]). The loader
  // reorders each head's rows of q_proj and k_proj (weights and biases) to evens then odds over those
  // dimensions, so the usual rotation gives the same values in that order, and q·k is unchanged.
  bool rope_interleaved = false;
  MixtureOfExperts moe;
  LatentAttention mla;
  // OLMoE's clip_qkv: q, k and v clamped to [-c, c] after their projections (and q/k norms). Unset: none.
  std::optional<double> clip_qkv;
  bool sparse(int64_t layer) const {
    return moe.num_experts > 0 && (moe.sparse_layers.empty() || moe.sparse_layers[static_cast<size_t>(layer)]);
  }
  bool uses_rope(int64_t layer) const {
    return !learned_positions && (rope_layers.empty() || rope_layers[static_cast<size_t>(layer)]);
  }
  bool slides(int64_t layer) const { return !sliding_layers.empty() && sliding_layers[static_cast<size_t>(layer)]; }
};

struct ModelConfig {
  std::string model_type = "llama";  // a row of the family table (model/config/families.cpp)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;  // every norm's epsilon (GPT-NeoX's layer_norm_eps, GPT-2's layer_norm_epsilon)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // The fraction of each head that RoPE rotates (phi3's partial_rotary_factor, gpt_neox's rotary_pct):
  // the first rotary_dim() dimensions, the rest pass through.
  double partial_rotary_factor = 1.0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2); o_proj's: arch.o_proj_bias
  // The attention window of the layers arch.sliding_layers marks: a query at position p sees the keys
  // at positions p - sliding_window < q <= p (transformers' sliding_window_overlay). Unset: no window.
  std::optional<int64_t> sliding_window;
  Architecture arch;
  std::string torch_dtype;  // as written in config.json; "" when absent
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;

  // Parses a config.json object; `where` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  static ModelConfig load(const std::string& config_json_path);
  nlohmann::json to_json() const;

  int64_t num_groups() const { return num_attention_heads / num_key_value_heads; }
  bool latent_attention() const { return arch.mla.kv_lora_rank > 0; }
  // The KV cache's heads and their width: num_key_value_heads of head_dim, or one latent of
  // kv_lora_rank + qk_rope_head_dim under latent attention (its values are its keys: stored once).
  int64_t cache_heads() const { return latent_attention() ? 1 : num_key_value_heads; }
  int64_t cache_head_dim() const {
    return latent_attention() ? arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim : head_dim;
  }
  bool cache_values_are_keys() const { return latent_attention(); }
  // int(head_dim * partial_rotary_factor), as transformers computes it; even and > 0 once read.
  int64_t rotary_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor); }
  // The length past which the RoPE tables change (dynamic: max_position_embeddings; longrope:
  // original_max_position_embeddings); none for the static types. A forward call's rows each choose
  // their tables from their own largest position + 1, so a sequence longer than this must have a row
  // of its own and no shared prefix (the planner sees to it) to get what transformers computes.
  std::optional<int64_t> rope_length_threshold() const;
  // Parameters of the decoder, embeddings and head included (tied head counted once).
  int64_t num_parameters() const;
};

}  // namespace gpueval
