#include "model/config/dtype.h"

#include "gpueval/error.h"
#include "gpueval/model.h"

namespace gpueval {

at::ScalarType resolve_dtype(const std::string& requested, const at::Device& device, const std::string& model_dir) {
  if (requested != "auto") return parse_dtype(requested);
  if (device.is_cpu()) return at::kFloat;
  const std::string stored = ModelConfig::load(model_dir + "/config.json").torch_dtype;
  return stored.empty() ? at::kBFloat16 : parse_dtype(stored);
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return at::kHalf;
  throw Error(fmt::format("unknown dtype '{}' (expected float32, bfloat16 or float16)", name));
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return c10::toString(dtype);
  }
}

}  // namespace gpueval
