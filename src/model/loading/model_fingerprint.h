// A checkpoint's fingerprint: a SHA-256 that changes when the model does, computed without
// reading every weight. It covers config.json's bytes, generation_config.json's eos_token_id where
// it differs from config.json's (model/config/generation_config.h), and, for every *.safetensors file in the
// directory (sorted by name), its name, size and JSON header (tensor names, dtypes, shapes and
// offsets). Retraining that rewrites weights in place with identical headers and sizes is not
// detected; everything that changes the architecture, dtype or layout is. Used as the model key
// of the calibration cache (copies of one architecture share their batch budgets).
//
// checkpoint_fingerprint() tells apart checkpoints of one architecture, as the nightly runs of a
// training job need: it adds to model_fingerprint() a sample of every tensor's bytes (up to 1 KiB
// at its start and 1 KiB at its middle), so checkpoints whose weights differ anywhere a training
// step touches get different fingerprints while reading well under 1 MiB per 1,000 tensors.
// Stateless and thread-safe.
#pragma once

#include <string>

namespace gpueval {

// Lowercase hex. Throws Error naming the file when config.json or a safetensors header cannot be
// read, or when the directory holds no safetensors file.
std::string model_fingerprint(const std::string& model_dir);
std::string checkpoint_fingerprint(const std::string& model_dir);

}  // namespace gpueval
