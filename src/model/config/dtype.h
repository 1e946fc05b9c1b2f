// The one rule for what a requested dtype means on a device. Workers load with it and calibration
// keys its cache with it, so both must read "auto" the same way. Stateless and thread-safe.
#pragma once

#include <string>

#include <ATen/ATen.h>

namespace gpueval {

// `requested` as parse_dtype reads it, except "auto": float32 on the CPU (bf16 matmuls are slow
// there); on a GPU the torch_dtype of `model_dir`'s config.json, bfloat16 when it names none.
at::ScalarType resolve_dtype(const std::string& requested, const at::Device& device, const std::string& model_dir);

}  // namespace gpueval
