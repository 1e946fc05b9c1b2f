// Device slots: what `--gpus` asks for, as the list of workers the scheduler forks, one slot per
// worker. "0-3", "0,2,5", "1" and "all" name CUDA devices (a repeat such as "0,0" puts two workers
// on one GPU); "cpu" is one CPU worker with every core and "cpu:N" is N CPU workers sharing the
// cores. Asking for a GPU that is not there is an error, never a quiet run on the CPU. Parsing is
// a pure function of its arguments (the caller says how many CUDA devices and cores it sees), so
// it is safe from any thread and testable without a GPU. Errors are one-line gpueval::Errors
// naming the flag and the spec: "--gpus 3-1: range end is below its start".
#pragma once

#include <string>
#include <vector>

namespace gpueval {

// Threads given to a CUDA worker: it feeds the GPU and does not compute on the CPU.
constexpr int kCudaWorkerThreads = 2;
// The most workers one spec may ask for; a larger count is a typo, not a plan.
constexpr int kMaxWorkers = 1024;

struct DeviceSlot {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // CUDA ordinal as the user named it, or CPU worker number 0..N-1
  int threads = 1;  // CPU threads this worker may use
  std::string name() const;  // "cuda:0", "cpu:1"
};

// `cuda_devices`: how many CUDA devices this process sees; `cpu_cores`: cores available to split
// between CPU workers (each gets max(1, cores / N), the remainder going to the first workers).
std::vector<DeviceSlot> parse_device_spec(const std::string& spec, int cuda_devices, int cpu_cores);

// Checks only the form of `spec`, not whether its devices exist, so a config file can be checked
// before any device is probed; errors start with `where` instead of "--gpus <spec>".
void check_device_spec_syntax(const std::string& spec, const std::string& where);

}  // namespace gpueval
