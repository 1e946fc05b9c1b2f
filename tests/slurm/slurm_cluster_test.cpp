// Sharded runs on a real Slurm cluster: Debian's slurm-wlm and munge as a single-node cluster on
// this machine (scripts/slurm_local.sh, started and stopped by the fixture, as root), driven by
// `gpueval slurm --submit`. The merged results equal a one-machine `--gpus cpu:1` run byte for
// byte; a shard whose job step is killed (scancel --signal=KILL) is requeued by Slurm and computes
// only what its journal lacks. Skips, saying why, where there is no root or no Slurm.
//
// Its own executable and one CTest test (Slurm.SingleNodeCluster, RESOURCE_LOCK slurm): the
// cluster is started once for both tests. Every wait is on an event: a job's state in scontrol, a
// worker's log line, a shard's status.json.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Shell {
  int status = -1;
  std::string out;  // stdout and stderr
};

Shell sh(const std::string& command) {
  Shell r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Polls `done` every 100 ms until it holds or `timeout_s` passes (a bound for a broken run only).
bool wait_for(const std::function<bool()>& done, double timeout_s = 240) {
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < timeout_s) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// `scontrol show job ID`'s Key=Value pairs (the first record).
std::map<std::string, std::string> job_fields(const std::string& id) {
  std::map<std::string, std::string> f;
  const Shell r = sh("scontrol show job " + id);
  static const std::regex kv(R"(([A-Za-z:/]+)=(\S*))");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), kv); it != std::sregex_iterator(); ++it)
    if (!f.count((*it)[1])) f[(*it)[1]] = (*it)[2];
  return f;
}

bool job_ended(const std::string& id) {
  const std::string s = job_fields(id)["JobState"];
  return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" || s == "OUT_OF_MEMORY" ||
         s == "NODE_FAIL";
}

class SlurmClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_ = "needs root: slurmd runs the jobs as their submitter and munged as user munge";
      return;
    }
    for (const char* tool : {"slurmctld", "slurmd", "sbatch", "scontrol", "munged"})
      if (sh(std::string("command -v ") + tool).status != 0) {
        skip_ = std::string("no ") + tool + " (apt-get install slurm-wlm munge; scripts/install_deps.sh does)";
        return;
      }
    cluster_ = new testing::TempDir();
    const Shell up = sh(fmt::format("bash {}/scripts/slurm_local.sh start {} --owner {}", testing::source_dir(),
                                    cluster_->file("slurm"), ::getpid()));
    if (up.status != 0) {
      skip_ = "the single-node cluster did not start: " + up.out;
      return;
    }
    ::setenv("SLURM_CONF", cluster_->file("slurm/slurm.conf").c_str(), 1);  // for sbatch, scontrol, the jobs
  }
  static void TearDownTestSuite() {
    if (cluster_) {
      const Shell down =
          sh(fmt::format("bash {}/scripts/slurm_local.sh stop {}", testing::source_dir(), cluster_->file("slurm")));
      EXPECT_EQ(down.status, 0) << down.out;
      EXPECT_NE(sh("pgrep -x slurmctld").status, 0) << "slurmctld is still running";
      EXPECT_NE(sh("pgrep -x slurmd").status, 0) << "slurmd is still running";
      delete cluster_;
      cluster_ = nullptr;
    }
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ::setenv("GPUEVAL_CACHE_DIR", dir_.file("cache").c_str(), 1);  // calibration: the same cache for both runs
  }

  // The flags of both runs: the demo config, and with ../shared a small MMLU subject too.
  std::vector<std::string> run_flags(const std::string& name, const std::vector<std::string>& extra) const {
    std::vector<std::string> f = {testing::source_dir() + "/configs/demo.yaml", "--output", dir_.file(name),
                                  "--history", dir_.file(name + ".sqlite")};
    if (testing::have_shared())
      f.insert(f.end(), {"--tasks", "demo_choice,demo_perplexity,mmlu_abstract_algebra", "--data",
                         "mmlu=" + testing::shared_dir() + "/data/mmlu"});
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
  }
  std::vector<std::string> tasks() const {
    std::vector<std::string> t = {"demo_choice", "demo_perplexity"};
    if (testing::have_shared()) t.push_back("mmlu_abstract_algebra");
    return t;
  }

  // The one-machine run whose bytes the merge must give.
  std::string reference(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run", "--gpus", "cpu:1"};
    for (const std::string& a : run_flags("reference", extra)) args.push_back(a);
    auto r = testing::run_gpueval(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return dir_.file("reference");
  }

  // `gpueval slurm ... --submit`: the plan, shards and merge job ids.
  std::map<std::string, std::string> submit(const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"slurm"};
    for (const std::string& a : run_flags(name, extra)) args.push_back(a);
    for (const char* a : {"--nodes", "3", "--cpu-workers", "1", "--submit"}) args.push_back(a);
    auto r = testing::run_gpueval(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::map<std::string, std::string> ids;
    std::smatch m;
    if (std::regex_search(r.out, m, std::regex(R"(plan=(\d+) shards=(\d+) merge=(\d+))")))
      ids = {{"plan", m[1]}, {"shards", m[2]}, {"merge", m[3]}};
    EXPECT_EQ(ids.size(), 3u) << r.out;
    return ids;
  }

  void expect_same_bytes(const std::string& merged, const std::string& reference) {
    ASSERT_TRUE(io::path_exists(merged + "/results.json")) << sh("cat " + merged + "/slurm/*.out").out;
    EXPECT_EQ(json::parse(io::read_file(merged + "/results.json"))["results"].dump(),
              json::parse(io::read_file(reference + "/results.json"))["results"].dump());
    for (const std::string& t : tasks()) {
      const std::string file = "/samples_" + t + ".jsonl";
      ASSERT_TRUE(io::path_exists(reference + file)) << t;
      EXPECT_EQ(io::read_file(merged + file), io::read_file(reference + file)) << t;
    }
  }

  // What to read when a wait fails: the queue, every job's log, the shards' status files.
  std::string diagnostics(const std::string& name) const {
    const std::string d = dir_.file(name);
    return sh("squeue; for f in " + d + "/slurm/*.out " + d + "/shards/*/status.json " + d +
              "/shards/*/shard.json; do echo \"== $f\"; cat \"$f\"; done")
        .out;
  }

  static std::string skip_;
  static testing::TempDir* cluster_;
  testing::TempDir dir_;
};
std::string SlurmClusterTest::skip_;
testing::TempDir* SlurmClusterTest::cluster_ = nullptr;

TEST_F(SlurmClusterTest, ThreeShardArrayMergesToTheOneMachineBytes) {
  const std::string ref = reference({});
  const auto ids = submit("sharded", {});
  ASSERT_EQ(ids.size(), 3u);
  ASSERT_TRUE(wait_for([&] { return job_ended(ids.at("merge")); })) << diagnostics("sharded");
  EXPECT_EQ(job_fields(ids.at("merge"))["JobState"], "COMPLETED") << diagnostics("sharded");
  expect_same_bytes(dir_.file("sharded"), ref);
  // Every shard ran as its own array task, once.
  for (int i = 0; i < 3; ++i) {
    const json st = json::parse(io::read_file(dir_.file(fmt::format("sharded/shards/{}/status.json", i))));
    EXPECT_EQ(st["state"], "complete") << i;
    EXPECT_FALSE(st["slurm_job_id"].get<std::string>().empty()) << i;
  }
  const std::string plan = io::read_file(dir_.file("sharded/plan.json"));
  EXPECT_THAT(plan, ::testing::ContainsRegex("\"budget_source\": \"(probed|cache)\""));  // one probe, in the plan job
  auto st = testing::run_gpueval({"status", dir_.file("sharded")});
  EXPECT_EQ(st.exit_code, 0) << st.out;
  EXPECT_THAT(st.out, HasSubstr("3 complete"));
  EXPECT_THAT(st.out, HasSubstr("merged"));
}

TEST_F(SlurmClusterTest, AKilledShardStepIsRequeuedAndComputesOnlyWhatItsJournalLacked) {
  // A fixed budget: small batches, and no calibration probe for the fault to act on.
  const std::vector<std::string> budget = {"--batch-tokens", "192"};
  const std::string ref = reference(budget);
  // The first worker to pass two batches holds its third (once in the whole cluster).
  ::setenv("GPUEVAL_FAULT", "hold:any", 1);
  ::setenv("GPUEVAL_FAULT_AFTER", "2", 1);
  ::setenv("GPUEVAL_FAULT_ONCE", dir_.file("held").c_str(), 1);
  const auto ids = submit("killed", budget);
  ::unsetenv("GPUEVAL_FAULT");
  ::unsetenv("GPUEVAL_FAULT_AFTER");
  ::unsetenv("GPUEVAL_FAULT_ONCE");
  ASSERT_EQ(ids.size(), 3u);

  // The held shard: its worker's log says so, and its status.json shows its two batches.
  int held = -1;
  ASSERT_TRUE(wait_for([&] {
    for (int i = 0; i < 3 && held < 0; ++i) {
      const std::string logs = dir_.file(fmt::format("killed/shards/{}/logs", i));
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(logs, ec))
        if (e.path().filename().string().rfind("worker_", 0) == 0 &&
            io::read_file(e.path().string()).find("holding batch") != std::string::npos)
          held = i;
    }
    return held >= 0;
  })) << diagnostics("killed");
  const std::string status = dir_.file(fmt::format("killed/shards/{}/status.json", held));
  std::string job;
  ASSERT_TRUE(wait_for([&] {
    if (!io::path_exists(status)) return false;
    const json s = json::parse(io::read_file(status), nullptr, false);
    if (s.is_discarded() || s.value("shard_batches_done", 0) != 2) return false;
    job = s.value("slurm_job_id", "");
    return !job.empty();
  }));
  const int64_t mine = json::parse(io::read_file(status))["shard_batches_total"].get<int64_t>();
  ASSERT_GT(mine, 2);

  // Kill the shard's job step (its gpueval and workers); the batch script requeues the task. On a busy
  // machine scancel may still fail with "Job is pending execution" after its signal landed: the step
  // died at once, the batch script requeued the task, and scancel's last request met the job pending
  // (the shard's slurm .out then reads "srun: Force Terminated StepId=<job>.0"). Whether the kill
  // worked is what the next wait checks: one restart, pending.
  const Shell kill = sh("scancel --signal=KILL " + job + ".0");
  EXPECT_TRUE(kill.status == 0 || kill.out.find("Job is pending execution") != std::string::npos) << kill.out;
  ASSERT_TRUE(wait_for([&] {
    auto f = job_fields(job);
    return f["Restarts"] == "1" && f["JobState"] == "PENDING";
  })) << sh("scontrol show job " + job).out
      << diagnostics("killed");
  // Slurm (22.05) holds a requeued batch job about two minutes before it may start again, so that
  // the node has cleaned up the last start and the new launch credential is newer than the
  // revocation of the old one. This test starts it sooner, once both hold:
  // - slurmd logs the old batch step done (a start before that races with the purge of its script);
  // - the clock has left the second in which that line was read. slurmd revokes the job's
  //   credentials as of the requeue's time, in whole seconds, and refuses a launch whose credential
  //   is not strictly newer ("already killed, do not launch"): the task then ends without running
  //   and the merge's afterok can never be met. The requeue came before the line, so a start
  //   asked for in a later second gets a credential newer than the revocation.
  const std::string slurmd_log = cluster_->file("slurm/log/slurmd.log");
  ASSERT_TRUE(wait_for([&] {
    return io::read_file(slurmd_log).find("[" + job + ".batch] done with job") != std::string::npos;
  })) << io::read_file(slurmd_log);
  const std::time_t done_at = std::time(nullptr);
  ASSERT_TRUE(wait_for([&] { return std::time(nullptr) > done_at; }));
  const Shell now = sh("scontrol update JobId=" + job + " StartTime=now");
  EXPECT_EQ(now.status, 0) << now.out;

  ASSERT_TRUE(wait_for([&] { return job_ended(ids.at("merge")); }))
      << sh("scontrol show job " + job).out << diagnostics("killed") << io::read_file(slurmd_log)
      << io::read_file(cluster_->file("slurm/log/slurmctld.log"));
  EXPECT_EQ(job_fields(ids.at("merge"))["JobState"], "COMPLETED") << diagnostics("killed");
  expect_same_bytes(dir_.file("killed"), ref);
  // The requeued shard computed only what its journal lacked: all but the two committed batches.
  const json shard = json::parse(io::read_file(dir_.file(fmt::format("killed/shards/{}/shard.json", held))));
  const json ck = shard["checkpoints"]["stories260K"];
  EXPECT_EQ(ck["batches"], mine);
  EXPECT_EQ(ck["batches_resumed"], 2);
  EXPECT_EQ(ck["batches_computed"], mine - 2);
  const std::string log = io::read_file(dir_.file(fmt::format("killed/slurm/shard-{}.out", held)));
  EXPECT_THAT(log, HasSubstr("requeueing (restart 1 of 3)"));
  EXPECT_THAT(log, HasSubstr(", start 2 at "));
}

}  // namespace
}  // namespace gpueval
