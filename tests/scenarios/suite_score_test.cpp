// Suite scores (gpueval's member_metrics in a group file, task_group.h): the unweighted mean of
// each member's own metric, its stderr, chance levels, member groups, what results.json,
// report.md and the history make of it, and the errors of a bad spec.
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "aggregate/aggregator.h"
#include "common/file_io.h"
#include "evaluation/history_recorder.h"
#include "gpueval/history.h"
#include "gpueval/report.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"
#include "test_util.h"

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;

RequestResult ll(double logprob) {
  RequestResult r;
  r.logprob = logprob;
  return r;
}

RequestResult text(const std::string& t) {
  RequestResult r;
  r.text = t;
  return r;
}

// quiz: 4 documents (4, 4, 2 and 2 choices: chance 0.375); pick: 2 documents of 3 choices;
// trivia: generate_until with filters none and remove_whitespace. Groups: inner = lm-eval group
// over pick (acc); mc = suite {quiz: acc_norm, inner: acc}; top = suite {mc: score, trivia:
// exact_match,remove_whitespace}.
class SuiteScoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_quiz_task(dir_,
                             "{\"question\": \"a\", \"choices\": [\"x\", \"yy\", \"zzz\", \"w\"], \"label\": 0}\n"
                             "{\"question\": \"b\", \"choices\": [\"x\", \"yy\", \"zzz\", \"w\"], \"label\": 2}\n"
                             "{\"question\": \"c\", \"choices\": [\"no\", \"yes\"], \"label\": 1}\n"
                             "{\"question\": \"d\", \"choices\": [\"no\", \"yes\"], \"label\": 0}\n");
    dir_.write("pick.jsonl", "{\"q\": \"one\", \"label\": 0}\n{\"q\": \"two\", \"label\": 1}\n");
    dir_.write("pick.yaml",
               "task: pick\ndataset_path: pick.jsonl\noutput_type: multiple_choice\n"
               "doc_to_text: \"{{q}}\"\ndoc_to_choice: [\"r\", \"s\", \"t\"]\ndoc_to_target: \"{{label}}\"\n"
               "metric_list: [acc]\n");
    dir_.write("trivia.jsonl", "{\"q\": \"capital?\", \"a\": \"Paris\"}\n{\"q\": \"river?\", \"a\": \"Nile\"}\n");
    dir_.write("trivia.yaml",
               "task: trivia\ndataset_path: trivia.jsonl\noutput_type: generate_until\n"
               "doc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\nmetric_list: [exact_match]\n"
               "filter_list:\n  - name: none\n    filter:\n      - function: take_first\n"
               "  - name: remove_whitespace\n    filter:\n      - function: remove_whitespace\n"
               "      - function: take_first\n");
    dir_.write("inner.yaml",
               "group: inner\ntask: [pick]\naggregate_metric_list:\n  - metric: acc\n"
               "    weight_by_size: true\n");
    dir_.write("mc.yaml",
               "group: mc\ntask: [quiz, inner]\naggregate_metric_list:\n  - metric: score\n"
               "    weight_by_size: false\n    member_metrics:\n      quiz: acc_norm\n      inner: acc\n");
    dir_.write("top.yaml",
               "group: top\ntask:\n  - mc\n  - trivia\naggregate_metric_list:\n  - metric: score\n"
               "    member_metrics:\n      trivia: exact_match,remove_whitespace\n      mc: score\n");
  }

  // Loads the selection's tasks and scores every document: quiz right on 0 and 2 by acc and
  // also on 1 by acc_norm, pick right on document 0, trivia right only once the leading space
  // is removed.
  void score(const std::string& group, bool with_trivia = true) {
    selection_ = expand_tasks({group}, {dir_.path()});
    tasks_.clear();
    tasks_.reserve(selection_.tasks.size());
    for (const std::string& name : selection_.tasks) tasks_.push_back(Task::load(name, {dir_.path()}));
    std::vector<const Task*> ptrs;
    for (const Task& t : tasks_) ptrs.push_back(&t);
    check_member_metrics(selection_.groups, ptrs);
    records_.clear();
    for (const Task& t : tasks_) {
      for (const Document& d : t.documents()) {
        std::vector<RequestResult> results;
        if (t.name() == "quiz") {
          const std::vector<std::vector<double>> lp = {{-1, -3, -4, -5}, {-4, -3, -1.9, -1}, {-3, -1}, {-2, -1}};
          for (double x : lp[static_cast<size_t>(d.doc_id)]) results.push_back(ll(x));
        } else if (t.name() == "pick") {
          results = {ll(-1), ll(-2), ll(-3)};
        } else if (t.name() == "trivia") {
          if (!with_trivia) continue;
          results = {text(d.doc_id == 0 ? " Paris" : " Nile")};
        }
        records_.push_back(testing::scored_record(t, d, results));
      }
    }
    ptrs_ = ptrs;
    scores_ = score_tasks(ptrs_, records_, 100);
    groups_ = score_groups(scores_, selection_.groups);
  }

  const MetricResult& task_metric(const std::string& task, const std::string& metric,
                                  const std::string& filter = "none") const {
    for (const TaskScores& t : scores_)
      for (const MetricResult& m : t.metrics)
        if (t.task->name() == task && m.name == metric && m.filter == filter) return m;
    throw Error("no metric " + task + " " + metric + "," + filter);
  }
  const GroupScores& group(const std::string& name) const {
    for (const GroupScores& g : groups_)
      if (g.group->name() == name) return g;
    throw Error("no group " + name);
  }

  testing::TempDir dir_;
  TaskSelection selection_;
  std::vector<Task> tasks_;
  std::vector<const Task*> ptrs_;
  std::vector<DocRecord> records_;
  std::vector<TaskScores> scores_;
  std::vector<GroupScores> groups_;
};

TEST(SuiteScoreArithmeticTest, UnweightedMeanAndIndependentStderr) {
  const std::vector<SubtaskScore> scores = {{0.5, 0.03, 10}, {0.25, 0.04, 3000}, {0.9, 0.12, 7}};
  EXPECT_DOUBLE_EQ(aggregate_subtask_scores(scores, false), 0.55);  // (0.5 + 0.25 + 0.9) / 3, sizes ignored
  EXPECT_DOUBLE_EQ(*suite_stderr(scores), 0.13 / 3);  // sqrt(0.0009 + 0.0016 + 0.0144) / 3
  EXPECT_FALSE(suite_stderr({{0.5, 0.03, 10}, {0.25, std::nullopt, 30}}));
  EXPECT_FALSE(suite_stderr({}));
}

TEST_F(SuiteScoreTest, LoadsMembersInTaskOrderWithTheirMetricsAndFilters) {
  const TaskGroup top = TaskGroup::load(dir_.file("top.yaml"));
  ASSERT_EQ(top.metrics().size(), 1u);
  const GroupMetricSpec& spec = top.metrics()[0];
  EXPECT_TRUE(spec.is_suite());
  EXPECT_FALSE(spec.weight_by_size);
  ASSERT_EQ(spec.member_metrics.size(), 2u);
  EXPECT_EQ(spec.member_metrics[0].member, "mc");  // `task` order, not member_metrics order
  EXPECT_EQ(spec.member_metrics[0].metric, "score");
  EXPECT_EQ(spec.member_metrics[0].filter, "none");
  EXPECT_EQ(spec.member_metrics[1].member, "trivia");
  EXPECT_EQ(spec.member_metrics[1].metric, "exact_match");
  EXPECT_EQ(spec.member_metrics[1].filter, "remove_whitespace");
  EXPECT_EQ(spec.member_metrics[1].where, dir_.file("top.yaml") + ":8");
  EXPECT_FALSE(TaskGroup::load(dir_.file("inner.yaml")).metrics()[0].is_suite());
}

TEST_F(SuiteScoreTest, ScoreIsTheMeanOfEachMembersOwnMetric) {
  score("top");
  const MetricResult& quiz = task_metric("quiz", "acc_norm");
  const MetricResult& pick = task_metric("pick", "acc");
  const MetricResult& trivia = task_metric("trivia", "exact_match", "remove_whitespace");
  EXPECT_EQ(trivia.value, 1.0);
  EXPECT_EQ(task_metric("trivia", "exact_match").value, 0.0);  // the leading space: filter none misses
  EXPECT_NE(quiz.value, task_metric("quiz", "acc").value);  // so taking acc_norm is visible

  const GroupScores& inner = group("inner");
  ASSERT_EQ(inner.metrics.size(), 1u);
  EXPECT_EQ(inner.metrics[0].value, pick.value);

  const GroupScores& mc = group("mc");
  ASSERT_EQ(mc.metrics.size(), 1u);
  EXPECT_EQ(mc.metrics[0].name, "score");
  EXPECT_EQ(mc.alias, " - mc");  // nested in top
  EXPECT_DOUBLE_EQ(mc.metrics[0].value, (quiz.value + inner.metrics[0].value) / 2);
  EXPECT_DOUBLE_EQ(*mc.metrics[0].stderr,
                   std::sqrt(*quiz.stderr * *quiz.stderr + *inner.metrics[0].stderr * *inner.metrics[0].stderr) / 2);
  EXPECT_EQ(mc.metrics[0].n, 6);
  EXPECT_TRUE(mc.metrics[0].higher_is_better);

  // A suite of a suite and a task under a filter.
  const GroupScores& top = group("top");
  ASSERT_EQ(top.metrics.size(), 1u);
  EXPECT_DOUBLE_EQ(top.metrics[0].value, (mc.metrics[0].value + trivia.value) / 2);
  EXPECT_DOUBLE_EQ(*top.metrics[0].stderr,
                   std::sqrt(*mc.metrics[0].stderr * *mc.metrics[0].stderr + *trivia.stderr * *trivia.stderr) / 2);
  EXPECT_EQ(top.metrics[0].n, 8);
}

TEST_F(SuiteScoreTest, ChanceLevelsFollowTheScores) {
  score("top");
  // quiz: mean(1/4, 1/4, 1/2, 1/2); pick 1/3; trivia (generate_until) none.
  EXPECT_DOUBLE_EQ(*task_metric("quiz", "acc").chance, 0.375);
  EXPECT_DOUBLE_EQ(*task_metric("quiz", "acc_norm").chance, 0.375);
  EXPECT_DOUBLE_EQ(*task_metric("pick", "acc").chance, 1.0 / 3);
  EXPECT_FALSE(task_metric("trivia", "exact_match", "remove_whitespace").chance);
  EXPECT_DOUBLE_EQ(*group("inner").metrics[0].chance, 1.0 / 3);
  EXPECT_DOUBLE_EQ(*group("mc").metrics[0].chance, (0.375 + 1.0 / 3) / 2);
  EXPECT_FALSE(group("top").metrics[0].chance);  // trivia has none
}

TEST_F(SuiteScoreTest, AStderrNaMakesTheSuiteStderrNa) {
  // One pick document: its acc has no stderr (lm-eval's N/A), so neither do inner and mc.
  dir_.write("pick.jsonl", "{\"q\": \"one\", \"label\": 0}\n");
  score("mc");
  EXPECT_FALSE(task_metric("pick", "acc").stderr);
  EXPECT_FALSE(group("mc").metrics[0].stderr);
  EXPECT_DOUBLE_EQ(group("mc").metrics[0].value, (task_metric("quiz", "acc_norm").value + 1.0) / 2);
}

TEST_F(SuiteScoreTest, AnUnscoredMemberLeavesTheSuiteUnscored) {
  score("top", /*with_trivia=*/false);
  EXPECT_EQ(group("mc").metrics.size(), 1u);
  EXPECT_TRUE(group("top").metrics.empty());  // not a mean over fewer members
}

TEST_F(SuiteScoreTest, ResultsJsonReportAndHistoryShowTheSuite) {
  score("top");
  RunSummary summary;
  summary.model = "m";
  summary.bootstrap_iters = 100;
  summary.groups = selection_.groups;
  const nlohmann::ordered_json results = results_json(ptrs_, records_, summary);
  const GroupScores& mc = group("mc");
  EXPECT_EQ(results["groups"]["mc"]["score,none"].get<double>(), mc.metrics[0].value);
  EXPECT_EQ(results["groups"]["mc"]["score_stderr,none"].get<double>(), *mc.metrics[0].stderr);
  EXPECT_EQ(results["results"]["top"]["alias"], "top");
  EXPECT_EQ(results["higher_is_better"]["mc"], nlohmann::ordered_json({{"score", true}}));
  EXPECT_FALSE(results["higher_is_better"].contains("inner"));  // lm-eval's groups stay as lm-eval writes them
  EXPECT_EQ(results["chance"]["quiz"], nlohmann::ordered_json({{"acc,none", 0.375}, {"acc_norm,none", 0.375}}));
  EXPECT_EQ(results["chance"]["mc"]["score,none"].get<double>(), *mc.metrics[0].chance);
  EXPECT_FALSE(results["chance"].contains("trivia"));
  EXPECT_FALSE(results["chance"].contains("top"));

  const std::string md = report_markdown(ptrs_, records_, summary);
  EXPECT_THAT(md, HasSubstr(fmt::format("| top | N/A | score | ↑ | {:.4f} | ± |", group("top").metrics[0].value)));
  EXPECT_THAT(md, HasSubstr(fmt::format("|  - mc | N/A | score | ↑ | {:.4f} | ± |", mc.metrics[0].value)));

  std::vector<ScoreRow> rows = score_rows(score_run(ptrs_, records_, 100, selection_.groups), std::nullopt);
  auto find = [&](const std::string& task, const std::string& metric) -> const ScoreRow& {
    for (const ScoreRow& r : rows)
      if (r.task == task && r.metric == metric) return r;
    throw Error("no row " + task + " " + metric);
  };
  EXPECT_TRUE(find("mc", "score").is_group);
  EXPECT_EQ(find("mc", "score").n, 6);
  EXPECT_DOUBLE_EQ(*find("mc", "score").chance, *mc.metrics[0].chance);
  EXPECT_FALSE(find("top", "score").chance);
  EXPECT_DOUBLE_EQ(*find("quiz", "acc_norm").chance, 0.375);
  EXPECT_FALSE(find("trivia", "exact_match").chance);

  // The history keeps the chance level with the score.
  History h = History::open(dir_.file("h.sqlite"));
  const int64_t run = h.begin_run("cfg", {}, "");
  h.record(run, CheckpointInfo{"fp", "/c", "c", 1}, "cfg", "complete", rows, samples_from_records(records_));
  const std::vector<ScoredCheckpoint> trend = h.trend("cfg");
  ASSERT_EQ(trend.size(), 1u);
  rows = trend[0].scores;
  EXPECT_DOUBLE_EQ(*find("mc", "score").chance, *mc.metrics[0].chance);
  EXPECT_FALSE(find("top", "score").chance);
  EXPECT_TRUE(find("top", "score").higher_is_better);
}

TEST_F(SuiteScoreTest, LowerIsBetterSuiteKeepsItsDirection) {
  testing::write_story_task(dir_, "{\"text\": \"One day.\"}\n{\"text\": \"The end.\"}\n");
  dir_.write("ppl.yaml",
             "group: ppl\ntask: [story]\naggregate_metric_list:\n  - metric: mean_ppl\n"
             "    member_metrics: {story: word_perplexity}\n");
  const TaskSelection sel = expand_tasks({"ppl"}, {dir_.path()});
  const Task story = Task::load("story", {dir_.path()});
  check_member_metrics(sel.groups, {&story});
  std::vector<DocRecord> records;
  for (const Document& d : story.documents()) records.push_back(testing::scored_record(story, d, {ll(-7)}));
  RunSummary summary;
  summary.groups = sel.groups;
  const nlohmann::ordered_json results = results_json({&story}, records, summary);
  EXPECT_EQ(results["higher_is_better"]["ppl"], nlohmann::ordered_json({{"mean_ppl", false}}));
  const Scores scores = score_run({&story}, records, summary.bootstrap_iters, sel.groups);
  for (const ScoreRow& r : score_rows(scores, std::nullopt)) {
    if (r.task == "ppl") EXPECT_FALSE(r.higher_is_better);
  }
}

// The history's rows of nested groups, in results.json's order (by name): a group's n is the sum
// over the tasks under it through nested groups, each row's parent the group that lists it.
TEST_F(SuiteScoreTest, HistoryRowsOfNestedGroups) {
  score("top");
  const std::vector<ScoreRow> rows = score_rows(score_run(ptrs_, records_, 100, selection_.groups), std::nullopt);
  std::vector<std::string> got;
  for (const ScoreRow& r : rows)
    got.push_back(
        fmt::format("{}<{} {},{} n={}{}", r.task, r.parent, r.metric, r.filter, r.n, r.is_group ? " group" : ""));
  EXPECT_EQ(got, (std::vector<std::string>{
                     "inner<mc acc,none n=2 group",
                     "mc<top score,none n=6 group",
                     "pick<inner acc,none n=2",
                     "quiz<mc acc,none n=4",
                     "quiz<mc acc_norm,none n=4",
                     "top< score,none n=8 group",
                     "trivia<top exact_match,none n=2",
                     "trivia<top exact_match,remove_whitespace n=2",
                 }));
  EXPECT_EQ(rows[0].value, group("inner").metrics[0].value);
  EXPECT_EQ(rows[1].stderr_value, group("mc").metrics[0].stderr);
  // Under a limit, n counts the documents it lets in.
  for (const ScoreRow& r : score_rows(score_run(ptrs_, records_, 100, selection_.groups), 1))
    if (r.task == "mc") EXPECT_EQ(r.n, 2);
}

// Every bad spec is one line naming the group file and the line of the fault.
TEST_F(SuiteScoreTest, BadSpecsNameFileAndLine) {
  auto load_error = [&](const std::string& yaml) {
    const std::string path = dir_.write("bad.yaml", yaml);
    const std::string e = error_of([&] { TaskGroup::load(path); });
    EXPECT_THAT(e, Not(HasSubstr("\n")));
    return e;
  };
  const std::string bad = dir_.file("bad.yaml");
  const std::string head = "group: bad\ntask: [quiz, pick]\naggregate_metric_list:\n  - metric: score\n";
  EXPECT_EQ(load_error(head + "    member_metrics:\n      quiz: acc\n"),
            bad + ":4: member_metrics: no metric for member 'pick' (every member of group 'bad' needs one)");
  EXPECT_EQ(load_error(head + "    member_metrics:\n      quiz: acc\n      pick: acc\n      trivia: exact_match\n"),
            bad + ":8: member_metrics: 'trivia' is not a member of group 'bad' (its members: quiz, pick)");
  EXPECT_EQ(load_error(head + "    weight_by_size: true\n    member_metrics: {quiz: acc, pick: acc}\n"),
            bad +
                ":4: weight_by_size: a suite score (member_metrics) is the unweighted mean of its members; "
                "leave weight_by_size out or set it false");
  EXPECT_EQ(load_error(head + "    member_metrics: [quiz, pick]\n"),
            bad + ":5: member_metrics must be a mapping of member names to their metrics (arc_easy: acc_norm)");
  EXPECT_EQ(load_error(head + "    member_metrics:\n      quiz: a,b,c\n      pick: acc\n"),
            bad + ":6: member_metrics: 'a,b,c' of 'quiz' is not \"metric\" or \"metric,filter\"");
  EXPECT_EQ(load_error(head + "    member_metrics:\n      quiz: [acc]\n      pick: acc\n"),
            bad + ":6: member_metrics: the metric of 'quiz' must be a name, or \"metric,filter\"");
  EXPECT_THAT(load_error(head + "    member_metrics:\n      quiz: acc\n      quiz: acc_norm\n      pick: acc\n"),
              HasSubstr(bad + ":7:"));  // a duplicate key
  EXPECT_EQ(load_error("group: bad\ntask: [quiz, pick, quiz]\naggregate_metric_list:\n  - metric: score\n"
                       "    member_metrics: {quiz: acc, pick: acc}\n"),
            bad + ":4: member_metrics: member 'quiz' is listed twice under task, so the mean would count it twice");
  EXPECT_EQ(load_error(head + "    member_metric: {quiz: acc, pick: acc}\n"),
            bad +
                ":4: unknown aggregate_metric_list key 'member_metric' (metric, aggregation, weight_by_size, "
                "filter_list, member_metrics)");

  // Metrics the members do not have: found once the tasks are loaded.
  auto check_error = [&](const std::string& yaml) {
    dir_.write("bad.yaml", yaml);
    const std::string e = error_of([&] {
      const TaskSelection sel = expand_tasks({"bad"}, {dir_.path()});
      std::vector<Task> tasks;
      for (const std::string& name : sel.tasks) tasks.push_back(Task::load(name, {dir_.path()}));
      std::vector<const Task*> ptrs;
      for (const Task& t : tasks) ptrs.push_back(&t);
      check_member_metrics(sel.groups, ptrs);
    });
    EXPECT_THAT(e, Not(HasSubstr("\n")));
    return e;
  };
  const std::string two =
      "group: bad\ntask: [quiz, inner, trivia]\naggregate_metric_list:\n  - metric: score\n"
      "    member_metrics:\n";
  EXPECT_EQ(check_error(two + "      quiz: acc_mutual\n      inner: acc\n      trivia: exact_match\n"),
            bad + ":6: member_metrics: task 'quiz' has no metric 'acc_mutual' (its metrics: acc, acc_norm)");
  EXPECT_EQ(check_error(two + "      quiz: acc\n      inner: acc_norm\n      trivia: exact_match\n"),
            bad + ":7: member_metrics: group 'inner' has no aggregate metric 'acc_norm' (its aggregate metrics: acc)");
  EXPECT_EQ(check_error(two + "      quiz: acc\n      inner: acc,strict\n      trivia: exact_match\n"),
            bad + ":7: member_metrics: group 'inner' is scored under filter none only, not 'strict'");
  EXPECT_EQ(check_error(two + "      quiz: acc\n      inner: acc\n      trivia: exact_match,strict-match\n"),
            bad +
                ":8: member_metrics: task 'trivia' has no filter 'strict-match' for exact_match (its filters: "
                "none, remove_whitespace)");
  testing::write_story_task(dir_, "{\"text\": \"One day.\"}\n");
  EXPECT_EQ(check_error("group: bad\ntask: [quiz, story]\naggregate_metric_list:\n  - metric: score\n"
                        "    member_metrics:\n      quiz: acc\n      story: word_perplexity\n"),
            bad +
                ":7: member_metrics: story word_perplexity is lower-is-better but quiz acc is higher-is-better: "
                "a suite score needs one direction");
  dir_.write("tag.yaml", "group: tag\ntask: [pick]\n");
  EXPECT_EQ(check_error("group: bad\ntask: [quiz, tag]\naggregate_metric_list:\n  - metric: score\n"
                        "    member_metrics:\n      quiz: acc\n      tag: acc\n"),
            bad + ":7: member_metrics: group 'tag' has no aggregate metric 'acc' (its aggregate metrics: none)");
}

// A run of a suite over the shipped demo_choice: the suite is in results.json and report.md; a
// metric the task lacks stops the run before any work, in one line naming the group file.
TEST(SuiteScoreRunTest, RunReportsTheSuiteAndRefusesAMetricTheTaskLacks) {
  testing::TempDir dir;
  const std::string suite =
      "group: suite\ntask: [demo_choice]\naggregate_metric_list:\n  - metric: score\n"
      "    member_metrics:\n      demo_choice: ";
  dir.write("suite.yaml", suite + "acc_norm\n");
  dir.write("run.yaml", "model: " + testing::source_dir() + "/models/stories260K\ntasks: [suite]\noutput: " +
                            dir.file("out") + "\nhistory: " + dir.file("h.sqlite") + "\n");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--limit", "4", dir.file("run.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto results = nlohmann::json::parse(io::read_file(dir.file("out/results.json")));
  EXPECT_EQ(results["groups"]["suite"]["score,none"], results["results"]["demo_choice"]["acc_norm,none"]);
  EXPECT_EQ(results["groups"]["suite"]["score_stderr,none"].get<double>(),
            results["results"]["demo_choice"]["acc_norm_stderr,none"].get<double>());  // sqrt(se^2) / 1
  EXPECT_EQ(results["chance"]["suite"]["score,none"], results["chance"]["demo_choice"]["acc_norm,none"]);
  EXPECT_THAT(io::read_file(dir.file("out/report.md")), HasSubstr("| suite | N/A | score | ↑ |"));
  EXPECT_THAT(io::read_file(dir.file("out/report.html")), HasSubstr("data-task=\"suite\""));  // charted

  dir.write("suite.yaml", suite + "acc_mutual\n");
  r = testing::run_gpueval(
      {"run", "--gpus", "cpu:1", "--limit", "4", "--output", dir.file("out2"), dir.file("run.yaml")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "gpueval: " + dir.file("suite.yaml") +
                ":6: member_metrics: task 'demo_choice' has no metric 'acc_mutual' (its metrics: acc, acc_norm)\n");
}

const std::vector<std::string> kPretrainingMembers = {
    "arc_easy", "arc_challenge", "hellaswag",      "piqa",     "openbookqa",       "winogrande",
    "boolq",    "copa",          "lambada_openai", "triviaqa", "mmlu_continuation"};

// The shipped suite file and its config, read as files (neither needs the member tasks).
TEST(PretrainingSuiteTest, GroupFileAndConfigRead) {
  const TaskGroup g = TaskGroup::load(testing::source_dir() + "/tasks/pretraining/pretraining.yaml");
  EXPECT_EQ(g.name(), "pretraining");
  EXPECT_EQ(g.members(), kPretrainingMembers);
  ASSERT_EQ(g.metrics().size(), 1u);
  const GroupMetricSpec& spec = g.metrics()[0];
  EXPECT_EQ(spec.metric, "score");
  EXPECT_FALSE(spec.weight_by_size);
  ASSERT_EQ(spec.member_metrics.size(), kPretrainingMembers.size());
  std::vector<std::string> spelled;
  for (const MemberMetric& m : spec.member_metrics) {
    spelled.push_back(m.member + ":" + m.metric + (m.filter == "none" ? "" : "," + m.filter));
  }
  EXPECT_EQ(spelled, (std::vector<std::string>{"arc_easy:acc_norm", "arc_challenge:acc_norm", "hellaswag:acc_norm",
                                               "piqa:acc_norm", "openbookqa:acc_norm", "winogrande:acc", "boolq:acc",
                                               "copa:acc", "lambada_openai:acc",
                                               "triviaqa:exact_match,remove_whitespace", "mmlu_continuation:acc"}));

  const RunConfig c = load_run_config(testing::source_dir() + "/configs/pretraining.yaml");
  EXPECT_EQ(c.tasks, std::vector<std::string>{"pretraining"});
  EXPECT_EQ(c.num_fewshot, 0);
  EXPECT_EQ(c.extra_metrics, std::vector<std::string>{"bpb"});
  EXPECT_EQ(c.data.size(), 10u);
  for (const auto& [root, path] : c.data) EXPECT_THAT(path, HasSubstr("/shared/data/" + root)) << root;
  EXPECT_THAT(c.output, HasSubstr("out/pretraining"));
}

// Every member task is in tasks/, and (with the shared data) the suite's member metrics are the
// ones those tasks report.
TEST(PretrainingSuiteTest, MemberMetricsAreTheTasksOnceTheyExist) {
  const std::vector<std::string> search = {testing::source_dir() + "/tasks"};
  std::string missing;
  for (const std::string& m : kPretrainingMembers) {
    if (!find_task_file(m, search)) missing += (missing.empty() ? "" : ", ") + m;
  }
  ASSERT_TRUE(missing.empty()) << "not in tasks/: " << missing;
  GPUEVAL_REQUIRE_SHARED();
  const RunConfig c = load_run_config(testing::source_dir() + "/configs/pretraining.yaml");
  const TaskSelection sel = expand_tasks(c.tasks, search);
  TaskLoadOptions options;
  options.data_roots = c.data;
  options.num_fewshot = c.num_fewshot;
  std::vector<Task> tasks;
  tasks.reserve(sel.tasks.size());
  for (const std::string& name : sel.tasks) tasks.push_back(Task::load(name, search, options));
  std::vector<const Task*> ptrs;
  for (const Task& t : tasks) ptrs.push_back(&t);
  check_member_metrics(sel.groups, ptrs);
  EXPECT_EQ(sel.groups.back().name(), "pretraining");
}

}  // namespace
}  // namespace gpueval
