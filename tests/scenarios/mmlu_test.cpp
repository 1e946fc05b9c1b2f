// MMLU from the original CSV release: the prompts are lm-evaluation-harness's byte for byte
// (0-shot against the llama2.c reference file's contexts, 5-shot pinned), the groups expand
// and aggregate as lm-eval's do, and a real run writes the groups section.
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "gpueval/model.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"
#include "gpueval/template.h"
#include "gpueval/tokenizer.h"
#include "plan/planner.h"
#include "run/executor.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> task_dirs() { return {testing::source_dir() + "/tasks"}; }
std::string mmlu_dir() { return testing::shared_dir() + "/data/mmlu"; }

Task load_mmlu(const std::string& subject, std::optional<int64_t> num_fewshot) {
  TaskLoadOptions options;
  options.data_roots["mmlu"] = mmlu_dir();
  options.num_fewshot = num_fewshot;
  return Task::load("mmlu_" + subject, task_dirs(), options);
}

using testing::error_of;

TEST(MmluTest, StripIsPythonsStrip) {
  const Template t = Template::parse("[{{q.strip()}}|{{ q }}]", "doc_to_text", "x.yaml:1");
  const nlohmann::json doc = {{"q", " \t\n\u00a0 a b \u3000\r\n"}};
  EXPECT_EQ(t.render(doc, "d"), "[a b|" + doc["q"].get<std::string>() + "]");
  EXPECT_EQ(Template::parse("{{q.strip()}}", "x", "w").value(doc, "d"), "a b");
  EXPECT_EQ(Template::parse("{{q.strip()}}", "x", "w").render({{"q", "  "}}, "d"), "");
  EXPECT_EQ(error_of([&] { Template::parse("{{q.strip().x}}", "doc_to_text", "x.yaml:1").render(doc, "d:2"); }),
            "d:2: doc_to_text '{{q.strip().x}}': q.strip() (str) has no attribute 'x'");
}

TEST(MmluTest, ZeroShotPromptsEqualTheReferenceContexts) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_mmlu("abstract_algebra", std::nullopt);
  EXPECT_EQ(task.num_fewshot(), 0);  // lm-eval's default; configs/mmlu.yaml asks for 5
  ASSERT_EQ(task.documents().size(), 100u);
  std::ifstream in(testing::shared_dir() + "/refs/stories260K_loglikelihood.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& item : ref.at("items")) {
    if (item.at("task") != "mmlu_abstract_algebra_0shot") continue;
    const Document& doc = task.documents().at(item.at("doc_id").get<size_t>());
    const std::vector<Request> requests = task.requests(doc);
    ASSERT_EQ(requests.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(requests[i].context, item.at("context").get<std::string>());
      EXPECT_EQ(requests[i].continuation, item.at("choices")[i].at("continuation").get<std::string>());
    }
    const auto gold = item.at("gold").get<int64_t>();
    std::vector<RequestResult> results(4);
    for (size_t i = 0; i < 4; ++i) results[i].logprob = i == static_cast<size_t>(gold) ? -1.0 : -2.0;
    EXPECT_EQ(task.process_results(doc, results).at("acc").value, 1.0) << "gold " << gold;
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

// Scoring our own requests (not the reference's strings) through the planner and executor
// gives the reference's log-likelihoods.
TEST(MmluTest, ZeroShotScoresReproduceTheReference) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_mmlu("abstract_algebra", 0);
  std::ifstream in(testing::shared_dir() + "/refs/stories260K_loglikelihood.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::vector<Request> requests;
  std::vector<double> expected;
  for (const auto& item : ref.at("items")) {
    if (item.at("task") != "mmlu_abstract_algebra_0shot") continue;
    for (Request& r : task.requests(task.documents().at(item.at("doc_id").get<size_t>()))) {
      expected.push_back(item.at("choices")[static_cast<size_t>(r.choice)].at("sum_logprob").get<double>());
      r.index = static_cast<int64_t>(requests.size());
      requests.push_back(std::move(r));
    }
  }
  ASSERT_EQ(requests.size(), 40u);
  const std::vector<RequestResult> results = testing::score_with_stories260k(requests);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < results.size(); ++i) EXPECT_NEAR(results[i].logprob, expected[i], 1e-4) << i;
}

TEST(MmluTest, ZeroShotPromptStripsTheQuestion) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_mmlu("college_medicine", 0);
  // The CSV's question ends in "behavior? "; lm-eval's template strips it.
  EXPECT_EQ(task.context(task.documents().at(0)),
            "The following are multiple choice questions (with answers) about college medicine.\n\nA police officer "
            "carries out hundreds of traffic stops every year. When his supervisor is reviewing the officer\u2019s "
            "records for the past year, he notices that the officer is equally likely to stop people of various "
            "genders, ages, and races. However, he is significantly more likely to write tickets for middle-aged "
            "white males with dark hair and eyes. When confronted with this fact, the officer truthfully states that "
            "he has no idea why that is, and that it must simply be a coincidence. Unbeknownst to the officer, this "
            "behavior is tied to the fact that these men look like his father, with whom he had an abusive "
            "relationship as a child. What psychological framework would directly address the unconscious bias in "
            "his behavior?\nA. Behaviorist\nB. Psychoanalytic\nC. Cognitive behavioral\nD. Humanistic\nAnswer:");
  EXPECT_EQ(task.target(task.documents().at(0)), "B");
}

TEST(MmluTest, FiveShotPromptTakesTheFirstFiveDevRows) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_mmlu("abstract_algebra", 5);
  EXPECT_EQ(task.num_fewshot(), 5);
  EXPECT_EQ(task.config()["num_fewshot"], 5);
  EXPECT_EQ(task.fewshot_sampler(), "first_n");
  EXPECT_EQ(task.fewshot_indices(task.documents().at(3)), (std::vector<size_t>{0, 1, 2, 3, 4}));
  const std::vector<Request> requests = task.requests(task.documents().at(0));
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].context,
            "The following are multiple choice questions (with answers) about abstract algebra.\n\nFind all c in Z_3 "
            "such that Z_3[x]/(x^2 + c) is a field.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\nStatement 1 | If aH is an "
            "element of a factor group, then |aH| divides |a|. Statement 2 | If H and K are subgroups of G then HK is "
            "a subgroup of G.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\nAnswer: B\n\nStatement "
            "1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 | The symmetric group "
            "S_10 has 10 elements.\nA. True, True\nB. False, False\nC. True, False\nD. False, True\nAnswer: "
            "C\n\nStatement 1| Every function from a finite set onto itself must be one to one. Statement 2 | Every "
            "subgroup of an abelian group is abelian.\nA. True, True\nB. False, False\nC. True, False\nD. False, "
            "True\nAnswer: A\n\nFind the characteristic of the ring 2Z.\nA. 0\nB. 3\nC. 12\nD. 30\nAnswer: A\n\nFind "
            "the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\nA. 0\nB. 4\nC. 2\nD. "
            "6\nAnswer:");
  EXPECT_EQ(requests[0].continuation, " A");
  EXPECT_EQ(requests[3].continuation, " D");
  // Every document shares the same examples.
  const std::string prefix = requests[0].context.substr(0, requests[0].context.rfind("\n\n") + 2);
  EXPECT_EQ(task.context(task.documents().at(99)).substr(0, prefix.size()), prefix);
}

TEST(MmluTest, AllFiftySevenSubjectsLoad) {
  GPUEVAL_REQUIRE_SHARED();
  const TaskSelection all = expand_tasks({"mmlu"}, task_dirs());
  ASSERT_EQ(all.tasks.size(), 57u);
  ASSERT_EQ(all.groups.size(), 5u);
  EXPECT_EQ(all.groups.back().name(), "mmlu");
  EXPECT_THAT(all.groups.back().members(),
              ElementsAre("mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities"));
  size_t total = 0;
  for (const std::string& name : all.tasks) total += load_mmlu(name.substr(5), 5).documents().size();
  EXPECT_EQ(total, 14042u);
  const TaskSelection stem = expand_tasks({"mmlu_stem"}, task_dirs());
  EXPECT_EQ(stem.tasks.size(), 19u);
  ASSERT_EQ(stem.groups.size(), 1u);
  EXPECT_EQ(stem.groups[0].alias(), "stem");
}

TEST(MmluTest, MissingDataRootSaysHowToSetIt) {
  TaskLoadOptions options;
  options.data_roots["mmlu"] = "/nonexistent/mmlu";
  EXPECT_EQ(error_of([&] { Task::load("mmlu_anatomy", task_dirs(), options); }),
            "data root 'mmlu': /nonexistent/mmlu is not a directory (set it with --data mmlu=PATH or the run "
            "config's data: {mmlu: PATH})");
}

TEST(MmluTest, MalformedCsvRowNamesFileAndLine) {
  testing::TempDir dir;
  testing::write_text(dir.file("q.csv"), "What?,a,b,c,d,A\n\"Open quote,a,b,c,d,B\n");
  testing::write_text(dir.file("q.yaml"),
                      "task: q\ndataset_kind: csv\ncolumn_names: [question, A, B, C, D, answer]\ndataset_path: q.csv\n"
                      "output_type: multiple_choice\ndoc_to_text: \"{{question.strip()}}\"\n"
                      "doc_to_choice: [\"A\", \"B\", \"C\", \"D\"]\ndoc_to_target: answer\n");
  EXPECT_EQ(error_of([&] { Task::load(dir.file("q.yaml"), {}); }),
            dir.file("q.csv") + ":2: quoted field is never closed");
  testing::write_text(dir.file("q.csv"), "What?,a,b,c,d,A\nWhy?,a,b,c,d\n");
  EXPECT_EQ(error_of([&] { Task::load(dir.file("q.yaml"), {}); }), dir.file("q.csv") + ":2: 5 fields, expected 6");
  testing::write_text(dir.file("q.csv"), "What?,a,b,c,d,E\n");
  EXPECT_THAT(error_of([&] { Task::load(dir.file("q.yaml"), {}); }), HasSubstr(dir.file("q.csv") + ":1: target"));
}

TEST(MmluTest, GroupScoresAreSizeWeightedWithPooledStderr) {
  const std::vector<SubtaskScore> scores = {{0.5, 0.1, 10}, {0.25, 0.2, 30}};
  EXPECT_DOUBLE_EQ(aggregate_subtask_scores(scores, true), 0.3125);  // (0.5*10 + 0.25*30) / 40
  EXPECT_DOUBLE_EQ(aggregate_subtask_scores(scores, false), 0.375);
  // sqrt((9 * 0.01 * 10 + 29 * 0.04 * 30) / (40 - 2) / 40)
  EXPECT_DOUBLE_EQ(*pooled_sample_stderr(scores), 0.15325417483795722);
  EXPECT_FALSE(pooled_sample_stderr({{0.5, std::nullopt, 10}, {0.25, 0.2, 30}}));
}

TEST(MmluTest, RunWritesTheGroupsSection) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  testing::write_text(dir.file("two.yaml"),
                      "group: two\ntask:\n  - mmlu_abstract_algebra\n  - mmlu_anatomy\n"
                      "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n");
  testing::write_text(dir.file("run.yaml"), "model: " + testing::source_dir() + "/models/stories260K\n" +
                                                "tasks: [two]\nnum_fewshot: 5\noutput: " + dir.file("out") + "\n");
  const auto r = testing::run_gpueval(
      {"run", "--gpus", "cpu:2", "--limit", "5", "--data", "mmlu=" + mmlu_dir(), dir.file("run.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json results = nlohmann::json::parse(io::read_file(dir.file("out/results.json")));
  const auto& a = results["results"]["mmlu_abstract_algebra"];
  const auto& b = results["results"]["mmlu_anatomy"];
  ASSERT_TRUE(results.contains("groups")) << results.dump(2);
  const auto& g = results["groups"]["two"];
  EXPECT_DOUBLE_EQ(g["acc,none"].get<double>(), (a["acc,none"].get<double>() + b["acc,none"].get<double>()) / 2);
  EXPECT_TRUE(g.contains("acc_stderr,none"));
  EXPECT_EQ(results["group_subtasks"]["two"], nlohmann::json({"mmlu_abstract_algebra", "mmlu_anatomy"}));
  EXPECT_EQ(results["n-shot"]["mmlu_anatomy"], 5);
  EXPECT_EQ(results["n-samples"]["mmlu_anatomy"]["effective"], 5);
  EXPECT_THAT(io::read_file(dir.file("out/report.md")), HasSubstr("| two | N/A | acc |"));
  // A missing data root is one line naming the flag.
  const auto bad =
      testing::run_gpueval({"run", "--gpus", "cpu:1", "--data", "mmlu=/nonexistent", dir.file("run.yaml")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--data mmlu=PATH"));
}

}  // namespace
}  // namespace gpueval
