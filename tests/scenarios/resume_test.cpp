// Resuming from the journal, end to end with real processes: a run killed with SIGKILL (the
// whole process group), a torn WAL, a full disk, a corrupt database and a journal of another
// config, each followed by the same command again. Whatever happened, the final per-request
// results equal an uninterrupted run's bit for bit, and only the missing requests are computed.
#include <gmock/gmock.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "run_outputs.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using testing::AsyncRun;
using ::testing::HasSubstr;

// The demo tasks in many small batches (the same as run_test.cpp's), so faults land mid-run.
std::string write_config(const testing::TempDir& dir, const std::string& name, const std::string& extra = "") {
  return testing::write_demo_config(dir, name, extra);
}

using testing::results_of;
using testing::samples_of;

// Reads the journal with SQLite directly, never checkpointing on close, so that looking does
// not change what the next run finds.
class JournalReader {
 public:
  explicit JournalReader(const std::string& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  }
  ~JournalReader() { sqlite3_close(db_); }
  int64_t query(const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
    int64_t n = -1;
    if (st && sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
  }
  // Requests with every part stored.
  int64_t complete_requests() {
    return query(
        "SELECT COUNT(*) FROM (SELECT request_key FROM results GROUP BY request_key"
        " HAVING COUNT(*) = MAX(parts))");
  }
  void checkpoint() {
    EXPECT_EQ(sqlite3_exec(db_, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db_);
  }

 private:
  sqlite3* db_ = nullptr;
};

int64_t complete_requests(const std::string& out) { return JournalReader(out + "/journal.sqlite").complete_requests(); }

class ResumeTest : public ::testing::Test {
 protected:
  // One uninterrupted run on one worker: the results every resumed run must equal.
  static void SetUpTestSuite() {
    reference_dir_ = new testing::TempDir();
    auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", write_config(*reference_dir_, "reference")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string out = reference_dir_->file("reference");
    reference_ = new testing::ReferenceOutputs(testing::reference_outputs(out));
    JournalReader j(out + "/journal.sqlite");
    total_requests_ = j.complete_requests();
    journal_pages_ = j.query("PRAGMA page_count");
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete reference_dir_;
  }

  void expect_reference_results(const std::string& out) {
    const auto got = samples_of(out);
    for (const auto& [task, text] : reference_->samples) {
      EXPECT_FALSE(text.empty()) << task;
      EXPECT_EQ(got.at(task), text) << task << ": per-document results differ from the uninterrupted run";
    }
    EXPECT_EQ(results_of(out)["results"].dump(), reference_->results);
  }

  // Starts `name` on two workers, one of which holds request 200's batch (so the run cannot end),
  // waits until at least two batches are in the journal, and kills the whole process group with SIGKILL.
  void kill_mid_run(const std::string& cfg, const std::string& out) {
    AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, out,
                                   {{"GPUEVAL_FAULT", "hold:200"}, {"GPUEVAL_FAULT_ONCE", out + ".held"}});
    const json s = run.wait_status([](const json& st) { return st.value("batches_done", 0) >= 2; });
    ASSERT_FALSE(s.is_null()) << run.log();
    ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
    run.child.wait();
  }

  // Runs `cfg` again without faults; checks it completes with the reference results and
  // computes exactly the requests the journal lacked. Returns results.json's "journal".
  json rerun_and_check(const std::string& cfg, const std::string& out, int64_t stored) {
    auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr(fmt::format("[sched] journal {}/journal.sqlite: {} of {} requests already scored", out,
                                             stored, total_requests_)));
    // With a journal the workers start only once the inputs have loaded and it says what is left
    // (a fresh run starts them first: RunTest.TwoWorkersGiveBitIdenticalResults).
    const size_t inputs_loaded = r.err.find("[sched] contexts "), started = r.err.find("[sched] started worker");
    EXPECT_NE(inputs_loaded, std::string::npos) << r.err;
    EXPECT_NE(started, std::string::npos) << r.err;
    EXPECT_LT(inputs_loaded, started) << r.err;
    expect_reference_results(out);
    const json j = results_of(out)["journal"];
    EXPECT_EQ(j["path"], out + "/journal.sqlite");
    EXPECT_EQ(j["requests_resumed"], stored);
    EXPECT_EQ(j["requests_computed"], total_requests_ - stored);
    EXPECT_EQ(complete_requests(out), total_requests_);
    return j;
  }

  static testing::TempDir* reference_dir_;
  static testing::ReferenceOutputs* reference_;
  static int64_t total_requests_, journal_pages_;
  testing::TempDir dir_;
};
testing::TempDir* ResumeTest::reference_dir_ = nullptr;
testing::ReferenceOutputs* ResumeTest::reference_ = nullptr;
int64_t ResumeTest::total_requests_ = 0;
int64_t ResumeTest::journal_pages_ = 0;

TEST_F(ResumeTest, ReferenceJournalHoldsEveryRequest) {
  EXPECT_EQ(total_requests_, 260);
  const json j = results_of(reference_dir_->file("reference"))["journal"];
  EXPECT_EQ(j["requests_resumed"], 0);
  EXPECT_EQ(j["requests_computed"], 260);
  EXPECT_EQ(j["batches_resumed"], 0);
  EXPECT_EQ(j["batches_computed"], results_of(reference_dir_->file("reference"))["batching"]["batches"]);
}

TEST_F(ResumeTest, SigkilledRunResumesWithOnlyTheMissingRequestsAndTheSameResults) {
  const std::string cfg = write_config(dir_, "killed");
  const std::string out = dir_.file("killed");
  kill_mid_run(cfg, out);
  const int64_t stored = complete_requests(out);
  EXPECT_GT(stored, 0);
  EXPECT_LT(stored, total_requests_);
  const json j = rerun_and_check(cfg, out, stored);
  EXPECT_GT(j["batches_resumed"].get<int>(), 0);

  // Once more: nothing left to compute, and no worker is even started.
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:2", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("260 of 260 requests already scored; computing 0 in 0 batches"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("started worker")));
  EXPECT_EQ(results_of(out)["journal"]["requests_computed"], 0);
  EXPECT_EQ(results_of(out)["journal"]["batches_computed"], 0);
  expect_reference_results(out);
}

TEST_F(ResumeTest, TornLastTransactionIsDroppedAndRecomputed) {
  const std::string cfg = write_config(dir_, "torn");
  const std::string out = dir_.file("torn");
  kill_mid_run(cfg, out);
  const std::string wal = out + "/journal.sqlite-wal";
  ASSERT_TRUE(io::path_exists(wal));
  const int64_t before = complete_requests(out);
  struct stat st;
  ASSERT_EQ(::stat(wal.c_str(), &st), 0);
  ASSERT_GT(st.st_size, 32 + 2 * (24 + 4096));
  // The WAL is a 32-byte header and frames of a 24-byte header and a 4096-byte page; cut the
  // last whole frame (the commit frame of the last transaction) in half.
  const off_t frames = (st.st_size - 32) / (24 + 4096);
  ASSERT_EQ(::truncate(wal.c_str(), 32 + (frames - 1) * (24 + 4096) + 2060), 0);
  const int64_t after = complete_requests(out);
  EXPECT_LT(after, before) << "the torn transaction should have been dropped";
  EXPECT_GT(after, 0);
  rerun_and_check(cfg, out, after);
}

TEST_F(ResumeTest, FullDiskStopsTheRunAndTheRerunCompletesIt) {
  const std::string cfg = write_config(dir_, "full");
  const std::string out = dir_.file("full");
  // Room for the schema and about half of the results.
  ASSERT_GT(journal_pages_, 6);
  const int64_t max_pages = 3 + (journal_pages_ - 3) / 2;
  AsyncRun run =
      AsyncRun::start({"run", "--gpus", "cpu:2", cfg}, out, {{"GPUEVAL_JOURNAL_MAX_PAGES", std::to_string(max_pages)}});
  ExitStatus st = run.child.wait();
  EXPECT_EQ(st.kind, ExitStatus::Kind::kExited);
  EXPECT_EQ(st.code, 1) << run.log();
  EXPECT_THAT(run.log(),
              HasSubstr("gpueval: " + out + "/journal.sqlite: cannot record results: database or disk is full\n"));
  const int64_t stored = complete_requests(out);
  EXPECT_GT(stored, 0);
  EXPECT_LT(stored, total_requests_);
  rerun_and_check(cfg, out, stored);
}

TEST_F(ResumeTest, JournalOfAnotherConfigIsRefusedUntilFresh) {
  const std::string out = dir_.file("other");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--limit", "3", write_config(dir_, "other")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string before = io::read_file(out + "/results.json");
  r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--limit", "4", write_config(dir_, "other")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(out + "/journal.sqlite: journal was written for model"));
  EXPECT_THAT(r.err, HasSubstr("with another config"));
  EXPECT_THAT(r.err, HasSubstr("run with --fresh to start over"));
  EXPECT_EQ(io::read_file(out + "/results.json"), before);
  r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--limit", "4", "--fresh", write_config(dir_, "other")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = results_of(out)["journal"];
  EXPECT_EQ(j["requests_resumed"], 0);
  EXPECT_EQ(j["requests_computed"].get<int64_t>(), complete_requests(out));
  EXPECT_GT(j["requests_computed"].get<int64_t>(), 0);
}

TEST_F(ResumeTest, CorruptJournalIsRefusedAndNothingIsWritten) {
  const std::string cfg = write_config(dir_, "corrupt");
  const std::string out = dir_.file("corrupt");
  auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string db = out + "/journal.sqlite";
  JournalReader(db).checkpoint();
  std::string bytes = io::read_file(db);
  ASSERT_GT(bytes.size(), 4u * 4096);
  const size_t page = bytes.size() / 4096 / 2;
  for (size_t i = 0; i < 4096; ++i) bytes[page * 4096 + i] = static_cast<char>(0x5a ^ (i * 7));
  testing::write_text(db, bytes);
  const std::string results_before = io::read_file(out + "/results.json");
  const std::string status_before = io::read_file(out + "/status.json");
  r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("gpueval: " + db + ": journal is corrupt ("));
  EXPECT_THAT(r.err, HasSubstr("run with --fresh to start over"));
  EXPECT_EQ(io::read_file(out + "/results.json"), results_before);
  EXPECT_EQ(io::read_file(out + "/status.json"), status_before);
}

}  // namespace
}  // namespace gpueval
