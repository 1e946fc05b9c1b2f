// The family table: one row per supported model_type (llama, mistral, qwen2, ..., deepseek_v3), the
// defaults its transformers Config class has where config.json is silent and how its own keys fill the
// Architecture. Adding a family is a row in families.cpp. Read by ModelConfig::from_json and to_json
// (config/model_config.cpp), private to model/; calls config_keys.h's key readers only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/model_config.h"

namespace gpueval {

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
  void (*read)(const nlohmann::json& j, const std::string& where, ModelConfig& c);
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
const char* key_of(const Family& f, const nlohmann::json& j, const char* ours);

// The row of `model_type`; an error naming the supported ones otherwise.
const Family& family_of(const std::string& model_type, const std::string& where);

}  // namespace gpueval
