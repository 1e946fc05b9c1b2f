// The aggregator on the shipped demo tasks: item results in any order and any split give the
// same scored documents; a document counts only when every part of every request is in; task
// metrics follow the per-document outcomes; a document reported twice is an error.
#include "aggregate/aggregator.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "gpueval/task.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

class AggregatorTest : public ::testing::Test {
 protected:
  // The first 3 documents of demo_choice (4 choices each) and of demo_perplexity (rolling).
  void SetUp() override {
    const std::vector<std::string> search = {testing::source_dir() + "/tasks"};
    tasks_.push_back(Task::load("demo_choice", search, {}));
    tasks_.push_back(Task::load("demo_perplexity", search, {}));
    requests_ = build_requests({&tasks_[0], &tasks_[1]}, 3);
  }

  // Every request's items: a multiple-choice request in one part whose logprob makes `winner`
  // (a function of the document) the argmax; a rolling request in two windows.
  template <typename Winner>
  std::vector<ItemResult> items(Winner winner) const {
    std::vector<ItemResult> out;
    for (const Request& r : requests_) {
      if (r.type == RequestType::kLoglikelihoodRolling) {
        for (int32_t part = 0; part < 2; ++part) {
          ItemResult item;
          item.request_index = r.index;
          item.part = part;
          item.parts = 2;
          item.logprob = -1.5 - part;
          item.num_tokens = 10 + part;
          out.push_back(item);
        }
        continue;
      }
      ItemResult item;
      item.request_index = r.index;
      item.logprob = r.choice == winner(r.doc_id) ? -1.0 : -5.0 - static_cast<double>(r.choice);
      item.num_tokens = 1;
      out.push_back(item);
    }
    return out;
  }

  int64_t label(int64_t doc) const { return tasks_[0].documents()[static_cast<size_t>(doc)].fields.at("label"); }

  static double metric(const TaskScores& t, const std::string& name) {
    for (const MetricResult& m : t.metrics)
      if (m.name == name) return m.value;
    ADD_FAILURE() << "no metric " << name;
    return -1;
  }

  std::vector<Task> tasks_;
  std::vector<Request> requests_;
};

TEST_F(AggregatorTest, OrderAndSplitOfTheResultsDoNotMatter) {
  const std::vector<ItemResult> all = items([&](int64_t doc) { return label(doc); });
  Aggregator in_order(tasks_, requests_);
  in_order.add(all);
  Aggregator shuffled(tasks_, requests_);
  std::vector<ItemResult> reversed(all.rbegin(), all.rend());
  for (size_t k = 0; k < reversed.size(); k += 5)
    shuffled.add(
        std::vector<ItemResult>(reversed.begin() + static_cast<std::ptrdiff_t>(k),
                                reversed.begin() + static_cast<std::ptrdiff_t>(std::min(k + 5, reversed.size()))));
  const Aggregator::Documents a = in_order.documents(), b = shuffled.documents();
  ASSERT_EQ(a.scored.size(), 6u);
  ASSERT_EQ(b.scored.size(), 6u);
  EXPECT_TRUE(a.incomplete.empty());
  for (size_t d = 0; d < a.scored.size(); ++d) {
    ASSERT_EQ(a.scored[d].results.size(), b.scored[d].results.size());
    for (size_t i = 0; i < a.scored[d].results.size(); ++i) {
      EXPECT_EQ(a.scored[d].results[i].logprob, b.scored[d].results[i].logprob);
      EXPECT_EQ(a.scored[d].results[i].num_tokens, b.scored[d].results[i].num_tokens);
    }
  }
  // A rolling request's windows are summed: -1.5 + -2.5, 10 + 11 tokens.
  const DocRecord& rolling = a.scored.back();
  EXPECT_EQ(rolling.task->name(), "demo_perplexity");
  EXPECT_EQ(rolling.results.at(0).logprob, -4.0);
  EXPECT_EQ(rolling.results.at(0).num_tokens, 21);
}

TEST_F(AggregatorTest, ADocumentCountsOnlyWhenEveryPartOfEveryRequestIsIn) {
  std::vector<ItemResult> all = items([&](int64_t doc) { return label(doc); });
  // Leave out choice 2 of demo_choice doc 1 and the second window of demo_perplexity doc 0.
  std::vector<ItemResult> some;
  for (const ItemResult& item : all) {
    const Request& r = requests_[static_cast<size_t>(item.request_index)];
    const bool missing_choice = r.task == "demo_choice" && r.doc_id == 1 && r.choice == 2;
    const bool missing_window = r.task == "demo_perplexity" && r.doc_id == 0 && item.part == 1;
    if (!missing_choice && !missing_window) some.push_back(item);
  }
  Aggregator aggregator(tasks_, requests_);
  aggregator.add(some);
  EXPECT_EQ(aggregator.progress()["demo_choice"], (nlohmann::json{{"documents", 3}, {"documents_done", 2}}));
  EXPECT_EQ(aggregator.progress()["demo_perplexity"], (nlohmann::json{{"documents", 3}, {"documents_done", 2}}));
  const Aggregator::Documents docs = aggregator.documents();
  EXPECT_EQ(docs.scored.size(), 4u);
  EXPECT_EQ(docs.incomplete, (std::vector<std::string>{"demo_choice doc 1", "demo_perplexity doc 0"}));
}

TEST_F(AggregatorTest, TaskMetricsFollowTheDocuments) {
  const std::vector<const Task*> tasks = {&tasks_[0], &tasks_[1]};
  Aggregator right(tasks_, requests_);
  right.add(items([&](int64_t doc) { return label(doc); }));
  const Aggregator::Documents right_docs = right.documents();
  std::vector<TaskScores> scores = score_tasks(tasks, right_docs.scored, 100);
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_EQ(scores[0].records.size(), 3u);
  EXPECT_EQ(metric(scores[0], "acc"), 1.0);
  // Wrong on document 0 only: 2 of 3.
  Aggregator one_wrong(tasks_, requests_);
  one_wrong.add(items([&](int64_t doc) { return doc == 0 ? (label(doc) + 1) % 4 : label(doc); }));
  const Aggregator::Documents wrong_docs = one_wrong.documents();
  scores = score_tasks(tasks, wrong_docs.scored, 100);
  EXPECT_DOUBLE_EQ(metric(scores[0], "acc"), 2.0 / 3.0);
  // The same documents twice are refused.
  std::vector<DocRecord> twice = right_docs.scored;
  twice.push_back(right_docs.scored.front());
  EXPECT_THAT(testing::error_of([&] { score_tasks(tasks, twice, 100); }), HasSubstr("reported twice"));
}

}  // namespace
}  // namespace gpueval
