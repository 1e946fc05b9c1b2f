#include "run/worker_messages.h"

#include <limits>

#include "common/wire_json.h"

namespace gpueval {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

}  // namespace

HelloReply hello_reply_from_json(const nlohmann::json& j) {
  wire::require_object(j, "hello");
  HelloReply h;
  if (j.contains("model")) h.model = wire::get_string(j.at("model"), "hello: model");
  if (j.contains("load_seconds")) h.load_seconds = wire::get_double(j.at("load_seconds"), "hello: load_seconds");
  return h;
}

ErrorReply error_reply_from_json(const nlohmann::json& j) {
  wire::require_object(j, "error");
  ErrorReply e;
  if (j.contains("message")) e.message = wire::get_string(j.at("message"), "error: message");
  if (j.contains("batch_id")) e.batch_id = wire::get_int(j.at("batch_id"), "error: batch_id", -1, kMaxInt);
  return e;
}

ResultReply result_reply_from_json(const nlohmann::json& j) {
  wire::require_object(j, "result");
  ResultReply r;
  r.batch_id = wire::get_int(wire::field(j, "batch_id", "result"), "result: batch_id", 0, kMaxInt);
  for (const nlohmann::json& item : wire::array_field(j, "items", "result")) r.items.push_back(item_result_from_json(item));
  if (j.contains("stats")) {
    const nlohmann::json& st = j.at("stats");
    wire::require_object(st, "result: stats");
    auto count = [&](const char* key) {
      return st.contains(key) ? wire::get_int(st.at(key), std::string("result: stats: ") + key, 0, kMaxInt) : 0;
    };
    r.stats.tokens_computed = count("tokens_computed");
    r.stats.prefix_tokens = count("prefix_tokens");
    r.stats.oom_splits = count("oom_splits");
  }
  return r;
}

ItemsReply items_reply_from_json(const nlohmann::json& j) {
  wire::require_object(j, "items");
  ItemsReply r;
  r.batch_id = wire::get_int(wire::field(j, "batch_id", "items"), "items: batch_id", 0, kMaxInt);
  for (const nlohmann::json& item : wire::array_field(j, "items", "items")) r.items.push_back(item_result_from_json(item));
  return r;
}

std::string broadcast_id_from_json(const nlohmann::json& j) {
  wire::require_object(j, "broadcast");
  return wire::get_string(wire::field(j, "nccl_id", "broadcast"), "broadcast: nccl_id");
}

}  // namespace gpueval
