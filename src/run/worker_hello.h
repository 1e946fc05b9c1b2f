// The Hello frame's payload (worker.h): what a worker process is told to be before anything else,
// and, sent again later, which checkpoint to load in place of the one it holds. Plain data;
// from_json checks every field, because a message from a pipe is untrusted. Thread-safe.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gpueval {

// The first frame a worker reads. Its JSON keys are the field names ("broadcast" is
// {"rank", "world"} and only there for a load over NCCL).
struct WorkerHello {
  struct Broadcast {
    int rank = 0;
    int world = 0;
  };
  std::string worker;  // the slot's name, "cpu:0" or "cuda:1": the prefix of its log lines
  std::string model;  // the checkpoint directory to load
  std::string dtype = "auto";  // as requested; the worker resolves "auto" (model/config/dtype.h)
  std::string device = "cpu";  // as the worker sees it: "cpu", or "cuda:0" (it sees one GPU)
  int threads = 0;  // intra-op threads; <= 0 keeps LibTorch's default
  double heartbeat_s = 1;
  std::optional<Broadcast> broadcast;  // its first load goes over NCCL (weight_broadcast.h)
};

nlohmann::json to_json(const WorkerHello& hello);
// Every field checked for presence and type (common/wire_json.h); heartbeat_s and broadcast may
// be absent. With `current` (a later Hello to a running worker), only model and dtype are
// required; the other fields keep their values from `current`, except broadcast, which only the
// message itself can ask for.
WorkerHello worker_hello_from_json(const nlohmann::json& j, const WorkerHello* current = nullptr);
// The later Hello that makes a running worker load `model` in place of the checkpoint it holds.
nlohmann::json switch_hello_json(const std::string& model, const std::string& dtype);

}  // namespace gpueval
