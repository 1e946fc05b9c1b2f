#include "model/config/families.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "model/config/config_keys.h"

namespace gpueval {

using nlohmann::json;

namespace {

// The window and the layers it applies to (Architecture::sliding_layers). `layer_types` (transformers
// >= 4.53) names each layer "full_attention" or "sliding_attention"; absent, the family's pattern
// `slides(layer)` decides. A sliding layer without a window is refused, as transformers refuses it.
void read_sliding_layers(const json& j, const std::string& where, ModelConfig& c, std::optional<int64_t> window,
                         const std::function<bool(int64_t)>& slides) {
  std::vector<bool> layers;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<int64_t>(it->size()) != c.num_hidden_layers)
      fail(where, "key 'layer_types' must be a list of num_hidden_layers ({}) strings", c.num_hidden_layers);
    for (const json& t : *it) {
      if (t != "full_attention" && t != "sliding_attention")
        fail(where, "layer_types holds {} (supported: full_attention, sliding_attention)", t.dump());
      layers.push_back(t == "sliding_attention");
    }
  } else {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.push_back(window.has_value() && slides(i));
  }
  const bool any = std::find(layers.begin(), layers.end(), true) != layers.end();
  if (any && !window)
    fail(where,
         "layer_types marks sliding_attention layers but there is no sliding_window (null, or "
         "use_sliding_window is false)");
  c.sliding_window = window;
  if (any) c.arch.sliding_layers = std::move(layers);
}

// The window a config sets: `sliding_window` (>= 1, within the position bound), `fallback` when the
// key is absent, none when it is null.
std::optional<int64_t> read_window(const json& j, const std::string& where, std::optional<int64_t> fallback) {
  if (!j.contains("sliding_window")) return fallback;
  if (j["sliding_window"].is_null()) return std::nullopt;
  return get_int(j, where, "sliding_window", std::nullopt, 1, kMaxPositions);
}

// Qwen2 and Qwen3: a window only with use_sliding_window, on the layers from max_window_layers on.
void read_qwen_window(const json& j, const std::string& where, ModelConfig& c) {
  const std::optional<int64_t> window =
      get_bool(j, where, "use_sliding_window", false) ? read_window(j, where, 4096) : std::nullopt;
  const int64_t first = get_int(j, where, "max_window_layers", 28, 0, kMaxLayers);
  read_sliding_layers(j, where, c, window, [first](int64_t i) { return i >= first; });
}

// SmolLM3's no_rope_layers: one 0/1 per layer, 1 where the layer applies RoPE. Absent, transformers
// derives it from no_rope_layer_interval (every interval-th layer has none).
std::vector<bool> parse_rope_layers(const json& j, const std::string& where, int64_t layers) {
  std::vector<bool> out;
  auto it = j.find("no_rope_layers");
  if (it == j.end() || it->is_null()) {
    const int64_t interval = get_int(j, where, "no_rope_layer_interval", 4, 1, kMaxLayers);
    for (int64_t i = 0; i < layers; ++i) out.push_back((i + 1) % interval != 0);
    return out;
  }
  if (!it->is_array() || static_cast<int64_t>(it->size()) != layers)
    fail(where, "key 'no_rope_layers' must be a list of num_hidden_layers ({}) values 0 or 1", layers);
  for (const json& x : *it) {
    if (x != 0 && x != 1) fail(where, "key 'no_rope_layers' holds {} (each value must be 0 or 1)", x.dump());
    out.push_back(x == 1);
  }
  return out;
}

// Heads of the families without grouped-query attention, and whose head size is hidden / heads: a config
// that says otherwise is refused, since their modeling code would ignore it.
void require_plain_heads(const json& j, const std::string& where, const ModelConfig& c) {
  if (c.num_key_value_heads != c.num_attention_heads)
    fail(where, "num_key_value_heads ({}) differs from the heads ({}); model_type '{}' has no grouped-query attention",
         c.num_key_value_heads, c.num_attention_heads, c.model_type);
  if (c.hidden_size % c.num_attention_heads != 0 || c.head_dim != c.hidden_size / c.num_attention_heads)
    fail(where, "head_dim ({}) must be the hidden size {} / {} heads for model_type '{}'", c.head_dim, c.hidden_size,
         c.num_attention_heads, c.model_type);
  if (j.contains("layer_types") || (j.contains("sliding_window") && !j["sliding_window"].is_null()))
    fail(where, "sliding windows (layer_types, sliding_window) are not part of model_type '{}'", c.model_type);
}

// Gemma 2 and 3: the sandwich of four (1 + w) norms, GeGLU, embeddings times sqrt(hidden_size) in the
// model dtype, and the attention scale query_pre_attn_scalar^-1/2.
void read_gemma(const json& j, const std::string& where, ModelConfig& c) {
  c.arch.norm_placement = NormPlacement::kSandwich;
  c.arch.norm_unit_offset = true;
  c.arch.activation = read_activation(j, where, "hidden_activation", "gelu_pytorch_tanh");
  c.arch.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  c.arch.embedding_multiplier_in_dtype = true;
  c.arch.attention_scale = 1.0 / std::sqrt(get_positive(j, where, "query_pre_attn_scalar", 256.0));
  c.arch.o_proj_bias = c.attention_bias;
}

// A mixture of experts: `experts` (under either spelling transformers uses: its 5.x files write
// num_local_experts where the hub's Qwen3-MoE files have num_experts), at least min_experts of them
// (0 only where transformers makes a layer without experts dense: Qwen3-MoE; Mixtral's and OLMoE's
// sparse blocks have no such case, so 0 there is refused), num_experts_per_tok, the experts' width and
// whether the chosen probabilities are renormalised.
constexpr int64_t kMaxExperts = 4096;
void read_moe(const json& j, const std::string& where, ModelConfig& c, int64_t default_experts, int64_t default_top_k,
              int64_t intermediate_size, bool normalize, int64_t min_experts = 1) {
  MixtureOfExperts& m = c.arch.moe;
  const int64_t either = get_int(j, where, "num_local_experts", default_experts, min_experts, kMaxExperts);
  m.num_experts = get_int(j, where, "num_experts", either, min_experts, kMaxExperts);
  m.top_k = get_int(j, where, "num_experts_per_tok", default_top_k, 1, kMaxExperts);
  if (m.num_experts > 0 && m.top_k > m.num_experts)
    fail(where, "num_experts_per_tok ({}) is more than the {} experts", m.top_k, m.num_experts);
  m.intermediate_size = intermediate_size;
  m.normalize_top_k = normalize;
  if (get_bool(j, where, "use_sliding_window", false) ||
      (j.contains("sliding_window") && !j["sliding_window"].is_null()))
    fail(where, "sliding_window is not supported for {} yet (mixture-of-experts families read full attention only)",
         c.model_type);
}

// DeepSeek-V3 (DeepseekV3Config's defaults): latent attention, a sigmoid router with a correction bias,
// group-limited top-k, scaled weights, shared experts, and the first first_k_dense_replace layers dense.
void read_deepseek_v3(const json& j, const std::string& where, ModelConfig& c) {
  const auto require = [&](const char* key, const char* value) {
    if (auto it = j.find(key); it != j.end() && !it->is_null() && *it != value)
      fail(where, "{} {} is not supported for deepseek_v3 (only \"{}\", as transformers' DeepseekV3 reads it)", key,
           it->dump(), value);
  };
  require("topk_method", "noaux_tc");
  require("scoring_func", "sigmoid");
  if (get_int(j, where, "moe_layer_freq", 1, 1, kMaxLayers) != 1)
    fail(where,
         "moe_layer_freq other than 1 is not supported for deepseek_v3 (transformers makes every layer "
         "from first_k_dense_replace on sparse)");
  if (c.attention_bias) fail(where, "attention_bias=true is not supported for deepseek_v3");
  if (c.num_key_value_heads != c.num_attention_heads)
    fail(where,
         "num_key_value_heads ({}) must equal num_attention_heads ({}) for deepseek_v3: latent attention "
         "expands its keys and values for every head",
         c.num_key_value_heads, c.num_attention_heads);
  LatentAttention& a = c.arch.mla;
  a.kv_lora_rank = get_int(j, where, "kv_lora_rank", 512, 1, kMaxHidden);
  a.q_lora_rank = get_int(j, where, "q_lora_rank", 0, 0, kMaxHidden);  // null: q_proj
  if (j.contains("q_lora_rank") && !j["q_lora_rank"].is_null() && a.q_lora_rank == 0)
    fail(where, "key 'q_lora_rank' must be null or >= 1, got 0");
  a.qk_rope_head_dim = c.head_dim;  // read as head_dim (the family's spelling: qk_rope_head_dim)
  a.qk_nope_head_dim = get_int(j, where, "qk_nope_head_dim", 128, 0, kMaxHeadDim);
  a.v_head_dim = get_int(j, where, "v_head_dim", 128, 1, kMaxHeadDim);
  a.rope_interleave = get_bool(j, where, "rope_interleave", true);
  MixtureOfExperts& m = c.arch.moe;
  m.num_experts = get_int(j, where, "n_routed_experts", 256, 1, kMaxExperts);
  m.top_k = get_int(j, where, "num_experts_per_tok", 8, 1, kMaxExperts);
  m.intermediate_size = get_int(j, where, "moe_intermediate_size", 2048, 1, kMaxIntermediate);
  m.normalize_top_k = get_bool(j, where, "norm_topk_prob", true);
  m.score = RouterScore::kSigmoid;
  m.correction_bias = true;
  m.groups = get_int(j, where, "n_group", 8, 1, kMaxExperts);
  m.top_groups = get_int(j, where, "topk_group", 4, 1, kMaxExperts);
  m.routed_scaling = get_double(j, where, "routed_scaling_factor", 2.5);
  if (!(m.routed_scaling > 0)) fail(where, "key 'routed_scaling_factor' must be positive");
  m.shared_intermediate_size = get_int(j, where, "n_shared_experts", 1, 0, 64) * m.intermediate_size;
  if (m.num_experts % m.groups != 0 || m.num_experts / m.groups < 2)
    fail(where, "n_routed_experts ({}) must be n_group ({}) groups of at least 2 experts", m.num_experts, m.groups);
  if (m.top_groups > m.groups) fail(where, "topk_group ({}) is more than n_group ({})", m.top_groups, m.groups);
  if (m.top_k > m.top_groups * (m.num_experts / m.groups))
    fail(where, "num_experts_per_tok ({}) is more than the {} experts of the topk_group ({}) groups", m.top_k,
         m.top_groups * (m.num_experts / m.groups), m.top_groups);
  const int64_t dense = get_int(j, where, "first_k_dense_replace", 3, 0, kMaxLayers);
  m.sparse_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  for (int64_t i = dense; i < c.num_hidden_layers; ++i) m.sparse_layers[static_cast<size_t>(i)] = true;
  if (get_bool(j, where, "use_sliding_window", false) ||
      (j.contains("sliding_window") && !j["sliding_window"].is_null()))
    fail(where, "sliding_window is not supported for deepseek_v3");
}

}  // namespace

// The key `ours` under the family's spelling, where the family has one and the config uses it.
const char* key_of(const Family& f, const json& j, const char* ours) {
  for (const auto& [shared, theirs] : f.keys)
    if (std::string(shared) == ours && (j.contains(theirs) || !j.contains(ours))) return theirs;
  return ours;
}

namespace {

const Family kFamilies[] = {
    {"llama", "LlamaForCausalLM", std::nullopt, 1e-6, 10000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.o_proj_bias = c.attention_bias;
       c.arch.mlp_bias = get_bool(j, where, "mlp_bias", false);
     }},
    {"mistral", "MistralForCausalLM", std::nullopt, 1e-6, 10000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       // transformers' MistralConfig defaults the window to 4096 when the key is absent; null is none.
       // Every layer slides (MistralModel reads no layer_types).
       c.sliding_window = read_window(j, where, 4096);
       if (c.sliding_window) c.arch.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), true);
     }},
    {"qwen2", "Qwen2ForCausalLM", std::nullopt, 1e-6, 10000.0, false, true,
     [](const json& j, const std::string& where, ModelConfig& c) { read_qwen_window(j, where, c); }},
    {"qwen3", "Qwen3ForCausalLM", 128, 1e-6, 10000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       read_qwen_window(j, where, c);
       c.arch.qk_norm = QkNorm::kPerHead;
       c.arch.o_proj_bias = c.attention_bias;
     }},
    {"olmo2", "Olmo2ForCausalLM", std::nullopt, 1e-5, 10000.0, false, false,
     [](const json&, const std::string&, ModelConfig& c) {
       c.arch.norm_placement = NormPlacement::kPostSublayer;
       c.arch.qk_norm = QkNorm::kWholeProjection;
       c.arch.o_proj_bias = c.attention_bias;
     }},
    // GLM-4 (0414): sandwich RMSNorms without the unit offset, q/k/v biased (o_proj not), gate and up
    // fused, RoPE on the interleaved pairs of half of each head (partial_rotary_factor 0.5 unless set).
    {"glm4",
     "Glm4ForCausalLM",
     128,
     1.5625e-7,
     10000.0,
     false,
     true,
     [](const json&, const std::string&, ModelConfig& c) {
       c.arch.norm_placement = NormPlacement::kSandwich;
       c.arch.layout = WeightLayout::kGlm4;
       c.arch.rope_interleaved = true;
     },
     {},
     "silu",
     0.5,
     0,
     131072},
    // Mixtral: Mistral's attention, every layer a mixture of num_local_experts SwiGLU experts of
    // intermediate_size, top num_experts_per_tok always renormalised; Mixtral's weight names.
    {"mixtral", "MixtralForCausalLM", std::nullopt, 1e-5, 1000000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.layout = WeightLayout::kMixtral;
       read_moe(j, where, c, 8, 2, c.intermediate_size, true);
     }},
    // Qwen3-MoE: Qwen3's attention (per-head q/k norms); experts of moe_intermediate_size, renormalised only
    // with norm_topk_prob; a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step-th.
    {"qwen3_moe", "Qwen3MoeForCausalLM", std::nullopt, 1e-6, 10000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.qk_norm = QkNorm::kPerHead;
       c.arch.o_proj_bias = c.attention_bias;
       read_moe(j, where, c, 128, 8, get_int(j, where, "moe_intermediate_size", 768, 1, int64_t{1} << 24),
                get_bool(j, where, "norm_topk_prob", false), /*min_experts=*/0);
       c.arch.moe.weights_in_model_dtype = true;
       const int64_t step = get_int(j, where, "decoder_sparse_step", 1, 1, kMaxLayers);
       std::vector<bool> sparse(static_cast<size_t>(c.num_hidden_layers));
       for (int64_t i = 0; i < c.num_hidden_layers; ++i) sparse[static_cast<size_t>(i)] = (i + 1) % step == 0;
       if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
         if (!it->is_array()) fail(where, "key 'mlp_only_layers' must be a list of layer indices");
         for (const json& x : *it) {
           if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c.num_hidden_layers)
             fail(where, "key 'mlp_only_layers' holds {}, not a layer index below {}", x.dump(), c.num_hidden_layers);
           sparse[static_cast<size_t>(x.get<int64_t>())] = false;
         }
       }
       c.arch.moe.sparse_layers = sparse;
     }},
    // OLMoE: pre-norm Llama layers with q/k norms over the projections' widths, optional clip_qkv, and
    // experts of intermediate_size renormalised only with norm_topk_prob.
    {"olmoe", "OlmoeForCausalLM", std::nullopt, 1e-5, 10000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.qk_norm = QkNorm::kWholeProjection;
       c.arch.o_proj_bias = c.attention_bias;
       c.arch.clip_qkv = get_optional_positive(j, where, "clip_qkv", std::nullopt);
       read_moe(j, where, c, 64, 8, c.intermediate_size, get_bool(j, where, "norm_topk_prob", false));
       c.arch.moe.weights_in_model_dtype = true;
     }},
    {"deepseek_v3",
     "DeepseekV3ForCausalLM",
     64,
     1e-6,
     10000.0,
     false,
     false,
     read_deepseek_v3,
     {{"head_dim", "qk_rope_head_dim"}},
     "silu",
     1.0,
     0,
     4096},
    {"granite", "GraniteForCausalLM", std::nullopt, 1e-6, 10000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.o_proj_bias = c.attention_bias;
       c.arch.mlp_bias = get_bool(j, where, "mlp_bias", false);
       c.arch.embedding_multiplier = get_positive(j, where, "embedding_multiplier", 1.0);
       c.arch.residual_multiplier = get_positive(j, where, "residual_multiplier", 1.0);
       c.arch.attention_scale = get_positive(j, where, "attention_multiplier", 1.0);
       c.arch.logits_divisor = get_positive(j, where, "logits_scaling", 1.0);
     }},
    {"smollm3", "SmolLM3ForCausalLM", std::nullopt, 1e-6, 2000000.0, true, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.o_proj_bias = c.attention_bias;
       c.arch.mlp_bias = get_bool(j, where, "mlp_bias", false);
       c.arch.rope_layers = parse_rope_layers(j, where, c.num_hidden_layers);
       // Windowed by default only where use_sliding_window is set, on the layers without RoPE; an
       // explicit layer_types uses sliding_window whatever use_sliding_window says (as transformers' mask does).
       const bool use = get_bool(j, where, "use_sliding_window", false);
       const std::vector<bool> rope = c.arch.rope_layers;
       read_sliding_layers(j, where, c, read_window(j, where, std::nullopt),
                           [use, rope](int64_t i) { return use && !rope[static_cast<size_t>(i)]; });
     }},
    {"olmo3", "Olmo3ForCausalLM", std::nullopt, 1e-5, 500000.0, false, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       c.arch.norm_placement = NormPlacement::kPostSublayer;
       c.arch.qk_norm = QkNorm::kWholeProjection;
       c.arch.o_proj_bias = c.attention_bias;
       // Three sliding layers in every four; rope_scaling (e.g. yarn) on the full layers alone.
       read_sliding_layers(j, where, c, read_window(j, where, 4096), [](int64_t i) { return (i + 1) % 4 != 0; });
       c.arch.sliding_rope_theta = get_positive(j, where, "rope_local_base_freq", c.rope_theta);
     }},
    {"phi3",
     "Phi3ForCausalLM",
     std::nullopt,
     1e-5,
     10000.0,
     false,
     false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       if (c.attention_bias) fail(where, "attention_bias=true is not supported for phi3 (its qkv_proj has no bias)");
       c.arch.layout = WeightLayout::kPhi3;
       // A window on every layer when sliding_window is set (Phi-3-mini-4k: 2047), as Mistral's.
       c.sliding_window = read_window(j, where, std::nullopt);
       if (c.sliding_window) c.arch.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), true);
       // Phi3Config always has a top-level original_max_position_embeddings (4096 unless set), and a
       // top-level one wins over rope_scaling's.
       if (c.rope_scaling.type != RopeScalingType::kNone && !j.contains("original_max_position_embeddings")) {
         json with_default = j, scaling = j["rope_scaling"];
         with_default["original_max_position_embeddings"] = 4096;
         for (const char* type_key : {"rope_type", "type"})
           if (scaling.contains(type_key)) scaling[type_key] = rope_scaling_name(c.rope_scaling.type);
         c.rope_scaling = parse_rope_scaling(scaling, with_default, where, c);
       }
     },
     {},
     "silu",
     1.0,
     0,
     2048,
     {{"su", "longrope"}, {"yarn", "longrope"}}},
    {"gemma2", "Gemma2ForCausalLM", 256, 1e-6, 10000.0, true, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       read_gemma(j, where, c);
       c.arch.attention_softcap = get_optional_positive(j, where, "attn_logit_softcapping", 50.0);
       c.arch.logit_softcap = get_optional_positive(j, where, "final_logit_softcapping", 30.0);
       read_sliding_layers(j, where, c, read_window(j, where, 4096), [](int64_t i) { return (i + 1) % 2 != 0; });
     }},
    {"gemma3_text",
     "Gemma3ForCausalLM",
     256,
     1e-6,
     1000000.0,
     true,
     false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       read_gemma(j, where, c);
       c.arch.qk_norm = QkNorm::kPerHead;
       if (get_bool(j, where, "use_bidirectional_attention", false))
         fail(where, "use_bidirectional_attention=true is not supported (gpueval scores causal language models)");
       c.arch.attention_softcap = get_optional_positive(j, where, "attn_logit_softcapping", std::nullopt);
       c.arch.logit_softcap = get_optional_positive(j, where, "final_logit_softcapping", std::nullopt);
       // Five sliding layers per full one (sliding_window_pattern, saved as _sliding_window_pattern by transformers 5).
       const int64_t pattern = get_int(j, where, "sliding_window_pattern",
                                       get_int(j, where, "_sliding_window_pattern", 6, 1, kMaxLayers), 1, kMaxLayers);
       read_sliding_layers(j, where, c, read_window(j, where, 4096),
                           [pattern](int64_t i) { return (i + 1) % pattern != 0; });
       c.arch.sliding_rope_theta = get_positive(j, where, "rope_local_base_freq", 10000.0);
     },
     {},
     "silu",
     1.0,
     0,
     131072,
     {},
     R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
         "num_attention_heads": 8, "num_key_value_heads": 4})"},
    // Pythia: LayerNorm with biases, q, k, v fused per head in query_key_value, partial RoPE (rotary_pct,
    // 0.25 by default), parallel residual by default, a plain GELU MLP with biases, an untied embed_out.
    {"gpt_neox",
     "GPTNeoXForCausalLM",
     std::nullopt,
     1e-5,
     10000.0,
     false,
     true,
     [](const json& j, const std::string& where, ModelConfig& c) {
       require_plain_heads(j, where, c);
       c.arch.layout = WeightLayout::kGptNeoX;
       c.arch.norm = NormKind::kLayerNorm;
       c.arch.gated_mlp = false;
       c.arch.mlp_bias = true;
       c.arch.o_proj_bias = c.attention_bias;
       c.arch.parallel_residual = get_bool(j, where, "use_parallel_residual", true);
     },
     {{"rms_norm_eps", "layer_norm_eps"}, {"rope_theta", "rotary_emb_base"}},
     "gelu",
     0.25},
    // GPT-2 (nanoGPT exports): learned positions, LayerNorm with biases, Conv1D weights stored [in, out],
    // q, k, v fused in c_attn, biases everywhere, a plain gelu_new MLP, the head tied to wte.
    {"gpt2",
     "GPT2LMHeadModel",
     std::nullopt,
     1e-5,
     10000.0,
     true,
     true,
     [](const json& j, const std::string& where, ModelConfig& c) {
       require_plain_heads(j, where, c);
       for (const char* key : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
         if (get_bool(j, where, key, false)) fail(where, "{}=true is not supported for gpt2", key);
       if (j.contains("rope_scaling")) fail(where, "rope_scaling is set, but gpt2 has learned positions, not RoPE");
       c.arch.layout = WeightLayout::kGpt2;
       c.arch.norm = NormKind::kLayerNorm;
       c.arch.gated_mlp = false;
       c.arch.mlp_bias = true;
       c.attention_bias = true;  // c_attn and c_proj always carry biases
       c.arch.o_proj_bias = true;
       c.arch.learned_positions = true;
       if (!get_bool(j, where, "scale_attn_weights", true)) c.arch.attention_scale = 1.0;  // q kᵀ unscaled
     },
     {{"hidden_size", "n_embd"},
      {"num_hidden_layers", "n_layer"},
      {"num_attention_heads", "n_head"},
      {"max_position_embeddings", "n_positions"},
      {"intermediate_size", "n_inner"},
      {"rms_norm_eps", "layer_norm_epsilon"},
      {"hidden_act", "activation_function"}},
     "gelu_new",
     1.0,
     4,
     1024},
};

}  // namespace

const Family& family_of(const std::string& model_type, const std::string& where) {
  for (const Family& f : kFamilies)
    if (model_type == f.model_type) return f;
  std::string names;
  for (const Family& f : kFamilies) names += std::string(names.empty() ? "" : ", ") + f.model_type;
  fail(where, "unsupported model_type '{}' (supported: {})", model_type, names);
}

}  // namespace gpueval
