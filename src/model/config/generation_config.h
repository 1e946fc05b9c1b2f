// generation_config.json, the file beside config.json whose settings transformers' generate() uses:
//   - eos_token_id, the tokens that end generation (an id or a list: Llama-3.1-Instruct's
//     [128001, 128008, 128009], Qwen2.5-Instruct's [151645, 151643]), which replaces config.json's when
//     the file sets it. load_model() puts it in ModelConfig::eos_token_ids; model_fingerprint() counts
//     it where it differs from config.json's (a file that changes when generation ends changes the
//     fingerprint).
//   - temperature, top_k, top_p: what a sampling task that leaves them unset uses, as generate()
//     merges a call's kwargs over the checkpoint's file and then transformers' own defaults
//     (temperature 1, top_k 50, top_p 1). The run fills its requests with them before fingerprinting.
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

struct SamplingDefaults {
  double temperature = 1.0;  // transformers' GenerationConfig defaults
  int64_t top_k = 50;
  double top_p = 1.0;
};

// generation_config.json's temperature, top_k and top_p in `model_dir` where it sets them (null
// counts as unset), else transformers' defaults. Throws Error naming the file when it cannot be
// read, is not a JSON object, or a value is out of range (temperature > 0, top_k >= 0, top_p in (0, 1]).
SamplingDefaults generation_sampling_defaults(const std::string& model_dir);

}  // namespace gpueval
