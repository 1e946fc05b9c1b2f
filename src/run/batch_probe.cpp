#include "run/batch_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "common/byte_amount.h"
#include "gpueval/error.h"
#include "plan/packing.h"
#include "run/device_memory.h"
#include "run/executor.h"
#include "run/prefix_cache.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// A batch of `rows` rolling-window items of length + 1 tokens (the last is only a target), every
// position scored: the heaviest batch a budget allows, run through the executor as a real batch
// is. Ids are a fixed function of (row, position), never 0..2 (pad/BOS/EOS).
Batch synthetic_batch(int64_t rows, int64_t length, int64_t vocab) {
  Batch batch;
  batch.items.resize(static_cast<size_t>(rows));
  batch.padded_tokens = rows * length;
  const int64_t span = std::max<int64_t>(vocab - 3, 1);
  for (int64_t r = 0; r < rows; ++r) {
    WorkItem& item = batch.items[static_cast<size_t>(r)];
    item.request_index = r;
    item.type = RequestType::kLoglikelihoodRolling;
    item.first_target = 1;
    item.tokens.resize(static_cast<size_t>(length + 1));
    for (int64_t j = 0; j <= length; ++j)
      item.tokens[static_cast<size_t>(j)] = static_cast<int32_t>(3 + (r * 7919 + j * 104729) % span);
  }
  return batch;
}

// The first batch the plan would cut from the sample's rows under `budget`: the sample's items
// re-cut (rebatch) with the sample's sharing and prefix.
Batch sample_batch(const Batch& sample, int64_t budget) {
  Plan plan;
  plan.batches.push_back(sample);
  PlanOptions o;
  o.batch_tokens = budget;
  o.group_continuations = sample.share_contexts;
  o.prefix_reuse = !sample.prefix.empty();
  o.min_prefix_tokens = std::max<int64_t>(1, static_cast<int64_t>(sample.prefix.size()));
  Plan cut = rebatch(plan, o);
  return std::move(cut.batches.front());
}

// One run of the batch (its prefix from `prefixes`, computed on the first run, as a worker keeps
// it); returns the row tokens it computed. An out-of-memory error the executor recovered from by
// splitting the batch is one here too, because the budget did not fit as asked.
int64_t run_once(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& batch, PrefixCache& prefixes) {
  ExecutionStats stats;
  ExecutionOptions o;
  o.prefixes = &prefixes;
  execute_batch(model, tokenizer, batch, o, &stats);
  TORCH_CHECK_WITH(OutOfMemoryError, stats.oom_splits == 0, "the batch ran out of memory and was split ",
                   stats.oom_splits, " time(s)");
  return stats.tokens_computed - stats.prefix_tokens;
}

// The peak a CPU point would reach, extrapolated linearly from the last two points `seen`
// ((budget, peak) pairs); 0 when there are fewer than two.
double predicted_peak(const std::vector<std::pair<double, double>>& seen, int64_t budget) {
  if (seen.size() < 2) return 0;
  const auto& [b1, m1] = seen[seen.size() - 2];
  const auto& [b2, m2] = seen.back();
  const double slope = std::max(0.0, (m2 - m1) / (b2 - b1));
  return m2 + slope * (static_cast<double>(budget) - b2);
}

// Runs `batch` once to warm up (when `warm_up`) and `repeats` times timed: point `p`'s tokens/s
// (the row tokens of the best run) and peak, or its note "out of memory". Returns the slowest
// timed run's seconds.
double measure_point(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& batch, int repeats,
                     double long_run_seconds, bool warm_up, PrefixCache& prefixes, ProbePoint& p) {
  const at::Device device = model.options().device;
  double best_s = 0, worst_s = 0;
  int64_t tokens = 0;
  reset_peak_memory(device);
  try {
    // The prefix is computed before the clock starts, as a worker computes it once for its batches.
    if (!batch.prefix.empty()) prefixes.get(model, batch.prefix);
    int timed = 0;
    if (warm_up) {  // first-touch allocations, kernel selection
      const auto t0 = Clock::now();
      tokens = run_once(model, tokenizer, batch, prefixes);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      // On a CPU a long warm-up is the measurement: what it spends on first touches is small beside it.
      if (device.is_cpu() && s >= long_run_seconds) {
        best_s = worst_s = s;
        timed = repeats;
      }
    }
    for (int i = timed; i < repeats; ++i) {
      const auto t0 = Clock::now();
      tokens = run_once(model, tokenizer, batch, prefixes);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      best_s = i == timed ? s : std::min(best_s, s);
      worst_s = std::max(worst_s, s);
      if (device.is_cpu() && s >= long_run_seconds) break;  // long enough to measure once
    }
  } catch (const c10::OutOfMemoryError& e) {
    p.note = "out of memory";
  }
  p.peak_bytes = peak_memory_bytes(device);
  if (p.note.empty()) p.tokens_per_second = static_cast<double>(tokens) / std::max(best_s, 1e-9);
  return worst_s;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int64_t choose_batch_tokens(const std::vector<ProbePoint>& points, double knee, std::string* reason) {
  double best = 0;
  int64_t best_tokens = 0;
  for (const ProbePoint& p : points)
    if (p.fits && p.tokens_per_second > best) {
      best = p.tokens_per_second;
      best_tokens = p.batch_tokens;
    }
  if (best_tokens == 0) {
    if (reason) *reason = "no budget fits";
    return 0;
  }
  int64_t chosen = 0;
  double chosen_tps = 0;
  for (const ProbePoint& p : points)
    if (p.fits && p.tokens_per_second >= knee * best && (chosen == 0 || p.batch_tokens < chosen)) {
      chosen = p.batch_tokens;
      chosen_tps = p.tokens_per_second;
    }
  if (reason) {
    if (chosen == best_tokens)
      *reason = fmt::format("{} tokens is the fastest fitting budget ({:.0f} tok/s)", chosen, best);
    else
      *reason = fmt::format(
          "{} tokens is the smallest fitting budget within {:.0f}% of the best ({:.0f} of {:.0f} "
          "tok/s at {})",
          chosen, 100 * knee, chosen_tps, best, best_tokens);
  }
  return chosen;
}

std::optional<Batch> probe_sample(const Plan& plan, int64_t max_tokens) {
  if (plan.batches.empty() || plan.batches.front().items.front().type == RequestType::kGenerateUntil) return {};
  const Batch& first = plan.batches.front();
  Batch sample;
  sample.share_contexts = first.share_contexts;
  sample.prefix = first.prefix;
  sample.prefix_id = first.prefix_id;
  int64_t tokens = 0;
  for (const Batch& b : plan.batches) {
    if (b.prefix_id != first.prefix_id || b.share_contexts != first.share_contexts ||
        b.items.front().type == RequestType::kGenerateUntil || tokens >= max_tokens)
      break;
    sample.items.insert(sample.items.end(), b.items.begin(), b.items.end());
    tokens += b.padded_tokens;
  }
  sample.padded_tokens = batch_padded_tokens(sample);
  return sample;
}

ProbeResult probe_batch_tokens(const DecoderModelImpl& model, const Tokenizer& tokenizer, const ProbeOptions& options,
                               PrefixCache* prefixes_in) {
  if (options.min_tokens < 1 || options.max_tokens < options.min_tokens || options.repeats < 1 ||
      !(options.safety > 0 && options.safety <= 1) || !(options.knee > 0 && options.knee <= 1) ||
      options.work_tokens < 0 || options.workers < 1 || !(options.max_share > 0) || !(options.min_seconds >= 0) ||
      !(options.long_run_seconds > 0))
    fail("batch probe", "bad options {}", to_json(options).dump());
  const at::Device device = model.options().device;
  const int64_t context = model.config().max_position_embeddings;
  const int64_t length = std::clamp<int64_t>(options.length, 1, std::max<int64_t>(context - 1, 1));
  const bool sampled = options.sample.has_value() && !options.sample->items.empty();
  ProbeResult result;
  result.memory_limit_bytes = options.memory_limit_bytes > 0 ? options.memory_limit_bytes : device_total_bytes(device);
  const double allowed = options.safety * static_cast<double>(result.memory_limit_bytes);
  const auto started = Clock::now();
  PrefixCache own_prefixes;
  PrefixCache& prefixes = prefixes_in ? *prefixes_in : own_prefixes;

  // (budget, peak) pairs to extrapolate from; budget 0 is the memory held before any batch ran.
  std::vector<std::pair<double, double>> seen = {{0.0, static_cast<double>(current_memory_bytes(device))}};
  std::string stop = fmt::format("reached max_tokens {}", options.max_tokens);
  double best_tps = 0;
  int stale = 0;
  int64_t first_budget = std::max(options.min_tokens, length);
  int64_t largest_batch = 0;  // sampled: the padded tokens of the whole sample's first batch
  if (sampled) {
    first_budget = options.min_tokens;
    for (const PackedRow& row : pack_rows(*options.sample))
      first_budget = std::max<int64_t>(first_budget, static_cast<int64_t>(row.tokens.size()));
    largest_batch = sample_batch(*options.sample, options.max_tokens).padded_tokens;
  }
  for (int64_t budget = first_budget; budget <= options.max_tokens; budget *= 2) {
    ProbePoint p;
    p.batch_tokens = budget;
    Batch batch;
    if (sampled) {
      batch = sample_batch(*options.sample, budget);
      p.rows = static_cast<int64_t>(pack_rows(batch).size());
      p.length = p.rows > 0 ? batch.padded_tokens / p.rows : 0;
    } else {
      p.length = length;
      p.rows = budget / length;
      batch = synthetic_batch(p.rows, p.length, model.config().vocab_size);
    }
    // A GPU warms up every shape (kernel selection, allocator growth); a CPU only once, and not even
    // then when computing the sample's prefix has touched every weight already.
    const bool warm_up = !device.is_cpu() || (result.points.empty() && (!sampled || batch.prefix.empty()));
    if (options.work_tokens > 0 && best_tps > 0) {
      // The work bound: this point's runs at the best rate so far, against the run's estimated time.
      const double run_s = static_cast<double>(options.work_tokens) / (best_tps * options.workers);
      const double limit_s = std::max(options.max_share * run_s, options.min_seconds);
      const double point_s =
          (options.repeats + (warm_up ? 1 : 0)) * static_cast<double>(batch.padded_tokens) / best_tps;
      if (seconds_since(started) + point_s > limit_s) {
        stop = fmt::format(
            "stopped before {} tokens: the probe would pass {:.1f}s ({:.0f}% of the run's estimated "
            "{:.1f}s, or {:.0f}s)",
            budget, limit_s, 100 * options.max_share, run_s, options.min_seconds);
        result.bounded_by_work_tokens = options.work_tokens;
        break;
      }
    }
    if (device.is_cpu() && seen.size() >= 2) {
      const double predicted = predicted_peak(seen, budget);
      if (predicted > allowed) {
        p.peak_bytes = static_cast<int64_t>(predicted);
        p.note = fmt::format("skipped: predicted peak {:.0f} MiB > {:.0f} MiB allowed", mib(p.peak_bytes),
                             allowed / (1 << 20));
        result.points.push_back(p);
        stop = fmt::format("stopped before {} tokens: its predicted peak would exceed {:.0f}% of the {:.0f} MiB limit",
                           budget, 100 * options.safety, mib(result.memory_limit_bytes));
        break;
      }
    }
    const double worst_s =
        measure_point(model, tokenizer, batch, options.repeats, options.long_run_seconds, warm_up, prefixes, p);
    if (!p.note.empty()) {  // out of memory
      release_cached_memory(device);
      result.points.push_back(p);
      stop = fmt::format("stopped at {} tokens: out of memory", budget);
      break;
    }
    p.fits = static_cast<double>(p.peak_bytes) <= allowed;
    if (!p.fits) p.note = fmt::format("peak {:.0f} MiB > {:.0f} MiB allowed", mib(p.peak_bytes), allowed / (1 << 20));
    result.points.push_back(p);
    if (!p.fits) {
      stop = fmt::format("stopped at {} tokens: its peak exceeds {:.0f}% of the {:.0f} MiB limit", budget,
                         100 * options.safety, mib(result.memory_limit_bytes));
      break;
    }
    seen.emplace_back(static_cast<double>(budget), static_cast<double>(p.peak_bytes));
    if (p.tokens_per_second > best_tps * 1.02) {
      best_tps = std::max(best_tps, p.tokens_per_second);
      stale = 0;
    } else {
      best_tps = std::max(best_tps, p.tokens_per_second);
      if (++stale >= options.patience) {
        stop = fmt::format("stopped at {} tokens: no throughput gain for {} doubling{}", budget, options.patience,
                           options.patience == 1 ? "" : "s");
        break;
      }
    }
    if (worst_s > options.max_point_seconds) {
      stop = fmt::format("stopped at {} tokens: one batch took {:.1f}s (> {:.0f}s)", budget, worst_s,
                         options.max_point_seconds);
      break;
    }
    if (sampled && batch.padded_tokens >= largest_batch) {
      stop = fmt::format("stopped at {} tokens: the run's rows fill no larger batch", budget);
      break;
    }
  }
  std::string why;
  result.chosen_batch_tokens = choose_batch_tokens(result.points, options.knee, &why);
  if (result.chosen_batch_tokens == 0)
    fail("batch probe", "not even {} tokens ({} rows of {}) fit on {}: {}", result.points.front().batch_tokens,
         result.points.front().rows, result.points.front().length, device.str(),
         result.points.front().note.empty() ? stop : result.points.front().note);
  result.reason = fmt::format("{}; {} (probe {:.1f}s)", stop, why, seconds_since(started));
  return result;
}

int64_t parse_memory_amount(const std::string& text, int64_t available_bytes, const std::string& where) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end != begin && *end == '\0' && value > 0 && value <= 1 && text[0] != '+')
    return static_cast<int64_t>(value * static_cast<double>(available_bytes));
  if (const std::optional<int64_t> bytes = parse_byte_amount(text, 1 << 20, where, ", or a share such as 0.5"))
    return *bytes;
  fail(where, "must be an amount such as 6GiB, 512MiB or a share of available memory such as 0.5, got '{}'", text);
}

nlohmann::json to_json(const ProbePoint& p) {
  return {{"batch_tokens", p.batch_tokens},
          {"rows", p.rows},
          {"length", p.length},
          {"tokens_per_second", p.tokens_per_second},
          {"peak_bytes", p.peak_bytes},
          {"fits", p.fits},
          {"note", p.note}};
}

nlohmann::json to_json(const ProbeOptions& o) {
  nlohmann::json j = {{"length", o.length},           {"memory_limit_bytes", o.memory_limit_bytes},
                      {"safety", o.safety},           {"knee", o.knee},
                      {"min_tokens", o.min_tokens},   {"max_tokens", o.max_tokens},
                      {"repeats", o.repeats},         {"long_run_seconds", o.long_run_seconds},
                      {"patience", o.patience},       {"max_point_seconds", o.max_point_seconds},
                      {"work_tokens", o.work_tokens}, {"workers", o.workers},
                      {"max_share", o.max_share},     {"min_seconds", o.min_seconds}};
  if (o.sample) j["sample"] = to_json(*o.sample);
  return j;
}

nlohmann::json to_json(const ProbeResult& r) {
  nlohmann::json points = nlohmann::json::array();
  for (const ProbePoint& p : r.points) points.push_back(to_json(p));
  nlohmann::json j = {{"points", points},
                      {"chosen_batch_tokens", r.chosen_batch_tokens},
                      {"memory_limit_bytes", r.memory_limit_bytes},
                      {"reason", r.reason}};
  if (r.bounded_by_work_tokens > 0) j["bounded_by_work_tokens"] = r.bounded_by_work_tokens;
  return j;
}

ProbeOptions probe_options_from_json(const nlohmann::json& j) {
  try {
    ProbeOptions o;
    o.length = j.at("length").get<int64_t>();
    o.memory_limit_bytes = j.at("memory_limit_bytes").get<int64_t>();
    o.safety = j.at("safety").get<double>();
    o.knee = j.at("knee").get<double>();
    o.min_tokens = j.at("min_tokens").get<int64_t>();
    o.max_tokens = j.at("max_tokens").get<int64_t>();
    o.repeats = j.at("repeats").get<int>();
    o.long_run_seconds = j.value("long_run_seconds", 2.0);
    o.patience = j.at("patience").get<int>();
    o.max_point_seconds = j.at("max_point_seconds").get<double>();
    o.work_tokens = j.value("work_tokens", int64_t{0});
    o.workers = j.value("workers", 1);
    o.max_share = j.value("max_share", 0.1);
    o.min_seconds = j.value("min_seconds", 1.0);
    if (j.contains("sample")) o.sample = batch_from_json(j.at("sample"));
    return o;
  } catch (const nlohmann::json::exception& e) {
    fail("probe options", "malformed: {}", e.what());
  }
}

ProbeResult probe_result_from_json(const nlohmann::json& j) {
  try {
    ProbeResult r;
    for (const auto& pj : j.at("points")) {
      ProbePoint p;
      p.batch_tokens = pj.at("batch_tokens").get<int64_t>();
      p.rows = pj.at("rows").get<int64_t>();
      p.length = pj.at("length").get<int64_t>();
      p.tokens_per_second = pj.at("tokens_per_second").get<double>();
      p.peak_bytes = pj.at("peak_bytes").get<int64_t>();
      p.fits = pj.at("fits").get<bool>();
      p.note = pj.at("note").get<std::string>();
      r.points.push_back(p);
    }
    r.chosen_batch_tokens = j.at("chosen_batch_tokens").get<int64_t>();
    r.memory_limit_bytes = j.at("memory_limit_bytes").get<int64_t>();
    r.reason = j.at("reason").get<std::string>();
    r.bounded_by_work_tokens = j.value("bounded_by_work_tokens", int64_t{0});
    return r;
  } catch (const nlohmann::json::exception& e) {
    fail("probe result", "malformed: {}", e.what());
  }
}

}  // namespace gpueval
