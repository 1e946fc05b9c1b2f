// lm-eval's few-shot samplers on small synthetic tasks. The expected indices were printed by
// lm-eval 0.4.13 itself: lm_eval.api.samplers.ContextSampler / FirstNSampler over the same
// documents as Python dicts, set_rnd(seed), then sample(n, eval_doc=...) once per document in
// order, as build_all_requests calls it (eval_doc only when the few-shot split is the test split).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/task.h"
#include "test_util.h"

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using Draws = std::vector<std::vector<size_t>>;

constexpr const char* kTask =
    "task: shots\n"
    "dataset_path: eval.jsonl\n"
    "output_type: generate_until\n"
    "doc_to_text: \"{{q}}?\"\n"
    "doc_to_target: \"{{a}}\"\n"
    "num_fewshot: 3\n";

// {"q": "<prefix><i>", "a": "<i>"} for i in 0..n-1, one per line.
std::string numbered(const std::string& prefix, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += "{\"q\": \"" + prefix + std::to_string(i) + "\", \"a\": \"" + std::to_string(i) + "\"}\n";
  }
  return out;
}

Draws draws_of(const Task& task) {
  Draws out;
  for (const Document& doc : task.documents()) out.push_back(task.fewshot_indices(doc));
  return out;
}

class FewshotSamplerTest : public ::testing::Test {
 protected:
  Task load(const std::string& yaml, uint64_t seed = 1234) {
    testing::write_text(dir_.file("task.yaml"), yaml);
    TaskLoadOptions options;
    options.fewshot_seed = seed;
    return Task::load(dir_.file("task.yaml"), {}, options);
  }
  testing::TempDir dir_;
};

TEST_F(FewshotSamplerTest, DefaultSamplerDrawsPerDocumentInOrder) {
  testing::write_text(dir_.file("eval.jsonl"), numbered("E", 4));
  testing::write_text(dir_.file("pool.jsonl"), numbered("Q", 10));
  // No fewshot_config: lm-eval's default sampler, Random(1234).sample(pool, 3) per document.
  const Task task = load(std::string(kTask) + "fewshot_path: pool.jsonl\n");
  EXPECT_EQ(task.fewshot_sampler(), "default");
  EXPECT_FALSE(task.fewshot_from_dataset());
  EXPECT_EQ(draws_of(task), (Draws{{7, 1, 0}, {1, 0, 9}, {1, 5, 3}, {0, 9, 8}}));
  EXPECT_EQ(task.context(task.documents()[0]), "Q7? 7\n\nQ1? 1\n\nQ0? 0\n\nE0?");
  EXPECT_EQ(task.context(task.documents()[3]), "Q0? 0\n\nQ9? 9\n\nQ8? 8\n\nE3?");
  // Said explicitly, the same; another seed, other draws.
  EXPECT_EQ(draws_of(load(std::string(kTask) + "fewshot_path: pool.jsonl\nfewshot_config:\n  sampler: default\n")),
            draws_of(task));
  EXPECT_EQ(draws_of(load(std::string(kTask) + "fewshot_path: pool.jsonl\n", 7)),
            (Draws{{5, 2, 6}, {0, 1, 8}, {5, 0, 3}, {0, 1, 6}}));
  // Requests over the first two documents carry the same prompts: draws never depend on limit.
  const std::vector<Request> two = build_requests({&task}, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].context, task.context(task.documents()[1]));
  // first_n: the first three, for every document.
  EXPECT_EQ(draws_of(load(std::string(kTask) + "fewshot_path: pool.jsonl\nfewshot_config: {sampler: first_n}\n")),
            (Draws{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2}}));
}

TEST_F(FewshotSamplerTest, FromTheEvaluatedFileTheAskedDocumentIsLeftOut) {
  testing::write_text(dir_.file("eval.jsonl"), numbered("Q", 10));
  // sample(pool, 4), every copy of the asked document dropped, the first 3 kept.
  const Task task = load(std::string(kTask) + "fewshot_path: eval.jsonl\n");
  EXPECT_TRUE(task.fewshot_from_dataset());
  const Draws draws = draws_of(task);
  EXPECT_EQ(draws, (Draws{{7, 1, 9},
                          {9, 0, 8},
                          {5, 3, 0},
                          {0, 5, 7},
                          {7, 2, 1},
                          {1, 0, 7},
                          {1, 8, 7},
                          {9, 1, 0},
                          {1, 4, 3},
                          {5, 4, 3}}));
  EXPECT_EQ(task.context(task.documents()[0]), "Q7? 7\n\nQ1? 1\n\nQ9? 9\n\nQ0?");
  ASSERT_EQ(task.notes().size(), 1u);
  EXPECT_THAT(task.notes()[0], HasSubstr("drawn at random, seed 1234, skipping the document being asked"));
}

TEST_F(FewshotSamplerTest, CopiesOfTheAskedDocumentAreAllLeftOut) {
  // Documents 0..2 are equal: lm-eval's != drops all three, and when fewer than n remain of the
  // n + 1 drawn, it draws n again from the documents unequal to the asked one.
  testing::write_text(dir_.file("eval.jsonl"),
                      "{\"q\": \"D\", \"a\": \"0\"}\n{\"q\": \"D\", \"a\": \"0\"}\n{\"q\": \"D\", \"a\": \"0\"}\n"
                      "{\"q\": \"X\", \"a\": \"3\"}\n{\"q\": \"Y\", \"a\": \"4\"}\n");
  std::string yaml = std::string(kTask) + "fewshot_path: eval.jsonl\n";
  yaml.replace(yaml.find("num_fewshot: 3"), 14, "num_fewshot: 2");
  EXPECT_EQ(draws_of(load(yaml)), (Draws{{3, 4}, {3, 4}, {3, 4}, {2, 4}, {3, 1}}));
  EXPECT_EQ(draws_of(load(yaml + "fewshot_config:\n  sampler: first_n\n")),
            (Draws{{3, 4}, {3, 4}, {3, 4}, {0, 1}, {0, 1}}));
}

TEST_F(FewshotSamplerTest, BadSamplerOrTooFewDocumentsFailWithFileAndLine) {
  testing::write_text(dir_.file("eval.jsonl"), numbered("Q", 3));
  const std::string yaml = dir_.file("task.yaml");
  EXPECT_THAT(
      error_of([&] { load(std::string(kTask) + "fewshot_path: eval.jsonl\nfewshot_config:\n  sampler: random\n"); }),
      HasSubstr(yaml + ":9: fewshot_config: unknown sampler 'random' (lm-eval's samplers: default, first_n)"));
  EXPECT_THAT(
      error_of([&] { load(std::string(kTask) + "fewshot_path: eval.jsonl\nfewshot_config:\n  split: train\n"); }),
      HasSubstr(yaml + ":9: fewshot_config: only 'sampler' and 'samples' are supported yet, not 'split'"));
  // Three documents, 3 shots from the evaluated file: lm-eval's sample(pool, 4) fails too.
  EXPECT_THAT(error_of([&] { load(std::string(kTask) + "fewshot_path: eval.jsonl\n"); }),
              HasSubstr("eval.jsonl: num_fewshot 3 from the task's own 3 documents needs at least 4"));
}

}  // namespace
}  // namespace gpueval
