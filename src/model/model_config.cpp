#include "gpueval/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/wire_json.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

using nlohmann::json;
using wire::get_bool;
using wire::get_double;
using wire::get_int;

// Bounds on the values that size allocations (embeddings, KV cache, RoPE tables, layers). Each is
// far past any released Llama-family model (Llama 3.1 405B: hidden 16384, intermediate 53248,
// 126 layers, 128 heads; Llama 4 Scout: 10M positions; Gemma: 256k vocabulary) and stops a corrupt
// or hostile config.json (max_position_embeddings 2^40) before it asks for terabytes.
constexpr int64_t kMaxVocab = int64_t{1} << 24;      // 16,777,216 tokens
constexpr int64_t kMaxHidden = int64_t{1} << 17;     // 131,072
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 24;  // 16,777,216 positions
constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

// A key of rope_scaling: a number (null or absent: `fallback`, none: required).
double scaling_number(const json& s, const std::string& where, const std::string& type, const char* key,
                      std::optional<double> fallback) {
  auto it = s.find(key);
  if (it == s.end() || it->is_null()) {
    if (!fallback) fail(where, "rope_scaling type '{}' needs key '{}'", type, key);
    return *fallback;
  }
  if (!it->is_number()) fail(where, "rope_scaling: key '{}' must be a number, got {}", key, it->dump());
  return it->get<double>();
}

double scaling_positive(const json& s, const std::string& where, const std::string& type, const char* key,
                        std::optional<double> fallback) {
  const double v = scaling_number(s, where, type, key, fallback);
  if (!(v > 0) || !std::isfinite(v)) fail(where, "rope_scaling: key '{}' must be a positive number, got {}", key, v);
  return v;
}

// longrope's short_factor / long_factor: rotary_dim / 2 positive numbers.
std::vector<double> scaling_factors(const json& s, const std::string& where, const char* key, int64_t count) {
  auto it = s.find(key);
  if (it == s.end() || it->is_null()) fail(where, "rope_scaling type 'longrope' needs key '{}'", key);
  if (!it->is_array() || static_cast<int64_t>(it->size()) != count)
    fail(where, "rope_scaling: key '{}' must be a list of rotary_dim / 2 = {} numbers", key, count);
  std::vector<double> out;
  for (const json& x : *it) {
    if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>()))
      fail(where, "rope_scaling: key '{}' holds {} (each value must be a positive number)", key, x.dump());
    out.push_back(x.get<double>());
  }
  return out;
}

// rope_scaling as transformers' modeling_rope_utils reads it: the keys each type uses, its defaults.
// `top` is the whole config (a top-level original_max_position_embeddings wins, as transformers 5's
// standardize_rope_params has it); `c` has head_dim, rotary_dim() and max_position_embeddings read.
RopeScaling parse_rope_scaling(const json& j, const json& top, const std::string& where, const ModelConfig& c) {
  RopeScaling s;
  if (j.is_null()) return s;
  if (!j.is_object()) fail(where, "key 'rope_scaling' must be an object or null");
  std::string type;
  if (j.contains("rope_type")) type = j["rope_type"].is_string() ? j["rope_type"].get<std::string>() : "";
  else if (j.contains("type")) type = j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type.empty()) fail(where, "rope_scaling needs a string 'rope_type' (or 'type')");
  if (type == "default") return s;
  const std::pair<const char*, RopeScalingType> kTypes[] = {
      {"linear", RopeScalingType::kLinear}, {"dynamic", RopeScalingType::kDynamic},
      {"llama3", RopeScalingType::kLlama3}, {"yarn", RopeScalingType::kYarn},
      {"longrope", RopeScalingType::kLongRope}};
  bool known = false;
  for (const auto& entry : kTypes)
    if (type == entry.first) {
      s.type = entry.second;
      known = true;
    }
  if (!known)
    fail(where, "unsupported rope_scaling type '{}' (supported: default, linear, dynamic, llama3, yarn, longrope)",
         type);
  const bool has_original = s.type == RopeScalingType::kLlama3 || s.type == RopeScalingType::kYarn ||
                            s.type == RopeScalingType::kLongRope;
  if (has_original) {
    const json* from = &j;
    if (top.contains("original_max_position_embeddings") && !top["original_max_position_embeddings"].is_null())
      from = &top;
    s.original_max_position_embeddings =
        get_int(*from, where, "original_max_position_embeddings", c.max_position_embeddings, 2, kMaxPositions);
  }
  // yarn's and longrope's factor may be null: the ratio of the two contexts (yarn still needs the key).
  const double context_ratio =
      static_cast<double>(c.max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings);
  switch (s.type) {
    case RopeScalingType::kLinear:
    case RopeScalingType::kDynamic:
      s.factor = scaling_positive(j, where, type, "factor", std::nullopt);
      if (s.type == RopeScalingType::kDynamic && c.rotary_dim() <= 2)
        fail(where, "rope_scaling type 'dynamic' needs a rotary dimension above 2, got {}", c.rotary_dim());
      break;
    case RopeScalingType::kLlama3:
      s.factor = scaling_positive(j, where, type, "factor", std::nullopt);
      s.low_freq_factor = scaling_positive(j, where, type, "low_freq_factor", std::nullopt);
      s.high_freq_factor = scaling_positive(j, where, type, "high_freq_factor", std::nullopt);
      if (!(s.high_freq_factor > s.low_freq_factor))
        fail(where, "rope_scaling: high_freq_factor ({}) must exceed low_freq_factor ({})", s.high_freq_factor,
             s.low_freq_factor);
      break;
    case RopeScalingType::kYarn: {
      if (!j.contains("factor")) fail(where, "rope_scaling type 'yarn' needs key 'factor'");
      s.factor = scaling_positive(j, where, type, "factor", context_ratio);
      if (j.contains("attention_factor") && !j["attention_factor"].is_null())
        s.attention_factor = scaling_positive(j, where, type, "attention_factor", std::nullopt);
      // transformers: `get("beta_fast") or 32`, so 0 means the default as null does.
      s.beta_fast = scaling_number(j, where, type, "beta_fast", 32.0);
      if (s.beta_fast == 0) s.beta_fast = 32.0;
      s.beta_slow = scaling_number(j, where, type, "beta_slow", 1.0);
      if (s.beta_slow == 0) s.beta_slow = 1.0;
      if (!(s.beta_fast > 0) || !(s.beta_slow > 0) || s.beta_fast < s.beta_slow)
        fail(where, "rope_scaling: beta_fast ({}) and beta_slow ({}) must be positive, beta_fast >= beta_slow",
             s.beta_fast, s.beta_slow);
      s.mscale = scaling_number(j, where, type, "mscale", 0.0);
      s.mscale_all_dim = scaling_number(j, where, type, "mscale_all_dim", 0.0);
      if (s.mscale < 0 || s.mscale_all_dim < 0)
        fail(where, "rope_scaling: mscale ({}) and mscale_all_dim ({}) must not be negative", s.mscale,
             s.mscale_all_dim);
      if (s.mscale != 0 && s.mscale_all_dim != 0 && s.factor > 1 && 0.1 * s.mscale_all_dim * std::log(s.factor) + 1 <= 0)
        fail(where, "rope_scaling: mscale_all_dim gives a zero attention factor");
      // transformers reads `get("truncate", True)`: a null there is falsy, no truncation.
      s.truncate = j.contains("truncate") && j["truncate"].is_null() ? false : get_bool(j, where, "truncate", true);
      break;
    }
    case RopeScalingType::kLongRope: {
      const int64_t half = c.rotary_dim() / 2;
      s.short_factor = scaling_factors(j, where, "short_factor", half);
      s.long_factor = scaling_factors(j, where, "long_factor", half);
      s.factor = scaling_positive(j, where, type, "factor", context_ratio);
      if (j.contains("attention_factor") && !j["attention_factor"].is_null())
        s.attention_factor = scaling_positive(j, where, type, "attention_factor", std::nullopt);
      break;
    }
    case RopeScalingType::kNone:
      break;
  }
  return s;
}

// The fraction of each head RoPE rotates: partial_rotary_factor (phi3 and most), rotary_pct (gpt_neox).
double parse_partial_rotary(const json& j, const std::string& where, int64_t head_dim, double fallback) {
  const char* key = "partial_rotary_factor";
  if ((!j.contains(key) || j[key].is_null()) && j.contains("rotary_pct")) key = "rotary_pct";
  const double f = get_double(j, where, key, fallback);
  if (!(f > 0 && f <= 1)) fail(where, "key '{}' must be in (0, 1], got {}", key, f);
  const auto dim = static_cast<int64_t>(static_cast<double>(head_dim) * f);
  if (dim <= 0 || dim % 2 != 0)
    fail(where, "key '{}' ({}) gives a rotary dimension of int({} * {}) = {}; it must be even and > 0", key, f,
         head_dim, f, dim);
  return f;
}

}  // namespace

namespace {

// transformers >= 5 writes `rope_parameters` {rope_theta, rope_type, factor, ...} and `dtype`
// where earlier versions wrote `rope_theta`, `rope_scaling` and `torch_dtype`: the older keys,
// where set (not null), win; otherwise the newer ones are read as if they were the older.
json with_legacy_keys(const json& j, const std::string& where) {
  json out = j;
  auto unset = [&](const char* key) { return !out.contains(key) || out[key].is_null(); };
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    json p = j["rope_parameters"];
    if (!p.is_object()) fail(where, "key 'rope_parameters' must be an object or null");
    // Per layer type (Gemma 3, OLMo 3): full_attention's is the model's RoPE; sliding_attention's, of the
    // default type, only changes the base, read as the older rope_local_base_freq.
    if (p.contains("full_attention") || p.contains("sliding_attention")) {
      for (auto it = p.begin(); it != p.end(); ++it)
        if ((it.key() != "full_attention" && it.key() != "sliding_attention") || !it.value().is_object())
          fail(where, "rope_parameters per layer type holds '{}' (expected full_attention and sliding_attention "
                      "objects)", it.key());
      if (p.contains("sliding_attention")) {
        const json& local = p["sliding_attention"];
        const std::string type = local.contains("rope_type") && local["rope_type"].is_string()
                                     ? local["rope_type"].get<std::string>() : "default";
        if (type != "default")
          fail(where, "rope_parameters.sliding_attention has rope_type '{}' (only default is supported there)", type);
        if (!j.contains("rope_local_base_freq") && local.contains("rope_theta"))
          out["rope_local_base_freq"] = local["rope_theta"];
      }
      p = p.contains("full_attention") ? p["full_attention"] : json::object();
    }
    if (unset("rope_theta") && p.contains("rope_theta")) out["rope_theta"] = p["rope_theta"];
    // Only a string names a type; parse_rope_scaling says what is wrong with anything else.
    std::string type = "default";
    for (const char* key : {"type", "rope_type"})
      if (p.contains(key)) type = p[key].is_string() ? p[key].get<std::string>() : "?";
    // transformers 5 keeps partial_rotary_factor (gpt_neox's rotary_pct too) in rope_parameters.
    if (unset("partial_rotary_factor") && unset("rotary_pct") && p.contains("partial_rotary_factor"))
      out["partial_rotary_factor"] = p["partial_rotary_factor"];
    if (unset("rope_scaling") && type != "default") {
      json scaling = p;
      scaling.erase("rope_theta");
      scaling.erase("partial_rotary_factor");
      out["rope_scaling"] = scaling;
    }
  }
  if (unset("torch_dtype") && j.contains("dtype")) out["torch_dtype"] = j["dtype"];
  for (const char* key : {"rope_theta", "rope_scaling", "torch_dtype"})
    if (out.contains(key) && out[key].is_null()) out.erase(key);
  return out;
}

}  // namespace

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
    fail(where, "layer_types marks sliding_attention layers but there is no sliding_window (null, or "
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

double get_positive(const json& j, const std::string& where, const char* key, double fallback) {
  const double v = get_double(j, where, key, fallback);
  if (!(v > 0)) fail(where, "key '{}' must be a positive number, got {}", key, v);
  return v;
}

// A positive number, `fallback` when absent, none when null (Gemma's soft-caps).
std::optional<double> get_optional_positive(const json& j, const std::string& where, const char* key,
                                            std::optional<double> fallback) {
  if (!j.contains(key)) return fallback;
  if (j[key].is_null()) return std::nullopt;
  return get_positive(j, where, key, 1.0);
}

// The MLP's activation under `key`: silu, gelu (erf) or GELU's tanh approximation under each of
// transformers' names for it (gelu_pytorch_tanh, gelu_new, gelu_fast: the same function).
Activation read_activation(const json& j, const std::string& where, const char* key, const char* fallback) {
  const json v = j.contains(key) && !j[key].is_null() ? j[key] : json(fallback);
  if (v == "silu") return Activation::kSilu;
  if (v == "gelu") return Activation::kGelu;
  if (v == "gelu_pytorch_tanh" || v == "gelu_new" || v == "gelu_fast") return Activation::kGeluTanh;
  fail(where, "unsupported {} {} (supported: silu, gelu, gelu_new, gelu_fast, gelu_pytorch_tanh)", key, v.dump());
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_pytorch_tanh";
  }
  return "?";
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
// num_local_experts where the hub's Qwen3-MoE files have num_experts), num_experts_per_tok, the experts'
// width and whether the chosen probabilities are renormalised.
constexpr int64_t kMaxExperts = 4096;
void read_moe(const json& j, const std::string& where, ModelConfig& c, int64_t default_experts, int64_t default_top_k,
              int64_t intermediate_size, bool normalize) {
  MixtureOfExperts& m = c.arch.moe;
  const int64_t either = get_int(j, where, "num_local_experts", default_experts, 0, kMaxExperts);
  m.num_experts = get_int(j, where, "num_experts", either, 0, kMaxExperts);
  m.top_k = get_int(j, where, "num_experts_per_tok", default_top_k, 1, kMaxExperts);
  if (m.num_experts > 0 && m.top_k > m.num_experts)
    fail(where, "num_experts_per_tok ({}) is more than the {} experts", m.top_k, m.num_experts);
  m.intermediate_size = intermediate_size;
  m.normalize_top_k = normalize;
  if (get_bool(j, where, "use_sliding_window", false) || (j.contains("sliding_window") && !j["sliding_window"].is_null()))
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
    fail(where, "moe_layer_freq other than 1 is not supported for deepseek_v3 (transformers makes every layer "
                "from first_k_dense_replace on sparse)");
  if (c.attention_bias) fail(where, "attention_bias=true is not supported for deepseek_v3");
  if (c.num_key_value_heads != c.num_attention_heads)
    fail(where, "num_key_value_heads ({}) must equal num_attention_heads ({}) for deepseek_v3: latent attention "
                "expands its keys and values for every head", c.num_key_value_heads, c.num_attention_heads);
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
  if (get_bool(j, where, "use_sliding_window", false) || (j.contains("sliding_window") && !j["sliding_window"].is_null()))
    fail(where, "sliding_window is not supported for deepseek_v3");
}

// One row per family: the defaults its transformers Config class has where config.json is silent,
// and how its own keys fill the Architecture (read after the keys every family shares).
struct Family {
  const char* model_type;
  const char* architecture;  // the transformers class, written back by to_json
  std::optional<int64_t> head_dim;  // unset: hidden_size / num_attention_heads
  double rms_norm_eps;
  double rope_theta;
  bool tie_word_embeddings;
  bool attention_bias;
  void (*read)(const json& j, const std::string& where, ModelConfig& c);
  // The family's own spelling of a key the shared code reads (GPT-2's n_embd for hidden_size): read
  // when present or when the shared key is absent, and written back by to_json.
  std::vector<std::pair<const char*, const char*>> keys = {};
  const char* activation = "silu";  // hidden_act's default
  double partial_rotary_factor = 1.0;
  int64_t intermediate_multiple = 0;  // intermediate_size's default as a multiple of hidden_size; 0: required
  int64_t max_position_embeddings = 2048;
  // Older names of rope_scaling types the family's Config class renames (Phi-3: su and yarn are its longrope).
  std::vector<std::pair<const char*, const char*>> rope_types = {};
  // Defaults of keys every other family requires, as a JSON object: Gemma 3's released multimodal
  // checkpoints leave the text model's vocabulary and heads to Gemma3TextConfig's defaults.
  const char* defaults = "{}";
};

// The key `ours` under the family's spelling, where the family has one and the config uses it.
const char* key_of(const Family& f, const json& j, const char* ours) {
  for (const auto& [shared, theirs] : f.keys)
    if (std::string(shared) == ours && (j.contains(theirs) || !j.contains(ours))) return theirs;
  return ours;
}

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
                get_bool(j, where, "norm_topk_prob", false));
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
    {"deepseek_v3", "DeepseekV3ForCausalLM", 64, 1e-6, 10000.0, false, false, read_deepseek_v3,
     {{"head_dim", "qk_rope_head_dim"}}, "silu", 1.0, 0, 4096},
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
    {"phi3", "Phi3ForCausalLM", std::nullopt, 1e-5, 10000.0, false, false,
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
     {}, "silu", 1.0, 0, 2048, {{"su", "longrope"}, {"yarn", "longrope"}}},
    {"gemma2", "Gemma2ForCausalLM", 256, 1e-6, 10000.0, true, false,
     [](const json& j, const std::string& where, ModelConfig& c) {
       read_gemma(j, where, c);
       c.arch.attention_softcap = get_optional_positive(j, where, "attn_logit_softcapping", 50.0);
       c.arch.logit_softcap = get_optional_positive(j, where, "final_logit_softcapping", 30.0);
       read_sliding_layers(j, where, c, read_window(j, where, 4096), [](int64_t i) { return (i + 1) % 2 != 0; });
     }},
    {"gemma3_text", "Gemma3ForCausalLM", 256, 1e-6, 1000000.0, true, false,
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
     {}, "silu", 1.0, 0, 131072, {},
     R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
         "num_attention_heads": 8, "num_key_value_heads": 4})"},
    // Pythia: LayerNorm with biases, q, k, v fused per head in query_key_value, partial RoPE (rotary_pct,
    // 0.25 by default), parallel residual by default, a plain GELU MLP with biases, an untied embed_out.
    {"gpt_neox", "GPTNeoXForCausalLM", std::nullopt, 1e-5, 10000.0, false, true,
     [](const json& j, const std::string& where, ModelConfig& c) {
       require_plain_heads(j, where, c);
       c.arch.layout = WeightLayout::kGptNeoX;
       c.arch.norm = NormKind::kLayerNorm;
       c.arch.gated_mlp = false;
       c.arch.mlp_bias = true;
       c.arch.o_proj_bias = c.attention_bias;
       c.arch.parallel_residual = get_bool(j, where, "use_parallel_residual", true);
     },
     {{"rms_norm_eps", "layer_norm_eps"}, {"rope_theta", "rotary_emb_base"}}, "gelu", 0.25},
    // GPT-2 (nanoGPT exports): learned positions, LayerNorm with biases, Conv1D weights stored [in, out],
    // q, k, v fused in c_attn, biases everywhere, a plain gelu_new MLP, the head tied to wte.
    {"gpt2", "GPT2LMHeadModel", std::nullopt, 1e-5, 10000.0, true, true,
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
     {{"hidden_size", "n_embd"}, {"num_hidden_layers", "n_layer"}, {"num_attention_heads", "n_head"},
      {"max_position_embeddings", "n_positions"}, {"intermediate_size", "n_inner"},
      {"rms_norm_eps", "layer_norm_epsilon"}, {"hidden_act", "activation_function"}},
     "gelu_new", 1.0, 4, 1024},
};

const Family& family_of(const std::string& model_type, const std::string& where) {
  for (const Family& f : kFamilies)
    if (model_type == f.model_type) return f;
  std::string names;
  for (const Family& f : kFamilies) names += std::string(names.empty() ? "" : ", ") + f.model_type;
  fail(where, "unsupported model_type '{}' (supported: {})", model_type, names);
}

}  // namespace

namespace {

// Gemma 3's multimodal checkpoints (4B and up, model_type gemma3): the language model is a gemma3_text
// whose config is text_config (the top level's dtype, special ids and tie_word_embeddings win) and
// whose weights lie under language_model.model. (weight_names.h's WeightLayout::kGemma3Multimodal), and
// whose logits are not soft-capped (Gemma3ForConditionalGeneration, unlike Gemma3ForCausalLM, ignores
// final_logit_softcapping). The vision tower is not read: gpueval scores text.
json gemma3_text_config(const json& raw, const std::string& where) {
  if (!raw.contains("text_config") || !raw["text_config"].is_object())
    fail(where, "model_type 'gemma3' needs a 'text_config' object (its language model's config)");
  json text = raw["text_config"];
  if (text.contains("model_type") && text["model_type"] != "gemma3_text")
    fail(where, "text_config has model_type {} (model_type 'gemma3' holds a gemma3_text)", text["model_type"].dump());
  text["model_type"] = "gemma3_text";
  for (const char* key : {"torch_dtype", "dtype", "bos_token_id", "eos_token_id", "tie_word_embeddings"})
    if (raw.contains(key) && !raw[key].is_null()) text[key] = raw[key];
  return text;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& raw, const std::string& where) {
  if (!raw.is_object()) fail(where, "config must be a JSON object");
  if (raw.contains("model_type") && raw["model_type"] == "gemma3") {
    ModelConfig c = from_json(gemma3_text_config(raw, where), where + " (text_config)");
    c.arch.layout = WeightLayout::kGemma3Multimodal;
    c.arch.logit_softcap.reset();  // Gemma3ForConditionalGeneration's head applies none, whatever text_config says
    return c;
  }
  if (auto q = raw.find("quantization_config"); q != raw.end() && !q->is_null())
    fail(where, "quantized checkpoints are not supported (quantization_config {}): gpueval reads float32, bfloat16 "
                "and float16 weights", q->contains("quant_method") ? (*q)["quant_method"].dump() : q->dump());
  json j = with_legacy_keys(raw, where);
  ModelConfig c;
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string()) fail(where, "key 'model_type' must be a string");
    c.model_type = j["model_type"].get<std::string>();
  }
  const Family& family = family_of(c.model_type, where);
  const json defaults = json::parse(family.defaults);
  for (const auto& [name, value] : defaults.items())
    if (!j.contains(name) || j[name].is_null()) j[name] = value;
  const auto key = [&](const char* ours) { return key_of(family, j, ours); };
  c.arch.activation = read_activation(j, where, key("hidden_act"), family.activation);

  c.vocab_size = get_int(j, where, "vocab_size", std::nullopt, 1, kMaxVocab);
  c.hidden_size = get_int(j, where, key("hidden_size"), std::nullopt, 1, kMaxHidden);
  std::optional<int64_t> default_intermediate;
  if (family.intermediate_multiple > 0) default_intermediate = family.intermediate_multiple * c.hidden_size;
  c.intermediate_size = get_int(j, where, key("intermediate_size"), default_intermediate, 1, kMaxIntermediate);
  c.num_hidden_layers = get_int(j, where, key("num_hidden_layers"), std::nullopt, 1, kMaxLayers);
  c.num_attention_heads = get_int(j, where, key("num_attention_heads"), std::nullopt, 1, kMaxHeads);
  c.num_key_value_heads = get_int(j, where, "num_key_value_heads", c.num_attention_heads, 1, kMaxHeads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(where, "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", c.num_attention_heads,
         c.num_key_value_heads);
  std::optional<int64_t> default_head_dim = family.head_dim;
  if (!default_head_dim && c.hidden_size % c.num_attention_heads == 0) default_head_dim = c.hidden_size / c.num_attention_heads;
  c.head_dim = get_int(j, where, key("head_dim"), default_head_dim, 2, kMaxHeadDim);
  if (c.head_dim % 2 != 0) fail(where, "{} ({}) must be even for rotary embeddings", key("head_dim"), c.head_dim);
  c.max_position_embeddings =
      get_int(j, where, key("max_position_embeddings"), family.max_position_embeddings, 1, kMaxPositions);
  c.rms_norm_eps = get_double(j, where, key("rms_norm_eps"), family.rms_norm_eps);
  if (!(c.rms_norm_eps > 0)) fail(where, "key '{}' must be positive", key("rms_norm_eps"));
  c.rope_theta = get_double(j, where, key("rope_theta"), family.rope_theta);
  if (!(c.rope_theta > 1)) fail(where, "key '{}' must be > 1", key("rope_theta"));
  c.partial_rotary_factor = parse_partial_rotary(j, where, c.head_dim, family.partial_rotary_factor);
  if (j.contains("rope_scaling")) {
    json scaling = j["rope_scaling"];
    for (const char* type_key : {"rope_type", "type"})
      for (const auto& [old_name, name] : family.rope_types)
        if (scaling.is_object() && scaling.contains(type_key) && scaling[type_key] == old_name) scaling[type_key] = name;
    c.rope_scaling = parse_rope_scaling(scaling, j, where, c);
  }
  c.tie_word_embeddings = get_bool(j, where, "tie_word_embeddings", family.tie_word_embeddings);
  // Qwen2 always has q/k/v biases; Llama has them only when attention_bias says so.
  c.attention_bias = get_bool(j, where, "attention_bias", family.attention_bias);
  family.read(j, where, c);
  if (!c.arch.mlp_bias && get_bool(j, where, "mlp_bias", false))
    fail(where, "mlp_bias=true is not supported for model_type '{}'", c.model_type);
  if (!c.arch.sliding_rope_theta && j.contains("rope_local_base_freq") &&
      get_double(j, where, "rope_local_base_freq", c.rope_theta) != c.rope_theta)
    fail(where, "a second RoPE base for sliding layers (rope_local_base_freq, or rope_parameters.sliding_attention) "
                "is not supported for model_type '{}'", c.model_type);
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();
  if (j.contains("bos_token_id") && !j["bos_token_id"].is_null())
    c.bos_token_id = get_int(j, where, "bos_token_id", std::nullopt, 0, kMaxTokenId);
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) {
      c.eos_token_ids.push_back(e.get<int64_t>());
    } else if (e.is_array()) {
      for (const auto& x : e) {
        if (!x.is_number_integer()) fail(where, "key 'eos_token_id' must be an integer or a list of integers");
        c.eos_token_ids.push_back(x.get<int64_t>());
      }
    } else if (!e.is_null()) {
      fail(where, "key 'eos_token_id' must be an integer or a list of integers");
    }
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open config file");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, "not valid JSON");
  return from_json(j, path);
}

json ModelConfig::to_json() const {
  json j = {{"architectures", {family_of(model_type, "ModelConfig::to_json").architecture}},
            {"model_type", model_type},
            {"vocab_size", vocab_size},
            {"hidden_size", hidden_size},
            {"intermediate_size", intermediate_size},
            {"num_hidden_layers", num_hidden_layers},
            {"num_attention_heads", num_attention_heads},
            {"num_key_value_heads", num_key_value_heads},
            {"head_dim", head_dim},
            {"max_position_embeddings", max_position_embeddings},
            {"rms_norm_eps", rms_norm_eps},
            {"rope_theta", rope_theta},
            {"tie_word_embeddings", tie_word_embeddings},
            {"attention_bias", attention_bias},
            {"hidden_act", activation_name(arch.activation)}};
  if (arch.mlp_bias && arch.gated_mlp) j["mlp_bias"] = true;
  const RopeScaling& s = rope_scaling;
  if (s.type == RopeScalingType::kNone) {
    j["rope_scaling"] = nullptr;
  } else {
    json r = {{"rope_type", rope_scaling_name(s.type)}, {"factor", s.factor}};
    if (s.type == RopeScalingType::kLlama3) {
      r["low_freq_factor"] = s.low_freq_factor;
      r["high_freq_factor"] = s.high_freq_factor;
    }
    if (s.type == RopeScalingType::kLlama3 || s.type == RopeScalingType::kYarn || s.type == RopeScalingType::kLongRope)
      r["original_max_position_embeddings"] = s.original_max_position_embeddings;
    if (s.attention_factor) r["attention_factor"] = *s.attention_factor;
    if (s.type == RopeScalingType::kYarn) {
      r["beta_fast"] = s.beta_fast;
      r["beta_slow"] = s.beta_slow;
      if (s.mscale != 0) r["mscale"] = s.mscale;
      if (s.mscale_all_dim != 0) r["mscale_all_dim"] = s.mscale_all_dim;
      r["truncate"] = s.truncate;
    }
    if (s.type == RopeScalingType::kLongRope) {
      r["short_factor"] = s.short_factor;
      r["long_factor"] = s.long_factor;
    }
    j["rope_scaling"] = r;
  }
  const Family& family = family_of(model_type, "ModelConfig::to_json");
  if (partial_rotary_factor != family.partial_rotary_factor) j["partial_rotary_factor"] = partial_rotary_factor;
  // A window, or null where the family's default would be one (Mistral, Gemma, OLMo 3: 4096).
  if (sliding_window) j["sliding_window"] = *sliding_window;
  else if (model_type != "llama" && model_type != "gpt_neox" && model_type != "gpt2" && model_type != "deepseek_v3")
    j["sliding_window"] = nullptr;
  if (sliding_window && model_type != "mistral") {
    json types = json::array();
    for (int64_t i = 0; i < num_hidden_layers; ++i) types.push_back(arch.slides(i) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    if (model_type == "qwen2" || model_type == "qwen3" || model_type == "smollm3") j["use_sliding_window"] = true;
  }
  if (model_type == "granite") {
    j["embedding_multiplier"] = arch.embedding_multiplier;
    j["residual_multiplier"] = arch.residual_multiplier;
    j["attention_multiplier"] = arch.attention_scale.value_or(1.0);
    j["logits_scaling"] = arch.logits_divisor;
  }
  if (model_type == "gemma2" || model_type == "gemma3_text") {
    j["hidden_activation"] = j["hidden_act"];
    // attention_scale is query_pre_attn_scalar^-1/2.
    j["query_pre_attn_scalar"] = 1.0 / (*arch.attention_scale * *arch.attention_scale);
    j["attn_logit_softcapping"] = arch.attention_softcap ? json(*arch.attention_softcap) : json(nullptr);
    j["final_logit_softcapping"] = arch.logit_softcap ? json(*arch.logit_softcap) : json(nullptr);
  }
  if (model_type == "gpt_neox") j["use_parallel_residual"] = arch.parallel_residual;
  if (model_type == "deepseek_v3") {
    const MixtureOfExperts& m = arch.moe;
    const LatentAttention& a = arch.mla;
    j["n_routed_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["moe_intermediate_size"] = m.intermediate_size;
    j["norm_topk_prob"] = m.normalize_top_k;
    j["n_group"] = m.groups;
    j["topk_group"] = m.top_groups;
    j["routed_scaling_factor"] = m.routed_scaling;
    j["n_shared_experts"] = m.shared_intermediate_size / m.intermediate_size;
    int64_t dense = 0;
    while (dense < num_hidden_layers && !arch.sparse(dense)) ++dense;
    j["first_k_dense_replace"] = dense;
    j["kv_lora_rank"] = a.kv_lora_rank;
    j["q_lora_rank"] = a.q_lora_rank > 0 ? json(a.q_lora_rank) : json(nullptr);
    j["qk_nope_head_dim"] = a.qk_nope_head_dim;
    j["v_head_dim"] = a.v_head_dim;
    j["rope_interleave"] = a.rope_interleave;
  } else if (arch.moe.num_experts > 0) {
    j[model_type == "mixtral" ? "num_local_experts" : "num_experts"] = arch.moe.num_experts;
    j["num_experts_per_tok"] = arch.moe.top_k;
    if (model_type != "mixtral") j["norm_topk_prob"] = arch.moe.normalize_top_k;
    if (model_type == "qwen3_moe") {
      j["moe_intermediate_size"] = arch.moe.intermediate_size;
      j["decoder_sparse_step"] = 1;
      json dense = json::array();
      for (int64_t i = 0; i < num_hidden_layers; ++i)
        if (!arch.sparse(i)) dense.push_back(i);
      j["mlp_only_layers"] = dense;
    }
  }
  if (arch.clip_qkv) j["clip_qkv"] = *arch.clip_qkv;
  if (model_type == "gpt2") {
    j["scale_attn_weights"] = !arch.attention_scale.has_value();
    j.erase("rope_scaling");
  }
  if (arch.sliding_rope_theta) j["rope_local_base_freq"] = *arch.sliding_rope_theta;
  if (!arch.rope_layers.empty()) {
    json layers = json::array();
    for (bool r : arch.rope_layers) layers.push_back(r ? 1 : 0);
    j["no_rope_layers"] = layers;
  }
  if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty()) j["eos_token_id"] = eos_token_ids;
  for (const auto& [ours, theirs] : family.keys)  // the family's own spelling (GPT-2's n_embd)
    if (j.contains(ours)) {
      j[theirs] = j[ours];
      j.erase(ours);
    }
  return j;
}

const char* rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone: return "default";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kLlama3: return "llama3";
    case RopeScalingType::kYarn: return "yarn";
    case RopeScalingType::kLongRope: return "longrope";
  }
  return "?";
}

std::optional<int64_t> ModelConfig::rope_length_threshold() const {
  if (rope_scaling.type == RopeScalingType::kDynamic) return max_position_embeddings;
  if (rope_scaling.type == RopeScalingType::kLongRope) return rope_scaling.original_max_position_embeddings;
  return std::nullopt;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t attn = hidden_size * q + 2 * hidden_size * kv + q * hidden_size;
  if (latent_attention()) {
    const LatentAttention& a = arch.mla;
    const int64_t q_out = num_attention_heads * a.qk_head_dim();
    attn = a.q_lora_rank > 0 ? hidden_size * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * q_out : hidden_size * q_out;
    attn += hidden_size * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +
            a.kv_lora_rank * num_attention_heads * (a.qk_nope_head_dim + a.v_head_dim) +
            num_attention_heads * a.v_head_dim * hidden_size;
  }
  if (attention_bias) attn += q + 2 * kv;
  if (arch.o_proj_bias) attn += hidden_size;
  if (arch.qk_norm == QkNorm::kPerHead) attn += 2 * head_dim;
  if (arch.qk_norm == QkNorm::kWholeProjection) attn += q + kv;
  const int64_t matrices = arch.gated_mlp ? 3 : 2;
  int64_t mlp = matrices * hidden_size * intermediate_size;
  if (arch.mlp_bias) mlp += (matrices - 1) * intermediate_size + hidden_size;
  const int64_t norm = (arch.norm == NormKind::kLayerNorm ? 2 : 1) * hidden_size;  // weight (and bias)
  const int64_t norms = arch.norm_placement == NormPlacement::kSandwich ? 4 : 2;
  // A sparse layer holds every expert (the memory a replica needs), and the router.
  const MixtureOfExperts& m = arch.moe;
  const int64_t sparse_mlp = m.num_experts * (3 * hidden_size * m.intermediate_size + hidden_size) +
                             (m.correction_bias ? m.num_experts : 0) + 3 * hidden_size * m.shared_intermediate_size;
  int64_t layers = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i) layers += attn + (arch.sparse(i) ? sparse_mlp : mlp) + norms * norm;
  const int64_t embed = vocab_size * hidden_size;
  const int64_t positions = arch.learned_positions ? max_position_embeddings * hidden_size : 0;
  return layers + norm + embed + positions + (tie_word_embeddings ? 0 : embed);
}

}  // namespace gpueval
