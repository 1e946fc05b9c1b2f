#include "model/config/config_keys.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"

namespace gpueval {

using nlohmann::json;

namespace {

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

}  // namespace

// rope_scaling as transformers' modeling_rope_utils reads it: the keys each type uses, its defaults.
// `top` is the whole config (a top-level original_max_position_embeddings wins, as transformers 5's
// standardize_rope_params has it); `c` has head_dim, rotary_dim() and max_position_embeddings read.
RopeScaling parse_rope_scaling(const json& j, const json& top, const std::string& where, const ModelConfig& c) {
  RopeScaling s;
  if (j.is_null()) return s;
  if (!j.is_object()) fail(where, "key 'rope_scaling' must be an object or null");
  std::string type;
  if (j.contains("rope_type"))
    type = j["rope_type"].is_string() ? j["rope_type"].get<std::string>() : "";
  else if (j.contains("type"))
    type = j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type.empty()) fail(where, "rope_scaling needs a string 'rope_type' (or 'type')");
  if (type == "default") return s;
  const std::pair<const char*, RopeScalingType> kTypes[] = {{"linear", RopeScalingType::kLinear},
                                                            {"dynamic", RopeScalingType::kDynamic},
                                                            {"llama3", RopeScalingType::kLlama3},
                                                            {"yarn", RopeScalingType::kYarn},
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
  const bool has_original =
      s.type == RopeScalingType::kLlama3 || s.type == RopeScalingType::kYarn || s.type == RopeScalingType::kLongRope;
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
      if (s.mscale != 0 && s.mscale_all_dim != 0 && s.factor > 1 &&
          0.1 * s.mscale_all_dim * std::log(s.factor) + 1 <= 0)
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
    case RopeScalingType::kNone: break;
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

}  // namespace gpueval
