#include "model/config/generation_config.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"

namespace gpueval {

namespace {

// The file's object, or nullopt when there is none.
std::optional<nlohmann::json> read_generation_config(const std::string& path) {
  if (!io::path_exists(path)) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(io::read_file(path, uint64_t{16} << 20), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(path, "not a JSON object");
  return j;
}

}  // namespace

SamplingDefaults generation_sampling_defaults(const std::string& model_dir) {
  SamplingDefaults d;
  const std::string path = model_dir + "/generation_config.json";
  const std::optional<nlohmann::json> file = read_generation_config(path);
  if (!file) return d;
  const nlohmann::json& j = *file;
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    if (!j["temperature"].is_number() || !(j["temperature"].get<double>() > 0))
      fail(path, "temperature must be a number > 0, not {}", j["temperature"].dump());
    d.temperature = j["temperature"].get<double>();
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    if (!j["top_k"].is_number_integer() || j["top_k"].get<int64_t>() < 0)
      fail(path, "top_k must be an integer >= 0, not {}", j["top_k"].dump());
    d.top_k = j["top_k"].get<int64_t>();
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    if (!j["top_p"].is_number() || !(j["top_p"].get<double>() > 0 && j["top_p"].get<double>() <= 1))
      fail(path, "top_p must be a number in (0, 1], not {}", j["top_p"].dump());
    d.top_p = j["top_p"].get<double>();
  }
  return d;
}

std::optional<std::vector<int64_t>> generation_eos_token_ids(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  const std::optional<nlohmann::json> file = read_generation_config(path);
  if (!file) return std::nullopt;
  const nlohmann::json& j = *file;
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
