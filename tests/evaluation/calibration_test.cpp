// `gpueval calibrate` and `gpueval run` with batch_size auto: probing in a real worker process,
// the table, calibration.svg/.json, and the cache a later run reads instead of probing.
#include "evaluation/calibration.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "model/config/dtype.h"
#include "model/loading/model_fingerprint.h"
#include "run/device_memory.h"
#include "run/devices.h"
#include "run/scheduler.h"
#include "store/calibration_cache.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// Points GPUEVAL_CACHE_DIR (inherited by the gpueval children) at a fresh directory.
class CalibrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("GPUEVAL_CACHE_DIR")) saved_ = v;
    ::setenv("GPUEVAL_CACHE_DIR", cache_.path().c_str(), 1);
  }
  void TearDown() override { ::setenv("GPUEVAL_CACHE_DIR", saved_.c_str(), 1); }
  testing::TempDir cache_;
  testing::TempDir out_;
  std::string saved_;
};

TEST_F(CalibrationTest, ProbeOnSlotRunsInAWorker) {
  DeviceSlot slot;
  slot.threads = 1;
  ProbeOptions o;
  o.length = 64;
  o.max_tokens = 2048;
  o.repeats = 1;
  o.memory_limit_bytes = int64_t{4} << 30;
  const ProbeResult r =
      probe_on_slot(slot, testing::binary(), testing::source_dir() + "/models/stories260K", "auto", o, out_.path());
  ASSERT_FALSE(r.points.empty());
  EXPECT_EQ(r.points.front().batch_tokens, 256);
  EXPECT_EQ(r.points.front().rows, 4);
  EXPECT_EQ(r.memory_limit_bytes, o.memory_limit_bytes);
  EXPECT_GT(r.chosen_batch_tokens, 0);
  // The worker's peak includes its own model and LibTorch: more than a few MiB, far below the limit.
  EXPECT_GT(r.points.front().peak_bytes, int64_t{8} << 20);
  EXPECT_THAT(io::read_file(out_.path() + "/probe_cpu_0.log"), HasSubstr("[cpu:0] pid"));

  o.memory_limit_bytes = 1 << 20;  // nothing fits: the worker's error comes back as one line
  const std::string err = testing::error_of(
      [&] { probe_on_slot(slot, testing::binary(), testing::source_dir() + "/models/stories260K", "auto", o); });
  EXPECT_THAT(err, HasSubstr("probe on cpu:0: batch probe: not even 256 tokens"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 0);
}

// Scheduler::probe: in the slot's fresh worker, which stays up; never in one whose memory holds
// more than its model; a failed probe ends that worker, and the next probe starts a new one.
TEST_F(CalibrationTest, SchedulerProbesInTheSlotsFreshWorkerOnly) {
  const std::string model = testing::source_dir() + "/models/stories260K";
  SchedulerOptions so;
  so.slots = parse_device_spec("cpu:2", 0, 2);
  so.executable = testing::binary();
  so.log_dir = out_.path();
  Scheduler scheduler(so);
  EXPECT_EQ(scheduler.start_workers(model), 2);
  EXPECT_EQ(scheduler.start_workers(model), 0);  // both are up already
  ProbeOptions o;
  o.length = 64;
  o.max_tokens = 1024;
  o.repeats = 1;
  o.memory_limit_bytes = int64_t{4} << 30;
  // Another checkpoint than the worker holds: not there.
  EXPECT_FALSE(scheduler.probe(so.slots[0], model + "/", o).has_value());
  const std::optional<ProbeResult> r = scheduler.probe(so.slots[0], model, o);
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(r->points.empty());
  EXPECT_EQ(r->points.front().batch_tokens, 256);
  EXPECT_GT(r->chosen_batch_tokens, 0);
  EXPECT_FALSE(scheduler.probe(so.slots[0], model, o).has_value());  // probed once: its peaks would mislead
  const std::string log0 = io::read_file(out_.file("worker_cpu_0.log"));
  EXPECT_THAT(log0, HasSubstr("[cpu:0] pid"));

  o.memory_limit_bytes = 1 << 20;  // nothing fits: one line naming the slot; the worker is ended
  const std::string err = testing::error_of([&] { scheduler.probe(so.slots[1], model, o); });
  EXPECT_THAT(err, HasSubstr("probe on cpu:1: batch probe: not even 256 tokens"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 0);
  o.memory_limit_bytes = int64_t{4} << 30;  // a new worker for the slot probes
  const std::optional<ProbeResult> again = scheduler.probe(so.slots[1], model, o);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(again->points.empty());
  scheduler.shutdown();
}

TEST_F(CalibrationTest, CalibrateThenRunReadsTheCache) {
  const std::string config = testing::source_dir() + "/configs/demo.yaml";
  auto r = testing::run_gpueval({"calibrate", "--gpus", "cpu:1", "--output", out_.file("cal"), config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("batch_tokens"));
  EXPECT_THAT(r.out, HasSubstr("peak MiB"));
  EXPECT_THAT(r.err, HasSubstr("probing batch budgets on cpu:0"));
  EXPECT_TRUE(io::path_exists(cache_.file("calibration.sqlite")));
  const json cal = json::parse(io::read_file(out_.file("cal") + "/calibration.json"));
  ASSERT_EQ(cal["devices"].size(), 1u);
  const json& dev = cal["devices"][0];
  const int64_t chosen = dev["batch_tokens"].get<int64_t>();
  EXPECT_GT(chosen, 0);
  EXPECT_EQ(dev["source"], "probed");
  EXPECT_THAT(dev["device"].get<std::string>(), HasSubstr("x1 threads"));
  ASSERT_GE(dev["probe"]["points"].size(), 2u);
  // The table marks the chosen row, and that row is the chosen budget.
  int starred = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" yes  *") == std::string::npos) continue;
    ++starred;
    EXPECT_THAT(line, HasSubstr(" " + std::to_string(chosen) + " ")) << r.out;
  }
  EXPECT_EQ(starred, 1) << r.out;
  const std::string svg = io::read_file(out_.file("cal") + "/calibration.svg");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("data-chosen=\"" + std::to_string(chosen) + "\""));
  EXPECT_THAT(svg, HasSubstr("<polyline class=\"tps\""));
  EXPECT_THAT(svg, Not(HasSubstr("http://www.w3.org/1999/xlink")));

  // A run with batch_size auto finds the budget in the cache and does not probe.
  r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--output", out_.file("run"), config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[sched] batch budget " + std::to_string(chosen) + " tokens for cpu: "));
  EXPECT_THAT(r.err, HasSubstr("(calibration cache)"));
  EXPECT_THAT(r.err, Not(HasSubstr("probing batch budgets")));
  EXPECT_FALSE(io::path_exists(out_.file("run") + "/logs/probe_cpu_0.log"));
  json results = json::parse(io::read_file(out_.file("run") + "/results.json"));
  EXPECT_EQ(results["config"]["batch_tokens_source"], "cache");
  EXPECT_EQ(results["config"]["batch_tokens_used"], chosen);

  // --recalibrate probes again, in the run's own worker cpu:0: one process per worker, each
  // started before the plan and loading the model once; the probing one then runs batches too.
  r = testing::run_gpueval({"run", "--gpus", "cpu:2", "--recalibrate", "--output", out_.file("re"), config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("probing batch budgets on cpu:0"));
  EXPECT_THAT(r.err, HasSubstr("in worker cpu:0: "));
  EXPECT_THAT(r.err, Not(HasSubstr("(calibration cache)")));
  EXPECT_FALSE(io::path_exists(out_.file("re") + "/logs/probe_cpu_0.log"));
  for (const char* w : {"cpu:0", "cpu:1"}) {
    const std::string started = std::string("[sched] started worker ") + w + " (pid ";
    const size_t at = r.err.find(started);
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(started, at + 1), std::string::npos) << "started twice: " << r.err;
    EXPECT_LT(at, r.err.find("probing batch budgets")) << "started after the probe began: " << r.err;
  }
  const size_t pid_at = r.err.find("[sched] started worker cpu:0 (pid ") + 34;
  const std::string probe_pid = r.err.substr(pid_at, r.err.find_first_of("),", pid_at) - pid_at);
  const json status = json::parse(io::read_file(out_.file("re") + "/status.json"));
  ASSERT_EQ(status["workers"].size(), 2u);
  EXPECT_EQ(status["workers"][0]["name"], "cpu:0");
  EXPECT_EQ(std::to_string(status["workers"][0]["pid"].get<int64_t>()), probe_pid);
  EXPECT_GT(status["workers"][0]["batches_done"].get<int64_t>() + status["workers"][1]["batches_done"].get<int64_t>(),
            0);
  results = json::parse(io::read_file(out_.file("re") + "/results.json"));
  EXPECT_EQ(results["config"]["batch_tokens_source"], "probed");
  EXPECT_GT(results["config"]["batch_tokens_used"].get<int64_t>(), 0);

  // A fixed batch size skips probing and the cache.
  r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--batch-size", "8", "--output", out_.file("fixed"), config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("batch budget")));
  results = json::parse(io::read_file(out_.file("fixed") + "/results.json"));
  EXPECT_EQ(results["config"]["batch_tokens_source"], "config");
  EXPECT_EQ(results["config"]["batch_tokens_used"], 4096);
}

// A run's probe computes its sample's few-shot prefix in the probing worker's own cache, and the
// run sends that worker the batches with it: the prefix is not computed again, and the scores are
// the same bits as those of a run given the probe's budget, which does not probe.
TEST_F(CalibrationTest, TheProbesPrefixServesTheProbingWorkersBatches) {
  GPUEVAL_REQUIRE_SHARED();
  const auto run = [&](const std::string& name, std::vector<std::string> extra) {
    const std::vector<std::string> args = testing::mmlu_anatomy_run_args("cpu:1", out_.file(name), extra);
    const auto r = testing::run_gpueval(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  const auto probed = run("probed", {"--recalibrate"});
  EXPECT_THAT(probed.err, HasSubstr("in worker cpu:0: ")) << "the probe ran in the run's worker";
  const json a = json::parse(io::read_file(out_.file("probed") + "/results.json"));
  ASSERT_EQ(a["config"]["batch_tokens_source"], "probed");
  const int64_t budget = a["config"]["batch_tokens_used"].get<int64_t>();
  run("fixed", {"--batch-tokens", std::to_string(budget)});
  const json b = json::parse(io::read_file(out_.file("fixed") + "/results.json"));
  ASSERT_EQ(b["config"]["batch_tokens_source"], "config");
  ASSERT_EQ(a["batching"]["shared_prefixes"], 1) << "one 1-shot prefix for every question";
  EXPECT_GT(b["batching"]["prefix_tokens_computed"].get<int64_t>(), 0);
  EXPECT_EQ(a["batching"]["prefix_tokens_computed"], 0) << "the probe had computed it in the worker";
  EXPECT_EQ(a["batching"]["tokens_computed"].get<int64_t>() + b["batching"]["prefix_tokens_computed"].get<int64_t>(),
            b["batching"]["tokens_computed"].get<int64_t>());
  EXPECT_EQ(io::read_file(out_.file("probed") + "/samples_mmlu_anatomy.jsonl"),
            io::read_file(out_.file("fixed") + "/samples_mmlu_anatomy.jsonl"));
}

// What fn writes to std::cerr (the [sched] lines of calibration in this process).
template <typename Fn>
std::string cerr_of(Fn&& fn) {
  std::ostringstream captured;
  struct Restore {
    std::streambuf* old;
    ~Restore() { std::cerr.rdbuf(old); }
  } restore{std::cerr.rdbuf(captured.rdbuf())};
  fn();
  return captured.str();
}

// A budget chosen by a probe that the work bound cut short (batch_probe.h) serves runs of up to
// twice that work; a bigger run probes again, and a budget from an unbounded probe serves any run.
TEST_F(CalibrationTest, ABudgetFromAProbeCutShortIsProbedAgainByARunOfMoreThanTwiceItsWork) {
  const std::string model = testing::source_dir() + "/models/stories260K";
  std::vector<DeviceSlot> slots(1);
  slots[0].threads = 1;
  CalibrationOptions o;
  o.executable = testing::binary();
  o.model_dir = model;
  o.cache_path = cache_.file("calibration.sqlite");
  o.length = 64;
  o.log_dir = out_.path();
  const CalibrationKey key{model_fingerprint(model), dtype_name(resolve_dtype("auto", at::kCPU, model)),
                           device_description(at::kCPU, 1), length_bucket(64)};
  const auto store = [&](int64_t bounded_by) {
    ProbeResult probe;
    probe.chosen_batch_tokens = 768;  // no probe of this model picks it: a cache hit is unmistakable
    probe.points.push_back(ProbePoint{});
    probe.points.back().batch_tokens = 768;
    probe.points.back().peak_bytes = int64_t{64} << 20;
    probe.bounded_by_work_tokens = bounded_by;
    ASSERT_TRUE(CalibrationCache(o.cache_path).store(key, CalibrationEntry{768, 0, to_json(probe)}));
  };
  store(1000);
  o.work_tokens = 2000;  // twice the bounded probe's run: still served
  std::vector<DeviceBudget> b = calibrate_devices(slots, o);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].source, "cache");
  EXPECT_EQ(b[0].batch_tokens, 768);

  o.work_tokens = 2001;  // more than twice: probed again, and the new probe replaces the entry
  const std::string err = cerr_of([&] { b = calibrate_devices(slots, o); });
  EXPECT_THAT(err, HasSubstr("came from a probe cut short by a run of 1000 tokens; this run has 2001, probing again"));
  EXPECT_THAT(err, HasSubstr("probing batch budgets on cpu:0"));
  EXPECT_EQ(b[0].source, "probed");
  EXPECT_NE(b[0].batch_tokens, 768);
  const std::optional<CalibrationEntry> stored = CalibrationCache(o.cache_path).lookup(key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->batch_tokens, b[0].batch_tokens);

  store(0);  // an unbounded probe: any run takes it
  o.work_tokens = 1'000'000;
  b = calibrate_devices(slots, o);
  EXPECT_EQ(b[0].source, "cache");
  EXPECT_EQ(b[0].batch_tokens, 768);
}

// N of the probe's "[sched] probing batch budgets on cpu:0 (..., rows of N tokens, ...)" line; -1 without one.
int64_t probed_row_length(const std::string& err) {
  const std::string marker = ", rows of ";
  const size_t at = err.find(marker);
  if (at == std::string::npos || err.rfind("probing batch budgets on cpu:0", at) == std::string::npos) return -1;
  return std::stoll(err.substr(at + marker.size()));
}

// calibrate selects tasks and documents with run's flags, so it probes at the length of the
// requests the run will score: demo_choice's first five questions are far shorter than the
// demo config's perplexity texts.
TEST_F(CalibrationTest, CalibrateProbesTheRequestsTheFlagsSelect) {
  const std::string config = testing::source_dir() + "/configs/demo.yaml";
  auto r = testing::run_gpueval({"calibrate", "--gpus", "cpu:1", "--output", out_.file("all"), config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t whole_config = probed_row_length(r.err);
  ASSERT_GT(whole_config, 0) << r.err;
  r = testing::run_gpueval(
      {"calibrate", "--gpus", "cpu:1", "--tasks", "demo_choice", "--limit", "5", "--output", out_.file("few"), config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t selected = probed_row_length(r.err);
  ASSERT_GT(selected, 0) << r.err;
  EXPECT_LT(selected, whole_config) << r.err;

  // --num-fewshot and --data reach the tasks too: each makes the load fail the way a run's does.
  r = testing::run_gpueval({"calibrate", "--gpus", "cpu:1", "--tasks", "demo_choice", "--num-fewshot", "1", config});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("num_fewshot 1 needs fewshot_path"));
  r = testing::run_gpueval(
      {"calibrate", "--gpus", "cpu:1", "--tasks", "mmlu_anatomy", "--data", "mmlu=" + out_.file("nothing"), config});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("data root 'mmlu': " + out_.file("nothing") + " is not a directory"));
}

TEST_F(CalibrationTest, BadMaxMemoryFlagIsOneLine) {
  auto r = testing::run_gpueval({"calibrate", "--max-memory", "lots", testing::source_dir() + "/configs/demo.yaml"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("gpueval: --max-memory: must be an amount"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace gpueval
