// What a worker sends the scheduler, decoded from a frame's CBOR payload (wire.h unpack_payload).
// A worker may be dying or corrupt, so each decoder checks every field it reads for presence,
// type and range (common/wire_json.h) and throws one Error line naming the message and the field;
// the scheduler turns that into "worker N: protocol error: ..." and restarts the worker. They never
// throw anything else. Stateless and thread-safe; they call only common/, plan/ and run/executor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/item_result.h"
#include "run/executor.h"

namespace gpueval {

struct HelloReply {  // kHello from a worker: its checkpoint is loaded
  std::string model = "model";
  double load_seconds = 0;
};

struct ErrorReply {  // kError: a batch failed (batch_id >= 0), or the worker cannot go on (-1)
  std::string message = "(no message)";
  int64_t batch_id = -1;
};

struct ResultReply {  // kResult for a batch: its items in order, and what computing them took
  int64_t batch_id = 0;
  std::vector<ItemResult> items;
  ExecutionStats stats;
};

struct ItemsReply {  // kItems: results of the batch in flight that are final before it is
  int64_t batch_id = 0;
  std::vector<ItemResult> items;
};

HelloReply hello_reply_from_json(const nlohmann::json& j);
ErrorReply error_reply_from_json(const nlohmann::json& j);
ResultReply result_reply_from_json(const nlohmann::json& j);
ItemsReply items_reply_from_json(const nlohmann::json& j);
std::string broadcast_id_from_json(const nlohmann::json& j);  // kBroadcast: rank 0's NCCL id

}  // namespace gpueval
