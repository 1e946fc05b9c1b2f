// Trend analysis over the history database (history.h): how each task's score moved from one
// checkpoint to the next, which documents flipped between right and wrong, whether the change
// is more than chance (exact McNemar test on the flips), and which tasks regressed at the
// newest checkpoint. Pure functions of their arguments: stateless and thread-safe.
//
// A task's *primary* metric is its first ScoreRow in the order the checkpoint's scores were
// recorded (results.json order: the first filter's first metric, e.g. acc), filter as stored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpueval/history.h"

namespace gpueval {

// Two-sided exact McNemar test: with b documents right->wrong and c wrong->right, the
// probability under "no change" (each discordant pair either way with p = 1/2) of a split at
// least as uneven: min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)]). 1 when b + c == 0.
// Computed in log space, so counts in the millions work. Negative counts are an Error.
double mcnemar_p(int64_t b, int64_t c);

// One (task, metric, filter) from one checkpoint to the next.
struct Comparison {
  std::string task, metric, filter;
  bool is_group = false;
  bool higher_is_better = true;
  std::string previous, current;  // checkpoint names
  double before = 0, after = 0;
  double delta = 0;  // after - before, raw units
  std::optional<double> stderr_before, stderr_after;
  // Flips, only for a binary per-document metric (every paired value 0 or 1; "right" is 1 when
  // higher is better) and only on its first filter's ScoreRow; else paired == 0 and no p_value.
  int64_t paired = 0;  // documents with a value at both checkpoints
  int64_t b = 0;  // right -> wrong
  int64_t c = 0;  // wrong -> right
  std::optional<double> p_value;  // mcnemar_p(b, c)
  std::vector<int64_t> lost;  // doc_ids right -> wrong, ascending (size b)
  std::vector<int64_t> gained;  // doc_ids wrong -> right, ascending (size c)
};

// A checkpoint against the one before it in the trend.
struct CheckpointStep {
  std::string previous, current;  // checkpoint names
  std::string previous_fp, current_fp;  // their fingerprints
  std::vector<Comparison> comparisons;  // every ScoreRow of `current` that `previous` also has, in current's order
};

// The task's primary ScoreRow of every task and group of a checkpoint, in its order.
std::vector<ScoreRow> primary_scores(const ScoredCheckpoint& checkpoint);

// `previous` -> `current`; the samples are each checkpoint's SampleRows (History::samples()).
CheckpointStep compare_checkpoints(const ScoredCheckpoint& previous, const ScoredCheckpoint& current,
                                   const std::vector<SampleRow>& previous_samples,
                                   const std::vector<SampleRow>& current_samples);

// Every consecutive pair of a trend: result[i] compares trend[i] with trend[i + 1]. `samples`
// is parallel to `trend` (Error otherwise).
std::vector<CheckpointStep> compare_trend(const std::vector<ScoredCheckpoint>& trend,
                                          const std::vector<std::vector<SampleRow>>& samples);

struct Regression {
  std::string task, metric, filter;
  bool is_group = false;
  std::string previous, current;  // checkpoint names
  double before = 0, after = 0;
  double drop_points = 0;  // how much worse, in percentage points when in_points, else raw units
  bool in_points = true;  // both values in [0, 1], so the drop is x100
};

// For each task's and group's primary metric at the newest checkpoint, the change from the
// checkpoint before it (the same task, metric and filter; tasks missing there are skipped).
// The drop follows higher_is_better (perplexity rising is a drop) and is in percentage points
// (x100) when both values are in [0, 1], raw units otherwise; a drop strictly greater than
// `points` is a regression (beyond a 1e-9 relative margin for rounding). Fewer than two checkpoints: none. In the
// newest checkpoint's order.
std::vector<Regression> find_regressions(const std::vector<ScoredCheckpoint>& trend, double points);

}  // namespace gpueval
