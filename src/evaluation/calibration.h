// Calibration: choosing each device's batch budget (PlanOptions::batch_tokens) for a run, from
// the calibration cache or by probing. A probe runs in a real worker process (`gpueval worker`,
// spawned as the scheduler spawns them, with the same environment and thread count), so it
// measures the memory a worker will really use; the parent sends a Probe frame (wire.h) and reads
// back the ProbeResult (Scheduler::probe, run/scheduler.h, in either case). In a run that worker is
// the run's own for the slot (through CalibrationOptions::probe_in_worker), which then runs
// batches; elsewhere (`gpueval calibrate`, `gpueval plan`, a worker that already ran something) it
// is one of its own, started by a one-slot Scheduler (probe_on_slot). Distinct devices are probed once each: every CPU
// worker shares one probe (they are alike), and so do workers sharing one GPU. The run then uses the smallest budget
// over its devices, because the plan is one plan for every worker.
//
// `gpueval calibrate CONFIG` runs the full sweep on each device, prints a table, writes
// calibration.json and calibration.svg, and stores the choices in the cache, which later runs
// with `batch_size: auto` read. Nothing here is shared between threads; call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/run_config.h"
#include "run/batch_probe.h"
#include "run/devices.h"

namespace gpueval {

// Spawns `executable worker` on `slot` (a one-slot Scheduler), loads the model, runs one probe and
// shuts the worker down. The worker writes to `log_dir`/probe_<slot>.log, or to this process's
// stderr when `log_dir` is empty; silent for 120 s, it is taken for hung. Errors (the worker failed
// to start, died, or reported an error) are one-line gpueval::Errors naming the slot.
ProbeResult probe_on_slot(const DeviceSlot& slot, const std::string& executable, const std::string& model_dir,
                          const std::string& dtype, const ProbeOptions& options, const std::string& log_dir = "");

// The budget of one distinct device.
struct DeviceBudget {
  DeviceSlot slot;  // the first slot of the device (the one probed)
  int workers = 1;  // slots that share the device
  std::string device;  // device_description()
  std::string dtype;  // resolved dtype name
  int64_t memory_limit_bytes = 0;  // per worker; 0 = the whole device (one worker per GPU)
  int64_t batch_tokens = 0;
  std::string source;  // "probed" or "cache"
  ProbeResult probe;  // the measured (or cached) points
};

struct CalibrationOptions {
  std::string executable;
  std::string model_dir;
  std::string dtype = "auto";  // as configured
  std::string max_memory;  // RunConfig::max_memory
  std::string max_memory_where = "max_memory";  // how errors name it: the key or --max-memory
  std::string cache_path;  // resolved CalibrationCache path
  int64_t length = 0;  // cost of the run's longest request
  bool recalibrate = false;  // probe even on a cache hit
  bool full_sweep = false;  // `gpueval calibrate`: more repeats, patience and time per point
  // A run's probe (not full_sweep): the run's own rows to measure (probe_sample) and the work it
  // serves, which bounds it (batch_probe.h); 0 = unbounded.
  std::optional<Batch> sample;
  int64_t work_tokens = 0;
  std::string log_dir;  // worker logs ("" = the parent's stderr)
  // A run's probe in the run's own worker for the slot (Scheduler::probe), which then stays for
  // the run; unset, or returning nothing: in a worker process of its own (probe_on_slot).
  std::function<std::optional<ProbeResult>(const DeviceSlot&, const ProbeOptions&)> probe_in_worker;
  // MemAvailable as the run found it, before its workers loaded; 0: read when calibrating. A CPU
  // worker's memory limit is its share of this (or of max_memory).
  int64_t host_available_bytes = 0;
};

// The options a run config gives calibration for `model_dir`: its dtype, max_memory and cache,
// with `length` (the cost of the longest request) and recalibrate as the caller says.
CalibrationOptions calibration_options(const RunConfig& config, const std::string& executable,
                                       const std::string& model_dir, int64_t length, bool recalibrate);

// One budget per distinct device of `slots`, from the cache where it holds a fitting entry,
// else probed and stored. Logs one `[sched]` line per device.
std::vector<DeviceBudget> calibrate_devices(const std::vector<DeviceSlot>& slots, const CalibrationOptions& options);

// calibration.json: the devices with their points, choices and reasons.
nlohmann::json calibration_json(const std::vector<DeviceBudget>& budgets);
// A self-contained SVG: per device, tok/s and peak memory against batch tokens (log scale), the
// chosen point marked, points that do not fit drawn apart.
std::string calibration_svg(const std::vector<DeviceBudget>& budgets);
// The table `gpueval calibrate` prints.
std::string calibration_table(const std::vector<DeviceBudget>& budgets);

struct CalibrateCommandOptions {
  std::string executable;
  bool recalibrate = false;
  std::optional<std::string> output;  // --output; else the config's output
};

// `gpueval calibrate`: returns the process exit code.
int run_calibrate(const RunConfig& config, const CalibrateCommandOptions& options);

}  // namespace gpueval
