// Sampled generation with repeats, end to end with real processes: every sample's text is a
// function of (seed, task, document, repeat) alone. An uninterrupted one-worker run with the
// default batches, and a two-worker run with batches of two sequences that is killed with SIGKILL
// mid-run and then resumed from its journal, write the same samples. Where a batch's sequences do
// not depend on each other (generation_rows_independent), the sequences that ended before a
// worker died, or before the whole run was killed, are kept and not computed again.
#include <gmock/gmock.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "model/decoder/generate.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using testing::AsyncRun;
using ::testing::HasSubstr;

const char* const kNoIndependentRows =
    "this machine's generation rows depend on their batch (no AVX2+FMA, or GPUEVAL_ROW_INVARIANT_PRODUCTS=0): "
    "a batch is always redone whole, as the other tests here check";

json journal_of(const std::string& out) { return json::parse(io::read_file(out + "/results.json"))["journal"]; }

// Twelve story openings, each sampled four times (48 requests), then the demo choice task.
std::string write_config(const testing::TempDir& dir, const std::string& name, const std::string& extra) {
  std::string docs;
  const char* names[] = {"Lily", "Tom", "Ben", "Sue", "Max", "Mia", "Sam", "Anna", "Tim", "Lucy", "Jack", "Sara"};
  for (const char* n : names)
    docs += "{\"start\": \"Once upon a time, " + std::string(n) + " went to the\", \"who\": \"" + n + "\"}\n";
  testing::write_text(dir.file("stories.jsonl"), docs);
  testing::write_text(dir.file("stories.yaml"),
                      "task: stories\ndataset_path: stories.jsonl\noutput_type: generate_until\n"
                      "doc_to_text: \"{{start}}\"\ndoc_to_target: \"{{who}}\"\nrepeats: 4\n"
                      "generation_kwargs:\n  until: [\"\\n\"]\n  do_sample: true\n  temperature: 0.9\n"
                      "  max_gen_toks: 24\n"
                      "filter_list:\n  - name: name\n    filter:\n      - function: regex\n"
                      "        regex_pattern: \"(Lily|Tom|Ben|Sue|Max|Mia|Sam|Anna|Tim|Lucy|Jack|Sara)\"\n"
                      "metric_list:\n  - metric: pass_at_k\n    k: [1, 4]\n  - metric: maj_at_k\n    k: 4\n");
  const std::string path = dir.file(name + ".yaml");
  testing::write_text(path, "model: " + testing::source_dir() + "/models/stories260K\ntasks: [" +
                                dir.file("stories.yaml") + ", demo_choice]\noutput: " + dir.file(name) +
                                "\nheartbeat_timeout_s: 20\n" + extra);
  return path;
}

TEST(GenerationResume, SampledRepeatsAreTheSameAfterASigkillWithOtherBatchesAndWorkers) {
  testing::TempDir dir;
  const auto reference = testing::run_gpueval({"run", "--gpus", "cpu:1", write_config(dir, "reference", "")});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::string expected = io::read_file(dir.file("reference/samples_stories.jsonl"));

  const std::string cfg = write_config(dir, "killed", "batch_size: 2\n");
  const std::string out = dir.file("killed");
  {
    // Request 60 (in demo_choice) is held, so the run cannot end; it is killed once two batches are done.
    AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, out,
                                   {{"GPUEVAL_FAULT", "hold:60"}, {"GPUEVAL_FAULT_ONCE", out + ".held"}});
    const json s = run.wait_status([](const json& st) { return st.value("batches_done", 0) >= 2; });
    ASSERT_FALSE(s.is_null()) << run.log();
    ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
    run.child.wait();
  }
  const auto resumed = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("requests already scored"));
  const json journal = json::parse(io::read_file(out + "/results.json"))["journal"];
  EXPECT_GT(journal["requests_resumed"].get<int64_t>(), 0) << journal.dump();
  EXPECT_GT(journal["requests_computed"].get<int64_t>(), 0) << journal.dump();
  EXPECT_EQ(io::read_file(out + "/samples_stories.jsonl"), expected);
  // Four different samples of a document: sampling happened.
  const json first = json::parse(expected.substr(0, expected.find('\n')));
  ASSERT_EQ(first["resps"][0].size(), 4u);
  EXPECT_NE(first["resps"][0][0], first["resps"][0][1]);
}

// Sequences that end before their batch (kItems frames, journaled as they arrive), against one
// uninterrupted one-worker reference run shared by the suite. Skipped where rows depend on their
// batch: there a batch is always redone whole, as the test above checks.
class SequencesAhead : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!generation_rows_independent(at::kCPU, at::kFloat)) return;
    reference_dir_ = new testing::TempDir;
    const auto reference =
        testing::run_gpueval({"run", "--gpus", "cpu:1", write_config(*reference_dir_, "reference", "")});
    reference_error_ = reference.exit_code == 0 ? "" : reference.err;
    if (reference.exit_code == 0) reference_ = io::read_file(reference_dir_->file("reference/samples_stories.jsonl"));
  }
  static void TearDownTestSuite() {
    delete reference_dir_;
    reference_dir_ = nullptr;
  }
  void SetUp() override {
    if (!generation_rows_independent(at::kCPU, at::kFloat)) GTEST_SKIP() << kNoIndependentRows;
    ASSERT_TRUE(reference_error_.empty()) << reference_error_;
  }

  // Runs the config as `name` on one worker, with GPUEVAL_FAULT=fault firing once, to its end
  // (exit 0 asserted); its log.
  std::string run_with_fault(const std::string& name, const std::string& fault) {
    const std::string out = dir_.file(name);
    AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:1", write_config(dir_, name, "")}, out,
                                   {{"GPUEVAL_FAULT", fault}, {"GPUEVAL_FAULT_ONCE", out + ".fired"}});
    const ExitStatus st = run.child.wait();
    EXPECT_EQ(st.kind, ExitStatus::Kind::kExited);
    EXPECT_EQ(st.code, 0) << run.log();
    EXPECT_TRUE(io::path_exists(out + ".fired")) << run.log();
    return run.log();
  }
  void expect_reference_samples(const std::string& name) const {
    EXPECT_EQ(io::read_file(dir_.file(name) + "/samples_stories.jsonl"), reference_);
  }

  testing::TempDir dir_;
  static inline testing::TempDir* reference_dir_ = nullptr;
  static inline std::string reference_, reference_error_;
};

TEST_F(SequencesAhead, AWorkerThatDiesMidBatchSendsOnlyTheUnfinishedSequencesAgain) {
  // The worker aborts once five sequences of its batch have ended and gone ahead.
  EXPECT_THAT(run_with_fault("crashed", "crash-items:5"), HasSubstr("goes on without its 5 items that ended ahead"));
  expect_reference_samples("crashed");
  EXPECT_EQ(journal_of(dir_.file("crashed"))["items_recorded_ahead"].get<int64_t>(), 48);
}

TEST_F(SequencesAhead, AnItemSentAheadTwiceIsTheWorkersProtocolError) {
  const std::string log = run_with_fault("twice", "twice-items:2");
  EXPECT_THAT(log, HasSubstr("failed: protocol error: an item of request"));
  // The two items before the bad frame were kept; the restarted worker computed the rest.
  EXPECT_THAT(log, HasSubstr("goes on without its 2 items that ended ahead"));
  expect_reference_samples("twice");
}

TEST_F(SequencesAhead, AKilledRunKeepsTheSequencesThatEndedBeforeTheKill) {
  const std::string cfg = write_config(dir_, "killed", "");
  const std::string out = dir_.file("killed");
  {
    // The one worker holds its batch once three of its sequences have ended, so nothing else comes
    // ahead; the run is killed when the scheduler has journaled them (status.json's items_ahead is
    // written after they are). The resumed run has two workers: another plan, the same texts.
    AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:1", cfg}, out,
                                   {{"GPUEVAL_FAULT", "hold-items:3"}, {"GPUEVAL_FAULT_ONCE", out + ".held"}});
    const json s = run.wait_status([](const json& st) { return st.value("items_ahead", 0) == 3; });
    ASSERT_FALSE(s.is_null()) << run.log();
    ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
    run.child.wait();
  }
  const auto resumed = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("sequences that ended before)"));
  EXPECT_EQ(journal_of(out)["items_resumed_in_batches"].get<int64_t>(), 3) << journal_of(out).dump();
  expect_reference_samples("killed");
}

// The look-ahead: a worker's next generation batch comes before its current one's result, once the
// current one drains, and joins its running set. Batches of four sequences on one worker: the worker
// holds after its first batch's first sequence has ended, until the scheduler has sent the next
// batch ahead (status.json: two in flight); released, it takes that batch into its running set.
TEST_F(SequencesAhead, ANextBatchSentAheadJoinsTheRunningSetAndChangesNoSample) {
  const std::string out = dir_.file("ahead");
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:1", write_config(dir_, "ahead", "batch_size: 4\n")}, out,
                                 {{"GPUEVAL_FAULT", "hold-items:1"},
                                  {"GPUEVAL_FAULT_ONCE", out + ".held"},
                                  {"GPUEVAL_FAULT_RELEASE", out + ".release"}});
  const json s = run.wait_status([](const json& st) {
    for (const json& w : st["workers"])
      if (w.value("batches_in_flight", 0) == 2) return true;
    return false;
  });
  ASSERT_FALSE(s.is_null()) << run.log();
  testing::write_text(out + ".release", "");
  const ExitStatus st = run.child.wait();
  ASSERT_EQ(st.code, 0) << run.log();
  EXPECT_THAT(run.log(), HasSubstr("sent ahead to worker cpu:0"));
  EXPECT_THAT(io::read_file(out + "/logs/worker_cpu_0.log"), HasSubstr("'s running set"));
  expect_reference_samples("ahead");
  EXPECT_EQ(journal_of(out)["items_recorded_ahead"].get<int64_t>(), 48);
}

// A worker that dies once a batch sent ahead has joined its running set and sent one sequence:
// both batches go back to the queue, each without the sequences that ended ahead, and the samples
// are the uninterrupted run's.
TEST_F(SequencesAhead, AWorkerThatDiesWithABatchJoinedKeepsEverySequenceThatEnded) {
  const std::string out = dir_.file("joined");
  AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:1", write_config(dir_, "joined", "batch_size: 4\n")}, out,
                                 {{"GPUEVAL_FAULT", "crash-join:1"}, {"GPUEVAL_FAULT_ONCE", out + ".fired"}});
  const ExitStatus st = run.child.wait();
  ASSERT_EQ(st.code, 0) << run.log();
  const std::string log = run.log();
  EXPECT_TRUE(io::path_exists(out + ".fired")) << log;
  EXPECT_THAT(log, HasSubstr("goes on without its 1 items that ended ahead"));
  EXPECT_THAT(log, HasSubstr("worker cpu:0 failed"));
  expect_reference_samples("joined");
}

}  // namespace
}  // namespace gpueval
