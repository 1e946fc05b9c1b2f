#include "plan/item_result.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "common/wire_json.h"
#include "gpueval/error.h"

namespace gpueval {

namespace {

// JSON has no infinities; a -inf logprob (a token the model gives probability 0) travels as a string.
nlohmann::json number_or_name(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from(const nlohmann::json& j, const std::string& path) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return wire::get_double(j, path);
}

}  // namespace

nlohmann::json to_json(const ItemResult& r) {
  return {{"request_index", r.request_index},
          {"part", r.part},
          {"parts", r.parts},
          {"logprob", number_or_name(r.logprob)},
          {"is_greedy", r.is_greedy},
          {"num_tokens", r.num_tokens},
          {"text", r.text}};
}

void read_item_place(const nlohmann::json& j, const std::string& path, int64_t& request_index, int32_t& part,
                     int32_t& parts) {
  using namespace wire;
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  require_object(j, path);
  request_index = get_int(field(j, "request_index", path), path + ".request_index", 0, kInt64Max);
  parts = static_cast<int32_t>(get_int(field(j, "parts", path), path + ".parts", 1, kInt32Max));
  part = static_cast<int32_t>(get_int(field(j, "part", path), path + ".part", 0, parts - 1));
}

ItemResult item_result_from_json(const nlohmann::json& j) {
  using namespace wire;
  const std::string path = "item result";
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  ItemResult r;
  read_item_place(j, path, r.request_index, r.part, r.parts);
  r.logprob = number_from(field(j, "logprob", path), path + ".logprob");
  r.is_greedy = get_bool(field(j, "is_greedy", path), path + ".is_greedy");
  r.num_tokens = get_int(field(j, "num_tokens", path), path + ".num_tokens", 0, kInt64Max);
  r.text = get_string(field(j, "text", path), path + ".text");
  return r;
}

}  // namespace gpueval
