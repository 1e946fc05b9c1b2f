#include "gpueval/metrics.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

std::vector<MetricValue> scalars(const std::vector<double>& xs) {
  std::vector<MetricValue> out;
  for (const double x : xs) out.push_back(MetricValue::scalar(x));
  return out;
}

TEST(MetricsTest, MeanAndItsStandardErrorByHand) {
  // mean 0.75; squared deviations 3 * 0.0625 + 0.5625 = 0.75; / (n - 1) = 0.25; sd 0.5; / sqrt(4).
  const auto items = scalars({1, 0, 1, 1});
  EXPECT_EQ(aggregate(Aggregation::kMean, items), 0.75);
  EXPECT_EQ(aggregate_stderr(Aggregation::kMean, items), 0.25);
  EXPECT_EQ(sample_stddev({1, 0, 1, 1}), 0.5);
  EXPECT_EQ(mean_stderr({2, 4}), 1.0);  // sd sqrt(2), / sqrt(2)
}

TEST(MetricsTest, StandardErrorIsAbsentForOneDocumentAndWeightedMetrics) {
  EXPECT_FALSE(aggregate_stderr(Aggregation::kMean, scalars({1})).has_value());
  const std::vector<MetricValue> pairs = {MetricValue::weighted(-10, 5), MetricValue::weighted(-20, 10)};
  EXPECT_FALSE(aggregate_stderr(Aggregation::kWeightedPerplexity, pairs).has_value());
  EXPECT_FALSE(aggregate_stderr(Aggregation::kBitsPerByte, pairs).has_value());
  EXPECT_FALSE(aggregate_stderr(Aggregation::kMean, scalars({1, 0}), 0).has_value());
}

TEST(MetricsTest, WeightedMetricsPoolDocumentsAsLmEvalDoes) {
  // Pooled: -30 / 15 = -2, not the mean of the per-document ratios.
  const std::vector<MetricValue> pairs = {MetricValue::weighted(-10, 5), MetricValue::weighted(-20, 10)};
  EXPECT_DOUBLE_EQ(aggregate(Aggregation::kWeightedPerplexity, pairs), std::exp(2.0));
  EXPECT_DOUBLE_EQ(aggregate(Aggregation::kBitsPerByte, pairs), 2.0 / std::log(2.0));
  const std::vector<MetricValue> uneven = {MetricValue::weighted(-1, 1), MetricValue::weighted(-30, 10)};
  EXPECT_DOUBLE_EQ(aggregate(Aggregation::kWeightedPerplexity, uneven), std::exp(31.0 / 11.0));
}

TEST(MetricsTest, PerplexityIsExpOfMinusTheMeanLoglikelihood) {
  EXPECT_DOUBLE_EQ(aggregate(Aggregation::kPerplexity, scalars({-1, -3})), std::exp(2.0));
}

TEST(MetricsTest, AggregationRejectsTheWrongKindOfValue) {
  EXPECT_THROW(aggregate(Aggregation::kMean, {MetricValue::weighted(-1, 2)}), Error);
  EXPECT_THROW(aggregate(Aggregation::kBitsPerByte, scalars({1})), Error);
  EXPECT_TRUE(std::isnan(aggregate(Aggregation::kMean, {})));
}

TEST(MetricsTest, SumsAreCompensatedLikePython312) {
  // Python >= 3.12: sum([0.1] * 10) == 1.0; a plain loop gives 0.9999999999999999.
  EXPECT_EQ(python_sum(std::vector<double>(10, 0.1)), 1.0);
  EXPECT_EQ(python_sum({1e100, 1.0, -1e100}), 1.0);
  EXPECT_EQ(mean(std::vector<double>(10, 0.1)), 0.1);
}

TEST(MetricsTest, BootstrapMatchesLmEvalDrawForDraw) {
  // Reference: lm-eval's bootstrap_stderr(perplexity, xs, iters=2000) on CPython, i.e. chunks
  // seeded 0 and 1 with random.Random(i).choices(xs, k=len(xs)), 1000 resamples each, with
  // 3.12's compensated sum() in mean and sample_stddev.
  const auto items = scalars({-1.5, -2.25, -0.75, -3.0, -1.0});
  EXPECT_DOUBLE_EQ(aggregate(Aggregation::kPerplexity, items), 5.4739473917272);
  EXPECT_EQ(bootstrap_stderr(Aggregation::kPerplexity, items, 2000), 2.3159588745661015);
  EXPECT_EQ(aggregate_stderr(Aggregation::kPerplexity, items, 2000), 2.3159588745661015);
  // The same numbers every time: nothing depends on a clock or on global state.
  EXPECT_EQ(bootstrap_stderr(Aggregation::kPerplexity, items, 2000),
            bootstrap_stderr(Aggregation::kPerplexity, items, 2000));
}

TEST(MetricsTest, CountsAreLmEvalsCounts) {
  EXPECT_EQ(count_words(""), 1);  // re.split gives ['']
  EXPECT_EQ(count_words("one"), 1);
  EXPECT_EQ(count_words("one two"), 2);
  EXPECT_EQ(count_words(" one  two\n"), 4);  // ['', 'one', 'two', '']
  EXPECT_EQ(count_words("a\tb\r\nc"), 3);
  EXPECT_EQ(count_words("a\xc2\xa0"
                        "b"),
            2);  // U+00A0 is whitespace to Python's \s
  EXPECT_EQ(count_words("a\x1c"
                        "b"),
            2);  // so are the ASCII separators U+001C..U+001F
  EXPECT_EQ(count_words("a\xe3\x80\x80"
                        "b"),
            2);  // U+3000
  EXPECT_EQ(count_bytes("caf\xc3\xa9"), 5);
  EXPECT_EQ(count_code_points("caf\xc3\xa9"), 4);
  EXPECT_EQ(count_code_points("\xf0\x9f\x99\x82!"), 2);
}

TEST(MetricsTest, ExactMatchOptions) {
  const nlohmann::json none = nlohmann::json::object();
  EXPECT_EQ(exact_match("Paris", "Paris", none), 1.0);
  EXPECT_EQ(exact_match("paris", "Paris", none), 0.0);
  EXPECT_EQ(exact_match("paris", "Paris", {{"ignore_case", true}}), 1.0);
  EXPECT_EQ(exact_match("Paris!", "Paris", {{"ignore_punctuation", true}}), 1.0);
  EXPECT_EQ(exact_match("42 apples", "apples", {{"ignore_numbers", true}}), 0.0);  // the space stays
  EXPECT_EQ(exact_match("The answer is 42", "42", {{"regexes_to_ignore", {"^The answer is "}}}), 1.0);
  EXPECT_THROW(exact_match("a", "a", {{"ignore_spaces", true}}), Error);
}

// pass@k = 1 - C(n-c, k) / C(n, k), checked by hand: n = 8 samples, c = 2 right.
TEST(MetricsTest, PassAtKIsTheUnbiasedEstimator) {
  EXPECT_DOUBLE_EQ(pass_at_k(8, 2, 1), 2.0 / 8);  // c / n
  EXPECT_DOUBLE_EQ(pass_at_k(8, 2, 2), 1 - 15.0 / 28);  // C(6,2)/C(8,2) = 15/28
  EXPECT_DOUBLE_EQ(pass_at_k(8, 2, 4), 1 - 15.0 / 70);  // C(6,4)/C(8,4) = 15/70
  EXPECT_EQ(pass_at_k(8, 2, 7), 1.0);  // n - c < k: a right one is always drawn
  EXPECT_EQ(pass_at_k(8, 0, 1), 0.0);
  EXPECT_EQ(pass_at_k(8, 8, 8), 1.0);
  // C(61,8)/C(64,8) = (61 * 60 * ... * 54) / (64 * 63 * ... * 57)
  EXPECT_DOUBLE_EQ(pass_at_k(64, 3, 8),
                   1 - 61.0 * 60 * 59 * 58 * 57 * 56 * 55 * 54 / (64.0 * 63 * 62 * 61 * 60 * 59 * 58 * 57));
  EXPECT_THROW(pass_at_k(4, 5, 1), Error);
  EXPECT_THROW(pass_at_k(4, 1, 5), Error);
  EXPECT_THROW(pass_at_k(4, 1, 0), Error);
}

TEST(MetricsTest, AggregateMetricsFollowsSpecOrderAndSkipsAbsentMetrics) {
  const std::vector<MetricSpec> specs = {*builtin_metric("acc"), *builtin_metric("acc_norm"),
                                         *builtin_metric("acc_bytes")};
  const DocMetrics a = {{"acc", MetricValue::scalar(1)}, {"acc_norm", MetricValue::scalar(0)}};
  const DocMetrics b = {{"acc", MetricValue::scalar(0)}, {"acc_norm", MetricValue::scalar(0)}};
  const auto results = aggregate_metrics(specs, {&a, &b});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].name, "acc");
  EXPECT_EQ(results[0].value, 0.5);
  EXPECT_EQ(results[0].stderr, 0.5);
  EXPECT_EQ(results[0].n, 2);
  EXPECT_EQ(results[1].name, "acc_norm");
  EXPECT_EQ(results[1].value, 0.0);
  EXPECT_EQ(results[1].stderr, 0.0);
  EXPECT_FALSE(builtin_metric("f1").has_value());
  EXPECT_FALSE(builtin_metric("word_perplexity")->higher_is_better);
}

}  // namespace
}  // namespace gpueval
