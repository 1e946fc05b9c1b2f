#include "tasks/metric_table.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gpueval/filters.h"

namespace gpueval {
namespace {

// numpy.argmax: the first maximum, or the first NaN if there is one.
size_t argmax(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return i;
    if (v[i] > v[best]) best = i;
  }
  return best;
}

MetricValue right_choice(const std::vector<size_t>& gold, const std::vector<double>& scores) {
  return MetricValue::scalar(std::find(gold.begin(), gold.end(), argmax(scores)) != gold.end() ? 1.0 : 0.0);
}

MetricValue choice_acc(const DocEvidence& e, const MetricSpec&) { return right_choice(e.gold, e.lls); }
// acc_norm divides by len(choice) of the Python str: code points, not bytes or tokens.
MetricValue choice_acc_norm(const DocEvidence& e, const MetricSpec&) { return right_choice(e.gold, e.by_chars); }
MetricValue choice_acc_bytes(const DocEvidence& e, const MetricSpec&) { return right_choice(e.gold, e.by_bytes); }
MetricValue choice_exact_match(const DocEvidence& e, const MetricSpec&) {
  return MetricValue::scalar(e.gold_greedy ? 1.0 : 0.0);
}
MetricValue gold_bpb(const DocEvidence& e, const MetricSpec&) { return MetricValue::scalar(e.bpb); }
MetricValue loglikelihood(const DocEvidence& e, const MetricSpec&) { return MetricValue::scalar(e.logprob); }
MetricValue greedy(const DocEvidence& e, const MetricSpec&) { return MetricValue::scalar(e.is_greedy ? 1.0 : 0.0); }
MetricValue per_word(const DocEvidence& e, const MetricSpec&) { return MetricValue::weighted(e.logprob, e.words); }
MetricValue per_byte(const DocEvidence& e, const MetricSpec&) { return MetricValue::weighted(e.logprob, e.bytes); }
// lm-eval's results[0]: the first response the pipeline leaves.
MetricValue first_right(const DocEvidence& e, const MetricSpec& spec) {
  return MetricValue::scalar(e.right(spec, e.answers.front()));
}
// The unbiased pass@k over every response left.
MetricValue pass_at(const DocEvidence& e, const MetricSpec& spec) {
  int64_t c = 0;
  for (const std::string& a : e.answers) c += e.right(spec, a) > 0 ? 1 : 0;
  return MetricValue::scalar(pass_at_k(static_cast<int64_t>(e.answers.size()), c, spec.k));
}
// Whether the majority answer of the first k responses is right.
MetricValue majority_at(const DocEvidence& e, const MetricSpec& spec) {
  const std::vector<std::string> first_k(e.answers.begin(), e.answers.begin() + spec.k);
  return MetricValue::scalar(e.right(spec, majority_vote(first_k)));
}

using A = Aggregation;
// Columns: name, aggregation, higher_is_better, compute per output type {multiple_choice, loglikelihood,
// loglikelihood_rolling, generate_until}, default per output type, exact_match's options, k prefix.
const std::vector<MetricRow> kRows = {
    {"perplexity", A::kPerplexity, false, {nullptr, loglikelihood, nullptr, nullptr}, {0, 1, 0, 0}, false, nullptr},
    {"acc", A::kMean, true, {choice_acc, greedy, nullptr, nullptr}, {1, 1, 0, 0}, false, nullptr},
    {"acc_norm", A::kMean, true, {choice_acc_norm, nullptr, nullptr, nullptr}, {1, 0, 0, 0}, false, nullptr},
    {"acc_bytes", A::kMean, true, {choice_acc_bytes, nullptr, nullptr, nullptr}, {0, 0, 0, 0}, false, nullptr},
    {"exact_match", A::kMean, true, {choice_exact_match, nullptr, nullptr, first_right}, {0, 0, 0, 1}, true, nullptr},
    {"word_perplexity",
     A::kWeightedPerplexity,
     false,
     {nullptr, nullptr, per_word, nullptr},
     {0, 0, 1, 0},
     false,
     nullptr},
    {"byte_perplexity",
     A::kWeightedPerplexity,
     false,
     {nullptr, nullptr, per_byte, nullptr},
     {0, 0, 1, 0},
     false,
     nullptr},
    {"bits_per_byte", A::kBitsPerByte, false, {nullptr, nullptr, per_byte, nullptr}, {0, 0, 1, 0}, false, nullptr},
    // gpueval's, opt-in: -logprob of the gold continuation / its UTF-8 bytes / ln 2, averaged over
    // documents (OLMo's in-training "bits per byte").
    {"bpb", A::kMean, false, {gold_bpb, gold_bpb, nullptr, nullptr}, {0, 0, 0, 0}, false, nullptr},
    // generate_until with repeats: the unbiased pass@k and majority-vote accuracy over k samples,
    // expanded per k by the task file's entry.
    {"pass_at_k", A::kMean, true, {nullptr, nullptr, nullptr, pass_at}, {0, 0, 0, 0}, true, "pass@"},
    {"maj_at_k", A::kMean, true, {nullptr, nullptr, nullptr, majority_at}, {0, 0, 0, 0}, true, "maj@"},
    // lm-eval's mbpp `!function utils.pass_at_1`: whether the first response's program passes.
    {"pass_at_1", A::kMean, true, {nullptr, nullptr, nullptr, first_right}, {0, 0, 0, 0}, false, nullptr},
};

size_t column(OutputType type) { return static_cast<size_t>(type); }

}  // namespace

const std::vector<MetricRow>& metric_rows() { return kRows; }

const MetricRow* metric_row(std::string_view name) {
  for (const MetricRow& row : kRows)
    if (name == row.name) return &row;
  return nullptr;
}

const MetricRow* metric_row_of(const MetricSpec& spec) {
  if (spec.k > 0) {
    for (const MetricRow& row : kRows)
      if (row.per_k && spec.name.rfind(row.per_k, 0) == 0) return &row;
  }
  return metric_row(spec.name);
}

std::vector<std::string> metrics_for(OutputType type) {
  std::vector<std::string> out;
  for (const MetricRow& row : kRows)
    if (row.compute[column(type)]) out.push_back(row.name);
  return out;
}

std::vector<std::string> default_metrics(OutputType type) {
  std::vector<std::string> out;
  for (const MetricRow& row : kRows)
    if (row.by_default[column(type)]) out.push_back(row.name);
  return out;
}

}  // namespace gpueval
