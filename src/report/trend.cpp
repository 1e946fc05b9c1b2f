#include "report/trend.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "gpueval/error.h"

namespace gpueval {
namespace {

using RowKey = std::tuple<std::string, std::string, std::string>;  // task, metric, filter

RowKey key_of(const ScoreRow& r) { return {r.task, r.metric, r.filter}; }

// task -> metric -> doc_id -> value
using SampleIndex = std::map<std::string, std::map<std::string, std::map<int64_t, double>>>;

SampleIndex index_samples(const std::vector<SampleRow>& samples) {
  SampleIndex index;
  for (const SampleRow& s : samples) index[s.task][s.metric][s.doc_id] = s.value;
  return index;
}

const std::map<int64_t, double>* find_values(const SampleIndex& index, const std::string& task,
                                             const std::string& metric) {
  const auto t = index.find(task);
  if (t == index.end()) return nullptr;
  const auto m = t->second.find(metric);
  return m == t->second.end() ? nullptr : &m->second;
}

bool is_binary(double v) { return v == 0.0 || v == 1.0; }

// Fills the flip fields of `c` from the paired per-document values, when they are all 0/1.
void add_flips(Comparison& c, const std::map<int64_t, double>& before, const std::map<int64_t, double>& after) {
  int64_t paired = 0;
  std::vector<int64_t> lost, gained;
  for (const auto& [doc, x] : before) {
    const auto it = after.find(doc);
    if (it == after.end()) continue;
    const double y = it->second;
    if (!is_binary(x) || !is_binary(y)) return;  // not a right/wrong metric: no flips
    ++paired;
    const bool right_before = (x == 1.0) == c.higher_is_better;
    const bool right_after = (y == 1.0) == c.higher_is_better;
    if (right_before && !right_after) lost.push_back(doc);
    if (!right_before && right_after) gained.push_back(doc);
  }
  if (paired == 0) return;
  c.paired = paired;
  c.b = static_cast<int64_t>(lost.size());
  c.c = static_cast<int64_t>(gained.size());
  c.p_value = mcnemar_p(c.b, c.c);
  c.lost = std::move(lost);
  c.gained = std::move(gained);
}

}  // namespace

double mcnemar_p(int64_t b, int64_t c) {
  if (b < 0 || c < 0) fail("mcnemar_p", "negative count (b={}, c={})", b, c);
  const int64_t n = b + c;
  if (n == 0) return 1.0;
  const int64_t k_max = std::min(b, c);
  // log P[X = k] = lgamma(n+1) - lgamma(k+1) - lgamma(n-k+1) - n ln 2; summed with log-sum-exp
  // around the largest term (k = k_max, as k_max <= n/2).
  const double dn = static_cast<double>(n);
  const double base = std::lgamma(dn + 1) - dn * std::log(2.0);
  auto log_term = [&](int64_t k) {
    const double dk = static_cast<double>(k);
    return base - std::lgamma(dk + 1) - std::lgamma(dn - dk + 1);
  };
  const double top = log_term(k_max);
  double sum = 0;
  for (int64_t k = k_max; k >= 0; --k) {
    const double t = std::exp(log_term(k) - top);
    sum += t;
    if (t < 1e-18 * sum) break;  // the terms fall faster than geometrically from here down
  }
  const double p = 2.0 * std::exp(top + std::log(sum));
  return std::min(1.0, p);
}

std::vector<ScoreRow> primary_scores(const ScoredCheckpoint& checkpoint) {
  std::vector<ScoreRow> out;
  std::set<std::string> seen;
  for (const ScoreRow& r : checkpoint.scores) {
    if (seen.insert(r.task).second) out.push_back(r);
  }
  return out;
}

CheckpointStep compare_checkpoints(const ScoredCheckpoint& previous, const ScoredCheckpoint& current,
                                   const std::vector<SampleRow>& previous_samples,
                                   const std::vector<SampleRow>& current_samples) {
  CheckpointStep step;
  step.previous = previous.checkpoint.name;
  step.current = current.checkpoint.name;
  step.previous_fp = previous.checkpoint.fingerprint;
  step.current_fp = current.checkpoint.fingerprint;
  std::map<RowKey, const ScoreRow*> before;
  for (const ScoreRow& r : previous.scores) before.emplace(key_of(r), &r);
  const SampleIndex samples_before = index_samples(previous_samples);
  const SampleIndex samples_after = index_samples(current_samples);
  std::set<std::pair<std::string, std::string>> flips_done;  // samples belong to a metric's first filter
  for (const ScoreRow& r : current.scores) {
    const auto it = before.find(key_of(r));
    if (it == before.end()) continue;
    const ScoreRow& p = *it->second;
    Comparison c;
    c.task = r.task;
    c.metric = r.metric;
    c.filter = r.filter;
    c.is_group = r.is_group;
    c.higher_is_better = r.higher_is_better;
    c.previous = step.previous;
    c.current = step.current;
    c.before = p.value;
    c.after = r.value;
    c.delta = r.value - p.value;
    c.stderr_before = p.stderr_value;
    c.stderr_after = r.stderr_value;
    if (!r.is_group && flips_done.insert({r.task, r.metric}).second) {
      const auto* x = find_values(samples_before, r.task, r.metric);
      const auto* y = find_values(samples_after, r.task, r.metric);
      if (x && y) add_flips(c, *x, *y);
    }
    step.comparisons.push_back(std::move(c));
  }
  return step;
}

std::vector<CheckpointStep> compare_trend(const std::vector<ScoredCheckpoint>& trend,
                                          const std::vector<std::vector<SampleRow>>& samples) {
  if (samples.size() != trend.size()) {
    fail("compare_trend", "{} sample sets for {} checkpoints", samples.size(), trend.size());
  }
  std::vector<CheckpointStep> out;
  for (size_t i = 1; i < trend.size(); ++i) {
    out.push_back(compare_checkpoints(trend[i - 1], trend[i], samples[i - 1], samples[i]));
  }
  return out;
}

std::vector<Regression> find_regressions(const std::vector<ScoredCheckpoint>& trend, double points) {
  std::vector<Regression> out;
  if (trend.size() < 2) return out;
  const ScoredCheckpoint& previous = trend[trend.size() - 2];
  const ScoredCheckpoint& current = trend.back();
  std::map<RowKey, const ScoreRow*> before;
  for (const ScoreRow& r : previous.scores) before.emplace(key_of(r), &r);
  for (const ScoreRow& r : primary_scores(current)) {
    const auto it = before.find(key_of(r));
    if (it == before.end()) continue;
    const double x = it->second->value, y = r.value;
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    Regression g;
    g.task = r.task;
    g.metric = r.metric;
    g.filter = r.filter;
    g.is_group = r.is_group;
    g.previous = previous.checkpoint.name;
    g.current = current.checkpoint.name;
    g.before = x;
    g.after = y;
    g.in_points = x >= 0 && x <= 1 && y >= 0 && y <= 1;
    const double drop = r.higher_is_better ? x - y : y - x;
    g.drop_points = g.in_points ? drop * 100 : drop;
    // A drop of exactly `points` is not one, even where x100 leaves a last-bit excess (0.70 - 0.69).
    if (g.drop_points > points + 1e-9 * std::max(1.0, std::fabs(points))) out.push_back(std::move(g));
  }
  return out;
}

}  // namespace gpueval
