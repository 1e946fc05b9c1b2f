// Readers for the few tokenizer_config.json fields gpueval uses. The file is
// written by Hugging Face transformers and spells a special token either as a
// string or as an AddedToken object {"content": "<s>", ...}; either may be null.
// Pure functions; safe from any thread.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

// The token text under key ("bos_token", "eos_token"), if config has one.
std::optional<std::string> config_token(const nlohmann::json* config, const char* key);

// A boolean under key ("add_bos_token"), if config has one.
std::optional<bool> config_flag(const nlohmann::json* config, const char* key);

}  // namespace gpueval
