#include "model/generation_config.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"

namespace gpueval {

std::optional<std::vector<int64_t>> generation_eos_token_ids(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  if (!io::path_exists(path)) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(io::read_file(path, uint64_t{16} << 20), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(path, "not a JSON object");
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return std::nullopt;
  const auto id = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(path, "eos_token_id must be a token id or a list of token ids, not {}", v.dump());
    return v.get<int64_t>();
  };
  std::vector<int64_t> ids;
  if (it->is_array()) {
    if (it->empty()) fail(path, "eos_token_id is an empty list");
    for (const nlohmann::json& v : *it) ids.push_back(id(v));
  } else {
    ids.push_back(id(*it));
  }
  return ids;
}

}  // namespace gpueval
