// Memory facts about one device, for sizing batches: how much there is, how much a stretch of
// work used at its peak, and giving cached blocks back. On the CPU "the device" is this process
// on this machine: the total is MemTotal, the peak is the process's peak resident set (VmHWM),
// which counts the memory-mapped weights once they are touched. Peaks are process-wide, not
// per-thread: measure one piece of work at a time. Workers keep freed heap memory
// (cpu_allocator.h), so resident memory never shrinks between batches; measure budgets in
// increasing order and each peak is that budget's need. CUDA devices use the caching
// allocator's statistics (compiled only with GPUEVAL_WITH_CUDA). Everything here reads /proc or
// the allocator; errors are one-line gpueval::Errors naming the file or call.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "gpueval/model_config.h"

namespace gpueval {

// CPU: MemTotal of /proc/meminfo; CUDA: the device's global memory.
int64_t device_total_bytes(const at::Device& device);

// MemAvailable of /proc/meminfo: what new allocations can take without swapping or the OOM killer.
int64_t available_host_bytes();

// Starts a new peak measurement. CPU: writes "5" to /proc/self/clear_refs, which resets VmHWM to
// the current resident set; where the kernel refuses, the peak stays the process's all-time peak.
void reset_peak_memory(const at::Device& device);

// The peak since the last reset_peak_memory: CPU VmHWM of /proc/self/status; CUDA the caching
// allocator's peak reserved bytes.
int64_t peak_memory_bytes(const at::Device& device);

// CPU: the current resident set (VmRSS); CUDA: bytes reserved by the caching allocator.
int64_t current_memory_bytes(const at::Device& device);

// Gives the caching allocator's free blocks back to the driver (after an out-of-memory error).
// A no-op on the CPU.
void release_cached_memory(const at::Device& device);

// Bytes of a replica's weights in `dtype`: ModelConfig::num_parameters, every expert of a mixture
// counted (all of them stay resident, whichever a token chooses).
int64_t weight_bytes(const ModelConfig& config, at::ScalarType dtype);

// Refuses, before any worker starts, a model whose weights alone do not fit its device: a one-line
// Error naming `model_dir`, what the weights need and what the device has. A GPU's memory is shared
// by the `workers` on it (each holds a replica); the CPU's workers share one mapping of the checkpoint
// when `dtype` is its own (MemTotal must hold it once), else each converts its own copy.
void check_weights_fit(const ModelConfig& config, at::ScalarType dtype, const at::Device& device, int workers,
                       const std::string& model_dir);

// A stable description of the hardware a measurement was made on, for the calibration cache and
// tables: "cpu: AMD EPYC 7B13 x2 threads, oneDNN 2.6.3 (avx512_core)" (the library that multiplies:
// model/kernels/cpu_matmul.h), "cuda: NVIDIA H100 80GB HBM3 (79.1 GiB)".
std::string device_description(const at::Device& device, int threads);

}  // namespace gpueval
