#include "evaluation/calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "evaluation/run_inputs.h"
#include "gpueval/error.h"
#include "gpueval/evaluation.h"
#include "gpueval/model.h"
#include "model/config/dtype.h"
#include "model/loading/model_fingerprint.h"
#include "report/chart.h"
#include "report/report_html.h"
#include "run/device_memory.h"
#include "run/scheduler.h"
#include "store/calibration_cache.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

// A probe's own worker silent this long (no heartbeat, no reply) is taken for hung.
constexpr double kProbeSilenceSeconds = 120;

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

at::Device device_of(const DeviceSlot& slot) {
  return slot.kind == DeviceSlot::Kind::kCpu ? at::Device(at::kCPU)
                                             : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(slot.index));
}

}  // namespace

ProbeResult probe_on_slot(const DeviceSlot& slot, const std::string& executable, const std::string& model_dir,
                          const std::string& dtype, const ProbeOptions& options, const std::string& log_dir) {
  SchedulerOptions so;
  so.slots = {slot};
  so.executable = executable;
  so.dtype = dtype;
  so.log_dir = log_dir;
  so.log_name = "probe";
  so.heartbeat_timeout_s = kProbeSilenceSeconds;
  Scheduler scheduler(std::move(so));  // its destructor ends the worker
  std::optional<ProbeResult> result = scheduler.probe(slot, model_dir, options);
  // A new worker with load: mmap always takes the probe; absent would be a scheduler bug.
  if (!result) throw Error(fmt::format("probe on {}: the scheduler did not start a worker for it", slot.name()));
  return std::move(*result);
}

namespace {

// The cached budget for `key`, if the cache holds one whose measured peak fits `b`'s limit too:
// then `b` takes it and true. A malformed or unfitting entry is logged and means probing.
bool take_from_cache(const CalibrationCache& cache, const CalibrationKey& key, double safety, int64_t work_tokens,
                     DeviceBudget& b) {
  std::optional<CalibrationEntry> hit = cache.lookup(key);
  if (!hit) return false;
  ProbeResult cached;
  try {
    cached = probe_result_from_json(hit->probe);
  } catch (const Error& e) {
    std::cerr << fmt::format("[sched] warning: calibration cache {}: {}; probing again\n", cache.path(), e.what());
    return false;
  }
  if (cached.bounded_by_work_tokens > 0 && work_tokens > 2 * cached.bounded_by_work_tokens) {
    std::cerr << fmt::format(
        "[sched] calibration cache: {} tokens for {} came from a probe cut short by a run of {} "
        "tokens; this run has {}, probing again\n",
        hit->batch_tokens, b.device, cached.bounded_by_work_tokens, work_tokens);
    return false;
  }
  int64_t peak = 0;
  for (const ProbePoint& p : cached.points)
    if (p.batch_tokens == hit->batch_tokens) peak = p.peak_bytes;
  if (b.memory_limit_bytes == 0 || static_cast<double>(peak) <= safety * static_cast<double>(b.memory_limit_bytes)) {
    b.batch_tokens = hit->batch_tokens;
    b.source = "cache";
    b.probe = std::move(cached);
    std::cerr << fmt::format("[sched] batch budget {} tokens for {} (calibration cache)\n", b.batch_tokens, b.device);
    return true;
  }
  std::cerr << fmt::format(
      "[sched] calibration cache: {} tokens for {} peaked at {:.0f} MiB, over this run's "
      "{:.0f} MiB limit; probing again\n",
      hit->batch_tokens, b.device, mib(peak), mib(b.memory_limit_bytes));
  return false;
}

// Probes `b`'s device in a worker of its own and stores the choice in the cache.
void probe_and_store(const CalibrationOptions& o, ProbeOptions po, const at::Device& device,
                     const CalibrationCache& cache, const CalibrationKey& key, DeviceBudget& b) {
  po.memory_limit_bytes = b.memory_limit_bytes;
  // Longer than the bucket's length never happens in this run; probing at the bucket's upper
  // end keeps one cache entry valid for every run in the bucket.
  po.length = std::max<int64_t>(1, length_bucket(o.length));
  const std::string rows = po.sample ? fmt::format("the run's first {} rows", po.sample->items.size())
                                     : fmt::format("rows of {} tokens", po.length);
  const std::string bound = po.work_tokens > 0 ? fmt::format(", at most {:.0f}% of the run's work or {:.0f}s",
                                                             100 * po.max_share, po.min_seconds)
                                               : "";
  std::cerr << fmt::format(
      "[sched] probing batch budgets on {} ({}, {}, limit {:.0f} MiB{})\n", b.slot.name(), b.device, rows,
      b.memory_limit_bytes > 0 ? mib(b.memory_limit_bytes) : mib(device_total_bytes(device)), bound);
  const auto t0 = Clock::now();
  std::optional<ProbeResult> in_worker;
  if (o.probe_in_worker) in_worker = o.probe_in_worker(b.slot, po);
  b.probe =
      in_worker ? std::move(*in_worker) : probe_on_slot(b.slot, o.executable, o.model_dir, o.dtype, po, o.log_dir);
  b.batch_tokens = b.probe.chosen_batch_tokens;
  b.source = "probed";
  if (b.memory_limit_bytes == 0) b.memory_limit_bytes = b.probe.memory_limit_bytes;
  std::cerr << fmt::format("[sched] batch budget {} tokens for {} (probed in {:.1f}s{}: {})\n", b.batch_tokens,
                           b.device, std::chrono::duration<double>(Clock::now() - t0).count(),
                           in_worker ? fmt::format(" in worker {}", b.slot.name()) : "", b.probe.reason);
  CalibrationEntry entry;
  entry.batch_tokens = b.batch_tokens;
  entry.memory_limit_bytes = b.probe.memory_limit_bytes;
  entry.probe = to_json(b.probe);
  cache.store(key, entry);
}

}  // namespace

CalibrationOptions calibration_options(const RunConfig& config, const std::string& executable,
                                       const std::string& model_dir, int64_t length, bool recalibrate) {
  CalibrationOptions co;
  co.executable = executable;
  co.model_dir = model_dir;
  co.dtype = config.dtype;
  co.max_memory = config.max_memory;
  co.cache_path = CalibrationCache::default_path(config.calibration_cache);
  co.length = length;
  co.recalibrate = recalibrate;
  return co;
}

std::vector<DeviceBudget> calibrate_devices(const std::vector<DeviceSlot>& slots, const CalibrationOptions& o) {
  if (slots.empty()) fail("calibration", "no device slots");
  // Distinct devices in slot order: "cpu" for every CPU slot, "cuda:N" per GPU.
  std::vector<DeviceBudget> budgets;
  std::map<std::string, size_t> index;
  int cpu_workers = 0;
  for (const DeviceSlot& s : slots) {
    const std::string key = s.kind == DeviceSlot::Kind::kCpu ? "cpu" : "cuda:" + std::to_string(s.index);
    if (s.kind == DeviceSlot::Kind::kCpu) ++cpu_workers;
    auto [it, inserted] = index.emplace(key, budgets.size());
    if (!inserted) {
      ++budgets[it->second].workers;
      continue;
    }
    DeviceBudget b;
    b.slot = s;
    budgets.push_back(b);
  }
  const std::string fingerprint = model_fingerprint(o.model_dir);
  const CalibrationCache cache(o.cache_path);
  ProbeOptions po;
  po.length = o.length;
  if (o.full_sweep) {
    po.repeats = 3;
    po.patience = 2;
    po.max_point_seconds = 20;
  } else {
    // A run's probe: its own rows, stopped at the first budget past the knee and by the work it serves.
    po.repeats = 1;
    po.patience = 1;
    po.max_point_seconds = 5;
    po.sample = o.sample;
    po.work_tokens = o.work_tokens;
    po.workers = static_cast<int>(slots.size());
  }
  for (DeviceBudget& b : budgets) {
    const at::Device device = device_of(b.slot);
    b.device = device_description(device, b.slot.threads);
    b.dtype = dtype_name(resolve_dtype(o.dtype, device, o.model_dir));  // what the worker will load
    if (b.slot.kind == DeviceSlot::Kind::kCpu) {
      const int64_t available = o.host_available_bytes > 0 ? o.host_available_bytes : available_host_bytes();
      b.memory_limit_bytes = o.max_memory.empty()
                                 ? static_cast<int64_t>(0.8 * static_cast<double>(available) / std::max(1, cpu_workers))
                                 : parse_memory_amount(o.max_memory, available, o.max_memory_where);
    } else if (b.workers > 1) {
      b.memory_limit_bytes = device_total_bytes(device) / b.workers;
    }
    const CalibrationKey key{fingerprint, b.dtype, b.device, length_bucket(o.length)};
    if (!o.recalibrate && take_from_cache(cache, key, po.safety, po.work_tokens, b)) continue;
    probe_and_store(o, po, device, cache, key, b);
  }
  return budgets;
}

nlohmann::json calibration_json(const std::vector<DeviceBudget>& budgets) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceBudget& b : budgets)
    devices.push_back({{"slot", b.slot.name()},
                       {"workers", b.workers},
                       {"device", b.device},
                       {"dtype", b.dtype},
                       {"memory_limit_bytes", b.probe.memory_limit_bytes},
                       {"batch_tokens", b.batch_tokens},
                       {"source", b.source},
                       {"probe", to_json(b.probe)}});
  return {{"version", GPUEVAL_VERSION}, {"devices", devices}};
}

std::string calibration_table(const std::vector<DeviceBudget>& budgets) {
  std::string out = fmt::format("{:<44} {:>12} {:>6} {:>12} {:>9} {:>5}  {}\n", "device", "batch_tokens", "rows",
                                "tok/s", "peak MiB", "fits", "chosen");
  for (const DeviceBudget& b : budgets) {
    for (const ProbePoint& p : b.probe.points) {
      const bool chosen = p.batch_tokens == b.batch_tokens && p.fits;
      std::string dev = b.device.size() > 44 ? b.device.substr(0, 44) : b.device;
      out += fmt::format("{:<44} {:>12} {:>6} {:>12.0f} {:>9.1f} {:>5}  {}{}\n", dev, p.batch_tokens, p.rows,
                         p.tokens_per_second, mib(p.peak_bytes), p.fits ? "yes" : "no", chosen ? "*" : "",
                         p.note.empty() ? "" : (chosen ? " " : "") + p.note);
    }
    out += fmt::format("{:<44} chosen {} tokens ({}): {}\n", b.device.size() > 44 ? b.device.substr(0, 44) : b.device,
                       b.batch_tokens, b.source, b.probe.reason);
  }
  return out;
}

namespace {

constexpr double kSvgWidth = 720, kSvgPanel = 280, kSvgLeft = 80, kSvgRight = 80, kSvgTop = 40, kSvgBottom = 50;

// One device's panel of calibration.svg, `y0` pixels down: tok/s (left axis, solid) and peak
// memory (right axis, dashed) against the batch budget on a log2 axis, the chosen point ringed.
void calibration_panel(chart::Svg& svg, const DeviceBudget& b, double y0) {
  const double plot_w = kSvgWidth - kSvgLeft - kSvgRight, plot_h = kSvgPanel - kSvgTop - kSvgBottom;
  double lo = 1e300, hi = 0, max_tps = 0, max_mem = static_cast<double>(b.probe.memory_limit_bytes);
  for (const ProbePoint& p : b.probe.points) {
    lo = std::min(lo, std::log2(static_cast<double>(p.batch_tokens)));
    hi = std::max(hi, std::log2(static_cast<double>(p.batch_tokens)));
    max_tps = std::max(max_tps, p.tokens_per_second);
    max_mem = std::max(max_mem, static_cast<double>(p.peak_bytes));
  }
  svg.text("", kSvgLeft, y0 + 20, " font-weight=\"bold\"",
           fmt::format("{} ({}, {}): {} tokens", b.device, b.dtype, b.source, b.batch_tokens))
      .raw("\n");
  if (b.probe.points.empty()) return;
  if (hi <= lo) hi = lo + 1;
  if (max_tps <= 0) max_tps = 1;
  if (max_mem <= 0) max_mem = 1;
  const double top = y0 + kSvgTop, bottom = top + plot_h;
  const chart::Scale x_scale{lo, hi, kSvgLeft, kSvgLeft + plot_w};
  auto x_of = [&](int64_t t) { return x_scale(std::log2(static_cast<double>(t))); };
  const chart::Scale y_tps{0, max_tps * 1.1, bottom, top}, y_mem{0, max_mem * 1.1, bottom, top};
  // Axes: x ticks at each point, left tok/s, right MiB.
  for (const ProbePoint& p : b.probe.points) {
    const double x = x_of(p.batch_tokens);
    svg.line("grid", x, top, x, bottom)
        .text("", x, bottom + 15, " text-anchor=\"middle\"", std::to_string(p.batch_tokens))
        .raw("\n");
  }
  for (int i = 0; i <= 4; ++i) {
    const double f = i / 4.0;
    const double y = y_tps(f * max_tps * 1.1);
    svg.line("grid", kSvgLeft, y, kSvgLeft + plot_w, y)
        .text("", kSvgLeft - 6, y + 4, " text-anchor=\"end\"", fmt::format("{:.0f}", f * max_tps * 1.1))
        .text("", kSvgLeft + plot_w + 6, y + 4, "", fmt::format("{:.0f}", f * max_mem * 1.1 / (1 << 20)))
        .raw("\n");
  }
  svg.text("", 10.0, top - 8, " fill=\"#4c78a8\"", "tok/s")
      .text("", kSvgWidth - 6, top - 8, " text-anchor=\"end\"", "peak MiB (dashed)")
      .text("", kSvgLeft + plot_w / 2, y0 + kSvgPanel - 12, " text-anchor=\"middle\"", "batch tokens (rows x length)")
      .raw("\n");
  if (b.probe.memory_limit_bytes > 0) {
    const double y = y_mem(0.9 * static_cast<double>(b.probe.memory_limit_bytes));
    svg.line("limit", kSvgLeft, y, kSvgLeft + plot_w, y, "90% of the memory limit").raw("\n");
  }
  std::vector<chart::Point> tps_line, mem_line;
  for (const ProbePoint& p : b.probe.points) {
    const double x = x_of(p.batch_tokens);
    if (p.tokens_per_second > 0) tps_line.emplace_back(x, y_tps(p.tokens_per_second));
    mem_line.emplace_back(x, y_mem(static_cast<double>(p.peak_bytes)));
  }
  svg.polyline("tps", tps_line).raw("\n").polyline("mem", mem_line).raw("\n");
  for (const ProbePoint& p : b.probe.points) {
    const double x = x_of(p.batch_tokens);
    const std::string title = fmt::format("{} tokens, {} rows: {:.0f} tok/s, peak {:.1f} MiB{}{}", p.batch_tokens,
                                          p.rows, p.tokens_per_second, mib(p.peak_bytes),
                                          p.fits ? "" : ", does not fit", p.note.empty() ? "" : " (" + p.note + ")");
    if (p.tokens_per_second > 0)
      svg.circle(p.fits ? "pt" : "nofit", x, y_tps(p.tokens_per_second), 4, "", title).raw("\n");
    svg.rect(p.fits ? "mpt" : "nofit", x - 3.5, y_mem(static_cast<double>(p.peak_bytes)) - 3.5, 7, 7, "", title)
        .raw("\n");
    if (p.fits && p.batch_tokens == b.batch_tokens)
      svg.circle("chosen", x, y_tps(p.tokens_per_second), 9,
                 chart::Svg::attr("data-chosen", std::to_string(p.batch_tokens)), "chosen: " + title)
          .raw("\n");
  }
}

}  // namespace

std::string calibration_svg(const std::vector<DeviceBudget>& budgets) {
  const double height = kSvgPanel * static_cast<double>(std::max<size_t>(budgets.size(), 1));
  chart::Svg svg(1, "xmlns=\"http://www.w3.org/2000/svg\"", kSvgWidth, height, "batch budget calibration");
  svg.raw(
      "<style>text{font-family:ui-monospace,'DejaVu Sans Mono',Menlo,monospace;font-size:11px;fill:#1d2433}"
      ".grid{stroke:#e3e6ec}.tps{stroke:#4c78a8;fill:none;stroke-width:2}.mem{stroke:#e8871e;fill:none;"
      "stroke-width:2;stroke-dasharray:5 3}.limit{stroke:#c0392b;stroke-dasharray:2 3}.nofit{fill:#c0392b}"
      ".pt{fill:#4c78a8}.mpt{fill:#e8871e}.chosen{fill:none;stroke:#1d2433;stroke-width:2}</style>\n");
  for (size_t d = 0; d < budgets.size(); ++d) calibration_panel(svg, budgets[d], kSvgPanel * static_cast<double>(d));
  return svg.finish();
}

int run_calibrate(const RunConfig& config, const CalibrateCommandOptions& options) {
  const RunInputs in = load_run_inputs(config, options.executable);
  const std::string output = options.output ? *options.output : config.output;
  io::make_directories(output);
  io::make_directories(output + "/logs");
  CalibrationOptions co =
      calibration_options(config, options.executable, in.model_dir, longest_item_cost(in), options.recalibrate);
  co.full_sweep = true;
  co.log_dir = output + "/logs";
  std::cerr << fmt::format("[sched] calibrating {} on {}: longest request {} tokens; cache {}\n", in.model_dir, in.spec,
                           co.length, co.cache_path);
  const std::vector<DeviceBudget> budgets = calibrate_devices(in.slots, co);
  std::cout << calibration_table(budgets) << std::flush;
  io::write_file_atomic(output + "/calibration.json", calibration_json(budgets).dump(2) + "\n");
  io::write_file_atomic(output + "/calibration.svg", calibration_svg(budgets));
  std::cerr << fmt::format("[sched] wrote {0}/calibration.json and {0}/calibration.svg\n", output);
  return 0;
}

}  // namespace gpueval
