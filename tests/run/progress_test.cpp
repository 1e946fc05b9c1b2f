// The terminal's status line of a run (run/progress.h): what it shows, from a scheduler status.
#include "run/progress.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace gpueval {
namespace {

WorkerStatus worker(const std::string& name, const std::string& state) {
  WorkerStatus w;
  w.name = name;
  w.state = state;
  return w;
}

TEST(ProgressStatusLine, ShowsBarBatchesDocumentsRateEtaAndBusyWorkers) {
  SchedulerStatus s;
  s.batches_total = 40;
  s.batches_done = 10;
  s.tokens_done = 5000;
  s.elapsed_s = 10;
  s.eta_s = 30;
  s.workers = {worker("cpu:0", "busy"), worker("cpu:1", "idle")};
  const nlohmann::json tasks = {{"a", {{"documents", 500}, {"documents_done", 120}}},
                                {"b", {{"documents", 1500}, {"documents_done", 0}}}};
  EXPECT_EQ(ProgressReporter::status_line(s, tasks),
            "[======>                 ] 10/40 batches, 120/2,000 documents, 500 tok/s, ETA 30s, 1/2 workers busy");
  EXPECT_EQ(ProgressReporter::status_line(s, nullptr),
            "[======>                 ] 10/40 batches, 500 tok/s, ETA 30s, 1/2 workers busy");
}

TEST(ProgressStatusLine, SaysItWaitsForTheWorkersBeforeAnyIsUp) {
  SchedulerStatus s;
  s.batches_total = 40;
  s.workers = {worker("cpu:0", "starting"), worker("cpu:1", "starting")};
  EXPECT_EQ(ProgressReporter::status_line(s, nullptr),
            "[>                       ] 0/40 batches, waiting for 2 workers to load");
  s.workers = {worker("cpu:0", "starting")};
  EXPECT_EQ(ProgressReporter::status_line(s, nullptr),
            "[>                       ] 0/40 batches, waiting for the worker to load");
}

TEST(ProgressStatusLine, CountsHaveThousandsSeparators) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(56000), "56,000");
  EXPECT_EQ(format_count(1234567), "1,234,567");
  EXPECT_EQ(format_count(-1234), "-1,234");
}

}  // namespace
}  // namespace gpueval
