// lm-eval's tasks inside a gpueval run (evaluation/lm_eval_tasks.h), the C++ side: the config's
// `lm_eval:` entries and mapping, lm-eval's scores.json read back, the aggregator keeping their
// requests apart, and a whole run through a stand-in for the Python bridge (a small python3
// script that answers the two steps as the package does), so that what gpueval hands lm-eval and
// what it does with the answer are checked without lm-eval installed. The real bridge with
// lm-eval from PyPI is python/tests' RunConfigTest (CTest's Python.LmEvalPackage).
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "common/file_io.h"
#include "evaluation/history_recorder.h"
#include "evaluation/lm_eval_tasks.h"
#include "evaluation/request_run.h"
#include "gpueval/run_config.h"
#include "report/report_files.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

RunConfig config_of(const testing::TempDir& dir, const std::string& text) {
  return load_run_config(dir.write("run.yaml", text));
}

TEST(LmEvalConfigTest, EntriesAndTheMappingAreCheckedAsEveryOtherKey) {
  testing::TempDir dir;
  const RunConfig c = config_of(dir,
                                "model: m\ntasks: [mmlu, lm_eval:bbh_cot_fewshot]\n"
                                "lm_eval:\n  python: venv/bin/python\n  include_path: mine\n"
                                "  include_defaults: false\n");
  EXPECT_EQ(c.tasks, (std::vector<std::string>{"mmlu", "lm_eval:bbh_cot_fewshot"}));
  const std::string root = fs::canonical(dir.path()).string();
  EXPECT_EQ(c.lm_eval.python, root + "/venv/bin/python");  // a path is the file's
  EXPECT_EQ(c.lm_eval.include_path, root + "/mine");
  EXPECT_FALSE(c.lm_eval.include_defaults);
  EXPECT_EQ(c.to_json()["lm_eval"]["include_defaults"], false);
  // A round trip through the plan's JSON keeps it.
  EXPECT_EQ(run_config_from_json(c.to_json(), "plan.json", "/").lm_eval.to_json(), c.lm_eval.to_json());
  EXPECT_EQ(config_of(dir, "model: m\ntasks: [lm_eval:x]\nlm_eval: {python: python3.12}\n").lm_eval.python,
            "python3.12");  // a name is looked up on PATH when the run starts
  EXPECT_FALSE(config_of(dir, "model: m\ntasks: [t]\n").to_json().contains("lm_eval"));  // unset: as before

  const auto error = [&](const std::string& text) { return testing::error_of([&] { config_of(dir, text); }); };
  EXPECT_THAT(error("model: m\ntasks: ['lm_eval:']\n"),
              HasSubstr("run.yaml:2: key 'tasks' has 'lm_eval:' without a task name after it"));
  EXPECT_THAT(error("model: m\ntasks: ['lm_eval:a,b']\n"), HasSubstr("no spaces or commas"));
  EXPECT_THAT(error("model: m\ntasks: [t]\nlm_eval: {pyhton: x}\n"),
              HasSubstr("run.yaml:3: unknown key 'lm_eval.pyhton' (known: python, include_path, "
                        "include_defaults, confirm_run_unsafe_code)"));
  EXPECT_THAT(error("model: m\ntasks: [t]\nlm_eval: [x]\n"), HasSubstr("key 'lm_eval' must be a mapping"));
  EXPECT_THAT(error("model: m\ntasks: [t]\nlm_eval: {include_defaults: maybe}\n"),
              HasSubstr("key 'lm_eval.include_defaults' must be true/on or false/off"));

  RunConfig flags = config_of(dir, "model: m\ntasks: [t]\n");
  ConfigOverrides o;
  o.tasks = std::vector<std::string>{"t", "lm_eval:"};
  EXPECT_THAT(testing::error_of([&] { apply_overrides(flags, o); }),
              HasSubstr("--tasks: has 'lm_eval:' without a task name after it"));
}

TEST(LmEvalScoresTest, ScoresJsonBecomesTasksThenGroupsWithTheirMetrics) {
  const std::string text = R"({
    "results": {
      "grp": {"name": "grp", "alias": "grp", "acc,none": 0.5, "acc_stderr,none": "N/A"},
      "a": {"name": "a", "alias": " - a", "sample_len": 4, "acc,none": 0.75, "acc_stderr,none": 0.25,
            "acc,strict": 0.5, "acc_stderr,strict": 0.1},
      "b": {"name": "b", "alias": " - b", "word_perplexity,none": 12.5, "word_perplexity_stderr,none": "N/A"}
    },
    "groups": {"grp": {"acc,none": 0.5}},
    "group_subtasks": {"grp": ["a", "b"]},
    "configs": {"a": {"task": "a"}, "b": {"task": "b"}},
    "versions": {"a": 1.0, "b": 2, "grp": "1.0"},
    "n-shot": {"a": 5, "b": 0},
    "higher_is_better": {"a": {"acc": true}, "b": {"word_perplexity": false}, "grp": {"acc": true}},
    "n-samples": {"a": {"original": 10, "effective": 4}, "b": {"original": 3, "effective": 3}},
    "task_hashes": {"a": "aa", "b": "bb"},
    "samples": {"a": "{\"doc_id\": 0}\n", "b": ""}
  })";
  const std::vector<LmEvalScores> s = read_lm_eval_scores(text, "scores.json");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "a");
  EXPECT_EQ(s[1].name, "b");
  EXPECT_EQ(s[2].name, "grp");
  EXPECT_TRUE(s[2].is_group);
  EXPECT_EQ(s[2].subtasks, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(s[0].metrics.size(), 2u);  // acc under both filters; the stderr keys are not metrics
  EXPECT_EQ(s[0].metrics[0].name, "acc");
  EXPECT_EQ(s[0].metrics[1].filter, "strict");
  EXPECT_EQ(s[0].metrics[1].stderr, 0.1);
  EXPECT_EQ(s[0].metrics[0].n, 4);
  EXPECT_EQ(s[0].num_fewshot, 5);
  EXPECT_EQ(s[0].task_hash, "aa");
  EXPECT_EQ(s[0].samples, "{\"doc_id\": 0}\n");
  EXPECT_EQ(s[0].result["alias"], " - a");  // kept as lm-eval wrote it
  EXPECT_FALSE(s[1].metrics[0].higher_is_better);
  EXPECT_FALSE(s[1].metrics[0].stderr.has_value());  // "N/A"
  ASSERT_EQ(s[2].metrics.size(), 1u);
  EXPECT_EQ(s[2].metrics[0].n, 4);  // the documents of the members with an acc: a's 4, not b's 3

  EXPECT_THAT(testing::error_of([] { read_lm_eval_scores("{", "x/scores.json"); }),
              HasSubstr("x/scores.json: not JSON"));
  EXPECT_THAT(testing::error_of([] { read_lm_eval_scores("{}", "x/scores.json"); }),
              HasSubstr("x/scores.json: no \"results\" object"));

  // The report and the history hold them as lm-eval reported them.
  Scores scores;
  scores.lm_eval = s;
  RunSummary summary;
  summary.model = "m";
  const nlohmann::ordered_json r = results_json(scores, summary);
  EXPECT_EQ(r["results"]["a"]["acc,strict"], 0.5);
  EXPECT_EQ(r["results"]["a"]["sample_len"], 4);
  EXPECT_EQ(r["groups"]["grp"]["acc,none"], 0.5);
  EXPECT_EQ(r["group_subtasks"]["grp"], nlohmann::ordered_json({"a", "b"}));
  EXPECT_FALSE(r["group_subtasks"].contains("a"));  // under grp
  EXPECT_EQ(r["n-samples"]["a"]["effective"], 4);
  EXPECT_EQ(r["n-shot"]["a"], 5);
  EXPECT_EQ(r["versions"]["grp"], "1.0");
  EXPECT_EQ(r["task_hashes"]["b"], "bb");
  EXPECT_EQ(r["configs"]["b"]["task"], "b");
  testing::TempDir out;
  const std::string table = write_reports(out.path(), scores, summary);
  EXPECT_THAT(table, HasSubstr("|  - a | 1.0 | strict | 5 | acc | ↑ | 0.5000 | ± | 0.1000 | 4 |"));
  EXPECT_THAT(table, HasSubstr("| grp | 1.0 | acc | ↑ | 0.5000 | ± | N/A | 4 |"));
  EXPECT_EQ(io::read_file(out.file("samples_a.jsonl")), "{\"doc_id\": 0}\n");
  EXPECT_TRUE(fs::exists(out.file("samples_b.jsonl")));
  EXPECT_FALSE(fs::exists(out.file("samples_grp.jsonl")));
  const std::vector<ScoreRow> rows = score_rows(scores, std::nullopt);
  ASSERT_EQ(rows.size(), 4u);
  const auto row = [&](const std::string& task, const std::string& filter) {
    for (const ScoreRow& x : rows)
      if (x.task == task && x.filter == filter) return x;
    ADD_FAILURE() << "no row " << task << " " << filter;
    return ScoreRow{};
  };
  EXPECT_TRUE(row("grp", "none").is_group);
  EXPECT_EQ(row("grp", "none").n, 7);  // the history's n of a group: every member's documents
  EXPECT_EQ(row("a", "none").parent, "grp");
  EXPECT_FALSE(row("b", "none").higher_is_better);
}

TEST(LmEvalAggregatorTest, RequestsOfOtherTasksAreKeptApartWholeOrNotAtAll) {
  testing::TempDir dir;
  const Task quiz = Task::load(testing::write_quiz_task(dir, R"({"question": "Q", "choices": ["a", "b"], "label": 0})"
                                                             "\n"),
                               {});
  const std::vector<Task> tasks = {quiz};
  std::vector<Request> requests = quiz.requests(quiz.documents()[0]);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].index = static_cast<int64_t>(i);
  Request other;
  other.task = "lm_eval:x";
  other.index = static_cast<int64_t>(requests.size());
  other.type = RequestType::kLoglikelihoodRolling;
  requests.push_back(other);
  Aggregator agg(tasks, requests);
  const auto item = [](int64_t request, int32_t part, int32_t parts, double logprob) {
    ItemResult r;
    r.request_index = request;
    r.part = part;
    r.parts = parts;
    r.logprob = logprob;
    r.num_tokens = 1;
    return r;
  };
  agg.add({item(0, 0, 1, -1.0), item(1, 0, 1, -2.0), item(2, 0, 2, -0.5)});
  Aggregator::Documents docs = agg.documents();
  EXPECT_EQ(docs.scored.size(), 1u);  // the quiz's document is whole
  EXPECT_TRUE(docs.outside.empty());  // one window of two: not handed out
  ASSERT_EQ(docs.incomplete.size(), 1u);
  EXPECT_THAT(docs.incomplete[0], HasSubstr("lm_eval tasks: 1 of 1 requests have no result"));
  EXPECT_EQ(agg.progress()["lm_eval"], json({{"requests", 1}, {"requests_done", 0}}));
  agg.add({item(2, 1, 2, -0.25)});
  docs = agg.documents();
  EXPECT_TRUE(docs.incomplete.empty());
  ASSERT_EQ(docs.outside.size(), 1u);
  EXPECT_EQ(docs.outside[0].index, 2);
  EXPECT_EQ(docs.outside[0].logprob, -0.75);  // the windows summed
  EXPECT_EQ(agg.progress()["lm_eval"]["requests_done"], 1);
}

// A stand-in for `python -m gpueval_lm_eval.bridge`: the requests step writes three documents of
// loglikelihood requests and a rolling one for its task "fake"; the score step reports the sum of
// the responses' logprobs and how many lines it got. It keeps each step's arguments beside itself.
// A --tasks of "broken" fails the requests step, "scorefail" the score step, as the bridge fails.
constexpr const char* kFakeBridge = R"(#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "gpueval_lm_eval.bridge"], args
step = args[2]
def opt(name):
    return args[args.index(name) + 1] if name in args else None
here = os.path.dirname(os.path.abspath(sys.argv[0]))
with open(os.path.join(here, step + ".argv"), "w") as f:
    json.dump(args, f)
if opt("--tasks") == "broken" or (step == "score" and opt("--tasks") == "scorefail"):
    print("lm-eval says things first", file=sys.stderr)
    print("gpueval bridge: task " + opt("--tasks") + " went wrong", file=sys.stderr)
    sys.exit(1)
if step == "requests":
    with open(opt("--out"), "w") as f:
        for d in range(3):
            for c in (" water", " shoes"):
                f.write(json.dumps({"type": "loglikelihood", "context": "Lily drank a glass of", "continuation": c,
                                    "task": "fake", "doc_id": d, "key": "k%d%s" % (d, c)}) + "\n")
        f.write(json.dumps({"type": "loglikelihood_rolling", "context": "Once upon a time there was a cat.",
                            "task": "fake", "doc_id": 3, "key": "r"}) + "\n")
else:
    resp = [json.loads(l) for l in open(opt("--responses"))]
    total = sum(r["logprob"] for r in resp)
    json.dump({"results": {"fake": {"alias": "fake", "logprob_sum,none": total, "lines,none": len(resp),
                                    "logprob_sum_stderr,none": "N/A"}},
               "n-samples": {"fake": {"original": 4, "effective": 4}}, "versions": {"fake": 1},
               "higher_is_better": {"fake": {"logprob_sum": True}}, "n-shot": {"fake": 0},
               "configs": {"fake": {"task": "fake"}}, "samples": {"fake": "{\"doc_id\": 0}\n"},
               "task_hashes": {"fake": "ab"}}, open(opt("--out"), "w"))
)";

class LmEvalRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = dir_.write("fake_python", kFakeBridge);
    ::chmod(python_.c_str(), 0755);
  }
  std::string config(const std::string& name, const std::string& lm_task, const std::string& extra = "") {
    return dir_.write(name + ".yaml", "model: " + testing::source_dir() + "/models/stories260K\n" +
                                          "tasks: [demo_choice, lm_eval:" + lm_task + "]\nlimit: 4\n" +
                                          "output: " + dir_.file(name) + "\nlm_eval:\n  python: " + python_ +
                                          "\n  include_path: " + dir_.path() + "\n" + extra);
  }
  json argv(const std::string& step) { return json::parse(io::read_file(dir_.file(step + ".argv"))); }

  testing::TempDir dir_;
  std::string python_;
};

TEST_F(LmEvalRunTest, ARunComputesLmEvalsRequestsAndReportsLmEvalsScores) {
  const std::string cfg = config("run", "fake", "fewshot_seed: 7\n");
  const testing::CommandResult first = testing::run_gpueval({"run", cfg, "--gpus", "cpu:2"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // What the bridge was asked: the config's task arguments, the checkpoint and this binary.
  const json args = argv("requests");
  const auto has = [&](const std::string& flag, const std::string& value) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag && args[i + 1] == value) return true;
    return false;
  };
  EXPECT_TRUE(has("--tasks", "fake"));
  EXPECT_TRUE(has("--limit", "4"));
  EXPECT_FALSE(has("--num_fewshot", "0"));  // unset: each task's own
  EXPECT_TRUE(has("--fewshot_seed", "7"));
  EXPECT_TRUE(has("--include_path", dir_.path()));
  EXPECT_TRUE(has("--binary", fs::canonical(testing::binary()).string()) || has("--binary", testing::binary()));
  json score_args = argv("score");
  for (const char* f : {"--requests", "--responses", "--out"})
    EXPECT_NE(std::find(score_args.begin(), score_args.end(), f), score_args.end());

  // The responses are the engine's numbers for lm-eval's lines, in their order (as `gpueval
  // requests` gives them for the same lines: rolling texts as hf windows them).
  const std::string out = dir_.file("run");
  const std::string requests = out + "/lm_eval/requests.jsonl";
  const testing::CommandResult direct = testing::run_gpueval(
      {"requests", "--model", testing::source_dir() + "/models/stories260K", "--gpus", "cpu:1", "--requests", requests,
       "--results", dir_.file("direct.jsonl"), "--output", dir_.file("direct"), "--quiet"});
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  std::istringstream got(io::read_file(out + "/lm_eval/responses.jsonl")),
      want(io::read_file(dir_.file("direct.jsonl")));
  double total = 0;
  int lines = 0;
  for (std::string g, w; std::getline(got, g) && std::getline(want, w); ++lines) {
    const json a = json::parse(g), b = json::parse(w);
    EXPECT_NEAR(a["logprob"].get<double>(), b["logprob"].get<double>(), 1e-4) << g;
    EXPECT_EQ(a["tokens"], b["tokens"]) << g;
    total += a["logprob"].get<double>();
  }
  EXPECT_EQ(lines, 7);
  const json results = json::parse(io::read_file(out + "/results.json"));
  EXPECT_EQ(results["results"]["fake"]["lines,none"], 7);
  EXPECT_NEAR(results["results"]["fake"]["logprob_sum,none"].get<double>(), total, 1e-9);
  EXPECT_TRUE(results["results"].contains("demo_choice"));  // gpueval's own beside it
  EXPECT_EQ(results["task_hashes"]["fake"], "ab");
  EXPECT_EQ(io::read_file(out + "/samples_fake.jsonl"), "{\"doc_id\": 0}\n");
  EXPECT_THAT(first.out, HasSubstr("| fake | 1 | none | 0 | logprob_sum |"));
  const json status = json::parse(io::read_file(out + "/status.json"));
  EXPECT_THAT(status.dump(), HasSubstr("\"lm_eval\""));

  // Again on one worker: every request from the journal, the same scores.
  const testing::CommandResult second = testing::run_gpueval({"run", cfg, "--gpus", "cpu:1"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("computed 0 requests in 0 batches"));
  EXPECT_EQ(json::parse(io::read_file(out + "/results.json"))["results"], results["results"]);
}

TEST_F(LmEvalRunTest, ABridgeThatFailsEndsTheRunInOneLineAndLosesNothing) {
  const testing::CommandResult early = testing::run_gpueval({"run", config("early", "broken"), "--gpus", "cpu:1"});
  EXPECT_NE(early.exit_code, 0);
  EXPECT_THAT(early.err, HasSubstr("lm-eval's requests step failed (exit 1): gpueval bridge: task broken went wrong"));
  EXPECT_FALSE(fs::exists(dir_.file("early/journal.sqlite")));  // before any compute

  // The score step failing: gpueval's own tasks are reported, lm-eval's are listed as not scored,
  // the run exits non-zero with the bridge's line, and its journal keeps every result.
  const std::string cfg = config("late", "scorefail");
  const testing::CommandResult late = testing::run_gpueval({"run", cfg, "--gpus", "cpu:1"});
  EXPECT_NE(late.exit_code, 0);
  EXPECT_THAT(late.err, HasSubstr("lm-eval's score step failed (exit 1): gpueval bridge: task scorefail went wrong"));
  const json results = json::parse(io::read_file(dir_.file("late/results.json")));
  EXPECT_TRUE(results["results"].contains("demo_choice"));
  EXPECT_THAT(results["incomplete"].dump(), HasSubstr("lm_eval tasks not scored"));
  const testing::CommandResult again = testing::run_gpueval({"run", cfg, "--gpus", "cpu:1"});
  EXPECT_THAT(again.err, HasSubstr("23 of 23 requests already scored; computing 0 in 0 batches"));

  // An interpreter without the package: one line that says how to name one.
  io::write_file_atomic(python_, "#!/bin/sh\necho 'No module named gpueval_lm_eval' >&2\nexit 1\n");
  ::chmod(python_.c_str(), 0755);
  const testing::CommandResult missing = testing::run_gpueval({"run", config("missing", "fake"), "--gpus", "cpu:1"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("has no gpueval_lm_eval package; lm_eval: tasks need Python with the "
                                     "gpueval_lm_eval package (pip install ./python)"));
}

}  // namespace
}  // namespace gpueval
