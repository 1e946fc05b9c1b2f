// ARC and HellaSwag: lm-evaluation-harness's prompts byte for byte from every layout the tasks
// read (MosaicML, Hugging Face and AI2 ARC; HellaSwag's six-line text and original JSONL with
// lm-eval's preprocessing), one-line errors for bad files, and the llama2.c reference scores of
// the first HellaSwag documents reproduced through our requests, planner and executor.
#include <algorithm>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "gpueval/metrics.h"
#include "gpueval/model.h"
#include "gpueval/process_docs.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"
#include "gpueval/template.h"
#include "gpueval/tokenizer.h"
#include "plan/planner.h"
#include "run/executor.h"
#include "tasks/dataset_bounds.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> task_dirs() { return {testing::source_dir() + "/tasks"}; }

// The shipped tasks over ../shared/data's ARC and HellaSwag, or `root_name` at `root` instead.
Task load(const std::string& name, const std::string& root_name = "", const std::string& root = "") {
  TaskLoadOptions options;
  for (const char* shared : {"arc", "hellaswag"})
    options.data_roots[shared] = testing::shared_dir() + "/data/" + shared;
  if (!root.empty()) options.data_roots[root_name] = root;
  return Task::load(name, task_dirs(), options);
}

using testing::error_of;

std::vector<std::string> continuations(const std::vector<Request>& requests) {
  std::vector<std::string> out;
  for (const Request& r : requests) out.push_back(r.continuation);
  return out;
}

const char* kEasyQuestion = "Which statement best explains why photosynthesis is the foundation of most food webs?";

void expect_first_arc_easy_prompt(const Task& task) {
  const std::vector<Request> requests = task.requests(task.documents().at(0));
  ASSERT_EQ(requests.size(), 4u);
  for (const Request& r : requests) EXPECT_EQ(r.context, std::string("Question: ") + kEasyQuestion + "\nAnswer:");
  EXPECT_THAT(continuations(requests), ElementsAre(" Sunlight is the source of energy for nearly all ecosystems.",
                                                   " Most ecosystems are found on land instead of in water.",
                                                   " Carbon dioxide is more available than other gases.",
                                                   " The producers in all ecosystems are plants."));
  EXPECT_EQ(task.target(task.documents().at(0)), 0);
}

TEST(ArcHellaswagTest, ArcEasyFirstPromptFromTheMosaicFile) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load("arc_easy");
  EXPECT_EQ(task.dataset_file().substr(task.dataset_file().rfind('/') + 1), "arc_easy_test_mosaic.jsonl");
  EXPECT_EQ(task.documents().size(), 2376u);
  expect_first_arc_easy_prompt(task);
  // process_docs gives the Hugging Face layout lm-eval's templates read.
  EXPECT_EQ(task.documents()[0].fields["choices"]["label"], nlohmann::json({"A", "B", "C", "D"}));
  EXPECT_EQ(task.documents()[0].fields["answerKey"], "A");
  EXPECT_EQ(task.config()["process_docs"], "arc");
}

TEST(ArcHellaswagTest, ArcChallengeFirstPromptFromTheMosaicFile) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load("arc_challenge");
  EXPECT_EQ(task.documents().size(), 1172u);
  const std::vector<Request> requests = task.requests(task.documents().at(0));
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].context,
            "Question: An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most "
            "likely effect of this increase in rotation?\nAnswer:");
  EXPECT_THAT(continuations(requests),
              ElementsAre(" Planetary density will decrease.", " Planetary years will become longer.",
                          " Planetary days will become shorter.", " Planetary gravity will become stronger."));
  EXPECT_EQ(task.target(task.documents().at(0)), 2);
  const TaskSelection arc = expand_tasks({"ai2_arc"}, task_dirs());
  EXPECT_THAT(arc.tasks, ElementsAre("arc_easy", "arc_challenge"));
}

TEST(ArcHellaswagTest, HuggingFaceAndAi2LayoutsGiveTheSamePrompt) {
  testing::TempDir hf, ai2;
  const std::string choices =
      "[\"Sunlight is the source of energy for nearly all ecosystems.\", \"Most ecosystems are found on land instead "
      "of in water.\", \"Carbon dioxide is more available than other gases.\", \"The producers in all ecosystems are "
      "plants.\"]";
  // The second document numbers its labels, as some ARC questions do.
  hf.write(
      "arc_easy_test.jsonl",
      std::string("{\"id\": \"Mercury_417466\", \"question\": \"") + kEasyQuestion +
          "\", \"choices\": {\"text\": " + choices +
          ", \"label\": [\"A\", \"B\", \"C\", \"D\"]}, \"answerKey\": \"A\"}\n"
          "{\"id\": \"x2\", \"question\": \"Two?\", \"choices\": {\"text\": [\"a\", \"b\", \"c\"], \"label\": [\"1\", "
          "\"2\", \"3\"]}, \"answerKey\": \"3\"}\n");
  ai2.write(
      "ARC-Easy-Test.jsonl",
      std::string("{\"id\": \"Mercury_417466\", \"question\": {\"stem\": \"") + kEasyQuestion +
          "\", \"choices\": [{\"text\": \"Sunlight is the source of energy for nearly all ecosystems.\", \"label\": "
          "\"A\"}, {\"text\": \"Most ecosystems are found on land instead of in water.\", \"label\": \"B\"}, "
          "{\"text\": \"Carbon dioxide is more available than other gases.\", \"label\": \"C\"}, {\"text\": \"The "
          "producers in all ecosystems are plants.\", \"label\": \"D\"}]}, \"answerKey\": \"A\"}\n"
          "{\"id\": \"x2\", \"question\": {\"stem\": \"Two?\", \"choices\": [{\"text\": \"a\", \"label\": \"1\"}, "
          "{\"text\": \"b\", \"label\": \"2\"}, {\"text\": \"c\", \"label\": \"3\"}]}, \"answerKey\": \"3\"}\n");
  for (const testing::TempDir* dir : {&hf, &ai2}) {
    SCOPED_TRACE(dir->path());
    const Task task = load("arc_easy", "arc", dir->path());
    ASSERT_EQ(task.documents().size(), 2u);
    expect_first_arc_easy_prompt(task);
    const std::vector<Request> second = task.requests(task.documents()[1]);
    ASSERT_EQ(second.size(), 3u);
    EXPECT_EQ(second[2].context, "Question: Two?\nAnswer:");
    EXPECT_EQ(second[2].continuation, " c");
    EXPECT_EQ(task.target(task.documents()[1]), 2);
    EXPECT_EQ(task.documents()[0].fields["id"], "Mercury_417466");
  }
}

TEST(ArcHellaswagTest, IndexIsPythonsListIndex) {
  const Template t = Template::parse("{{ choices.label.index(answerKey) }}", "doc_to_target", "x.yaml:3");
  const nlohmann::json doc = {{"choices", {{"label", {"A", "B", "B"}}}}, {"answerKey", "B"}};
  EXPECT_EQ(t.value(doc, "d:1"), 1);  // the first match, an integer
  EXPECT_EQ(t.render(doc, "d:1"), "1");
  EXPECT_EQ(error_of([&] {
              t.value({{"choices", {{"label", {"A", "B"}}}}, {"answerKey", "E"}}, "d:7");
            }),
            "d:7: doc_to_target '{{ choices.label.index(answerKey) }}': 'E' is not in list ['A', 'B']");
  EXPECT_EQ(error_of([&] {
              t.value({{"choices", {{"label", {"1", "2"}}}}, {"answerKey", 1}}, "d:8");
            }),
            "d:8: doc_to_target '{{ choices.label.index(answerKey) }}': 1 is not in list ['1', '2']");
  EXPECT_EQ(
      error_of([&] {
        Template::parse("{{a.index(b).x}}", "doc_to_target", "x.yaml:3").value({{"a", {"p", "q"}}, {"b", "q"}}, "d:9");
      }),
      "d:9: doc_to_target '{{a.index(b).x}}': a.index(b) (int) has no attribute 'x'");
}

TEST(ArcHellaswagTest, ArcAnswerKeyNotAmongTheLabelsNamesTheLine) {
  testing::TempDir dir;
  dir.write(
      "arc_challenge_test.jsonl",
      "{\"question\": \"Q?\", \"choices\": {\"text\": [\"a\", \"b\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \"B\"}\n"
      "\n"
      "{\"question\": \"R?\", \"choices\": {\"text\": [\"a\", \"b\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \"E\"}\n");
  EXPECT_EQ(error_of([&] { load("arc_challenge", "arc", dir.path()); }),
            dir.file("arc_challenge_test.jsonl") +
                ":3: doc_to_target '{{choices.label.index(answerKey)}}': 'E' is not in list ['A', 'B']");
  dir.write("arc_challenge_test.jsonl", "{\"query\": \"Q?\", \"choices\": [\"a\"], \"gold\": 0}\n");
  EXPECT_EQ(error_of([&] { load("arc_challenge", "arc", dir.path()); }),
            dir.file("arc_challenge_test.jsonl") +
                ":1: ARC document (MosaicML layout) whose query does not start with 'Question: '");
}

TEST(ArcHellaswagTest, UnknownOrPythonProcessDocsIsRejectedWithTheLine) {
  testing::TempDir dir;
  dir.write("d.jsonl", "{\"q\": \"x\"}\n");
  const std::string yaml = dir.write("t.yaml",
                                     "task: t\ndataset_path: d.jsonl\nprocess_docs: arcc\ndoc_to_text: \"{{q}}\"\n"
                                     "doc_to_target: \"{{q}}\"\n");
  EXPECT_EQ(error_of([&] { Task::load(yaml, {}); }),
            yaml + ":3: unknown process_docs 'arcc' (built in: arc, hellaswag)");
  dir.write("t.yaml",
            "task: t\ndataset_path: d.jsonl\nprocess_docs: !function utils.process_docs\n"
            "doc_to_text: \"{{q}}\"\ndoc_to_target: \"{{q}}\"\n");
  EXPECT_EQ(error_of([&] { Task::load(yaml, {}); }),
            yaml + ":3: process_docs: tag '!function' is not supported (gpueval runs no Python)");
  // A candidate list names every file it tried.
  dir.write("t.yaml", "task: t\ndataset_path: [a.jsonl, b.jsonl]\ndoc_to_text: \"{{q}}\"\ndoc_to_target: \"{{q}}\"\n");
  EXPECT_EQ(error_of([&] { Task::load(yaml, {}); }),
            yaml + ":2: dataset_path: none of a.jsonl, b.jsonl exists in " + dir.path());
  // Candidates after the one found are checked too.
  dir.write("t.yaml",
            "task: t\ndataset_path:\n  - d.jsonl\n  - {path: x.txt, dataset_kind: txt}\n"
            "doc_to_text: \"{{q}}\"\ndoc_to_target: \"{{q}}\"\n");
  EXPECT_EQ(error_of([&] { Task::load(yaml, {}); }),
            yaml + ":4: dataset_kind must be jsonl, csv, hellaswag_text or text, got 'txt'");
}

TEST(ArcHellaswagTest, HellaswagFirstPromptsFromTheTextFile) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load("hellaswag");
  EXPECT_EQ(task.dataset_file().substr(task.dataset_file().rfind('/') + 1), "hellaswag_val_full.txt");
  EXPECT_EQ(task.documents().size(), 10042u);
  const std::vector<Request> first = task.requests(task.documents().at(0));
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first[0].context, "Roof shingle removal: A man is sitting on a roof. he");
  EXPECT_THAT(continuations(first),
              ElementsAre(" is using wrap to wrap a pair of skis.", " is ripping level tiles off.",
                          " is holding a rubik's cube.", " starts pulling up roofing on a roof."));
  EXPECT_EQ(task.target(task.documents()[0]), 3);
  EXPECT_EQ(task.location(task.documents()[1]), task.dataset_file() + ":7");
}

// The expected strings were worked out by hand from lm-eval's utils.preprocess and confirmed
// with Python 3's str.strip/replace/capitalize and re.sub.
TEST(ArcHellaswagTest, HellaswagJsonlIsPreprocessedAsLmEvalDoes) {
  testing::TempDir dir;
  dir.write("hellaswag_val.jsonl",
            "{\"ind\": 7, \"activity_label\": \"Personal Care and Style\", \"ctx_a\": \"  [header] How to tie a tie "
            "[title] Drape the tie around your neck.\", \"ctx_b\": \"tHE wide END [step] hangs LOWER\", \"endings\": "
            "[\"[substeps] on the left side.   Then cross it [title] over.\", \"no [bracket\\nhere] ok\", \" [step] [a "
            "[b] c] end  \", \"x\"], \"label\": \"2\", \"split\": \"val\"}\n");
  const Task task = load("hellaswag", "hellaswag", dir.path());
  EXPECT_EQ(task.dataset_file(), dir.file("hellaswag_val.jsonl"));
  const std::vector<Request> requests = task.requests(task.documents().at(0));
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].context,
            "Personal Care and Style:  How to tie a tie. Drape the tie around your neck. The wide end hangs lower");
  EXPECT_THAT(continuations(requests),
              ElementsAre("  on the left side.  Then cross it. over.", " no [bracket\nhere] ok", "  c] end", " x"));
  EXPECT_EQ(task.target(task.documents()[0]), 2);
  const nlohmann::json& fields = task.documents()[0].fields;
  EXPECT_EQ(fields["gold"], 2);
  EXPECT_EQ(fields["answer_letter"], "C");
  EXPECT_EQ(fields["split"], "val");  // the original fields stay, as datasets.map keeps them

  EXPECT_EQ(python_capitalize("tHE wide END"), "The wide end");
  EXPECT_EQ(python_capitalize(""), "");
  EXPECT_EQ(python_capitalize("1ST Place"), "1st place");
  // Latin-1, as Python 3 gives it: 'éCOLE ÄRGER Ÿ'.capitalize() == 'École ärger ÿ'.
  EXPECT_EQ(python_capitalize("\u00e9COLE \u00c4RGER \u0178"), "\u00c9cole \u00e4rger \u00ff");
  EXPECT_EQ(python_capitalize("\u00dfA"), "Ssa");
  EXPECT_EQ(python_capitalize("\u00ffX"), "\u0178x");
  EXPECT_EQ(python_capitalize("\u00b5A"), "\u039ca");
  EXPECT_EQ(python_capitalize("\u00d8x\u00d7\u00f7\u00de"), "\u00d8x\u00d7\u00f7\u00fe");
  EXPECT_EQ(hellaswag_preprocess("a    b   c"), "a  b  c");  // one pass of str.replace
}

TEST(ArcHellaswagTest, BadSixLineRecordsNameTheLine) {
  testing::TempDir dir;
  const std::string file = dir.write("hellaswag_val_full.txt", "ctx one\n2\na\nb\nc\nd\nctx two\n7\na\nb\nc\nd\n");
  EXPECT_EQ(error_of([&] { load("hellaswag", "hellaswag", dir.path()); }),
            file + ":8: gold ending '7' is not 0, 1, 2 or 3");
  dir.write("hellaswag_val_full.txt", "ctx one\r\n2\r\na\r\nb\r\nc\r\nd\r\nctx two\r\n1\r\na\r\n");
  EXPECT_EQ(error_of([&] { load("hellaswag", "hellaswag", dir.path()); }),
            file + ":7: the last record has 3 of its 6 lines (context, gold ending, 4 endings)");
  dir.write("hellaswag_val_full.txt", "ctx one\r\n2\r\na\r\nb\r\nc\r\nd\r\n");
  const Task task = load("hellaswag", "hellaswag", dir.path());
  EXPECT_EQ(task.context(task.documents().at(0)), "ctx one");
  EXPECT_EQ(task.requests(task.documents()[0])[3].continuation, " d");

  dir.write("hellaswag_val_full.txt", "ctx one\n2\na\nb\n" + std::string(kMaxDocumentBytes + 1, 'c') + "\nd\n");
  EXPECT_EQ(error_of([&] { load("hellaswag", "hellaswag", dir.path()); }),
            file +
                ":5: the line is 67108865 bytes, past the bound of 67108864 (64 MiB) that gpueval accepts for one "
                "document");
}

// Our own requests for the reference's HellaSwag documents, scored through the planner and
// executor, give llama2.c's log-likelihoods, and process_results its acc. The reference's
// acc_norm divides by the UTF-8 length of the continuation with its leading space; lm-eval's
// (and ours) by the length of the choice without it, which flips document 8.
TEST(ArcHellaswagTest, HellaswagScoresReproduceTheReference) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load("hellaswag");
  std::ifstream in(testing::shared_dir() + "/refs/stories260K_loglikelihood.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::vector<Request> requests;
  std::vector<nlohmann::json> items;
  for (const auto& item : ref.at("items")) {
    if (item.at("task") != "hellaswag_val_full_txt") continue;
    const Document& doc = task.documents().at(item.at("doc_id").get<size_t>());
    std::vector<Request> own = task.requests(doc);
    ASSERT_EQ(own.size(), item.at("choices").size());
    for (Request& r : own) {
      EXPECT_EQ(r.context, item.at("context").get<std::string>());
      EXPECT_EQ(r.continuation,
                item.at("choices")[static_cast<size_t>(r.choice)].at("continuation").get<std::string>());
      r.index = static_cast<int64_t>(requests.size());
      requests.push_back(std::move(r));
    }
    EXPECT_EQ(task.target(doc), item.at("gold"));
    items.push_back(item);
  }
  ASSERT_EQ(items.size(), 20u);
  const std::vector<RequestResult> results = testing::score_with_stories260k(requests);
  ASSERT_EQ(results.size(), requests.size());
  size_t next = 0;
  for (const nlohmann::json& item : items) {
    const int64_t doc_id = item.at("doc_id").get<int64_t>();
    SCOPED_TRACE("doc " + std::to_string(doc_id));
    std::vector<RequestResult> doc_results;
    for (const auto& choice : item.at("choices")) {
      EXPECT_NEAR(results[next].logprob, choice.at("sum_logprob").get<double>(), 1e-4);
      doc_results.push_back(results[next++]);
    }
    const DocMetrics metrics = task.process_results(task.documents()[static_cast<size_t>(doc_id)], doc_results);
    EXPECT_EQ(metrics.at("acc").value, item.at("acc").get<double>());
    // The reference normalises by the UTF-8 bytes of the continuation with its leading space;
    // lm-eval (and gpueval's acc_norm) by the characters of the choice without it. Each
    // definition, applied to the other side's loglikelihoods, must give the other's answer, so
    // both the numbers and our metric are checked on every item.
    const size_t gold = item.at("gold").get<size_t>();
    auto argmax = [](const std::vector<double>& xs) {
      return static_cast<size_t>(std::max_element(xs.begin(), xs.end()) - xs.begin());  // first max, as numpy
    };
    std::vector<double> ours_by_reference_rule, reference_by_lm_eval_rule;
    for (size_t c = 0; c < item.at("choices").size(); ++c) {
      const std::string continuation = item.at("choices")[c].at("continuation").get<std::string>();
      ASSERT_EQ(continuation.rfind(' ', 0), 0u);  // target_delimiter " " + ending
      ours_by_reference_rule.push_back(doc_results[c].logprob / static_cast<double>(continuation.size()));
      reference_by_lm_eval_rule.push_back(item.at("choices")[c].at("sum_logprob").get<double>() /
                                          static_cast<double>(count_code_points(continuation.substr(1))));
    }
    EXPECT_EQ(argmax(ours_by_reference_rule), item.at("pred_norm").get<size_t>());
    EXPECT_EQ(item.at("acc_norm").get<double>(), argmax(ours_by_reference_rule) == gold ? 1.0 : 0.0);
    EXPECT_EQ(metrics.at("acc_norm").value, argmax(reference_by_lm_eval_rule) == gold ? 1.0 : 0.0);
  }
}

// ai2_arc selects both ARC tasks and, like lm-eval's tag, has no score of its own: results.json
// lists it with its members, report.md shows no group table for it.
TEST(ArcHellaswagTest, Ai2ArcRunHasNoGroupScore) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  testing::write_text(dir.file("run.yaml"), "model: " + testing::source_dir() + "/models/stories260K\n" +
                                                "tasks: [ai2_arc]\noutput: " + dir.file("out") + "\n");
  const auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--limit", "3", "--data",
                                       "arc=" + testing::shared_dir() + "/data/arc", dir.file("run.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(io::read_file(dir.file("out/results.json")));
  EXPECT_EQ(results["group_subtasks"]["ai2_arc"], nlohmann::json({"arc_easy", "arc_challenge"}));
  EXPECT_TRUE(results["results"]["arc_easy"].contains("acc_norm,none"));
  EXPECT_FALSE(results["groups"]["ai2_arc"].contains("acc,none"));
  const std::string report = io::read_file(dir.file("out/report.md"));
  EXPECT_THAT(report, HasSubstr("| arc_challenge |"));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("| Group |")));
}

}  // namespace
}  // namespace gpueval
