// Batch probing: measures how a loaded model's throughput and memory grow with the batch token
// budget (PlanOptions::batch_tokens: rows x longest row, padding included) on its device, and
// picks the budget to run with. The sweep doubles the budget from min_tokens; each point runs
// one batch through execute_batch (executor.h, the path a run's batches take), best of
// `repeats`, and records tokens/s and the device's peak memory. The batch is either
//   - the run's own rows (ProbeOptions::sample, the plan's first and longest rows with their
//     shared prefix): the first batch the plan cut under the budget would have, so the probe
//     measures the run's real shapes; the sweep ends where the sample has no more rows; or
//   - budget/length synthetic rows of `length` tokens, every position scored (no sample: the
//     heaviest rows a length bucket allows; `gpueval calibrate`).
// A run's probe is bounded by the work it serves (ProbeOptions::work_tokens): it stops before
// a point that would take its time past max(max_share x the run's estimated time, min_seconds),
// the estimate being work_tokens at the best rate measured so far over `workers` workers.
// It stops at the first point that
// does not fit (an out-of-memory error, even one the executor recovered from by splitting, or a
// peak over safety x limit),
// before a CPU point whose peak, extrapolated linearly from the points before it, would not fit
// (so a probe never wakes the kernel's OOM killer), when throughput has not improved for
// `patience` doublings, at max_tokens, when a point took longer than max_point_seconds, or at
// the work bound above.
// The choice is the smallest fitting budget within `knee` of the best throughput: a larger batch
// that is no faster only costs memory and padding.
//
// Measures one model on one device; run it alone in its process, because peaks are
// process-wide (device_memory.h). Results are plain values with a JSON form for the wire.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/model.h"
#include "gpueval/tokenizer.h"
#include "plan/planner.h"
#include "run/prefix_cache.h"

namespace gpueval {

struct ProbePoint {
  int64_t batch_tokens = 0;  // the budget tried
  int64_t rows = 0;  // sequences in the batch: batch_tokens / length
  int64_t length = 0;  // tokens per row
  double tokens_per_second = 0;  // rows * length / best time; 0 when it did not run
  int64_t peak_bytes = 0;  // device peak while it ran; for a skipped point, the predicted peak
  bool fits = false;  // ran, and peak_bytes <= safety * memory limit
  std::string note;  // why it does not fit, or was skipped; empty otherwise
};

struct ProbeOptions {
  int64_t length = 128;  // tokens per row; clamped to 1..the model's context
  int64_t memory_limit_bytes = 0;  // what the process may use on its device; 0 = the device total
  double safety = 0.9;  // a point fits when its peak is at most safety * limit
  double knee = 0.95;  // choose the smallest budget with tok/s >= knee * best
  int64_t min_tokens = 256;
  int64_t max_tokens = int64_t{1} << 20;
  // Timed runs per point (after one untimed warm-up run); on a CPU a run of long_run_seconds or more
  // is not repeated, and such a warm-up is the measurement itself (a long run's time varies little, and
  // what a warm-up spends on first touches is small beside it: another long run would only lengthen
  // the probe, which a short run on a new checkpoint pays in full).
  int repeats = 2;
  double long_run_seconds = 2;
  int patience = 2;  // doublings without a throughput gain before stopping
  double max_point_seconds = 10;  // stop after a point whose slowest run took longer
  // The work bound: 0 = none. work_tokens is what the run will compute (its padded rows and
  // prefixes), shared by `workers` workers.
  int64_t work_tokens = 0;
  int workers = 1;
  double max_share = 0.1;  // of the run's estimated time
  double min_seconds = 1;  // a probe may always take this long
  // The run's rows (scoring items, longest first, with their prefix); absent: synthetic rows.
  std::optional<Batch> sample;
};

// The sample a run's probe measures: the plan's first batches (its longest rows) that share the
// first batch's prefix, as one batch, up to `max_tokens` padded tokens; absent when the plan's
// first batch generates text (the probe then uses synthetic rows).
std::optional<Batch> probe_sample(const Plan& plan, int64_t max_tokens);

struct ProbeResult {
  std::vector<ProbePoint> points;  // in sweep order (increasing budgets)
  int64_t chosen_batch_tokens = 0;
  int64_t memory_limit_bytes = 0;  // the limit the points were judged against
  std::string reason;  // why the sweep stopped and why that budget was chosen
  // The run's work when the work bound stopped the sweep (a later run with much more work probes
  // again rather than take this from the calibration cache); 0 when it did not.
  int64_t bounded_by_work_tokens = 0;
};

// Runs the sweep. Throws Error when not even the smallest budget fits. The sample's prefix is
// computed through `prefixes` when given (a worker's own cache: it then serves the run's batches
// with that prefix, with the same bits), else through a cache of the probe's own.
ProbeResult probe_batch_tokens(const DecoderModelImpl& model, const Tokenizer& tokenizer, const ProbeOptions& options,
                               PrefixCache* prefixes = nullptr);

// The choice rule alone: among fitting points, the smallest batch_tokens whose tok/s is at least
// knee * the best fitting tok/s; 0 when no point fits. `reason`, if given, says why.
int64_t choose_batch_tokens(const std::vector<ProbePoint>& points, double knee, std::string* reason = nullptr);

// Parses a memory amount: "6GiB", "512MiB", "2GB", "1048576" (bytes), or a share of
// `available_bytes` written as a number in (0, 1] ("0.5"). Throws Error("<where>: ...").
int64_t parse_memory_amount(const std::string& text, int64_t available_bytes, const std::string& where);

nlohmann::json to_json(const ProbePoint& point);
nlohmann::json to_json(const ProbeOptions& options);
nlohmann::json to_json(const ProbeResult& result);
ProbeOptions probe_options_from_json(const nlohmann::json& j);  // Error on a malformed object
ProbeResult probe_result_from_json(const nlohmann::json& j);  // Error on a malformed object

}  // namespace gpueval
