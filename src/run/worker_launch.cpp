#include "run/worker_launch.h"

#include <algorithm>

#include "run/worker_prefork.h"

namespace gpueval {

WorkerHello first_hello(const DeviceSlot& slot, const std::string& model, const std::string& dtype,
                        double heartbeat_s) {
  WorkerHello h;
  h.worker = slot.name();
  h.model = model;
  h.dtype = dtype;
  h.device = slot.kind == DeviceSlot::Kind::kCuda ? "cuda:0" : "cpu";
  h.threads = slot.threads;
  h.heartbeat_s = heartbeat_s;
  return h;
}

Child launch_worker(const DeviceSlot& slot, const std::string& executable, const std::string& log_path) {
  SpawnOptions so;
  so.argv = {executable, "worker"};
  so.env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, slot.threads)));
  if (slot.kind == DeviceSlot::Kind::kCuda) so.env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(slot.index));
  so.log_path = log_path;
  if (std::optional<Child> preforked = take_preforked_worker(so)) return std::move(*preforked);
  return Child::spawn(so);
}

}  // namespace gpueval
