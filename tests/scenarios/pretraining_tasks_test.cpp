// The pretraining-suite tasks (tasks/{piqa,openbookqa,boolq,copa,winogrande,lambada_openai,
// triviaqa}, and gsm8k/gsm8k_cot) build the requests lm-evaluation-harness 0.4.13 builds: every context and
// continuation of their first documents equals, byte for byte, lm-eval's own Instance.arguments
// (tests/fixtures/lm_eval_prompts.json, written by scripts/dump_lm_eval_prompts.py from lm-eval's
// YAMLs over the same shared data). Also: Winogrande's partial scoring through the planner, the
// opt-in bpb metric, and the bad inputs each task must refuse with one line.
#include <cmath>
#include <fstream>
#include <map>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "gpueval/task.h"
#include "plan/planner.h"
#include "run/executor.h"
#include "run/prefix_cache.h"
#include "test_util.h"

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

const char* const kSuite[] = {"piqa",           "openbookqa", "boolq",     "copa",      "winogrande",
                              "lambada_openai", "triviaqa",   "gsm8k_cot", "humaneval", "mbpp"};

std::string tasks_dir() { return testing::source_dir() + "/tasks"; }

Task load_shared(const std::string& name, TaskLoadOptions options = {}) {
  options.data_roots[name] = testing::shared_dir() + "/data/" + name;
  options.data_roots["gsm8k"] = testing::shared_dir() + "/data/gsm8k";  // gsm8k_cot's
  return Task::load(name, {tasks_dir()}, options);
}

// The task file copied into `dir` with its data root pointing at `dir` (a small dataset of one's own).
Task load_with_documents(const testing::TempDir& dir, const std::string& name, const std::string& jsonl) {
  dir.write(name + ".jsonl", jsonl);
  TaskLoadOptions options;
  options.data_roots[name] = dir.path();
  return Task::load(name, {tasks_dir()}, options);
}

TEST(PretrainingTasksTest, RequestsEqualLmEvalsInstancesByteForByte) {
  GPUEVAL_REQUIRE_SHARED();
  std::ifstream in(testing::source_dir() + "/tests/fixtures/lm_eval_prompts.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_EQ(fixture.at("lm_eval_version"), "0.4.13");
  for (const char* name : kSuite) {
    SCOPED_TRACE(name);
    const Task task = load_shared(name);
    const nlohmann::json& expected = fixture.at("tasks").at(name);
    std::vector<Request> got;
    for (int64_t d = 0; d < fixture.at("docs").get<int64_t>(); ++d) {
      for (Request& r : task.requests(task.documents().at(static_cast<size_t>(d)))) got.push_back(std::move(r));
    }
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const nlohmann::json& args = expected[i].at("arguments");
      EXPECT_EQ(got[i].doc_id, expected[i].at("doc_id").get<int64_t>());
      EXPECT_EQ(got[i].choice, expected[i].at("idx").get<int64_t>());
      EXPECT_EQ(got[i].context, args[0].get<std::string>()) << "request " << i;
      if (got[i].type == RequestType::kGenerateUntil) {
        EXPECT_EQ(got[i].stops, args[1].at("until").get<std::vector<std::string>>());
      } else {
        EXPECT_EQ(got[i].continuation, args[1].get<std::string>()) << "request " << i;
      }
    }
  }
}

// Every request of every document, not only the first ones: the fixture's digest of lm-eval's
// requests over the whole evaluated split (scripts/dump_lm_eval_prompts.py says how it is made:
// for each request in (doc_id, idx) order, context, NUL, the continuation or the stop strings
// joined by 0x1f, NUL), recomputed from gpueval's requests.
TEST(PretrainingTasksTest, EveryRequestOfEveryDocumentEqualsLmEvalsByDigest) {
  GPUEVAL_REQUIRE_SHARED();
  std::ifstream in(testing::source_dir() + "/tests/fixtures/lm_eval_prompts.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  for (const char* name : kSuite) {
    SCOPED_TRACE(name);
    const Task task = load_shared(name);
    std::string bytes;
    int64_t count = 0;
    for (const Document& doc : task.documents()) {
      for (const Request& r : task.requests(doc)) {
        bytes += r.context;
        bytes += '\0';
        if (r.type == RequestType::kGenerateUntil) {
          for (size_t i = 0; i < r.stops.size(); ++i) bytes += (i ? "\x1f" : "") + r.stops[i];
        } else {
          bytes += r.continuation;
        }
        bytes += '\0';
        ++count;
      }
    }
    const nlohmann::json& expected = fixture.at("digests").at(name);
    EXPECT_EQ(count, expected.at("requests").get<int64_t>());
    EXPECT_EQ(sha256_hex(bytes), expected.at("sha256").get<std::string>());
  }
}

TEST(PretrainingTasksTest, DocumentCountsAndMetricsAreLmEvals) {
  GPUEVAL_REQUIRE_SHARED();
  const std::map<std::string, std::pair<size_t, std::vector<std::string>>> expected = {
      {"piqa", {1838, {"acc", "acc_norm"}}},
      {"openbookqa", {500, {"acc", "acc_norm"}}},
      {"boolq", {3270, {"acc"}}},
      {"copa", {100, {"acc"}}},
      {"winogrande", {1267, {"acc"}}},
      {"lambada_openai", {5153, {"perplexity", "acc"}}},
      {"triviaqa", {3000, {"exact_match"}}},
      {"humaneval", {164, {"pass@1"}}},
      {"mbpp", {500, {"pass_at_1"}}}};
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    const Task task = load_shared(name);
    EXPECT_EQ(task.documents().size(), want.first);
    std::vector<std::string> metrics;
    for (const MetricSpec& m : task.metrics()) metrics.push_back(m.name);
    EXPECT_EQ(metrics, want.second);
    EXPECT_EQ(task.multiple_input(), name == "winogrande");
  }
  EXPECT_EQ(load_shared("triviaqa").filters().at(0).name(), "remove_whitespace");
}

TEST(PretrainingTasksTest, WinograndeScoresOneContinuationAfterEachOption) {
  testing::TempDir dir;
  const Task task = load_with_documents(
      dir, "winogrande",
      "{\"sentence\": \"The cup fell off the table because _ was wobbly.\", \"option1\": \"the cup\", "
      "\"option2\": \"the table\", \"answer\": \"2\"}\n");
  const Document& doc = task.documents().at(0);
  const std::vector<Request> rs = task.requests(doc);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].context, "The cup fell off the table because the cup");
  EXPECT_EQ(rs[1].context, "The cup fell off the table because the table");
  EXPECT_EQ(rs[0].continuation, " was wobbly.");
  EXPECT_EQ(rs[1].continuation, " was wobbly.");
  // The gold is doc_to_text's index: answer "2" is choice 1.
  std::vector<RequestResult> results(2);
  results[0].logprob = -5.0;
  results[1].logprob = -4.0;
  EXPECT_EQ(task.process_results(doc, results).at("acc").value, 1.0);
  results[0].logprob = -3.0;
  EXPECT_EQ(task.process_results(doc, results).at("acc").value, 0.0);
}

TEST(PretrainingTasksTest, CopaKeepsLmEvalsDoubleSpace) {
  testing::TempDir dir;
  const Task task = load_with_documents(
      dir, "copa",
      "{\"premise\": \"My body cast a shadow over the grass.\", \"choice1\": \"The sun was rising.\", "
      "\"choice2\": \"The grass was cut.\", \"question\": \"cause\", \"idx\": 0, \"label\": 0}\n");
  const std::vector<Request> rs = task.requests(task.documents().at(0));
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].context, "My body cast a shadow over the grass because");
  EXPECT_EQ(rs[0].continuation, "  the sun was rising.");
  EXPECT_EQ(rs[1].continuation, "  the grass was cut.");
  EXPECT_EQ(task.target(task.documents().at(0)), " the sun was rising.");
}

// Winogrande's two contexts share everything up to the blank: planned as one family they run
// as one row over that shared prefix, with the results of scoring each request alone.
TEST(PretrainingTasksTest, PartialScoringComputesTheSharedPrefixOnce) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_shared("winogrande");
  const std::vector<Request> rs = build_requests({&task}, 40);
  ASSERT_EQ(rs.size(), 80u);
  const DecoderModelImpl& model = testing::stories260k_model();
  const Tokenizer& tokenizer = testing::stories260k_tokenizer();
  auto run = [&](bool reuse, ExecutionStats& stats) {
    PlanOptions o;
    o.batch_tokens = 2048;
    o.max_length = model.config().max_position_embeddings;
    o.prefix_reuse = o.group_continuations = reuse;
    const Plan plan = make_plan(rs, tokenizer, o);
    std::vector<ItemResult> items;
    PrefixCache cache;
    ExecutionOptions eo;
    eo.prefixes = &cache;
    for (const Batch& b : plan.batches) {
      const Batch received = batch_from_json(nlohmann::json::parse(to_json(b).dump()));
      for (const ItemResult& r : execute_batch(model, tokenizer, received, eo, &stats)) items.push_back(r);
    }
    return std::make_pair(plan, combine_items(items));
  };
  ExecutionStats off_stats, on_stats;
  const auto [off_plan, off] = run(false, off_stats);
  const auto [on_plan, on] = run(true, on_stats);
  for (const Batch& b : on_plan.batches) {
    for (const WorkItem& item : b.items) EXPECT_GE(item.family, 0) << "request " << item.request_index;
  }
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_NEAR(off[i].logprob, on[i].logprob, 1e-5 * static_cast<double>(off[i].num_tokens)) << "request " << i;
    EXPECT_EQ(off[i].is_greedy, on[i].is_greedy);
    EXPECT_EQ(off[i].num_tokens, on[i].num_tokens);
  }
  // The options and the rest of the sentence are computed per request, the words before the
  // blank once per document.
  EXPECT_EQ(off_stats.tokens_computed, off_plan.total_tokens);
  EXPECT_LT(on_stats.tokens_computed * 10, off_stats.tokens_computed * 8)
      << on_stats.tokens_computed << " of " << off_stats.tokens_computed;
}

TEST(PretrainingTasksTest, BpbIsBitsPerByteOfTheGoldContinuation) {
  testing::TempDir dir;
  TaskLoadOptions options;
  options.extra_metrics = {"bpb"};
  dir.write("piqa.jsonl", "{\"goal\": \"g\", \"sol1\": \"ab\", \"sol2\": \"c\\u00e9\", \"label\": 1}\n");
  options.data_roots["piqa"] = dir.path();
  const Task piqa = Task::load("piqa", {tasks_dir()}, options);
  ASSERT_EQ(piqa.metrics().back().name, "bpb");
  EXPECT_FALSE(piqa.metrics().back().higher_is_better);
  std::vector<RequestResult> results(2);
  results[0].logprob = -1.0;
  results[1].logprob = -6.0;
  // The gold continuation " c\u00e9" is 4 bytes.
  EXPECT_NEAR(piqa.process_results(piqa.documents()[0], results).at("bpb").value, 6.0 / 4.0 / std::log(2.0), 1e-12);
  EXPECT_EQ(piqa.config().at("metric_list").back().at("metric"), "bpb");

  dir.write("lambada_openai.jsonl", "{\"text\": \"the cat sat\"}\n");
  options.data_roots["lambada_openai"] = dir.path();
  const Task lambada = Task::load("lambada_openai", {tasks_dir()}, options);
  std::vector<RequestResult> one(1);
  one[0].logprob = -2.0;
  EXPECT_NEAR(lambada.process_results(lambada.documents()[0], one).at("bpb").value, 2.0 / 4.0 / std::log(2.0), 1e-12);
  // Generation tasks have no gold continuation's logprob: bpb is not added there.
  dir.write("triviaqa.jsonl", "{\"question\": \"q\", \"answer\": {\"aliases\": [\"a\"]}}\n");
  options.data_roots["triviaqa"] = dir.path();
  EXPECT_EQ(Task::load("triviaqa", {tasks_dir()}, options).metrics().size(), 1u);
  // Without extra_metrics, piqa scores lm-eval's metrics only.
  TaskLoadOptions plain;
  plain.data_roots["piqa"] = dir.path();
  EXPECT_EQ(Task::load("piqa", {tasks_dir()}, plain).metrics().size(), 2u);
}

TEST(PretrainingTasksTest, BadDocumentsAreOneLineNamingFileAndLine) {
  testing::TempDir dir;
  auto error = [&](const std::string& name, const std::string& jsonl) {
    return error_of([&] { load_with_documents(dir, name, jsonl); });
  };
  const std::string ok_piqa = "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 0}\n";
  EXPECT_EQ(error("piqa", ok_piqa + "{\"goal\": \"g\", \"sol1\": \"a\", \"label\": 0}\n"),
            dir.file("piqa.jsonl") + ":2: doc_to_choice '{{[sol1, sol2]}}' references missing field 'sol2'");
  EXPECT_EQ(error("piqa", ok_piqa + "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 2}\n"),
            dir.file("piqa.jsonl") + ":2: label 2 is outside the 2 choices");
  EXPECT_EQ(error("openbookqa",
                  "{\"question_stem\": \"q\", \"choices\": {\"text\": [], \"label\": []}, \"answerKey\": \"A\"}\n"),
            dir.file("openbookqa.jsonl") + ":1: doc_to_choice gives no choices");
  EXPECT_EQ(
      error(
          "openbookqa",
          "{\"question_stem\": \"q\", \"choices\": {\"text\": [\"x\"], \"label\": [\"A\"]}, \"answerKey\": \" E\"}\n"),
      dir.file("openbookqa.jsonl") +
          ":1: doc_to_target '{{choices.label.index(answerKey.lstrip())}}': 'E' is not in list ['A']");
  EXPECT_EQ(error("boolq", "{\"question\": \"q\", \"passage\": \"p\", \"label\": 3}\n"),
            dir.file("boolq.jsonl") + ":1: label 3 is outside the 2 choices");
  EXPECT_EQ(error("winogrande",
                  "{\"sentence\": \"No blank here.\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n"),
            dir.file("winogrande.jsonl") + ":1: Winogrande sentence without '_' (the blank the options fill)");
  EXPECT_EQ(
      error("winogrande", "{\"sentence\": \"A _ b.\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"3\"}\n"),
      dir.file("winogrande.jsonl") + ":1: Winogrande document whose answer '3' is not '1' or '2'");
  EXPECT_EQ(
      error("copa",
            "{\"premise\": \"p.\", \"choice1\": \"A.\", \"choice2\": \"B.\", \"question\": \"cause\", \"label\": 2}\n"),
      dir.file("copa.jsonl") + ":1: COPA document whose label 2 is not 0 or 1 (an index into choice1, choice2)");
  EXPECT_EQ(
      error("copa",
            "{\"premise\": \"p.\", \"choice1\": \"A.\", \"choice2\": \"B.\", \"question\": \"why\", \"label\": 0}\n"),
      dir.file("copa.jsonl") + ":1: COPA document whose question 'why' is neither 'cause' nor 'effect'");
  EXPECT_EQ(error("lambada_openai", "{\"txt\": \"a b\"}\n"),
            dir.file("lambada_openai.jsonl") +
                ":1: doc_to_target '{{\\' \\'+text.split(\\' \\')[-1]}}' references missing field 'text'");
  EXPECT_EQ(
      error("triviaqa", "{\"question\": \"q\", \"answer\": {\"value\": \"a\"}}\n"),
      dir.file("triviaqa.jsonl") + ":1: doc_to_target '{{answer.aliases}}' references missing field 'answer.aliases'");
}

// From the command line: exit 1, the one line, and no output directory.
TEST(PretrainingTasksTest, ABadDatasetStopsTheRunBeforeAnythingIsWritten) {
  testing::TempDir dir;
  dir.write("winogrande.jsonl",
            "{\"sentence\": \"No blank.\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n");
  const std::string config =
      dir.write("run.yaml", "model: " + testing::source_dir() +
                                "/models/stories260K\ntasks: [winogrande]\ndata:\n  winogrande: " + dir.path() +
                                "\noutput: " + dir.file("out") + "\n");
  const testing::CommandResult r = testing::run_gpueval({"run", "--gpus", "cpu:1", config});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(dir.file("winogrande.jsonl") + ":1: Winogrande sentence without '_'"));
  EXPECT_FALSE(io::path_exists(dir.file("out")));
}

}  // namespace
}  // namespace gpueval
