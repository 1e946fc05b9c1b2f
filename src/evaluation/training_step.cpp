#include "evaluation/training_step.h"

#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"

namespace gpueval {

std::optional<int64_t> step_in_name(const std::string& base_name) {
  std::string name;
  for (char ch : base_name) name += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  const size_t count = name.size() - digits;
  if (count == 0 || count > 18) return std::nullopt;  // no number, or one past int64
  std::string prefix = name.substr(0, digits);
  if (!prefix.empty() && (prefix.back() == '-' || prefix.back() == '_')) prefix.pop_back();
  for (const std::string keyword : {"global_step", "step", "iter", "checkpoint"}) {
    if (prefix.size() < keyword.size() || prefix.compare(prefix.size() - keyword.size(), keyword.size(), keyword) != 0)
      continue;
    const size_t at = prefix.size() - keyword.size();
    if (at == 0 || prefix[at - 1] == '-' || prefix[at - 1] == '_' || prefix[at - 1] == '.')
      return std::stoll(name.substr(digits));
  }
  return std::nullopt;
}

std::optional<int64_t> training_step(const std::string& checkpoint_dir) {
  const std::filesystem::path dir(checkpoint_dir);
  const std::string state = (dir / "trainer_state.json").string();
  if (io::path_exists(state)) {
    const nlohmann::json j = nlohmann::json::parse(io::read_file(state, uint64_t{64} << 20), nullptr,
                                                   /*allow_exceptions=*/false);
    if (j.is_discarded()) fail(state, "not valid JSON");
    if (j.is_object() && j.contains("global_step") && !j["global_step"].is_null()) {
      const nlohmann::json& step = j["global_step"];
      if (!step.is_number_integer() || step.get<int64_t>() < 0)
        fail(state, "global_step must be a non-negative integer, got {}", step.dump());
      return step.get<int64_t>();
    }
  }
  std::string base = dir.filename().string();
  if (base.empty()) base = dir.parent_path().filename().string();  // "runs/step-10/"
  return step_in_name(base);
}

}  // namespace gpueval
