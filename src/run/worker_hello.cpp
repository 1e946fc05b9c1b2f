#include "run/worker_hello.h"

#include <limits>

#include "common/wire_json.h"

namespace gpueval {
namespace {

constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

std::string string_field(const nlohmann::json& j, const char* key) {
  return wire::get_string(wire::field(j, key, "hello"), std::string("hello.") + key);
}

int int_field(const nlohmann::json& j, const char* key, const std::string& path) {
  return static_cast<int>(wire::get_int(wire::field(j, key, path), path + "." + key, kIntMin, kIntMax));
}

}  // namespace

nlohmann::json to_json(const WorkerHello& hello) {
  nlohmann::json j = {{"worker", hello.worker}, {"model", hello.model},     {"dtype", hello.dtype},
                      {"device", hello.device}, {"threads", hello.threads}, {"heartbeat_s", hello.heartbeat_s}};
  if (hello.broadcast) j["broadcast"] = {{"rank", hello.broadcast->rank}, {"world", hello.broadcast->world}};
  return j;
}

WorkerHello worker_hello_from_json(const nlohmann::json& j, const WorkerHello* current) {
  WorkerHello h;
  if (current) {
    h = *current;
  } else {
    h.worker = string_field(j, "worker");
    h.device = string_field(j, "device");
    h.threads = int_field(j, "threads", "hello");
    if (j.contains("heartbeat_s")) h.heartbeat_s = wire::get_double(j.at("heartbeat_s"), "hello.heartbeat_s");
  }
  h.model = string_field(j, "model");
  h.dtype = string_field(j, "dtype");
  h.broadcast.reset();
  if (j.contains("broadcast")) {
    const nlohmann::json& b = j.at("broadcast");
    h.broadcast =
        WorkerHello::Broadcast{int_field(b, "rank", "hello.broadcast"), int_field(b, "world", "hello.broadcast")};
  }
  return h;
}

nlohmann::json switch_hello_json(const std::string& model, const std::string& dtype) {
  return {{"model", model}, {"dtype", dtype}};
}

}  // namespace gpueval
