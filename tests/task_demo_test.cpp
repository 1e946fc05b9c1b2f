// The shipped demo tasks scored end to end with the shipped stories260K model: requests from
// the task files, loglikelihoods the way lm-eval computes them, metrics, and the report files.
#include <cstdio>

#include <gtest/gtest.h>

#include "common/file_io.h"
#include "gpueval/model.h"
#include "gpueval/report.h"
#include "gpueval/task.h"
#include "gpueval/tokenizer.h"
#include "model/scorer.h"
#include "test_util.h"

namespace gpueval {
namespace {

// lm-eval's loglikelihood: continuation tokens are encode(context + continuation) past the
// tokens of encode(context), so a token straddling the boundary belongs to the continuation.
ScoreRequest loglikelihood_request(const Tokenizer& tok, const Request& r) {
  const std::vector<int32_t> context = tok.encode(r.context, /*add_special_tokens=*/true);
  const std::vector<int32_t> whole = tok.encode(r.context + r.continuation, /*add_special_tokens=*/true);
  ScoreRequest s;
  s.tokens = context;
  s.tokens.insert(s.tokens.end(), whole.begin() + static_cast<std::ptrdiff_t>(context.size()), whole.end());
  s.first_target = static_cast<int64_t>(context.size());
  return s;
}

class TaskDemoModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::source_dir() + "/models/stories260K";
    model_ = load_model(dir);
    tok_ = load_tokenizer(dir);
  }

  // Scores every document of `task` and returns its records.
  std::vector<DocRecord> score(const Task& task) {
    std::vector<DocRecord> records;
    for (const Document& doc : task.documents()) {
      DocRecord record;
      record.task = &task;
      record.doc = doc;
      record.requests = task.requests(doc);
      for (const Request& r : record.requests) {
        RequestResult result;
        result.index = r.index;
        std::vector<ScoreRequest> windows;
        if (r.type == RequestType::kLoglikelihood) {
          windows.push_back(loglikelihood_request(*tok_, r));
        } else {
          windows = rolling_windows(tok_->encode(r.context, false), *tok_->bos_id(),
                                    model_->config().max_position_embeddings);
        }
        result.is_greedy = true;
        for (const ScoreResult& s : score_batch(*model_, windows)) {
          result.logprob += s.sum();
          result.is_greedy = result.is_greedy && s.all_greedy();
          result.num_tokens += static_cast<int64_t>(s.logprobs.size());
        }
        record.results.push_back(result);
      }
      record.metrics = task.process_results_all(doc, record.results);
      records.push_back(std::move(record));
    }
    return records;
  }

  LlamaModel model_{nullptr};
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TaskDemoModelTest, Stories260kBeatsChanceOnDemoChoiceAndReportsAreWritten) {
  const std::vector<std::string> dirs = {testing::source_dir() + "/tasks"};
  const Task choice = Task::load("demo_choice", dirs);
  const Task perplexity = Task::load("demo_perplexity", dirs);
  std::vector<DocRecord> records = score(choice);
  const std::vector<DocRecord> stories = score(perplexity);
  records.insert(records.end(), stories.begin(), stories.end());

  RunSummary summary;
  summary.model = "models/stories260K";
  const auto results = results_json({&choice, &perplexity}, records, summary);
  const double acc = results["results"]["demo_choice"]["acc,none"].get<double>();
  const double acc_norm = results["results"]["demo_choice"]["acc_norm,none"].get<double>();
  const double word_ppl = results["results"]["demo_perplexity"]["word_perplexity,none"].get<double>();
  std::fprintf(stderr, "[demo] demo_choice acc %.4f ± %.4f, acc_norm %.4f; demo_perplexity word_perplexity %.2f\n",
               acc, results["results"]["demo_choice"]["acc_stderr,none"].get<double>(), acc_norm, word_ppl);
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
