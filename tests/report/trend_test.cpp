// Trend analysis: the exact McNemar test against scipy, flips between two checkpoints, and
// regressions at the newest checkpoint in both metric directions and both units.
#include "report/trend.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Reference p-values from scipy 1.x, computed independently of this code:
//   from scipy.stats import binomtest
//   binomtest(min(b, c), b + c, 0.5).pvalue    # two-sided exact binomial = exact McNemar
TEST(TrendTest, McNemarMatchesScipyBinomtest) {
  struct Case {
    int64_t b, c;
    double p;
  };
  const Case cases[] = {
      {0, 1, 1.0},
      {1, 0, 1.0},
      {3, 7, 0.34375},
      {7, 3, 0.34375},
      {5, 5, 1.0},
      {10, 0, 0.001953125},
      {0, 25, 5.960464477539063e-08},
      {12, 30, 0.007915897334896727},
      {100, 130, 0.05561357778139238},
      {1000, 1100, 0.03072070786424249},
      {40000, 40500, 0.07862036880511007},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.b) + " " + ::testing::PrintToString(c.c));
    EXPECT_NEAR(mcnemar_p(c.b, c.c), c.p, 1e-9 * std::max(1.0, c.p) + c.p * 1e-9);
    EXPECT_NEAR(mcnemar_p(c.b, c.c) / c.p, 1.0, 1e-8);
  }
  EXPECT_EQ(mcnemar_p(0, 0), 1.0);
}

TEST(TrendTest, McNemarWorksForHugeCountsAndRefusesNegativeOnes) {
  const double p = mcnemar_p(3000000, 3001000);
  EXPECT_TRUE(std::isfinite(p));
  EXPECT_GT(p, 0.0);
  EXPECT_LE(p, 1.0);
  EXPECT_EQ(mcnemar_p(3001000, 3000000), p);
  EXPECT_LT(mcnemar_p(3000000, 3020000), 1e-10);  // a 0.33% split of 6M pairs is far from chance
  EXPECT_LE(mcnemar_p(500000, 500000), 1.0);
  EXPECT_GT(mcnemar_p(500000, 500000), 0.99);
  EXPECT_THAT(testing::error_of([] { mcnemar_p(-1, 3); }), HasSubstr("negative"));
}

ScoreRow row(const std::string& task, const std::string& metric, double value, bool higher = true, bool group = false,
             const std::string& filter = "none") {
  ScoreRow r;
  r.task = task;
  r.metric = metric;
  r.filter = filter;
  r.value = value;
  r.stderr_value = 0.01;
  r.n = 10;
  r.higher_is_better = higher;
  r.is_group = group;
  return r;
}

ScoredCheckpoint at(const std::string& name, std::vector<ScoreRow> scores) {
  ScoredCheckpoint sc;
  sc.checkpoint = CheckpointInfo{"fp-" + name, "/ck/" + name, name, 0};
  sc.state = "complete";
  sc.scores = std::move(scores);
  return sc;
}

std::vector<SampleRow> values(const std::string& task, const std::string& metric, const std::vector<double>& v,
                              int64_t first_doc = 0) {
  std::vector<SampleRow> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(SampleRow{task, metric, first_doc + static_cast<int64_t>(i), v[i]});
  return out;
}

template <typename T>
std::vector<T> operator+(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TrendTest, FlipsBetweenTwoCheckpoints) {
  const auto before =
      at("s1", {row("quiz", "acc", 0.5), row("quiz", "acc", 0.4, true, false, "second"), row("story", "ppl", 30, false),
                row("all", "acc", 0.5, true, true), row("gone", "acc", 0.3)});
  const auto after =
      at("s2", {row("quiz", "acc", 0.6), row("quiz", "acc", 0.45, true, false, "second"),
                row("story", "ppl", 28, false), row("all", "acc", 0.55, true, true), row("new", "acc", 0.9)});
  //                      doc:   0  1  2  3  4  5  6  7  8  9   (doc 9 only before, doc 10 only after)
  const auto sb = values("quiz", "acc", {1, 1, 0, 0, 1, 0, 1, 0, 1, 1}) + values("story", "ppl", {-10.5, -3.25}) +
                  values("new", "acc", {1});
  const auto sa = values("quiz", "acc", {1, 0, 1, 1, 0, 0, 1, 1, 1}) + values("quiz", "acc", {0}, 10) +
                  values("story", "ppl", {-9.5, -3.0});
  const CheckpointStep step = compare_checkpoints(before, after, sb, sa);
  EXPECT_EQ(step.previous, "s1");
  EXPECT_EQ(step.current, "s2");
  EXPECT_EQ(step.current_fp, "fp-s2");
  ASSERT_EQ(step.comparisons.size(), 4u);  // "gone" and "new" are in one checkpoint only

  const Comparison& acc = step.comparisons[0];
  EXPECT_EQ(acc.task, "quiz");
  EXPECT_EQ(acc.filter, "none");
  EXPECT_DOUBLE_EQ(acc.delta, 0.1);
  EXPECT_EQ(acc.before, 0.5);
  EXPECT_EQ(acc.after, 0.6);
  EXPECT_EQ(acc.stderr_after, 0.01);
  EXPECT_EQ(acc.paired, 9);
  EXPECT_THAT(acc.lost, ElementsAre(1, 4));
  EXPECT_THAT(acc.gained, ElementsAre(2, 3, 7));
  EXPECT_EQ(acc.b, 2);
  EXPECT_EQ(acc.c, 3);
  ASSERT_TRUE(acc.p_value);
  EXPECT_DOUBLE_EQ(*acc.p_value, mcnemar_p(2, 3));

  // The samples are the first filter's; the second filter's row gets no flips.
  const Comparison& second = step.comparisons[1];
  EXPECT_EQ(second.filter, "second");
  EXPECT_EQ(second.paired, 0);
  EXPECT_FALSE(second.p_value);

  // Not a right/wrong metric: values, no flips.
  const Comparison& ppl = step.comparisons[2];
  EXPECT_EQ(ppl.delta, -2);
  EXPECT_FALSE(ppl.higher_is_better);
  EXPECT_EQ(ppl.paired, 0);
  EXPECT_FALSE(ppl.p_value);
  EXPECT_TRUE(ppl.lost.empty());

  EXPECT_TRUE(step.comparisons[3].is_group);
  EXPECT_EQ(step.comparisons[3].paired, 0);
}

TEST(TrendTest, FlipsOfALowerIsBetterBinaryMetricCountZeroAsRight) {
  const auto before = at("a", {row("t", "error", 0.5, false)});
  const auto after = at("b", {row("t", "error", 0.5, false)});
  const CheckpointStep step =
      compare_checkpoints(before, after, values("t", "error", {0, 1, 0}), values("t", "error", {1, 0, 0}));
  ASSERT_EQ(step.comparisons.size(), 1u);
  EXPECT_THAT(step.comparisons[0].lost, ElementsAre(0));
  EXPECT_THAT(step.comparisons[0].gained, ElementsAre(1));
}

TEST(TrendTest, CompareTrendPairsConsecutiveCheckpoints) {
  const std::vector<ScoredCheckpoint> trend = {at("a", {row("t", "acc", 0.1)}), at("b", {row("t", "acc", 0.2)}),
                                               at("c", {row("t", "acc", 0.4)})};
  const std::vector<std::vector<SampleRow>> samples = {values("t", "acc", {0, 0}), values("t", "acc", {1, 0}),
                                                       values("t", "acc", {1, 1})};
  const auto steps = compare_trend(trend, samples);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].previous + steps[0].current, "ab");
  EXPECT_EQ(steps[1].previous + steps[1].current, "bc");
  EXPECT_DOUBLE_EQ(steps[1].comparisons[0].delta, 0.2);
  EXPECT_THAT(steps[0].comparisons[0].gained, ElementsAre(0));
  EXPECT_THAT(steps[1].comparisons[0].gained, ElementsAre(1));
  EXPECT_TRUE(compare_trend({trend[0]}, {{}}).empty());
  EXPECT_THAT(testing::error_of([&] { compare_trend(trend, {{}}); }), HasSubstr("1 sample sets for 3 checkpoints"));
}

TEST(TrendTest, PrimaryScoresAreEachTasksFirstRow) {
  const auto sc = at("a", {row("t", "acc", 0.1), row("t", "acc_norm", 0.2), row("g", "acc", 0.3, true, true),
                           row("p", "word_perplexity", 40, false), row("p", "bits_per_byte", 1, false)});
  const auto p = primary_scores(sc);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].metric, "acc");
  EXPECT_EQ(p[1].task, "g");
  EXPECT_EQ(p[2].metric, "word_perplexity");
}

TEST(TrendTest, RegressionsFollowTheDirectionAndTheUnit) {
  const std::vector<ScoredCheckpoint> trend = {
      // The oldest checkpoint is not compared: only the newest against the one before it.
      at("s1", {row("up", "acc", 0.99), row("flat", "acc", 0.1), row("ppl", "word_perplexity", 10, false),
                row("better", "word_perplexity", 10, false), row("edge", "acc", 0.75),
                row("grp", "acc", 0.9, true, true), row("sec", "acc", 0.5), row("raw", "score", 50)}),
      at("s2",
         {row("up", "acc", 0.70), row("flat", "acc", 0.50), row("ppl", "word_perplexity", 40, false),
          row("better", "word_perplexity", 45, false), row("edge", "acc", 0.75), row("grp", "acc", 0.80, true, true),
          row("sec", "acc", 0.5), row("sec", "acc_norm", 0.9), row("raw", "score", 50)}),
      at("s3",
         {row("up", "acc", 0.68), row("flat", "acc", 0.495), row("ppl", "word_perplexity", 42, false),
          row("better", "word_perplexity", 38, false), row("edge", "acc", 0.74), row("grp", "acc", 0.70, true, true),
          row("sec", "acc", 0.5), row("sec", "acc_norm", 0.1), row("raw", "score", 48.5), row("newtask", "acc", 0.0)}),
  };
  const std::vector<Regression> r = find_regressions(trend, 1.0);
  ASSERT_EQ(r.size(), 4u);
  // acc 0.70 -> 0.68: 2 points.
  EXPECT_EQ(r[0].task, "up");
  EXPECT_EQ(r[0].previous, "s2");
  EXPECT_EQ(r[0].current, "s3");
  EXPECT_EQ(r[0].before, 0.70);
  EXPECT_EQ(r[0].after, 0.68);
  EXPECT_NEAR(r[0].drop_points, 2.0, 1e-9);
  EXPECT_TRUE(r[0].in_points);
  // Perplexity rising 40 -> 42 is a drop of 2 raw units; "better" fell, which is no drop.
  EXPECT_EQ(r[1].task, "ppl");
  EXPECT_NEAR(r[1].drop_points, 2.0, 1e-12);
  EXPECT_FALSE(r[1].in_points);
  // Exactly 1 point (0.75 -> 0.74) is not more than 1; flat's 0.5 point neither.
  EXPECT_EQ(r[2].task, "grp");
  EXPECT_TRUE(r[2].is_group);
  EXPECT_NEAR(r[2].drop_points, 10.0, 1e-9);
  // A raw-unit metric: 50 -> 48.5 is 1.5 units, not 150 points; sec's acc_norm is not primary.
  EXPECT_EQ(r[3].task, "raw");
  EXPECT_NEAR(r[3].drop_points, 1.5, 1e-12);
  EXPECT_FALSE(r[3].in_points);

  EXPECT_EQ(find_regressions(trend, 5.0).size(), 1u);  // only the group's 10 points
  EXPECT_EQ(find_regressions(trend, 0.0).size(), 6u);  // every worse primary metric, flat and edge too
  EXPECT_TRUE(find_regressions({trend[0]}, 0.0).empty());
  EXPECT_TRUE(find_regressions({}, 0.0).empty());
}

}  // namespace
}  // namespace gpueval
