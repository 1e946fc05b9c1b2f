// The shipped demo tasks scored end to end with the shipped stories260K model: requests from
// the task files, scored through the planner and executor a run uses, metrics, and the report files.
#include <cstdio>

#include <gtest/gtest.h>

#include "common/file_io.h"
#include "gpueval/report.h"
#include "gpueval/task.h"
#include "test_util.h"

namespace gpueval {
namespace {

// Every document of `tasks` scored the way a run scores it: build_requests, then the planner's
// encoding and the executor (testing::score_with_stories260k); one record per document.
std::vector<DocRecord> score(const std::vector<const Task*>& tasks) {
  const std::vector<Request> requests = build_requests(tasks);
  const std::vector<RequestResult> results = testing::score_with_stories260k(requests);
  std::vector<DocRecord> records;
  size_t next = 0;
  for (const Task* task : tasks) {
    for (const Document& doc : task->documents()) {
      DocRecord record;
      record.task = task;
      record.doc = doc;
      for (; next < requests.size() && requests[next].task == task->name() && requests[next].doc_id == doc.doc_id;
           ++next) {
        record.requests.push_back(requests[next]);
        record.results.push_back(results.at(next));
      }
      EXPECT_EQ(record.requests.size(), task->requests(doc).size()) << task->location(doc);
      record.metrics = task->process_results_all(doc, record.results);
      records.push_back(std::move(record));
    }
  }
  EXPECT_EQ(next, requests.size());
  return records;
}

TEST(TaskDemoModelTest, Stories260kBeatsChanceOnDemoChoiceAndReportsAreWritten) {
  const std::vector<std::string> dirs = {testing::source_dir() + "/tasks"};
  const Task choice = Task::load("demo_choice", dirs);
  const Task perplexity = Task::load("demo_perplexity", dirs);
  const std::vector<DocRecord> records = score({&choice, &perplexity});

  RunSummary summary;
  summary.model = "models/stories260K";
  const auto results = results_json({&choice, &perplexity}, records, summary);
  const double acc = results["results"]["demo_choice"]["acc,none"].get<double>();
  const double acc_norm = results["results"]["demo_choice"]["acc_norm,none"].get<double>();
  const double word_ppl = results["results"]["demo_perplexity"]["word_perplexity,none"].get<double>();
  std::fprintf(stderr, "[demo] demo_choice acc %.4f ± %.4f, acc_norm %.4f; demo_perplexity word_perplexity %.2f\n", acc,
               results["results"]["demo_choice"]["acc_stderr,none"].get<double>(), acc_norm, word_ppl);
  // Chance is 0.25: the right answer sits at each of the four positions equally often.
  EXPECT_GT(acc, 0.6);
  EXPECT_GT(acc_norm, 0.6);
  EXPECT_GT(word_ppl, 1.0);
  EXPECT_LT(word_ppl, 200.0);

  testing::TempDir out;
  write_reports(out.path(), {&choice, &perplexity}, records, summary);
  for (const char* name : {"results.json", "samples_demo_choice.jsonl", "samples_demo_perplexity.jsonl", "report.md"}) {
    EXPECT_TRUE(io::path_exists(out.file(name))) << name;
  }
}

}  // namespace
}  // namespace gpueval
