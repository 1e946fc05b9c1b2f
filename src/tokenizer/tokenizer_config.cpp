#include "tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

namespace gpueval {

std::optional<std::string> config_token(const nlohmann::json* config, const char* key) {
  if (config == nullptr || !config->is_object() || !config->contains(key)) return std::nullopt;
  const nlohmann::json& value = config->at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return std::nullopt;
}

std::optional<bool> config_flag(const nlohmann::json* config, const char* key) {
  if (config == nullptr || !config->is_object() || !config->contains(key)) return std::nullopt;
  const nlohmann::json& value = config->at(key);
  if (!value.is_boolean()) return std::nullopt;
  return value.get<bool>();
}

}  // namespace gpueval
