// generation_config.json, the file beside config.json whose settings transformers' generate() uses:
// here only eos_token_id, the tokens that end generation (an id or a list: Llama-3.1-Instruct's
// [128001, 128008, 128009], Qwen2.5-Instruct's [151645, 151643]), which replaces config.json's when the
// file sets it. load_model() puts it in ModelConfig::eos_token_ids; model_fingerprint() counts it where
// it differs from config.json's (a file that changes when generation ends changes the fingerprint).
// Stateless; reads the file on each call.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gpueval {

// generation_config.json's eos_token_id in `model_dir`: nullopt when there is no such file, or it
// sets no eos_token_id (or null). Throws Error naming the file when it cannot be read, is not a JSON
// object, or eos_token_id is not a non-negative integer or a non-empty list of them.
std::optional<std::vector<int64_t>> generation_eos_token_ids(const std::string& model_dir);

}  // namespace gpueval
