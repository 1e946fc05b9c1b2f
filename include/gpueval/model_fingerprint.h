// A checkpoint's fingerprint: a SHA-256 that changes when the model does, computed without
// reading every weight. It covers config.json's bytes and, for every *.safetensors file in the
// directory (sorted by name), its name, size and JSON header (tensor names, dtypes, shapes and
// offsets). Retraining that rewrites weights in place with identical headers and sizes is not
// detected; everything that changes the architecture, dtype or layout is. Used as the model key
// of the calibration cache. Stateless and thread-safe.
#pragma once

#include <string>

namespace gpueval {

// Lowercase hex. Throws Error naming the file when config.json or a safetensors header cannot be
// read, or when the directory holds no safetensors file.
std::string model_fingerprint(const std::string& model_dir);

}  // namespace gpueval
