#include "gpueval/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "model/config/config_keys.h"
#include "model/config/families.h"

namespace gpueval {

using nlohmann::json;

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
          fail(where,
               "rope_parameters per layer type holds '{}' (expected full_attention and sliding_attention "
               "objects)",
               it.key());
      if (p.contains("sliding_attention")) {
        const json& local = p["sliding_attention"];
        const std::string type = local.contains("rope_type") && local["rope_type"].is_string()
                                     ? local["rope_type"].get<std::string>()
                                     : "default";
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
    fail(where,
         "quantized checkpoints are not supported (quantization_config {}): gpueval reads float32, bfloat16 "
         "and float16 weights",
         q->contains("quant_method") ? (*q)["quant_method"].dump() : q->dump());
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
  if (!default_head_dim && c.hidden_size % c.num_attention_heads == 0)
    default_head_dim = c.hidden_size / c.num_attention_heads;
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
        if (scaling.is_object() && scaling.contains(type_key) && scaling[type_key] == old_name)
          scaling[type_key] = name;
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
    fail(where,
         "a second RoPE base for sliding layers (rope_local_base_freq, or rope_parameters.sliding_attention) "
         "is not supported for model_type '{}'",
         c.model_type);
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

namespace {

// rope_scaling as transformers writes it back: null for none, else the keys its type reads.
json rope_scaling_json(const RopeScaling& s) {
  if (s.type == RopeScalingType::kNone) return nullptr;
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
  return r;
}

// The experts' keys of a mixture-of-experts config under its family's names (DeepSeek-V3's, Mixtral's,
// Qwen3-MoE's, OLMoE's); nothing for a dense model.
void write_experts(const ModelConfig& c, json& j) {
  const std::string& model_type = c.model_type;
  const Architecture& arch = c.arch;
  const int64_t num_hidden_layers = c.num_hidden_layers;
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
}

}  // namespace

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
  j["rope_scaling"] = rope_scaling_json(rope_scaling);
  const Family& family = family_of(model_type, "ModelConfig::to_json");
  if (partial_rotary_factor != family.partial_rotary_factor) j["partial_rotary_factor"] = partial_rotary_factor;
  // A window, or null where the family's default would be one (Mistral, Gemma, OLMo 3: 4096).
  if (sliding_window)
    j["sliding_window"] = *sliding_window;
  else if (model_type != "llama" && model_type != "gpt_neox" && model_type != "gpt2" && model_type != "deepseek_v3")
    j["sliding_window"] = nullptr;
  if (sliding_window && model_type != "mistral") {
    json types = json::array();
    for (int64_t i = 0; i < num_hidden_layers; ++i)
      types.push_back(arch.slides(i) ? "sliding_attention" : "full_attention");
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
  write_experts(*this, j);
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
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids;
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
    attn =
        a.q_lora_rank > 0 ? hidden_size * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * q_out : hidden_size * q_out;
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
