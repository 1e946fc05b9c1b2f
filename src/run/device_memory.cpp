#include "run/device_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "gpueval/error.h"
#include "gpueval/model.h"
#include "model/kernels/cpu_matmul.h"

#ifdef GPUEVAL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>
// The allocator's statistics moved from c10::cuda::CUDACachingAllocator to c10::CachingAllocator in 2.x.
namespace gpueval_cuda_stat {
#if TORCH_VERSION_MAJOR >= 2
using c10::CachingAllocator::StatType;
#else
using c10::cuda::CUDACachingAllocator::StatType;
#endif
}  // namespace gpueval_cuda_stat
#endif

namespace gpueval {
namespace {

// The value of `key` ("MemAvailable:", "VmHWM:") in a /proc file of "key value kB" lines, in bytes.
int64_t proc_kib_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open: {}", std::strerror(errno));
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    int64_t kib = -1;
    fields >> kib;
    if (kib < 0) fail(path, "cannot parse the line '{}'", line);
    return kib * 1024;
  }
  fail(path, "no '{}' line", key);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    // Collapse runs of spaces ("Intel(R) Xeon(R) CPU  @ 2.20GHz") so the description is stable.
    std::string out;
    for (char c : name) {
      if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
      out.push_back(c);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    if (!out.empty()) return out;
  }
  return "unknown CPU";
}

#ifdef GPUEVAL_WITH_CUDA
int cuda_index(const at::Device& device) { return device.has_index() ? device.index() : 0; }
#endif

[[noreturn]] void no_cuda(const at::Device& device) { fail(device.str(), "this gpueval was built without CUDA"); }

}  // namespace

int64_t device_total_bytes(const at::Device& device) {
  if (device.is_cpu()) return proc_kib_field("/proc/meminfo", "MemTotal:");
#ifdef GPUEVAL_WITH_CUDA
  if (device.is_cuda()) return static_cast<int64_t>(at::cuda::getDeviceProperties(cuda_index(device))->totalGlobalMem);
#endif
  no_cuda(device);
}

int64_t weight_bytes(const ModelConfig& config, at::ScalarType dtype) {
  return config.num_parameters() * static_cast<int64_t>(c10::elementSize(dtype));
}

void check_weights_fit(const ModelConfig& config, at::ScalarType dtype, const at::Device& device, int workers,
                       const std::string& model_dir) {
  const int64_t one = weight_bytes(config, dtype);
  // CPU workers whose dtype is the checkpoint's map its file and share its pages.
  const bool shared_mapping = device.is_cpu() && config.torch_dtype == dtype_name(dtype);
  const int64_t need = shared_mapping ? one : one * std::max(1, workers);
  const int64_t have = device_total_bytes(device);
  if (need <= have) return;
  const auto gib = [](int64_t b) { return static_cast<double>(b) / (int64_t{1} << 30); };
  const std::string experts = config.arch.moe.num_experts > 0
                                  ? fmt::format(", all {} experts of each sparse layer", config.arch.moe.num_experts)
                                  : "";
  const std::string replicas = need > one ? fmt::format(" x {} workers", workers) : "";
  throw Error(
      fmt::format("{}: the model does not fit {}: its weights need {:.1f} GiB ({:.2f}B parameters{} in {}){}, "
                  "the device has {:.1f} GiB; use a device with more memory, fewer workers per device, or a "
                  "smaller dtype (tensor and expert parallelism across devices are not implemented)",
                  model_dir, device.str(), gib(need), static_cast<double>(config.num_parameters()) / 1e9, experts,
                  dtype_name(dtype), replicas, gib(have)));
}

int64_t available_host_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable:"); }

void reset_peak_memory(const at::Device& device) {
  if (device.is_cpu()) {
    int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;  // e.g. a hardened kernel: the peak is then the all-time peak
    ssize_t n;
    do n = ::write(fd, "5", 1);
    while (n < 0 && errno == EINTR);
    ::close(fd);
    return;
  }
#ifdef GPUEVAL_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index(device));
    return;
  }
#endif
  no_cuda(device);
}

int64_t peak_memory_bytes(const at::Device& device) {
  if (device.is_cpu()) return proc_kib_field("/proc/self/status", "VmHWM:");
#ifdef GPUEVAL_WITH_CUDA
  if (device.is_cuda()) {
    using gpueval_cuda_stat::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
    return stats.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].peak;
  }
#endif
  no_cuda(device);
}

int64_t current_memory_bytes(const at::Device& device) {
  if (device.is_cpu()) return proc_kib_field("/proc/self/status", "VmRSS:");
#ifdef GPUEVAL_WITH_CUDA
  if (device.is_cuda()) {
    using gpueval_cuda_stat::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
    return stats.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
  }
#endif
  no_cuda(device);
}

void release_cached_memory(const at::Device& device) {
  if (device.is_cpu()) return;
#ifdef GPUEVAL_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    return;
  }
#endif
  no_cuda(device);
}

std::string device_description(const at::Device& device, int threads) {
  if (device.is_cpu()) {
    // The library that multiplies sets the speed a budget was measured at (model/kernels/cpu_matmul.h).
    const std::string matmul = cpu_matmul_description();
    return fmt::format("cpu: {} x{} threads{}", cpu_model_name(), threads, matmul.empty() ? "" : ", " + matmul);
  }
#ifdef GPUEVAL_WITH_CUDA
  if (device.is_cuda()) {
    const auto* p = at::cuda::getDeviceProperties(cuda_index(device));
    return fmt::format("cuda: {} ({:.1f} GiB)", p->name, static_cast<double>(p->totalGlobalMem) / (1 << 30));
  }
#endif
  no_cuda(device);
}

}  // namespace gpueval
