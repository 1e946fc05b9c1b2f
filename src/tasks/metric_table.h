// The metric table: one row per metric gpueval computes (acc, acc_norm, ..., pass_at_k, maj_at_k), with
// lm-eval's aggregation and direction, the output types it is computed for and how, which output types
// get it by default, and the options it takes. Adding a metric is a row here. Read by builtin_metric
// (metrics.cpp), the task parser (task_parse.cpp: metric_list, defaults, options, order) and
// Task::process_results (task_requests.cpp), which fills a DocEvidence and asks each row for its value.
// Calls metrics.h only; stateless and thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpueval/metrics.h"
#include "gpueval/task.h"

namespace gpueval {

// What one document's request results say, as the metric rows read it (Task::process_results fills
// the part of its output type).
struct DocEvidence {
  // multiple_choice: per choice, its loglikelihood, and the same divided by its length in code points
  // and in UTF-8 bytes; the gold choices; whether a gold continuation was the greedy one.
  std::vector<double> lls, by_chars, by_bytes;
  std::vector<size_t> gold;
  bool gold_greedy = false;
  // loglikelihood and loglikelihood_rolling: the one request's loglikelihood; loglikelihood: is_greedy.
  double logprob = 0;
  bool is_greedy = false;
  // multiple_choice and loglikelihood: the gold continuation's bits per UTF-8 byte.
  double bpb = 0;
  // loglikelihood_rolling: the words and UTF-8 bytes of the document's text.
  int64_t words = 0, bytes = 0;
  // generate_until: the responses the filter pipeline left (at least k of them for a k-metric), and
  // whether a response is right for a metric (its program passed, or it matches a gold answer).
  std::vector<std::string> answers;
  std::function<double(const MetricSpec&, const std::string&)> right;
};

// A metric's value for one document; `spec` carries k and exact_match's options.
using MetricFn = MetricValue (*)(const DocEvidence& evidence, const MetricSpec& spec);

struct MetricRow {
  const char* name;
  Aggregation aggregation;  // lm_eval/api/metrics.py's register_metric for the name
  bool higher_is_better;
  // Per OutputType (in its order: multiple_choice, loglikelihood, loglikelihood_rolling,
  // generate_until): how the value is computed, nullptr where the metric does not apply.
  MetricFn compute[4];
  // The output types whose tasks get it without a metric_list (lm-eval's DEFAULT_METRIC_REGISTRY).
  bool by_default[4];
  bool match_options;  // takes exact_match's options (regexes_to_ignore, ignore_case, ...)
  const char* per_k;  // "pass@", "maj@": one spec per k of the entry, named per_k + k; nullptr: no k
};

// Every row, in the order lm-eval's process_results computes the metrics of each output type.
const std::vector<MetricRow>& metric_rows();

// The row named `name` (a metric_list name, not an expanded "pass@4"); nullptr if none.
const MetricRow* metric_row(std::string_view name);

// The row a task's spec comes from ("pass@4": pass_at_k); nullptr if none.
const MetricRow* metric_row_of(const MetricSpec& spec);

// The names computed for `type`, in row order; the names its tasks get by default.
std::vector<std::string> metrics_for(OutputType type);
std::vector<std::string> default_metrics(OutputType type);

}  // namespace gpueval
