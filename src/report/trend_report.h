// The morning report of a nightly run: how every task of one config moved across the
// checkpoints in the history database (history.h, trend.h).
//   report.md    a table of checkpoints (oldest first) by task (each task's primary metric:
//                value ± stderr, the change from the checkpoint before, and the exact McNemar
//                p-value of that change), the regressions, and a summary of flipped documents;
//   report.html  a self-contained offline page (inline CSS and SVG, no scripts, no external
//                references, every input string HTML-escaped): per group and task a
//                score-versus-checkpoint line chart with a shaded ±stderr band (a dashed
//                line at the chance level where the scores have one, ScoreRow::chance; a
//                log10 axis with a tick per decade for perplexity-type metrics), under it the
//                table of each change with its flips (b right->wrong, c wrong->right) and p-value,
//                and the flipped doc_ids of the latest change (the first 20 each way, with counts).
// Output is a function of the inputs alone (no clock; same input, same bytes). Stateless and
// thread-safe, except that load_trend and write_trend_reports read through the caller's History.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/history.h"
#include "report/trend.h"

namespace gpueval {

// Everything a trend report shows, read from the history once.
struct TrendData {
  std::string config_fingerprint;
  nlohmann::json config;  // the config's latest run (History::config_of)
  std::vector<ScoredCheckpoint> trend;  // oldest first
  std::vector<CheckpointStep> steps;  // steps[i]: trend[i] -> trend[i + 1]
  std::optional<double> regression_points;  // set: the report lists find_regressions(trend, *it)
  std::vector<Regression> regressions;
};

// Reads the trend of `config_fingerprint` and every checkpoint's samples, and compares them.
TrendData load_trend(const History& history, const std::string& config_fingerprint,
                     std::optional<double> regression_points = std::nullopt);

// The checkpoint x task table as Markdown (also what `gpueval history` prints): one row per
// checkpoint, oldest first; per task (only `task` when non-empty) its primary metric's
// "value ± stderr" and the change from the row above ("+0.0167"), with the McNemar p-value
// when `steps` (parallel to trend minus one) is given. Groups first, then tasks, each in
// first-seen order.
std::string trend_table(const std::vector<ScoredCheckpoint>& trend, const std::vector<CheckpointStep>* steps = nullptr,
                        const std::string& task = "");

// Every task and group name in the trend, in first-seen order.
std::vector<std::string> trend_tasks(const std::vector<ScoredCheckpoint>& trend);

std::string trend_markdown(const TrendData& data);
std::string trend_html(const TrendData& data);

// Writes report.md and report.html for the config into output_dir (created if missing), each
// atomically (io::write_file_atomic).
void write_trend_reports(const std::string& output_dir, const History& history, const std::string& config_fingerprint,
                         std::optional<double> regression_points = std::nullopt);

}  // namespace gpueval
