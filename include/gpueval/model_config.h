// ModelConfig holds the hyper-parameters of a Llama-family decoder, read from a
// Hugging Face `config.json` (Llama 2/3, Mistral, Qwen2, TinyLlama). Every field
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

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;    // llama3 only
  double high_freq_factor = 4.0;   // llama3 only
  int64_t original_max_position_embeddings = 8192;  // llama3 only
};

struct ModelConfig {
  std::string model_type = "llama";  // llama | mistral | qwen2
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  std::string torch_dtype;      // as written in config.json; "" when absent
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;

  // Parses a config.json object; `where` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  static ModelConfig load(const std::string& config_json_path);
  nlohmann::json to_json() const;

  int64_t num_groups() const { return num_attention_heads / num_key_value_heads; }
  // Parameters of the decoder, embeddings and head included (tied head counted once).
  int64_t num_parameters() const;
};

}  // namespace gpueval
