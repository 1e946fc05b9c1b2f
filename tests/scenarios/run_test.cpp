// `gpueval run` end to end with real worker processes: results do not depend
// on the number of workers, and crashes, hangs, corrupt frames and signals
// are survived (or ended) the way the scheduler promises.
#include <gmock/gmock.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "common/process.h"
#include "run/subprocess.h"
#include "run_outputs.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

// A run config over the demo tasks, cut into many small batches so that
// faults land mid-run.
// A short heartbeat timeout only where a test needs one: on a loaded CI machine a
// busy worker's heartbeat can be late without anything being wrong.
std::string write_config(const testing::TempDir& dir, const std::string& name, const std::string& extra = "",
                         double heartbeat_timeout_s = 20) {
  return testing::write_demo_config(dir, name, "max_attempts: 2\n" + extra, heartbeat_timeout_s);
}

using testing::results_of;
using testing::samples_of;

using testing::AsyncRun;

// Faults land mid-run by construction, never by timing: GPUEVAL_FAULT=hold:R makes the one worker
// (GPUEVAL_FAULT_ONCE) that gets request R's batch log "holding batch" and keep it, heartbeating,
// until it is killed; the other worker goes on. hold:any holds every worker on its first batch.
std::vector<std::pair<std::string, std::string>> hold_once(const testing::TempDir& dir, int request) {
  return {{"GPUEVAL_FAULT", "hold:" + std::to_string(request)}, {"GPUEVAL_FAULT_ONCE", dir.file("held")}};
}

// Whether `pid` has exited: no such process, or a zombie nobody reaps yet (an orphan adopted by this
// test process, which a Sandbox made earlier in it has marked a child subreaper).
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // "pid (comm) S ...": the state follows the command's name
  return stat.empty() || (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

// Waits, up to `seconds`, for the process behind `pidfd` to exit: the descriptor becomes readable
// when it does (a zombie has exited). Then reaps it where it is this process's to reap.
bool exits_within(int pid, const io::UniqueFd& pidfd, int seconds) {
  pollfd p{pidfd.get(), POLLIN, 0};
  int n;
  while ((n = ::poll(&p, 1, seconds * 1000)) < 0 && errno == EINTR) {}
  if (n != 1) return false;
  ::waitpid(pid, nullptr, WNOHANG);  // an adopted orphan: ours to reap, or not ours and ECHILD
  return true;
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

class RunTest : public ::testing::Test {
 protected:
  // One uninterrupted run on one worker: the reference every other run must equal.
  static void SetUpTestSuite() {
    reference_dir_ = new testing::TempDir();
    const std::string cfg = write_config(*reference_dir_, "reference");
    auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    reference_ = new std::map<std::string, std::string>(samples_of(reference_dir_->file("reference")));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete reference_dir_;
  }
  void expect_reference_results(const std::string& out) {
    auto got = samples_of(out);
    for (const auto& [task, text] : *reference_) {
      EXPECT_FALSE(text.empty()) << task;
      EXPECT_EQ(got[task], text) << task << ": per-document results differ from the uninterrupted run";
    }
  }
  static testing::TempDir* reference_dir_;
  static std::map<std::string, std::string>* reference_;
  testing::TempDir dir_;
};
testing::TempDir* RunTest::reference_dir_ = nullptr;
std::map<std::string, std::string>* RunTest::reference_ = nullptr;

// results.json's and status.json's "timing" (scheduler.h's RunTiming): measured by the scheduler,
// and its parts add up to what the run reports elsewhere.
void expect_measured_timing(const std::string& out, size_t workers) {
  const json results = results_of(out);
  const json& t = results["timing"];
  const json& b = results["batching"];
  ASSERT_TRUE(t.is_object()) << results.dump();
  const double compute = t["compute_s"].get<double>();
  const double wall = std::stod(results["total_evaluation_time_seconds"].get<std::string>());
  EXPECT_GT(compute, 0);
  EXPECT_LE(compute, wall);
  EXPECT_GE(t["before_first_batch_s"].get<double>(), 0);
  EXPECT_LE(t["before_first_batch_s"].get<double>() + compute, wall);
  ASSERT_EQ(t["workers"].size(), workers);
  int64_t requested = 0, computed = 0, scored = 0, batches = 0;
  for (const json& w : t["workers"]) {
    EXPECT_GT(w["load_s"].get<double>(), 0) << w.dump();
    EXPECT_GE(w["busy_s"].get<double>(), 0) << w.dump();
    EXPECT_LE(w["busy_s"].get<double>(), compute + 1e-9) << "a worker's batches lie inside the window: " << w.dump();
    EXPECT_NEAR(w["busy_fraction"].get<double>(), w["busy_s"].get<double>() / compute, 1e-12);
    requested += w["tokens_requested"].get<int64_t>();
    computed += w["tokens_computed"].get<int64_t>();
    scored += w["tokens_scored"].get<int64_t>();
    batches += w["batches"].get<int64_t>();
  }
  EXPECT_EQ(requested, b["tokens_requested"].get<int64_t>());
  EXPECT_EQ(computed, b["tokens_computed"].get<int64_t>());
  EXPECT_EQ(batches, b["batches"].get<int64_t>());
  EXPECT_EQ(t["tokens_requested"], requested);
  EXPECT_EQ(t["tokens_computed"], computed);
  EXPECT_EQ(t["tokens_scored"], scored);
  EXPECT_GT(scored, 0);
  EXPECT_LT(scored, requested);
  EXPECT_DOUBLE_EQ(t["requested_tokens_per_s"].get<double>(), requested / compute);
  EXPECT_DOUBLE_EQ(t["computed_tokens_per_s"].get<double>(), computed / compute);
  // status.json's last update holds the same window.
  const json status = json::parse(io::read_file(out + "/status.json"));
  EXPECT_EQ(status["timing"]["compute_s"].get<double>(), compute);
  EXPECT_EQ(status["timing"]["workers"].size(), workers);
  EXPECT_THAT(io::read_file(out + "/report.md"), HasSubstr("- compute: "));
}

TEST_F(RunTest, TwoWorkersGiveBitIdenticalResults) {
  const std::string cfg = write_config(dir_, "two");
  auto r = testing::run_gpueval({"--gpus", "cpu:2", cfg});  // the bare form: `gpueval --gpus … config.yaml`
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_reference_results(dir_.file("two"));
  json status = json::parse(io::read_file(dir_.file("two") + "/status.json"));
  EXPECT_EQ(status["state"], "complete");
  ASSERT_EQ(status["workers"].size(), 2u);
  // Dispatch is dynamic, so how the batches split between the workers depends on timing; their sum does not.
  int done = 0;
  for (const auto& w : status["workers"]) done += w["batches_done"].get<int>();
  EXPECT_EQ(done, status["batches_total"].get<int>());
  EXPECT_THAT(io::read_file(dir_.file("two") + "/logs/worker_cpu_0.log"), HasSubstr("[cpu:0] pid"));
  EXPECT_THAT(io::read_file(dir_.file("two") + "/logs/worker_cpu_1.log"), HasSubstr("[cpu:1] pid"));
  // Both CPU workers were forked at start-up and launched without exec (worker_prefork.h).
  EXPECT_THAT(r.err, ::testing::ContainsRegex("started worker cpu:0 \\(pid [0-9]+, forked ahead\\)"));
  EXPECT_THAT(r.err, ::testing::ContainsRegex("started worker cpu:1 \\(pid [0-9]+, forked ahead\\)"));
  // A fresh run (no journal yet) starts them before its tokenizer and requests load, so that the
  // model loads meanwhile: the inputs' first line ("contexts ... BOS") comes after.
  const size_t started = r.err.find("[sched] started worker cpu:1"), inputs_loaded = r.err.find("[sched] contexts ");
  ASSERT_NE(inputs_loaded, std::string::npos) << r.err;
  EXPECT_LT(started, inputs_loaded) << r.err;
  EXPECT_EQ(status["task_progress"]["demo_choice"], (json{{"documents", 60}, {"documents_done", 60}}));
  EXPECT_EQ(status["task_progress"]["demo_perplexity"], (json{{"documents", 20}, {"documents_done", 20}}));
  EXPECT_TRUE(io::path_exists(dir_.file("two") + "/logs/worker_cpu_1.log"));
  EXPECT_TRUE(io::path_exists(dir_.file("two") + "/report.md"));
  expect_measured_timing(dir_.file("two"), 2);
}

// GPUEVAL_PREFORK=0: every worker is fork+exec'd, as restarts always are; the same results.
TEST_F(RunTest, WorkersExecdInsteadOfForkedAheadGiveTheSameResults) {
  const std::string cfg = write_config(dir_, "exec");
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("exec"), {{"GPUEVAL_PREFORK", "0"}});
  ExitStatus st = run.child.wait();
  ASSERT_TRUE(st.success()) << st.describe() << "\n" << run.log();
  EXPECT_THAT(run.log(), ::testing::ContainsRegex("started worker cpu:0 \\(pid [0-9]+\\)"));
  EXPECT_THAT(run.log(), ::testing::ContainsRegex("started worker cpu:1 \\(pid [0-9]+\\)"));
  EXPECT_THAT(run.log(), Not(HasSubstr("forked ahead")));
  expect_reference_results(dir_.file("exec"));
}

// `load: broadcast` on CPU workers (or in a build without NCCL): one line says it falls back to
// per-worker mmap, and the run gives exactly the mmap results.
TEST_F(RunTest, LoadBroadcastFallsBackToMmapOnCpuWorkers) {
  const std::string cfg = write_config(dir_, "bcast", "load: broadcast\n");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
#ifdef GPUEVAL_WITH_NCCL
  const char* why = "the workers are not all on GPUs";
#else
  const char* why = "this build has no NCCL";
#endif
  EXPECT_THAT(r.err, HasSubstr(std::string("[sched] load: broadcast falls back to per-worker mmap: ") + why));
  EXPECT_THAT(r.err, Not(HasSubstr("NCCL sends it")));
  expect_reference_results(dir_.file("bcast"));
  EXPECT_EQ(results_of(dir_.file("bcast"))["config"]["load"], "broadcast");
}

// Full-size batches over real text: the shapes where a CPU worker's thread
// count once changed the rounding (see cpu_threads in configs/example.yaml).
TEST(RunDeterminism, OneAndTwoWorkersAgreeBitForBitOnLargeBatches) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  std::ifstream in(testing::shared_dir() + "/data/hellaswag/hellaswag_val_full.txt");
  std::string line, jsonl;
  for (int i = 0; i < 6 * 300 && std::getline(in, line); ++i)
    if (i % 6 == 0) jsonl += json{{"text", line}}.dump() + "\n";
  testing::write_text(dir.file("ctx.jsonl"), jsonl);
  testing::write_text(dir.file("ctx_ppl.yaml"),
                      "task: ctx_ppl\ndataset_path: ctx.jsonl\noutput_type: loglikelihood_rolling\n"
                      "doc_to_text: \"\"\ndoc_to_target: \"{{text}}\"\nmetric_list:\n  - metric: word_perplexity\n");
  testing::write_text(dir.file("run.yaml"), "model: " + testing::source_dir() + "/models/stories260K\n" +
                                                "tasks: [ctx_ppl, demo_choice]\nbatch_tokens: 4096\n");
  std::map<std::string, std::string> samples;
  for (const char* gpus : {"cpu:1", "cpu:2"}) {
    auto r = testing::run_gpueval({"run", "--gpus", gpus, "--output", dir.file(gpus), dir.file("run.yaml")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    samples[gpus] = io::read_file(dir.file(gpus) + "/samples_ctx_ppl.jsonl") +
                    io::read_file(dir.file(gpus) + "/samples_demo_choice.jsonl");
  }
  EXPECT_EQ(std::count(samples["cpu:1"].begin(), samples["cpu:1"].end(), '\n'), 360);
  EXPECT_TRUE(samples["cpu:1"] == samples["cpu:2"]) << "per-document results depend on the number of workers";
}

TEST_F(RunTest, KilledWorkerIsReplacedAndNothingIsLostOrDoubled) {
  const std::string cfg = write_config(dir_, "kill");
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("kill"), hold_once(dir_, 100));
  const int victim = AsyncRun::pid_in(run.wait_worker_line("holding batch"));
  ASSERT_GT(victim, 0) << run.log();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ExitStatus st = run.child.wait();
  ASSERT_TRUE(st.success()) << st.describe() << "\n" << run.log();
  EXPECT_THAT(run.log(), HasSubstr("killed by signal 9"));
  // The two first workers were forked ahead; a replacement (none when the other worker has
  // finished every batch first) is exec'd.
  const std::string log = run.log();
  EXPECT_EQ(count_of(log, ", forked ahead)"), 2) << log;
  EXPECT_THAT(count_of(log, "[sched] started worker"), ::testing::AnyOf(2, 3)) << log;
  expect_reference_results(dir_.file("kill"));
  json status = json::parse(io::read_file(dir_.file("kill") + "/status.json"));
  int restarts = 0;
  for (const auto& w : status["workers"]) restarts += w["restarts"].get<int>();
  EXPECT_EQ(restarts, 1);
}

TEST_F(RunTest, StoppedWorkerMissesHeartbeatAndIsReplaced) {
  const std::string cfg = write_config(dir_, "stop", "", /*heartbeat_timeout_s=*/5);
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("stop"), hold_once(dir_, 100));
  const int victim = AsyncRun::pid_in(run.wait_worker_line("holding batch"));
  ASSERT_GT(victim, 0) << run.log();
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  ExitStatus st = run.child.wait();
  ASSERT_TRUE(st.success()) << st.describe() << "\n" << run.log();
  EXPECT_THAT(run.log(), HasSubstr("missed its heartbeat"));
  EXPECT_TRUE(process_gone(victim));
  expect_reference_results(dir_.file("stop"));
}

TEST_F(RunTest, CorruptFrameIsACrashNeverAResult) {
  const std::string cfg = write_config(dir_, "corrupt");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  ASSERT_EQ(r.exit_code, 0);
  // Same run, but the first worker to see request 7 answers with a damaged frame.
  const std::string cfg2 = write_config(dir_, "corrupt2");
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:1", cfg2}, dir_.file("corrupt2"),
                                 {{"GPUEVAL_FAULT", "corrupt:7"}, {"GPUEVAL_FAULT_ONCE", dir_.file("once")}});
  ExitStatus st = run.child.wait();
  ASSERT_TRUE(st.success()) << st.describe() << "\n" << run.log();
  EXPECT_TRUE(io::path_exists(dir_.file("once")));
  EXPECT_THAT(run.log(), HasSubstr("bad frame"));
  expect_reference_results(dir_.file("corrupt2"));
}

TEST_F(RunTest, PoisonRequestIsQuarantinedAndTheRunFinishes) {
  const std::string cfg = write_config(dir_, "poison");
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("poison"), {{"GPUEVAL_FAULT", "crash:5"}});
  ExitStatus st = run.child.wait();
  EXPECT_EQ(st.kind, ExitStatus::Kind::kExited);
  EXPECT_EQ(st.code, 3) << run.log();  // finished, but incomplete
  EXPECT_THAT(run.log(), HasSubstr("quarantined after 2 failed attempts"));
  const std::string report = io::read_file(dir_.file("poison") + "/report.md");
  EXPECT_THAT(report, HasSubstr("demo_choice doc 1"));  // request 5 is the second document's second choice
  json status = json::parse(io::read_file(dir_.file("poison") + "/status.json"));
  EXPECT_EQ(status["state"], "incomplete");
  EXPECT_EQ(status["batches_quarantined"], 1);
  // Every other document was scored, with the reference's values.
  std::string choice = samples_of(dir_.file("poison"))["demo_choice"];
  EXPECT_EQ(samples_of(dir_.file("poison"))["demo_perplexity"], (*reference_)["demo_perplexity"]);
  EXPECT_GT(std::count(choice.begin(), choice.end(), '\n'), 10);
}

TEST_F(RunTest, SigtermEndsTheRunAndEveryWorkerWithin143) {
  const std::string cfg = write_config(dir_, "term");
  // Both workers hold their first batch, so status.json shows both busy until the signal.
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("term"), {{"GPUEVAL_FAULT", "hold:any"}});
  const std::vector<int> pids = run.wait_all_busy();
  ASSERT_EQ(pids.size(), 2u) << run.log();
  const auto t0 = Clock::now();
  run.child.signal(SIGTERM);
  ExitStatus st = run.child.wait();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(st.kind, ExitStatus::Kind::kExited);
  EXPECT_EQ(st.code, 143) << run.log();
  EXPECT_LT(secs, 10.0);  // no grace period for held workers: they are signalled at once
  for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << "worker " << pid << " outlived the scheduler";
  json status = json::parse(io::read_file(dir_.file("term") + "/status.json"));
  EXPECT_EQ(status["state"], "interrupted");
  EXPECT_TRUE(io::path_exists(dir_.file("term") + "/results.json"));
}

TEST_F(RunTest, SchedulerKilledWithSigkillTakesItsWorkersAlong) {
  const std::string cfg = write_config(dir_, "sigkill");
  AsyncRun run =
      AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, dir_.file("sigkill"), {{"GPUEVAL_FAULT", "hold:any"}});
  const std::vector<int> pids = run.wait_all_busy();
  ASSERT_EQ(pids.size(), 2u) << run.log();
  std::vector<io::UniqueFd> pidfds;  // opened while the workers surely run, so each names its worker
  for (int pid : pids) {
    pidfds.push_back(process::open_pidfd(pid));
    ASSERT_GE(pidfds.back().get(), 0) << "pidfd_open(" << pid << "): " << std::strerror(errno);
  }
  run.child.signal(SIGKILL);
  run.child.wait();
  for (size_t i = 0; i < pids.size(); ++i)
    EXPECT_TRUE(exits_within(pids[i], pidfds[i], 5)) << "worker " << pids[i] << " outlived a SIGKILLed scheduler";
}

// add_bos: auto follows the tokenizer (stories260K's adds BOS); false drops it from every context,
// which changes every loglikelihood; results.json records what it resolved to.
TEST_F(RunTest, AddBosFalseDropsBosFromContexts) {
  const std::string cfg = write_config(dir_, "nobos");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--add-bos", "false", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("contexts have no BOS (add_bos: false)"));
  EXPECT_EQ(results_of(dir_.file("nobos"))["config"]["add_bos_token"], false);
  EXPECT_EQ(results_of(reference_dir_->file("reference"))["config"]["add_bos_token"], true);
  // Multiple choice contexts lose BOS, so their loglikelihoods change; rolling windows keep theirs.
  const auto got = samples_of(dir_.file("nobos"));
  EXPECT_NE(got.at("demo_choice"), reference_->at("demo_choice"));
  EXPECT_EQ(got.at("demo_perplexity"), reference_->at("demo_perplexity"));
}

TEST(RunErrors, BadDevicesAndConfigsAreOneLine) {
  testing::TempDir dir;
  const std::string cfg = write_config(dir, "bad");
  auto r = testing::run_gpueval({"--gpus", "0-3", cfg});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--gpus 0-3: no CUDA device is visible"));
  testing::write_text(dir.file("typo.yaml"), "model: x\ntasks: [demo_choice]\nbatchsize: 3\n");
  r = testing::run_gpueval({"run", dir.file("typo.yaml")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("typo.yaml:3: unknown key 'batchsize'"));
}

// A tokenizer that does not load ends a fresh run after its workers started (they load the model
// meanwhile): exit 1, the tokenizer's error as the one error line, the workers ended and reaped
// without a line on how they ended, and no results.
TEST(RunErrors, BadTokenizerEndsTheEarlyWorkersWithoutAWord) {
  testing::TempDir dir;
  const std::string model = dir.file("model"), stories = testing::source_dir() + "/models/stories260K";
  io::make_directories(model);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"})
    ASSERT_EQ(::symlink((stories + "/" + name).c_str(), (model + "/" + name).c_str()), 0) << name;
  testing::write_text(model + "/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": 5\n");
  testing::write_text(dir.file("run.yaml"),
                      "model: " + model + "\ntasks: [demo_choice]\noutput: " + dir.file("out") + "\n");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", dir.file("run.yaml")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::vector<std::string> errors;
  std::vector<int> pids;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    int pid = 0;
    if (std::sscanf(line.c_str(), "[sched] started worker cpu:%*d (pid %d", &pid) == 1)
      pids.push_back(pid);
    else
      errors.push_back(line);
  }
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_THAT(errors[0], HasSubstr(model + "/tokenizer.json: not valid JSON")) << r.err;
  EXPECT_EQ(pids.size(), 2u) << r.err;
  for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
  EXPECT_FALSE(io::path_exists(dir.file("out") + "/results.json"));
}

// Bad task definitions and datasets end the run before any worker starts: exit 1, one line on
// stderr naming the file and line, and no results written. The worker forked ahead for cpu:1 is
// never launched: it ends without a word and without holding stderr open (run_gpueval reads to
// end of stream).
TEST(RunErrors, BadTaskFilesAreOneLineNamingFileAndLine) {
  testing::TempDir dir;
  testing::write_text(dir.file("quiz.jsonl"), "{\"q\": \"x\", \"choices\": [\"a\", \"b\"], \"label\": 0}\n");
  const std::string head =
      "task: quiz\ndataset_path: quiz.jsonl\noutput_type: multiple_choice\n"
      "doc_to_text: \"{{q}}\"\ndoc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{label}}\"\n";
  struct Case {
    std::string yaml, data, expected;
  };
  const std::vector<Case> cases = {
      {head + "metric_list:\n  - metric: bleu\n", "", "quiz.yaml:8: unknown metric 'bleu'"},
      {"task: quiz\ndataset_path: quiz.jsonl\noutput_type: multiple_choice\ndoc_to_text: \"{{q}}\"\n"
       "doc_to_target: \"{{label}}\"\n",
       "", "quiz.yaml: missing required key 'doc_to_choice'"},
      {head, "{\"q\": \"x\", \"choices\": [\"a\"], \"label\": 0}\n\"just a string\"\n",
       "quiz.jsonl:2: expected a JSON object, got string"},
  };
  for (const Case& c : cases) {
    testing::write_text(dir.file("quiz.yaml"), c.yaml);
    if (!c.data.empty()) testing::write_text(dir.file("quiz.jsonl"), c.data);
    testing::write_text(dir.file("run.yaml"), "model: " + testing::source_dir() + "/models/stories260K\n" + "tasks: [" +
                                                  dir.file("quiz.yaml") + "]\noutput: " + dir.file("out") + "\n");
    auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", dir.file("run.yaml")});
    EXPECT_EQ(r.exit_code, 1) << c.expected;
    EXPECT_THAT(r.err, HasSubstr(c.expected));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(io::path_exists(dir.file("out") + "/results.json"));
  }
}

}  // namespace
}  // namespace gpueval
