#include "run/worker_messages.h"

#include <limits>

#include "common/wire_json.h"

namespace gpueval {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// The batch_id and items that kResult and kItems both carry, in the object `message` names.
void read_batch_items(const nlohmann::json& j, const std::string& message, int64_t& batch_id,
                      std::vector<ItemResult>& items) {
  wire::require_object(j, message);
  batch_id = wire::get_int(wire::field(j, "batch_id", message), message + ": batch_id", 0, kMaxInt);
  for (const nlohmann::json& item : wire::array_field(j, "items", message))
    items.push_back(item_result_from_json(item));
}

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
  ResultReply r;
  read_batch_items(j, "result", r.batch_id, r.items);
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
  ItemsReply r;
  read_batch_items(j, "items", r.batch_id, r.items);
  return r;
}

std::string broadcast_id_from_json(const nlohmann::json& j) {
  wire::require_object(j, "broadcast");
  return wire::get_string(wire::field(j, "nccl_id", "broadcast"), "broadcast: nccl_id");
}

}  // namespace gpueval
