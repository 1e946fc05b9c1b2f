#include "model/dtype.h"

#include "gpueval/model.h"

namespace gpueval {

at::ScalarType resolve_dtype(const std::string& requested, const at::Device& device, const std::string& model_dir) {
  if (requested != "auto") return parse_dtype(requested);
  if (device.is_cpu()) return at::kFloat;
  const std::string stored = ModelConfig::load(model_dir + "/config.json").torch_dtype;
  return stored.empty() ? at::kBFloat16 : parse_dtype(stored);
}

}  // namespace gpueval
