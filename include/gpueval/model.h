// DecoderModel is a decoder-only transformer in LibTorch: RMSNorm or LayerNorm, rotary embeddings
// (every rope_scaling type of model/decoder/rope.h, partial rotary) or learned positions, grouped-query attention,
// SwiGLU, GeGLU or plain GELU MLP, optional biases, tied or untied LM head, sliding-window layers. It is
// one decoder for every family ModelConfig reads (Llama 2/3, Mistral, Qwen2, TinyLlama, Qwen3, OLMo 2/3,
// Granite, SmolLM3, Gemma 2/3, Phi-3, GPT-NeoX, GPT-2, Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3): what a
// family does differently is the config's Architecture (norm placement and kind, q/k norms, multipliers,
// layers without RoPE, windows, soft-caps, parallel residual, weight layout, experts and their router,
// latent attention), never a forward pass of its own.
//
// Parameters carry the Hugging Face names (`model.layers.0.self_attn.q_proj.weight`)
// and are loaded from a checkpoint directory (config.json + safetensors); on CPU,
// when the checkpoint dtype is the requested dtype, they are zero-copy views of
// the memory-mapped file. The model is read-only after loading: forward() may
// be called from several threads as long as each uses its own KVCache.
//
// Batches are padded: every call takes tokens, per-token rotary positions and
// a validity mask, so left- and right-padded batches both work and padding is
// never attended to. forward_ragged() runs groups of different shapes in one
// pass (continuous batching's step: the decoding rows and a prompt's chunk),
// their token-wise work together and their attention apart.
//
// Shared prefixes (few-shot examples, a context with several continuations):
// prefill() computes a prefix's keys and values once, and forward_packed() runs
// rows that all attend to it without copying it per row. A packed row is a
// trunk followed by branches; each branch sees the trunk but not the others.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpueval/kv_cache.h"
#include "gpueval/model_config.h"
#include "gpueval/packed_segments.h"

namespace gpueval {

// Returns the tensor called `name`, already checked to have `shape` and moved to
// the model's device and dtype.
using WeightSource = std::function<at::Tensor(const std::string& name, const std::vector<int64_t>& shape)>;

// y = x W^T (+ b); weight [out, in], bias [out] or undefined. `weight` is the tensor's checkpoint
// name ("model.layers.0.self_attn.q_proj.weight"); the bias is the same name ending in ".bias".
class PackedWeight;

class ProjectionImpl : public torch::nn::Module {
 public:
  ProjectionImpl(const WeightSource& source, const std::string& weight, int64_t in, int64_t out, bool bias);
  at::Tensor forward(const at::Tensor& x) const;  // [..., in] -> [..., out]
  const at::Tensor& weight() const { return weight_; }
  // From now on CPU float32 inputs multiply a packed copy of the weight (model/kernels/cpu_matmul.h), where
  // one applies; returns its bytes (0: none).
  int64_t pack_for_cpu();

 private:
  at::Tensor weight_;  // [out, in]
  at::Tensor bias_;  // [out] or undefined
  std::shared_ptr<const PackedWeight> packed_;
};
TORCH_MODULE(Projection);

// Token embedding table: weight [V, D]; forward maps ids [B, T] to [B, T, D].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(const WeightSource& source, const std::string& name, int64_t vocab, int64_t dim);
  at::Tensor forward(const at::Tensor& tokens) const;
  const at::Tensor& weight() const { return weight_; }

 private:
  at::Tensor weight_;  // [V, D]
};
TORCH_MODULE(Embedding);

// A norm over the last dimension, of the config's NormKind. RMSNorm: x / rms(x) * w, the statistics in
// float32 (float64 for float64); Llama's casts the normalised x to x's dtype before the product; with
// unit_offset (Gemma) the product is by (1 + w), in float32, and the cast comes after it. LayerNorm
// (GPT-NeoX, GPT-2): (x - mean) / std * w + b, as torch.nn.LayerNorm computes it; the bias is the
// weight's name ending in ".bias".
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(const WeightSource& source, const std::string& name, int64_t dim, double eps, NormKind kind,
           bool unit_offset = false);
  at::Tensor forward(const at::Tensor& x) const;  // [..., dim] -> same

 private:
  at::Tensor weight_;  // [dim]
  at::Tensor bias_;  // [dim], LayerNorm; else undefined
  at::Tensor scale_;  // unit_offset: 1 + weight in float32 (float64 for float64); else undefined
  double eps_;
};
TORCH_MODULE(Norm);

struct RopeTables;
class RotaryEmbedding;

// Keys and values of a token prefix that every row of a batch shares: computed once (batch 1) and
// attended to by every row without being copied per row. Read-only once built: several threads may
// attend to one PrefixKV.
struct PrefixKV {
  std::vector<at::Tensor> keys;  // per layer [1, n_kv_heads, P, head_dim], after RoPE, model dtype/device
  std::vector<at::Tensor> values;  // per layer [1, n_kv_heads, P, head_dim]
  int64_t length() const;  // P; 0 when empty
  int64_t bytes() const;  // storage held, for cache accounting
};

// One group of a ragged forward (DecoderModelImpl::forward_ragged) as a layer's attention sees it: its
// rows x length tokens, from `offset` of the tokens laid side by side, with its RoPE tables and mask for
// this layer and its own cache (or null).
struct AttentionGroup {
  int64_t offset = 0, rows = 0, length = 0;
  const RopeTables* rope = nullptr;
  const at::Tensor* mask = nullptr;
  KVCache* cache = nullptr;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, const WeightSource& source, int64_t layer);
  // x: [B, T, D]; returns [B, T, D]. Keys are, in order, the prefix's P (prefix may be null or empty;
  // [1, KV, P, hd] each, shared by all rows), the cache's earlier ones and this step's: S in all.
  // mask: [B, 1, 1, T, S] float32 additive.
  at::Tensor forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask, KVCache* cache, int64_t layer,
                     const PrefixKV* prefix = nullptr) const;
  // The same for the queries at `columns` ([B, T'] int64 positions of each row) alone: keys and values
  // of every position, queries and the output projection of T' per row. Returns [B, T', D].
  at::Tensor forward_at(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask, int64_t layer,
                        const PrefixKV* prefix, const at::Tensor& columns) const;
  // A ragged forward's attention: x [1, N, D] holds every group's tokens side by side. The q, k, v and
  // output projections multiply all N rows at once (latent attention's per group), and each group
  // attends on its own, with its rows' RoPE, mask and cache and the shared prefix: a group gets the
  // states forward() gives it alone. Returns [1, N, D].
  at::Tensor forward_ragged(const at::Tensor& x, const std::vector<AttentionGroup>& groups, int64_t layer,
                            const PrefixKV* prefix) const;
  // Only this step's keys and values, appended to the cache (a prefix's last layer: no query reads it).
  void append_keys_values(const at::Tensor& x, const RopeTables& rope, KVCache& cache, int64_t layer) const;

 private:
  // x [B, T, D] -> queries [B, H, T, hd], and keys and values [B, KV, T, hd], after the q/k norms
  // and RoPE (where the layer has them); queries already carry any non-default attention scale.
  at::Tensor queries(const at::Tensor& x, const RopeTables& rope) const;
  std::pair<at::Tensor, at::Tensor> keys_values(const at::Tensor& x, const RopeTables& rope) const;
  // The same from the projections already taken (not under latent attention): q [B, T, H * hd], k and
  // v [B, T, KV * hd].
  at::Tensor query_heads(const at::Tensor& q, const RopeTables& rope) const;
  std::pair<at::Tensor, at::Tensor> key_value_heads(const at::Tensor& k, at::Tensor v, const RopeTables& rope) const;
  // q: [B, H, T, hd], k, v: [B, KV, S', hd]; the prefix's keys come before k's. Returns [B, T, H * hd].
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                    const PrefixKV* prefix, int64_t layer) const;

  // [B, T, n * hd] -> [B, n, T, hd]: the q/k norm (`norm` may be null), the head split and RoPE.
  at::Tensor heads(at::Tensor x, int64_t n, const Norm& norm, const RopeTables& rope) const;
  // Latent attention (ModelConfig::arch.mla): RoPE on its qk_rope_head_dim dimensions ([..., rope]),
  // de-interleaved first with rope_interleave (transformers' apply_rotary_pos_emb_interleave).
  at::Tensor rotate(const at::Tensor& x, const RopeTables& rope) const;
  // attend()'s output [B, T, H * hd] -> what o_proj reads: itself, or under latent attention each
  // head's latent part times that head's value expansion (kv_b_proj's v rows): [B, T, H * v_head_dim].
  at::Tensor attention_output(const at::Tensor& attended) const;

  // Under latent attention n_kv_heads_ is 1 and head_dim_ kv_lora_rank + qk_rope_head_dim: the queries
  // are carried into the latent (absorbed), so attention runs as multi-query attention on the latent.
  int64_t n_heads_, n_kv_heads_, head_dim_;
  QkNorm qk_norm_;
  bool use_rope_;
  std::optional<double> softcap_;  // Gemma 2: scores = cap * tanh(scores / cap) before the mask
  std::optional<double> clip_;  // OLMoE's clip_qkv: q, k (after their norms) and v clamped to [-c, c]
  double query_scale_;  // 1 but for a family's own attention scale: scale * sqrt(hd), folded into q
  Projection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  Norm q_norm_{nullptr}, k_norm_{nullptr};  // null without arch.qk_norm
  // Latent attention: q_a_proj, q_a_layernorm, q_b_proj (with a q_lora_rank; else q_proj), kv_a_proj_with_mqa,
  // kv_a_layernorm; kv_b_proj's weight split per head into the keys' part [H, nope, r] and the values'
  // part, transposed, [H, r, v].
  LatentAttention mla_;
  Projection q_a_proj_{nullptr}, q_b_proj_{nullptr}, kv_a_proj_{nullptr};
  Norm q_a_layernorm_{nullptr}, kv_a_layernorm_{nullptr};
  at::Tensor key_up_, value_up_;
};
TORCH_MODULE(Attention);

// Which MLP of a layer: the dense one, expert `expert` of a sparse layer (a gated MLP of
// arch.moe.intermediate_size) or a sparse layer's shared experts (arch.moe.shared_intermediate_size).
enum class MlpRole { kDense, kExpert, kShared };

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& config, const WeightSource& source, int64_t layer, MlpRole role = MlpRole::kDense,
          int64_t expert = 0);
  at::Tensor forward(const at::Tensor& x) const;  // [B, T, D] -> [B, T, D]

 private:
  Projection gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};  // no gate without arch.gated_mlp
  Activation activation_;
};
TORCH_MODULE(Mlp);

// A sparse layer's mixture of experts (ModelConfig's arch.moe, which says how the router chooses):
// every token routed on its own, so its experts never depend on the other rows of its batch (on the
// CPU in float32 the router's product is model/kernels/row_invariant.h's row_invariant_product, each logit summed
// in one order whatever the row count); the tokens of each expert multiplied together as one product,
// the experts in ascending order; the shared experts' output (DeepSeek-V3) added last.
// Called with a sparse layer's index and, per token of a forward, its chosen experts [N, top_k] int64
// and their weights [N, top_k] float32 (`gpueval logits --routing`).
using RoutingObserver = std::function<void(int64_t layer, const at::Tensor& chosen, const at::Tensor& weights)>;

class MoeImpl : public torch::nn::Module {
 public:
  MoeImpl(const ModelConfig& config, const WeightSource& source, int64_t layer);
  at::Tensor forward(const at::Tensor& x) const;  // [..., D] -> [..., D]
  // Each token's chosen experts, [N, top_k] int64 in torch.topk's order, for x flattened to [N, D];
  // with `weights`, their weights [N, top_k]: float32, or the model's dtype with weights_in_model_dtype.
  at::Tensor choose(const at::Tensor& x, at::Tensor* weights = nullptr) const;
  // Every forward from now on reports its choices to `observer` (null: none). Not thread-safe: for a
  // model that one thread runs (DecoderModelImpl::observe_routing).
  void observe(RoutingObserver observer) { observer_ = std::move(observer); }

 private:
  at::Tensor router_logits(const at::Tensor& x) const;  // [N, D] -> [N, E] float32

  int64_t layer_;
  RoutingObserver observer_;

  MixtureOfExperts moe_;
  Projection router_{nullptr};
  at::Tensor router_float_;  // a sigmoid router's weight in float32, as transformers keeps it
  at::Tensor correction_;  // [E] float32, with moe_.correction_bias
  std::vector<Mlp> experts_;
  Mlp shared_{nullptr};  // with moe_.shared_intermediate_size
};
TORCH_MODULE(Moe);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, const WeightSource& source, int64_t index);
  at::Tensor forward(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask, KVCache* cache,
                     const PrefixKV* prefix = nullptr) const;
  // x [1, N, D]: every group's tokens side by side (AttentionImpl::forward_ragged); returns [1, N, D].
  at::Tensor forward_ragged(const at::Tensor& x, const std::vector<AttentionGroup>& groups,
                            const PrefixKV* prefix) const;
  // The layer's output at `columns` ([B, T'] int64) alone (AttentionImpl::forward_at): [B, T', D].
  at::Tensor forward_at(const at::Tensor& x, const RopeTables& rope, const at::Tensor& mask, const PrefixKV* prefix,
                        const at::Tensor& columns) const;
  // The layer's keys and values of x, appended to the cache; nothing else is computed.
  void append_keys_values(const at::Tensor& x, const RopeTables& rope, KVCache& cache) const;
  void observe_routing(const RoutingObserver& observer) {
    if (moe_) moe_->observe(observer);
  }

 private:
  // The residual stream after each sublayer: x + f(norm(x)) * m (pre-norm) or x + norm(f(x)) (post).
  at::Tensor attention_residual(at::Tensor attended, const at::Tensor& x) const;
  at::Tensor mlp_residual(const at::Tensor& h) const;
  at::Tensor attention_input(const at::Tensor& x) const;  // input_layernorm(x), or x itself (post-norm)
  // Both sublayers' outputs on the residual stream: the MLP reads the attention's residual, or with
  // arch.parallel_residual x itself (x + attended + mlp(post_attention_layernorm(x))).
  at::Tensor residuals(at::Tensor attended, const at::Tensor& x) const;

  int64_t index_;
  NormPlacement placement_;
  bool parallel_residual_;
  double residual_multiplier_;
  // Pre-norm: input_layernorm and post_attention_layernorm (the MLP's input norm). Post-sublayer:
  // post_attention_layernorm and post_feedforward_layernorm on each sublayer's output; no input norm.
  // Sandwich: input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm.
  Norm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr}, pre_feedforward_layernorm_{nullptr},
      post_feedforward_layernorm_{nullptr};
  Attention self_attn_{nullptr};
  Mlp mlp_{nullptr};  // null in a sparse layer
  Moe moe_{nullptr};  // a sparse layer's experts (arch.sparse)
  at::Tensor feed_forward(const at::Tensor& x) const { return moe_ ? moe_->forward(x) : mlp_->forward(x); }
};
TORCH_MODULE(DecoderLayer);

struct LoadOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
};

// One group of rows of a ragged forward (DecoderModelImpl::forward_ragged): tokens and positions [B, T]
// int64 and valid [B, T] bool as forward() takes them, and the group's own cache (or null).
struct ForwardGroup {
  at::Tensor tokens, positions, valid;
  KVCache* cache = nullptr;
};

class DecoderModelImpl : public torch::nn::Module {
 public:
  DecoderModelImpl(const ModelConfig& config, const WeightSource& source, LoadOptions options);

  // tokens, positions: [B, T] int64; valid: [B, T] bool (false = padding).
  // With a cache, the step's keys are appended to it and earlier ones attended to.
  // Returns the final-norm hidden states [B, T, D].
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                     KVCache* cache = nullptr) const;
  // The same after a shared prefix (may be null): every query also sees the prefix's keys, at
  // positions 0..P-1 (tokens' positions start at P or later).
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid, KVCache* cache,
                     const PrefixKV* prefix) const;
  // Groups of different shapes in one pass (continuous batching: the decoding rows, one token each, and
  // a waiting prompt's next chunk): each group gets what forward(g.tokens, g.positions, g.valid, g.cache,
  // prefix) gives it, while the work done token by token (embedding, norms, projections, MLPs or
  // experts) runs on every group's tokens together, so the weights are read once for all; attention
  // runs per group. Under the row-invariant products (row_invariant.h) a group's states are the bits
  // it gets alone. Returns each group's final-norm hidden states [B, T, D].
  std::vector<at::Tensor> forward_ragged(const std::vector<ForwardGroup>& groups, const PrefixKV* prefix) const;
  // Runs `tokens` at positions 0..P-1 as one sequence and returns their keys and values (throws Error if
  // empty, longer than max_position_embeddings or an id is outside the vocabulary).
  PrefixKV prefill(const std::vector<int32_t>& tokens) const;
  // A batch of packed sequences after an optional shared prefix. tokens, positions: [B, T] int64; valid: [B, T]
  // bool; segments: [B, T] int64, part * kSegmentsPerPart + branch: a sequence holds one or more parts (context
  // groups packed side by side), each a trunk (branch 0) then its branches k > 0. Query i attends to every prefix
  // key, and to key j of its sequence when j <= i, valid[j], j is in i's part, and j is in the trunk or in i's
  // branch (segments[j] == segments[i]). A part's trunk comes first; positions are absolute (each part's trunk
  // starts at P, each branch continues from its trunk's end). prefix may be null or empty. Returns final-norm
  // hidden states [B, T, D].
  // With `columns` ([B, T'] int64, the positions of each row whose states are wanted; a row that wants
  // fewer repeats one), returns [B, T', D]: the last layer computes its attention queries' outputs and
  // its MLP at those positions alone (keys and values everywhere), the same states as the full
  // forward's at those positions, for 1/L of the work less at every other position.
  at::Tensor forward_packed(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid,
                            const at::Tensor& segments, const PrefixKV* prefix, const at::Tensor& columns = {}) const;
  // hidden: [..., D] -> logits [..., V] in the model dtype.
  at::Tensor logits(const at::Tensor& hidden) const;

  const ModelConfig& config() const { return config_; }
  const LoadOptions& options() const { return options_; }
  // Every sparse layer reports its experts to `observer` from now on (null: stops); MoeImpl::observe.
  // For a model one thread runs (`gpueval logits --routing`), never a worker's.
  void observe_routing(const RoutingObserver& observer) {
    for (DecoderLayer& layer : layers_) layer->observe_routing(observer);
  }
  KVCache make_cache(int64_t batch, int64_t capacity) const;
  // Bytes of the packed copies the projections and the LM head multiply (model/kernels/cpu_matmul.h's
  // PackedWeight): a CPU float32 model packs them when loaded, where pack_cpu_weights() allows; else 0.
  int64_t packed_weight_bytes() const { return packed_bytes_; }

 private:
  // One forward's additive masks ([B, 1, 1, T, S] as AttentionImpl takes them): `full` for every layer,
  // `window` (defined when the model has sliding layers) for the sliding ones.
  struct LayerMasks {
    at::Tensor full, window;
  };
  // allowed: [B, T, S] bool; query_positions [B, T] and key_positions [B, S] int64 set the window.
  LayerMasks layer_masks(const at::Tensor& allowed, const at::Tensor& query_positions,
                         const at::Tensor& key_positions) const;
  // forward()'s masks for a batch after the prefix and the cache's committed keys (the step's keys set
  // pending in the cache); throws if the prefix is not the model's.
  LayerMasks step_masks(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid, KVCache* cache,
                        const PrefixKV* prefix) const;
  // The masks as the layers take them: converted for SDPA where it runs.
  LayerMasks attention_masks(const LayerMasks& masks, const at::Tensor& tokens) const;
  // The token embedding (plus learned positions and the family's multiplier): [B, T, D].
  at::Tensor embed(const at::Tensor& tokens, const at::Tensor& positions) const;
  // Embedding, every layer and the final norm, each layer with its mask of `masks`.
  // With columns, the last layer runs at those positions alone (forward_packed) and [B, T', D] returns.
  // keys_only (with a cache): the last layer only appends its keys and values, and nothing returns.
  at::Tensor run_layers(const at::Tensor& tokens, const at::Tensor& positions, const LayerMasks& masks, KVCache* cache,
                        const PrefixKV* prefix, const at::Tensor& columns = {}, bool keys_only = false) const;
  // forward() for a cache's sake alone: the last layer computes keys and values only.
  void fill_cache(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid, KVCache& cache) const;
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& valid, KVCache* cache,
                     bool keys_only, const PrefixKV* prefix = nullptr) const;

  ModelConfig config_;
  LoadOptions options_;
  // Registered under "model" (embed_tokens, layers.N, norm) and "lm_head", as in Hugging Face.
  Embedding embed_tokens_{nullptr};
  Embedding embed_positions_{nullptr};  // arch.learned_positions: [max_position_embeddings, D], added to the tokens'
  std::vector<DecoderLayer> layers_;
  Norm norm_{nullptr};
  at::Tensor lm_head_;  // [V, D], the embedding weight itself when tied
  std::shared_ptr<const RotaryEmbedding> rope_;  // the config's RoPE, on the model's device
  std::shared_ptr<const RotaryEmbedding> sliding_rope_;  // the sliding layers' own (arch.sliding_rope_theta), or null
  std::shared_ptr<const PackedWeight> lm_head_packed_;
  int64_t packed_bytes_ = 0;
};
TORCH_MODULE(DecoderModel);

// Loads `dir` (config.json + model.safetensors or a sharded index). Every
// missing tensor, wrong shape or non-float dtype is a one-line Error naming the
// file and the tensor. config().eos_token_ids, the tokens that end generation, are
// generation_config.json's eos_token_id where that file sets one, as transformers'
// generate() takes them, else config.json's (model/config/generation_config.h).
DecoderModel load_model(const std::string& dir, LoadOptions options = {});

// Builds the model from in-memory tensors keyed by Hugging Face name (tests,
// converters). Same checks as load_model; `where` names the source in errors.
DecoderModel build_model(const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
                         LoadOptions options = {}, const std::string& where = "<weights>");

// Parses "float32"/"fp32", "bfloat16"/"bf16", "float16"/"fp16"/"half".
at::ScalarType parse_dtype(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

}  // namespace gpueval
