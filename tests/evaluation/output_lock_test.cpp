// One run per output folder (src/evaluation/output_lock.h, src/common/dir_lock.h): a second run on
// a folder another run holds exits 5 naming the holder, --wait waits for it and then resumes from
// its journal, and a holder killed with SIGKILL leaves the folder free at once. Every wait is on
// an event the product emits: a worker's "holding batch" (GPUEVAL_FAULT=hold), a log line.
#include <gmock/gmock.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/dir_lock.h"
#include "common/file_io.h"
#include "run_outputs.h"
#include "test_util.h"

namespace gpueval {
namespace {

using testing::AsyncRun;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using testing::samples_of;

TEST(DirectoryLock, SecondTakerIsToldWhoHoldsIt) {
  testing::TempDir dir;
  const std::string d = dir.file("out");
  io::make_directories(d);
  {
    const DirectoryLock held = DirectoryLock::acquire(d, "gpueval run first.yaml", false);
    EXPECT_EQ(held.path(), d + "/gpueval.lock");
    // flock belongs to the open file, so a second descriptor in this very process is refused too.
    try {
      DirectoryLock::acquire(d, "gpueval run second.yaml", false);
      ADD_FAILURE() << "a second lock on a held directory was granted";
    } catch (const DirectoryBusy& e) {
      EXPECT_THAT(e.what(), MatchesRegex(d + " is in use by pid " + std::to_string(::getpid()) +
                                         " on host .+ since 20[0-9-]+ [0-9:]+ UTC \\(gpueval run first.yaml\\); "
                                         "wait for it with --wait, or write elsewhere with --output"));
    }
    EXPECT_THAT(DirectoryLock::describe_holder(d), HasSubstr("(gpueval run first.yaml)"));
  }
  // Released with the descriptor; the file stays, naming the last holder.
  const DirectoryLock again = DirectoryLock::acquire(d, "gpueval run second.yaml", false);
  EXPECT_THAT(DirectoryLock::describe_holder(d), HasSubstr("(gpueval run second.yaml)"));
}

TEST(DirectoryLock, UnreadableHolderIsAnUnknownProcess) {
  testing::TempDir dir;
  testing::write_text(dir.file("gpueval.lock"), "not json");
  EXPECT_EQ(DirectoryLock::describe_holder(dir.path()), "an unknown process");
}

class OutputLockTest : public ::testing::Test {
 protected:
  std::string config(const std::string& name) {
    const std::string path = dir_.file(name + ".yaml");
    testing::write_text(path, "model: " + testing::source_dir() + "/models/stories260K\n" +
                                  "tasks: [demo_choice]\n"
                                  "output: " +
                                  dir_.file("out") +
                                  "\n"
                                  "batch_tokens: 256\n");
    return path;
  }
  // A run that holds the output folder, stopped on its first batch until `release` exists.
  AsyncRun start_holder(const std::string& cfg) {
    AsyncRun run = AsyncRun::start({"run", "--gpus", "cpu:1", cfg}, dir_.file("out"),
                                   {{"GPUEVAL_FAULT", "hold:any"}, {"GPUEVAL_FAULT_RELEASE", release()}});
    EXPECT_FALSE(run.wait_worker_line("holding batch").empty()) << run.log();
    return run;
  }
  std::string release() const { return dir_.file("release"); }
  testing::TempDir dir_;
};

TEST_F(OutputLockTest, SecondRunExitsFiveNamingTheHolder) {
  const std::string cfg = config("a");
  AsyncRun first = start_holder(cfg);
  const auto second = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  EXPECT_EQ(second.exit_code, 5) << second.err;
  EXPECT_THAT(second.err,
              MatchesRegex("gpueval: " + dir_.file("out") + " is in use by pid " + std::to_string(first.child.pid()) +
                           " on host .+ since 20.+ UTC \\(gpueval run --gpus cpu:1 " + cfg +
                           "\\); wait for it with --wait, or write elsewhere with --output\n"));
  testing::write_text(release(), "");
  const ExitStatus st = first.child.wait();
  EXPECT_EQ(st.code, 0) << first.log();
}

TEST_F(OutputLockTest, WaitStartsOnceTheFirstRunEndsAndResumesItsJournal) {
  const std::string cfg = config("a");
  AsyncRun first = start_holder(cfg);
  AsyncRun waiting = AsyncRun::start({"run", "--gpus", "cpu:1", "--wait", cfg}, dir_.file("waiting"));
  // The waiting run says whom it waits for, then does nothing until the lock is free.
  const std::string needle = "is in use by pid " + std::to_string(first.child.pid());
  const auto t0 = std::chrono::steady_clock::now();
  while (waiting.log().find("waiting for it to finish (--wait)") == std::string::npos && !waiting.child.poll() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(300))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_THAT(waiting.log(), HasSubstr(needle));
  EXPECT_FALSE(waiting.child.poll()) << waiting.log();
  testing::write_text(release(), "");
  EXPECT_EQ(first.child.wait().code, 0) << first.log();
  EXPECT_EQ(waiting.child.wait().code, 0) << waiting.log();
  // It found every request scored by the first run and computed nothing.
  EXPECT_THAT(waiting.log(), HasSubstr("requests already scored; computing 0 in 0 batches"));
  EXPECT_THAT(waiting.log(), Not(HasSubstr("holding batch")));
  EXPECT_FALSE(samples_of(dir_.file("out"))["demo_choice"].empty());
}

TEST_F(OutputLockTest, HolderKilledWithSigkillLeavesTheFolderFree) {
  const std::string cfg = config("a");
  AsyncRun first = start_holder(cfg);
  first.child.signal(SIGKILL);
  first.child.wait();
  // No stale lock: the next run starts at once and finishes the work.
  const auto next = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_THAT(next.err, Not(HasSubstr("is in use")));
  EXPECT_FALSE(samples_of(dir_.file("out"))["demo_choice"].empty());
}

}  // namespace
}  // namespace gpueval
