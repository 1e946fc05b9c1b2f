// Nightly runs end to end with real worker processes: a glob of checkpoints scored oldest first
// by one set of workers that switch checkpoints in place, one output directory per checkpoint,
// a status.json line per checkpoint, and a damaged checkpoint that fails alone.
#include <signal.h>
#include <utime.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "report/tensorboard.h"
#include "run_outputs.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

void set_written(const std::string& dir, time_t when) {
  for (const auto& e : fs::directory_iterator(dir)) {
    utimbuf t{when, when};
    ASSERT_EQ(::utime(e.path().c_str(), &t), 0);
  }
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

class NightlyTest : public ::testing::Test {
 protected:
  // runs/step-100 (a byte copy of the shipped stories260K), step-200 (slightly perturbed) and
  // step-300 (heavily perturbed, so it scores worse), written in that order.
  void SetUp() override {
    const std::string stories = testing::source_dir() + "/models/stories260K";
    testing::perturbed_copy(stories, dir_.file("runs/step-100"), 0.0, 1);
    testing::perturbed_copy(stories, dir_.file("runs/step-200"), 0.02, 2);
    testing::perturbed_copy(stories, dir_.file("runs/step-300"), 0.3, 3);
    set_written(dir_.file("runs/step-100"), 1700000100);
    set_written(dir_.file("runs/step-200"), 1700000200);
    set_written(dir_.file("runs/step-300"), 1700000300);
  }

  std::string config(const std::string& name, const std::string& model, const std::string& extra = "") {
    const std::string path = dir_.file(name + ".yaml");
    testing::write_text(path, "model: " + model +
                                  "\ntasks: [demo_choice, demo_perplexity]\noutput: " + dir_.file(name) +
                                  "\nbatch_tokens: 512\nhistory: " + dir_.file("history.sqlite") + "\n" + extra);
    return path;
  }

  testing::TempDir dir_;
};

TEST_F(NightlyTest, GlobIsScoredOldestFirstByWorkersThatSwitchCheckpointsInPlace) {
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", config("night", dir_.file("runs/step-*"))});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("3 checkpoints, oldest first: step-100, step-200, step-300"));
  // Two worker processes for the whole night, never restarted: the later checkpoints were loaded in
  // place. Which worker switched to which checkpoint depends on who was idle when, so only the
  // totals are fixed: someone switched to each later checkpoint, no one more than once to each.
  EXPECT_EQ(count_of(r.err, "[sched] started worker"), 2u) << r.err;
  EXPECT_EQ(count_of(r.err, "failed:"), 0u) << r.err;
  std::string logs;
  for (const char* w : {"cpu_0", "cpu_1"}) logs += io::read_file(dir_.file("night") + "/logs/worker_" + w + ".log");
  for (const char* step : {"step-200", "step-300"}) {
    const std::string line = std::string("switching to ") + dir_.file("runs/") + step + " ";
    EXPECT_GE(count_of(logs, line), 1u) << logs;
    EXPECT_LE(count_of(logs, line), 2u) << logs;
  }
  EXPECT_EQ(count_of(logs, "loading "), 2u) << logs;
  // stdout: each checkpoint's table of scores under its name, then where the trend report is.
  std::string tables;
  for (const char* step : {"step-100", "step-200", "step-300"}) {
    const std::string out = dir_.file("night/") + step;
    tables +=
        std::string("## ") + step + "\n\n" + testing::scores_table_of(out) + "\nfull report: " + out + "/report.md\n\n";
  }
  EXPECT_EQ(r.out, tables + "trend report: " + dir_.file("night") + "/report.md\n");
  // The byte copy of stories260K scores exactly what a plain run of stories260K scores.
  auto single =
      testing::run_gpueval({"run", "--gpus", "cpu:1", config("single", testing::source_dir() + "/models/stories260K")});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const json night100 = json::parse(io::read_file(dir_.file("night/step-100/results.json")));
  const json plain = json::parse(io::read_file(dir_.file("single/results.json")));
  EXPECT_EQ(night100["results"], plain["results"]);
  EXPECT_EQ(io::read_file(dir_.file("night/step-100/samples_demo_choice.jsonl")),
            io::read_file(dir_.file("single/samples_demo_choice.jsonl")));
  const json night300 = json::parse(io::read_file(dir_.file("night/step-300/results.json")));
  EXPECT_LT(night300["results"]["demo_choice"]["acc,none"].get<double>(),
            night100["results"]["demo_choice"]["acc,none"].get<double>() - 0.2);
  // status.json: one line per checkpoint, in order.
  const json status = json::parse(io::read_file(dir_.file("night/status.json")));
  EXPECT_EQ(status["state"], "complete");
  ASSERT_EQ(status["checkpoints"].size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(status["checkpoints"][k]["name"], "step-" + std::to_string(100 * (k + 1)));
    EXPECT_EQ(status["checkpoints"][k]["state"], "complete");
  }
}

TEST_F(NightlyTest, ADamagedCheckpointFailsAloneAndTheOthersAreScored) {
  // step-200's weights were cut short (a save that did not finish).
  const std::string weights = dir_.file("runs/step-200/model.safetensors");
  const std::string bytes = io::read_file(weights);
  io::write_file_atomic(weights, bytes.substr(0, bytes.size() / 2));
  set_written(dir_.file("runs/step-200"), 1700000200);
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", config("night", dir_.file("runs/step-*"))});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[sched] checkpoint step-200 failed: " + weights));
  EXPECT_TRUE(io::path_exists(dir_.file("night/step-100/results.json")));
  EXPECT_TRUE(io::path_exists(dir_.file("night/step-300/results.json")));
  EXPECT_FALSE(io::path_exists(dir_.file("night/step-200/results.json")));
  const json status = json::parse(io::read_file(dir_.file("night/status.json")));
  EXPECT_EQ(status["state"], "failed");
  EXPECT_EQ(status["checkpoints"][1]["state"], "failed");
  EXPECT_THAT(status["checkpoints"][1]["error"].get<std::string>(), HasSubstr(weights));
  EXPECT_EQ(status["checkpoints"][2]["state"], "complete");
}

// kill -9 of the whole process group in the middle of the second checkpoint, then the same
// command: the first is skipped (the history has it), the second resumes from its journal and
// computes only what it lacked, the third is scored; every result equals an uninterrupted run's.
TEST_F(NightlyTest, KilledNightResumesWhereItStopped) {
  const std::string cfg = config("night", dir_.file("runs/step-*"));
  {
    // One worker holds request 200's batch of step-200, so the night stops there whatever the timing.
    testing::AsyncRun run = testing::AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("night"),
                                                     {{"GPUEVAL_FAULT", "hold:200"},
                                                      {"GPUEVAL_FAULT_ONCE", dir_.file("held")},
                                                      {"GPUEVAL_FAULT_MODEL", "/step-200"}});
    const json s = run.wait_status([](const json& st) {
      return st.value("checkpoint", json()) == "step-200" && st.value("batches_done", 0) >= 1;
    });
    ASSERT_FALSE(s.is_null()) << run.log();
    ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
    run.child.wait();
  }
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("step-100 already scored, skipped"));
  const json j200 = json::parse(io::read_file(dir_.file("night/step-200/results.json")))["journal"];
  const json j300 = json::parse(io::read_file(dir_.file("night/step-300/results.json")))["journal"];
  EXPECT_GT(j200["requests_resumed"].get<int64_t>(), 0) << r.err;
  EXPECT_GT(j200["requests_computed"].get<int64_t>(), 0) << r.err;
  EXPECT_EQ(j200["requests_resumed"].get<int64_t>() + j200["requests_computed"].get<int64_t>(), 260);
  EXPECT_EQ(j300["requests_resumed"], 0);
  EXPECT_EQ(j300["requests_computed"], 260);
  // An uninterrupted run of step-200 on one worker gives the same bytes.
  auto ref = testing::run_gpueval({"run", "--gpus", "cpu:1", config("ref200", dir_.file("runs/step-200"))});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  for (const char* task : {"demo_choice", "demo_perplexity"})
    EXPECT_EQ(io::read_file(dir_.file("night/step-200/samples_") + task + ".jsonl"),
              io::read_file(dir_.file("ref200/samples_") + task + ".jsonl"));
  EXPECT_EQ(json::parse(io::read_file(dir_.file("night/step-200/results.json")))["results"],
            json::parse(io::read_file(dir_.file("ref200/results.json")))["results"]);
}

// A night holds its output folder until its last report (issue 16: a cron job that overlaps the
// previous night): while the night is on its second checkpoint, another night on the same
// folder exits 5 and computes nothing; once the first is released, both checkpoints are done.
TEST_F(NightlyTest, AnOverlappingNightOnTheSameFolderExitsFive) {
  const std::string cfg = config("locked", dir_.file("runs/step-[12]00"));
  testing::AsyncRun night = testing::AsyncRun::start({"run", "--gpus", "cpu:1", cfg}, dir_.file("locked"),
                                                     {{"GPUEVAL_FAULT", "hold:any"},
                                                      {"GPUEVAL_FAULT_MODEL", "/step-200"},
                                                      {"GPUEVAL_FAULT_RELEASE", dir_.file("go")}});
  ASSERT_FALSE(night.wait_worker_line("holding batch").empty()) << night.log();
  EXPECT_THAT(night.log(), HasSubstr("checkpoint 2 of 2: step-200"));
  auto second = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  EXPECT_EQ(second.exit_code, 5) << second.err;
  EXPECT_THAT(second.err, HasSubstr("is in use by pid " + std::to_string(night.child.pid())));
  EXPECT_THAT(second.err, Not(HasSubstr("[sched] checkpoint")));
  testing::write_text(dir_.file("go"), "");
  EXPECT_EQ(night.child.wait().code, 0) << night.log();
  EXPECT_TRUE(io::path_exists(dir_.file("locked/step-200/results.json")));
  EXPECT_TRUE(io::path_exists(dir_.file("locked/report.md")));
}

// The nightly scenario: step-100 was scored by an earlier run; tonight's glob skips it,
// scores the other two with the same workers, the history and the trend report show all three,
// and --fail-on-regression fires on step-300, which is worse.
TEST_F(NightlyTest, ScoredCheckpointIsSkippedTrendShowsAllThreeAndRegressionFires) {
  auto first = testing::run_gpueval({"run", "--gpus", "cpu:1", config("first", dir_.file("runs/step-100"))});
  ASSERT_EQ(first.exit_code, 0) << first.err;

  auto r = testing::run_gpueval(
      {"run", "--gpus", "cpu:2", "--fail-on-regression", "5", config("night", dir_.file("runs/step-*"))});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_THAT(r.err, HasSubstr("1 already scored for this config"));
  EXPECT_THAT(r.err, HasSubstr("checkpoint 1 of 3: step-100 already scored, skipped"));
  EXPECT_FALSE(io::path_exists(dir_.file("night/step-100")));  // nothing computed for it
  EXPECT_TRUE(io::path_exists(dir_.file("night/step-200/results.json")));
  EXPECT_THAT(r.err, HasSubstr("[sched] regression: demo_choice acc went from"));
  EXPECT_THAT(r.err, HasSubstr("(step-200) to "));
  EXPECT_THAT(r.err, HasSubstr("(step-300): "));
  EXPECT_EQ(count_of(r.err, "regression: demo_choice"), 1u);

  // status.json: a line per checkpoint with its primary scores, the skipped one's from the history.
  const json status = json::parse(io::read_file(dir_.file("night/status.json")));
  EXPECT_EQ(status["state"], "regressed");
  EXPECT_EQ(status["checkpoints"][0]["state"], "skipped");
  const json first_results = json::parse(io::read_file(dir_.file("first/results.json")));
  EXPECT_EQ(status["checkpoints"][0]["scores"]["demo_choice"]["value"],
            first_results["results"]["demo_choice"]["acc,none"]);
  EXPECT_EQ(status["checkpoints"][2]["scores"]["demo_choice"]["metric"], "acc");
  const json last_results = json::parse(io::read_file(dir_.file("night/step-300/results.json")));
  EXPECT_EQ(status["checkpoints"][2]["scores"]["demo_choice"]["value"],
            last_results["results"]["demo_choice"]["acc,none"]);

  // The history and the morning report hold all three, oldest first.
  auto h = testing::run_gpueval({"history", "--history", dir_.file("history.sqlite"), "--task", "demo_choice"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const size_t p100 = h.out.find("step-100"), p200 = h.out.find("step-200"), p300 = h.out.find("step-300");
  ASSERT_NE(p100, std::string::npos) << h.out;
  ASSERT_NE(p300, std::string::npos) << h.out;
  EXPECT_LT(p100, p200);
  EXPECT_LT(p200, p300);
  const std::string html = io::read_file(dir_.file("night/report.html"));
  for (const char* name : {"step-100", "step-200", "step-300"}) {
    EXPECT_THAT(html, HasSubstr(name));
    EXPECT_THAT(io::read_file(dir_.file("night/report.md")), HasSubstr(std::string("| ") + name + " |"));
  }
  EXPECT_THAT(html, HasSubstr("demo_choice"));
  EXPECT_THAT(html, HasSubstr("Regressions"));

  // The same command again: everything is in the history; no worker starts, no regression is new.
  auto again = testing::run_gpueval(
      {"run", "--gpus", "cpu:2", "--fail-on-regression", "5", config("night", dir_.file("runs/step-*"))});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("3 already scored for this config"));
  EXPECT_EQ(count_of(again.err, "[sched] started worker"), 0u);

  // --fresh scores every checkpoint again, each from scratch, with the same results.
  auto fresh = testing::run_gpueval({"run", "--gpus", "cpu:1", "--fresh", config("night", dir_.file("runs/step-*"))});
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_THAT(fresh.err, Not(HasSubstr("already scored for this config")));
  EXPECT_THAT(fresh.err, Not(HasSubstr("already scored, skipped")));
  for (const char* c : {"step-100", "step-200", "step-300"}) {
    const json j = json::parse(io::read_file(dir_.file("night/") + c + "/results.json"));
    EXPECT_EQ(j["journal"]["requests_computed"], 260) << c;
  }
  EXPECT_EQ(json::parse(io::read_file(dir_.file("night/step-300/results.json")))["results"], last_results["results"]);
}

// Checkpoints synced in any order: written step-300 first and step-100 last, they are scored,
// charted and exported in training-step order; TensorBoard gets each tag once per checkpoint at
// its step, and a second night (the flag instead of the config key, same folder) adds nothing.
TEST_F(NightlyTest, CheckpointsWrittenOutOfOrderAreInStepOrderEverywhereAndInTensorBoardOnce) {
  set_written(dir_.file("runs/step-300"), 1700000100);
  set_written(dir_.file("runs/step-200"), 1700000200);
  set_written(dir_.file("runs/step-100"), 1700000300);
  const std::string logdir = dir_.file("tb");
  const std::string cfg = config("night", dir_.file("runs/step-*"), "tensorboard: " + logdir + "\n");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("3 checkpoints, oldest first: step-100, step-200, step-300"));
  EXPECT_THAT(r.err, HasSubstr("[sched] tensorboard: 3 checkpoints, "));

  auto again = testing::run_gpueval(
      {"run", "--gpus", "cpu:1", "--tensorboard", logdir, config("night2", dir_.file("runs/step-*"))});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("holds every checkpoint already (3)"));

  std::vector<std::string> runs;
  for (const auto& e : fs::directory_iterator(logdir)) runs.push_back(e.path().string());
  ASSERT_EQ(runs.size(), 1u);  // one run per config fingerprint, whatever the config file is called
  EXPECT_EQ(tensorboard::event_files(runs[0]).size(), 1u);
  std::map<std::string, std::vector<int64_t>> steps;
  for (const tensorboard::Event& e : tensorboard::read_events(runs[0]))
    for (const tensorboard::Value& v : e.values)
      if (v.scalar) steps[v.tag].push_back(e.step);
  EXPECT_TRUE(steps.count("demo_choice/acc")) << runs[0];
  EXPECT_TRUE(steps.count("demo_perplexity/bits_per_byte")) << runs[0];
  for (const auto& [tag, at] : steps) EXPECT_EQ(at, (std::vector<int64_t>{100, 200, 300})) << tag;
  // The values are the checkpoints' own.
  const json results = json::parse(io::read_file(dir_.file("night/step-200/results.json")));
  for (const tensorboard::Event& e : tensorboard::read_events(runs[0]))
    for (const tensorboard::Value& v : e.values)
      if (e.step == 200 && v.tag == "demo_choice/acc")
        EXPECT_FLOAT_EQ(*v.scalar, results["results"]["demo_choice"]["acc,none"].get<float>());

  // report.md, report.html and `gpueval history`: step order, not write order.
  auto in_order = [](const std::string& text) {
    const size_t a = text.find("step-100"), b = text.find("step-200"), c = text.find("step-300");
    return a != std::string::npos && a < b && b < c && c != std::string::npos;
  };
  const std::string md = io::read_file(dir_.file("night/report.md"));
  EXPECT_TRUE(in_order(md)) << md;
  EXPECT_THAT(md, HasSubstr("In training-step order"));
  const std::string html = io::read_file(dir_.file("night/report.html"));
  const size_t table =
      html.find("In training-step order");  // the checkpoints table (the header names the newest first)
  ASSERT_NE(table, std::string::npos) << html;
  EXPECT_TRUE(in_order(html.substr(table))) << html;
  auto h = testing::run_gpueval({"history", "--history", dir_.file("history.sqlite"), "--task", "demo_choice"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_TRUE(in_order(h.out)) << h.out;
}

// A TensorBoard folder that cannot be written fails the run with one line naming it, after the
// reports and the history are written: nothing scored is lost, and the next run exports it.
TEST_F(NightlyTest, ATensorBoardFolderThatCannotBeWrittenFailsAfterTheReports) {
  testing::write_text(dir_.file("tb-file"), "not a folder\n");
  auto r = testing::run_gpueval(
      {"run", "--gpus", "cpu:1", "--tensorboard", dir_.file("tb-file"), config("one", dir_.file("runs/step-100"))});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("gpueval: TensorBoard export (the scores are in the reports and the history): " +
                               dir_.file("tb-file") + ": exists and is not a directory"));
  EXPECT_TRUE(io::path_exists(dir_.file("one/results.json")));
  auto again = testing::run_gpueval(
      {"run", "--gpus", "cpu:1", "--tensorboard", dir_.file("tb"), config("one", dir_.file("runs/step-100"))});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("[sched] tensorboard: 1 checkpoint, "));
}

}  // namespace
}  // namespace gpueval
