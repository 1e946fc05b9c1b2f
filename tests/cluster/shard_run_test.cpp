// Sharded runs without Slurm (gpueval/cluster.h), end to end with real processes: a plan, shards
// started by hand in any order, one killed with SIGKILL and run again, a missing shard, shards of
// two plans, shards chosen by SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX, a nightly glob. The
// merged results.json "results" and samples files equal a one-machine `--gpus cpu:1` run's byte
// for byte every time.
#include <signal.h>
#include <sys/stat.h>
#include <utime.h>

#include <cstdlib>
#include <filesystem>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "gpueval/cluster.h"
#include "gpueval/error.h"
#include "report/tensorboard.h"
#include "run_outputs.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using testing::AsyncRun;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::results_of;
using testing::samples_of;
namespace fs = std::filesystem;

// The demo tasks in many small batches, so that three shards each get several.
std::string write_config(const testing::TempDir& dir, const std::string& name, const std::string& extra = "") {
  return testing::write_demo_config(dir, name, "history: " + dir.file("history.sqlite") + "\n" + extra);
}

json read_json(const std::string& path) { return json::parse(io::read_file(path)); }

// Sets environment variables for the scope (the gpueval children inherit them).
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class ShardedRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reference_dir_ = new testing::TempDir();
    auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", write_config(*reference_dir_, "reference")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    reference_ = new testing::ReferenceOutputs(testing::reference_outputs(reference_dir_->file("reference")));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete reference_dir_;
  }

  // Plans `name` into `shards` shards; returns the plan directory.
  std::string plan(const std::string& name, int shards, const std::string& extra = "") {
    const std::string cfg = write_config(dir_, name, extra);
    auto r = testing::run_gpueval({"plan", cfg, "--shards", std::to_string(shards)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("[plan] 1 checkpoint(s) in " + std::to_string(shards) + " shards"));
    return dir_.file(name);
  }
  static testing::CommandResult run_shard(const std::string& dir, int i, int n) {
    return testing::run_gpueval({"run", dir, "--shard", fmt::format("{}/{}", i, n), "--gpus", "cpu:1"});
  }
  static void expect_reference(const std::string& out) {
    const auto got = samples_of(out);
    for (const auto& [task, text] : reference_->samples) {
      EXPECT_FALSE(text.empty()) << task;
      EXPECT_EQ(got.at(task), text) << task << ": per-document results differ from the one-machine run";
    }
    EXPECT_EQ(results_of(out)["results"].dump(), reference_->results);
  }

  static testing::TempDir* reference_dir_;
  static testing::ReferenceOutputs* reference_;
  testing::TempDir dir_;
};
testing::TempDir* ShardedRunTest::reference_dir_ = nullptr;
testing::ReferenceOutputs* ShardedRunTest::reference_ = nullptr;

TEST_F(ShardedRunTest, ShardsInAnyOrderMergeToTheOneMachineBytesAndASecondMergeChangesNothing) {
  const std::string dir = plan("sharded", 3);
  const json p = read_json(dir + "/plan.json");
  EXPECT_EQ(p["shards"], 3);
  ASSERT_EQ(p["checkpoints"].size(), 1u);
  const std::vector<int64_t> cut = p["checkpoints"][0]["shard_batches"];
  ASSERT_EQ(cut.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_GT(cut[i + 1] - cut[i], 2) << "every shard gets several batches";

  for (int i : {2, 0, 1}) {
    auto r = run_shard(dir, i, 3);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr(fmt::format("[shard] {}/3 complete: {} of {} batches in the journal", i,
                                             cut[i + 1] - cut[i], cut[i + 1] - cut[i])));
    EXPECT_TRUE(io::path_exists(fmt::format("{}/shards/{}/journal.sqlite", dir, i)));
    EXPECT_EQ(read_json(fmt::format("{}/shards/{}/status.json", dir, i))["state"], "complete");
  }
  auto st = testing::run_gpueval({"status", dir});
  EXPECT_EQ(st.exit_code, 0) << st.out << st.err;
  EXPECT_THAT(st.out, HasSubstr("3 complete, 0 running, 0 pending, 0 failed"));
  EXPECT_THAT(st.out, HasSubstr("ready to merge"));

  auto m = testing::run_gpueval({"merge", dir});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  expect_reference(dir);
  // Its table of scores on stdout, as a one-machine run prints it; the logs on stderr.
  EXPECT_EQ(m.out, testing::scores_table_of(dir) + "\nfull report: " + dir + "/report.md\n");
  EXPECT_THAT(m.err, HasSubstr("[merge] "));
  const json results = results_of(dir);
  EXPECT_EQ(results["journal"]["plan_fingerprint"], p["fingerprint"]);
  EXPECT_EQ(results["journal"]["shards"].size(), 3u);
  EXPECT_EQ(results["batching"]["batches"], cut[3]);
  // The merged timing: each shard's measured compute window, the slowest one the run's.
  ASSERT_EQ(results["timing"]["shards"].size(), 3u) << results["timing"].dump();
  double slowest = 0;
  int64_t computed = 0;
  for (const json& s : results["timing"]["shards"]) {
    EXPECT_GT(s["compute_s"].get<double>(), 0) << s.dump();
    slowest = std::max(slowest, s["compute_s"].get<double>());
    computed += s["tokens_computed"].get<int64_t>();
  }
  EXPECT_EQ(results["timing"]["compute_s"].get<double>(), slowest);
  EXPECT_EQ(computed, results["batching"]["tokens_computed"].get<int64_t>());
  for (const char* f : {"report.md", "report.html", "merge.json"}) EXPECT_TRUE(io::path_exists(dir + "/" + f)) << f;

  // Idempotent: a second merge writes nothing (not even the same bytes again).
  struct stat before {};
  ASSERT_EQ(::stat((dir + "/results.json").c_str(), &before), 0);
  const std::string bytes = io::read_file(dir + "/results.json");
  auto again = testing::run_gpueval({"merge", dir});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("merged from these shards already"));
  struct stat after {};
  ASSERT_EQ(::stat((dir + "/results.json").c_str(), &after), 0);
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  EXPECT_EQ(io::read_file(dir + "/results.json"), bytes);
  st = testing::run_gpueval({"status", dir});
  EXPECT_THAT(st.out, HasSubstr("; merged"));
}

// A shard killed with SIGKILL after two committed batches, its rerun, and the merge: the rerun
// computes only what the journal lacked, the merge equals the one-machine run.
TEST_F(ShardedRunTest, KilledShardRerunComputesOnlyWhatItsJournalLacked) {
  const std::string dir = plan("killed", 3);
  const std::vector<int64_t> cut = read_json(dir + "/plan.json")["checkpoints"][0]["shard_batches"];
  const int64_t mine = cut[2] - cut[1];
  ASSERT_GT(mine, 2);
  ASSERT_EQ(run_shard(dir, 0, 3).exit_code, 0);
  ASSERT_EQ(run_shard(dir, 2, 3).exit_code, 0);

  const std::string shard1 = dir + "/shards/1";
  AsyncRun run = AsyncRun::start({"run", dir, "--shard", "1/3", "--gpus", "cpu:1"}, shard1,
                                 {{"GPUEVAL_FAULT", "hold:any"}, {"GPUEVAL_FAULT_AFTER", "2"}});
  ASSERT_FALSE(run.wait_worker_line("holding batch").empty()) << run.log();
  ASSERT_FALSE(run.wait_status([](const json& s) { return s.value("shard_batches_done", 0) == 2; }).is_null())
      << run.log();
  ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
  run.child.wait();

  auto st = testing::run_gpueval({"status", dir});
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_THAT(st.out, HasSubstr(fmt::format("2/{}", mine)));
  auto m = testing::run_gpueval({"merge", dir});
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_THAT(m.err, HasSubstr(fmt::format("cannot merge: 1 of 3 shards not done: shard 1 is incomplete "
                                           "(stories260K: {} of {} batches missing)",
                                           mine - 2, mine)));
  EXPECT_THAT(m.err, HasSubstr("gpueval run " + dir + " --shard 1/3"));
  EXPECT_FALSE(io::path_exists(dir + "/results.json"));

  auto r = run_shard(dir, 1, 3);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json shard = read_json(shard1 + "/shard.json");
  EXPECT_EQ(shard["checkpoints"]["stories260K"]["batches_resumed"], 2);
  EXPECT_EQ(shard["checkpoints"]["stories260K"]["batches_computed"], mine - 2);
  EXPECT_THAT(r.err, HasSubstr(fmt::format(" in {} batches\n", mine - 2)));
  ASSERT_EQ(testing::run_gpueval({"merge", dir}).exit_code, 0);
  expect_reference(dir);
}

TEST_F(ShardedRunTest, MergeWithAShardMissingNamesItAndHowToRunIt) {
  const std::string dir = plan("missing", 3);
  ASSERT_EQ(run_shard(dir, 0, 3).exit_code, 0);
  ASSERT_EQ(run_shard(dir, 1, 3).exit_code, 0);
  auto m = testing::run_gpueval({"merge", dir});
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_EQ(std::count(m.err.begin(), m.err.end(), '\n') >= 1, true);
  EXPECT_THAT(m.err, HasSubstr("gpueval: " + dir + ": cannot merge: 1 of 3 shards not done: shard 2 has not run (" +
                               dir + "/shards/2 has no journal.sqlite); run them (again): gpueval run " + dir +
                               " --shard 2/3, then gpueval merge " + dir + "\n"));
  auto st = testing::run_gpueval({"status", dir});
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_THAT(st.out, HasSubstr("2 complete, 0 running, 1 pending"));
  ASSERT_EQ(run_shard(dir, 2, 3).exit_code, 0);
  ASSERT_EQ(testing::run_gpueval({"merge", dir}).exit_code, 0);
  expect_reference(dir);
}

TEST_F(ShardedRunTest, ShardsOfTwoPlansAreRefused) {
  const std::string a = plan("plan_a", 2);
  const std::string b = plan("plan_b", 2, "max_attempts: 2\nbatch_size: 1\n");  // another cut: other batches
  ASSERT_NE(read_json(a + "/plan.json")["fingerprint"], read_json(b + "/plan.json")["fingerprint"]);
  for (const std::string& d : {a, b})
    for (int i = 0; i < 2; ++i) ASSERT_EQ(run_shard(d, i, 2).exit_code, 0);
  // Shard 1 of plan B's results copied over plan A's.
  fs::remove_all(a + "/shards/1");
  fs::copy(b + "/shards/1", a + "/shards/1", fs::copy_options::recursive);
  auto m = testing::run_gpueval({"merge", a});
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_THAT(m.err, HasSubstr(a + "/shards/1/journal.sqlite: computed against another plan"));
  EXPECT_THAT(m.err, HasSubstr("shards of two plans cannot be merged"));
  // Running that shard under plan A refuses too, until --fresh starts it over.
  auto r = run_shard(a, 1, 2);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("computed against another plan"));
  r = testing::run_gpueval({"run", a, "--shard", "1/2", "--gpus", "cpu:1", "--fresh"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Planning another cut over shards that were never merged is refused.
  const std::string other = write_config(dir_, "plan_a_other", "batch_size: 1\n");
  auto again = testing::run_gpueval({"plan", other, "--shards", "2", "--output", a});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("holds shards of another plan"));
  EXPECT_THAT(again.err, HasSubstr("that were never merged"));
  ASSERT_EQ(testing::run_gpueval({"merge", a}).exit_code, 0);
  expect_reference(a);
  // Once merged, a new plan clears them (the next night's plan into the same folder).
  again = testing::run_gpueval({"plan", other, "--shards", "2", "--output", a});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(io::path_exists(a + "/shards"));
}

TEST_F(ShardedRunTest, TheShardComesFromSlurmOrKubernetesWhenNotGiven) {
  const std::string dir = plan("env", 3);
  const std::string cfg = dir_.file("env.yaml");
  {
    ScopedEnv env({{"SLURM_ARRAY_TASK_ID", "11"}, {"SLURM_ARRAY_TASK_MIN", "10"}, {"SLURM_ARRAY_TASK_COUNT", "3"}});
    auto r = testing::run_gpueval({"run", cfg, "--gpus", "cpu:1"});  // the config whose output holds the plan
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("[shard] 1/3 of " + dir));
  }
  {
    ScopedEnv env(std::vector<std::pair<std::string, std::string>>{{"JOB_COMPLETION_INDEX", "2"}});
    auto r = testing::run_gpueval({"run", dir, "--gpus", "cpu:1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("[shard] 2/3 of " + dir));
  }
  {
    ScopedEnv env({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "4"}});
    auto r = testing::run_gpueval({"run", dir, "--gpus", "cpu:1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("SLURM_ARRAY_TASK_COUNT is 4 but the plan has 3 shards"));
  }
  auto r = testing::run_gpueval({"run", dir, "--gpus", "cpu:1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("say which shard with --shard i/3"));
  r = testing::run_gpueval({"run", dir, "--shard", "0/4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("has 3 shards"));
  r = testing::run_gpueval({"run", dir, "--shard", "0/3", "--limit", "5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("a shard runs its plan as planned"));
  r = testing::run_gpueval({"run", cfg, "--shard", "0/3", "--limit", "5"});  // another config than the plan's
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("computes other requests than " + dir + "/plan.json"));
  r = testing::run_gpueval({"run", write_config(dir_, "noplan"), "--shard", "0/3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("holds no plan; make one first: gpueval plan"));
  ASSERT_EQ(run_shard(dir, 0, 3).exit_code, 0);
  ASSERT_EQ(testing::run_gpueval({"merge", dir}).exit_code, 0);
  expect_reference(dir);
}

TEST(ShardSpec, ParsesAndRejects) {
  const ShardId id = parse_shard("2/5");
  EXPECT_EQ(id.index, 2);
  EXPECT_EQ(id.count, 5);
  EXPECT_THROW(parse_shard("5/5"), Error);
  EXPECT_THROW(parse_shard("-1/5"), Error);
  EXPECT_THROW(parse_shard("1"), Error);
  EXPECT_THROW(parse_shard("a/b"), Error);
  EXPECT_THROW(parse_shard("0/0"), Error);
  EXPECT_EQ(testing::error_of([] { parse_shard("3/2"); }), "--shard: 3 is not a shard of 2 (shards are 0 to 1)");
}

// A nightly glob of two checkpoints in two shards: each checkpoint's report equals a one-machine
// nightly run's, the trend report is written, and the history holds both.
TEST(ShardedNightly, AGlobShardsByCheckpointAndMergesLikeANight) {
  testing::TempDir dir;
  const std::string stories = testing::source_dir() + "/models/stories260K";
  testing::perturbed_copy(stories, dir.file("runs/step-100"), 0.0, 1);
  testing::perturbed_copy(stories, dir.file("runs/step-200"), 0.05, 2);
  int64_t when = 1700000100;
  for (const char* s : {"runs/step-100", "runs/step-200"}) {
    for (const auto& e : fs::directory_iterator(dir.file(s))) {
      utimbuf t{when, when};
      ASSERT_EQ(::utime(e.path().c_str(), &t), 0);
    }
    when += 100;
  }
  auto config = [&](const std::string& name) {
    return dir.write(name + ".yaml", "model: " + dir.file("runs/step-*") +
                                         "\ntasks: [demo_choice, demo_perplexity]\noutput: " + dir.file(name) +
                                         "\nbatch_tokens: 256\nhistory: " + dir.file(name + ".sqlite") +
                                         "\ntensorboard: " + dir.file("tb-" + name) + "\n");
  };
  auto one = testing::run_gpueval({"run", "--gpus", "cpu:1", config("night")});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto p = testing::run_gpueval({"plan", config("sharded"), "--shards", "2"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const json plan = read_json(dir.file("sharded/plan.json"));
  ASSERT_EQ(plan["checkpoints"].size(), 2u);
  // The cut falls between the two checkpoints (each is about half the work).
  EXPECT_EQ(plan["checkpoints"][0]["shard_batches"][1], plan["checkpoints"][0]["batches"]);
  EXPECT_EQ(plan["checkpoints"][1]["shard_batches"][1], 0);
  for (int i : {1, 0}) {
    auto r = testing::run_gpueval({"run", dir.file("sharded"), "--shard", fmt::format("{}/2", i), "--gpus", "cpu:1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_TRUE(io::path_exists(dir.file("sharded/shards/0/step-100/journal.sqlite")));
  EXPECT_TRUE(io::path_exists(dir.file("sharded/shards/1/step-200/journal.sqlite")));
  EXPECT_FALSE(io::path_exists(dir.file("tb-sharded")));  // shards write no TensorBoard points
  auto m = testing::run_gpueval({"merge", dir.file("sharded")});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  // The merge writes them, once, and they are the one-machine night's points.
  auto tb_points = [&](const std::string& logdir) {
    std::vector<std::string> runs;
    for (const auto& e : fs::directory_iterator(logdir)) runs.push_back(e.path().string());
    EXPECT_EQ(runs.size(), 1u) << logdir;
    std::vector<std::tuple<int64_t, std::string, float>> out;
    for (const tensorboard::Event& e : tensorboard::read_events(runs.at(0)))
      for (const tensorboard::Value& v : e.values)
        if (v.scalar) out.emplace_back(e.step, v.tag, *v.scalar);
    return std::make_pair(tensorboard::event_files(runs.at(0)).size(), out);
  };
  const auto merged_points = tb_points(dir.file("tb-sharded"));
  EXPECT_EQ(merged_points.first, 1u);
  EXPECT_EQ(merged_points.second.size(), 8u);  // 2 checkpoints x (acc, word and byte perplexity, bits per byte)
  EXPECT_EQ(merged_points.second, tb_points(dir.file("tb-night")).second);
  auto m2 = testing::run_gpueval({"merge", dir.file("sharded")});
  ASSERT_EQ(m2.exit_code, 0) << m2.err;
  EXPECT_EQ(tb_points(dir.file("tb-sharded")), merged_points);
  for (const char* step : {"step-100", "step-200"}) {
    EXPECT_EQ(read_json(dir.file(std::string("sharded/") + step + "/results.json"))["results"],
              read_json(dir.file(std::string("night/") + step + "/results.json"))["results"])
        << step;
    for (const char* task : {"demo_choice", "demo_perplexity"})
      EXPECT_EQ(io::read_file(dir.file(std::string("sharded/") + step + "/samples_" + task + ".jsonl")),
                io::read_file(dir.file(std::string("night/") + step + "/samples_" + task + ".jsonl")))
          << step << " " << task;
  }
  EXPECT_TRUE(io::path_exists(dir.file("sharded/report.md")));
  auto h = testing::run_gpueval({"history", "--history", dir.file("sharded.sqlite")});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_THAT(h.out, HasSubstr("step-100"));
  EXPECT_THAT(h.out, HasSubstr("step-200"));
  // The next night plans into the same folder: the merged plan's shards are cleared, and the
  // checkpoints the history holds are left out, as a one-machine night skips them.
  auto again = testing::run_gpueval({"plan", config("sharded"), "--shards", "2"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("step-100 already scored for this config"));
  EXPECT_THAT(again.err, HasSubstr("step-200 already scored for this config"));
  EXPECT_THAT(again.err, HasSubstr("was merged: its shards are cleared"));
  EXPECT_EQ(read_json(dir.file("sharded/plan.json"))["checkpoints"].size(), 0u);
  EXPECT_FALSE(io::path_exists(dir.file("sharded/shards")));
}

TEST(SlurmScripts, WrittenForAGpuClusterAndValidBash) {
  testing::TempDir dir;
  auto r = testing::run_gpueval({"slurm", testing::source_dir() + "/configs/demo.yaml", "--nodes", "4",
                                 "--gpus-per-node", "8", "--partition", "gpu", "--time", "4:00:00", "--account", "lm",
                                 "--sbatch-arg=--constraint=h100", "--output", dir.file("run"), "--limit", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string s = dir.file("run/slurm/");
  const std::string shards = io::read_file(s + "shards.sbatch");
  for (const char* line : {"#SBATCH --array=0-3\n", "#SBATCH --requeue\n", "#SBATCH --gpus-per-node=8\n",
                           "#SBATCH --partition=gpu\n", "#SBATCH --time=4:00:00\n", "#SBATCH --account=lm\n",
                           "#SBATCH --constraint=h100\n", "--shard \"$shard/4\" --gpus all", "scontrol requeue"})
    EXPECT_THAT(shards, HasSubstr(line));
  EXPECT_THAT(io::read_file(s + "plan.sbatch"), HasSubstr("plan " + s + "config.yaml --shards 4"));
  // demo.yaml's budget is auto: the plan job probes it once, on one GPU.
  EXPECT_THAT(io::read_file(s + "plan.sbatch"), HasSubstr("#SBATCH --gpus-per-node=1\n"));
  EXPECT_THAT(io::read_file(s + "merge.sbatch"), HasSubstr("merge " + dir.file("run")));
  const std::string submit = io::read_file(s + "submit.sh");
  EXPECT_THAT(submit, HasSubstr("--dependency=afterok:$plan shards.sbatch"));
  EXPECT_THAT(submit, HasSubstr("--dependency=afterok:$shards merge.sbatch"));
  for (const char* f : {"plan.sbatch", "shards.sbatch", "merge.sbatch", "submit.sh"})
    EXPECT_EQ(std::system(("bash -n " + s + f).c_str()), 0) << f;
  // config.yaml is the run config with the flags applied, and reads back as one.
  const RunConfig c = load_run_config(s + "config.yaml");
  EXPECT_EQ(c.limit, 5);
  EXPECT_EQ(c.output, dir.file("run"));
  EXPECT_EQ(c.models, std::vector<std::string>{testing::source_dir() + "/models/stories260K"});
}

}  // namespace
}  // namespace gpueval
