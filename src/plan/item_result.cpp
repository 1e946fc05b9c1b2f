#include "plan/item_result.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "common/wire_json.h"
#include "gpueval/error.h"

namespace gpueval {

std::vector<RequestResult> combine_items(const std::vector<ItemResult>& items) {
  std::map<int64_t, std::vector<const ItemResult*>> by_request;
  for (const ItemResult& r : items) by_request[r.request_index].push_back(&r);
  std::vector<RequestResult> out;
  out.reserve(by_request.size());
  for (auto& [index, parts] : by_request) {
    const int32_t count = parts.front()->parts;
    for (const ItemResult* p : parts) {
      if (p->parts != count)
        throw Error(fmt::format("request {}: parts disagree on their count ({} and {})", index, count, p->parts));
      if (p->part < 0 || p->part >= count)
        throw Error(fmt::format("request {}: part {} outside [0, {})", index, p->part, count));
    }
    std::sort(parts.begin(), parts.end(), [](const ItemResult* a, const ItemResult* b) { return a->part < b->part; });
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k > 0 && parts[k]->part == parts[k - 1]->part)
        throw Error(fmt::format("request {}: part {} of {} appears twice", index, parts[k]->part, count));
      if (parts[k]->part != static_cast<int32_t>(k))
        throw Error(fmt::format("request {}: part {} of {} is missing", index, k, count));
    }
    if (static_cast<int64_t>(parts.size()) != count)
      throw Error(fmt::format("request {}: part {} of {} is missing", index, parts.size(), count));
    RequestResult r;
    r.index = index;
    r.is_greedy = true;
    for (const ItemResult* p : parts) {
      r.logprob += p->logprob;
      r.num_tokens += p->num_tokens;
      r.is_greedy = r.is_greedy && p->is_greedy;
    }
    if (count == 1) r.text = parts.front()->text;
    out.push_back(std::move(r));
  }
  return out;
}

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
  return {{"request_index", r.request_index}, {"part", r.part},
          {"parts", r.parts},                 {"logprob", number_or_name(r.logprob)},
          {"is_greedy", r.is_greedy},         {"num_tokens", r.num_tokens},
          {"text", r.text}};
}

ItemResult item_result_from_json(const nlohmann::json& j) {
  using namespace wire;
  const std::string path = "item result";
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  require_object(j, path);
  ItemResult r;
  r.request_index = get_int(field(j, "request_index", path), path + ".request_index", 0, kInt64Max);
  r.parts = static_cast<int32_t>(get_int(field(j, "parts", path), path + ".parts", 1, kInt32Max));
  r.part = static_cast<int32_t>(get_int(field(j, "part", path), path + ".part", 0, r.parts - 1));
  r.logprob = number_from(field(j, "logprob", path), path + ".logprob");
  r.is_greedy = get_bool(field(j, "is_greedy", path), path + ".is_greedy");
  r.num_tokens = get_int(field(j, "num_tokens", path), path + ".num_tokens", 0, kInt64Max);
  r.text = get_string(field(j, "text", path), path + ".text");
  return r;
}

}  // namespace gpueval
