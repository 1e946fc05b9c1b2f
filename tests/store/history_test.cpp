// The history database: records round-trip, replace and forget; bad files are refused with
// one line naming them; two writers share a file; results.json and DocRecords become rows.
#include "gpueval/history.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "gpueval/task.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;
using Ordered = nlohmann::ordered_json;

CheckpointInfo checkpoint(const std::string& name, double mtime) {
  return CheckpointInfo{"fp-" + name, "/runs/a/" + name, name, mtime};
}

ScoreRow row(const std::string& task, const std::string& metric, double value, std::optional<double> se, int64_t n,
             bool higher = true, bool group = false, const std::string& filter = "none") {
  return testing::score_row(task, metric, value, se, n, higher, group, filter);
}

std::vector<ScoreRow> scores(double acc) {
  return {row("quiz", "acc", acc, 0.05, 3), row("quiz", "acc_norm", acc / 2, 0.04, 3),
          row("quiz", "exact_match", 0.5, std::nullopt, 3, true, false, "strict-match"),
          row("story", "word_perplexity", 40 + acc, std::nullopt, 2, false),
          row("all", "acc", acc + 0.01, 0.02, 5, true, true)};
}

std::vector<SampleRow> samples(std::vector<double> acc) {
  std::vector<SampleRow> out;
  for (size_t i = 0; i < acc.size(); ++i) out.push_back(SampleRow{"quiz", "acc", static_cast<int64_t>(i), acc[i]});
  out.push_back(SampleRow{"story", "loglikelihood", 7, -12.5});
  return out;
}

void expect_rows_equal(const std::vector<ScoreRow>& got, const std::vector<ScoreRow>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].task + " " + want[i].metric);
    EXPECT_EQ(got[i].task, want[i].task);
    EXPECT_EQ(got[i].metric, want[i].metric);
    EXPECT_EQ(got[i].filter, want[i].filter);
    EXPECT_EQ(got[i].value, want[i].value);
    EXPECT_EQ(got[i].stderr_value, want[i].stderr_value);
    EXPECT_EQ(got[i].n, want[i].n);
    EXPECT_EQ(got[i].higher_is_better, want[i].higher_is_better);
    EXPECT_EQ(got[i].is_group, want[i].is_group);
    EXPECT_EQ(got[i].chance, want[i].chance);
    EXPECT_EQ(got[i].parent, want[i].parent);
  }
}

TEST(HistoryTest, RecordAndTrendRoundTripOldestFirst) {
  testing::TempDir dir;
  const std::string path = dir.file("nested/deeper/history.sqlite");
  History h = History::open(path);
  EXPECT_TRUE(io::path_exists(path));
  const int64_t run = h.begin_run("cfgA", {{"model", "m"}, {"tasks", {"quiz"}}}, "gpueval run a.yaml");
  EXPECT_GT(run, 0);
  // Recorded newest first; the trend orders by mtime, then name.
  h.record(run, checkpoint("step-300", 300), "cfgA", "complete", scores(0.6), samples({1, 0, 1}));
  h.record(run, checkpoint("step-100", 100), "cfgA", "complete", scores(0.4), samples({0, 0, 1}));
  h.record(run, checkpoint("step-200b", 200), "cfgA", "incomplete", scores(0.5), {});
  h.record(run, checkpoint("step-200a", 200), "cfgA", "complete", scores(0.45), {});

  const std::vector<ScoredCheckpoint> trend = h.trend("cfgA");
  ASSERT_EQ(trend.size(), 4u);
  EXPECT_EQ(trend[0].checkpoint.name, "step-100");
  EXPECT_EQ(trend[1].checkpoint.name, "step-200a");
  EXPECT_EQ(trend[2].checkpoint.name, "step-200b");
  EXPECT_EQ(trend[3].checkpoint.name, "step-300");
  EXPECT_EQ(trend[0].checkpoint.path, "/runs/a/step-100");
  EXPECT_EQ(trend[0].checkpoint.fingerprint, "fp-step-100");
  EXPECT_EQ(trend[0].checkpoint.mtime, 100);
  EXPECT_EQ(trend[0].run_id, run);
  EXPECT_GT(trend[0].scored_at, 1.6e9);
  EXPECT_EQ(trend[2].state, "incomplete");
  EXPECT_EQ(trend[3].state, "complete");
  expect_rows_equal(trend[0].scores, scores(0.4));
  expect_rows_equal(trend[3].scores, scores(0.6));

  const std::vector<SampleRow> s = h.samples("fp-step-300", "cfgA");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].task, "quiz");
  EXPECT_EQ(s[0].doc_id, 0);
  EXPECT_EQ(s[1].value, 0);
  EXPECT_EQ(s[3].task, "story");
  EXPECT_EQ(s[3].value, -12.5);
  EXPECT_EQ(h.samples("fp-step-300", "cfgA", "quiz").size(), 3u);
  EXPECT_TRUE(h.samples("fp-step-300", "cfgB").empty());
  EXPECT_TRUE(h.trend("cfgB").empty());

  EXPECT_TRUE(h.is_scored("fp-step-100", "cfgA"));
  EXPECT_FALSE(h.is_scored("fp-step-200b", "cfgA"));  // incomplete
  EXPECT_FALSE(h.is_scored("fp-step-100", "cfgB"));

  // Everything is on disk: a second connection sees it.
  const History again = History::open(path, /*create=*/false);
  EXPECT_EQ(again.trend("cfgA").size(), 4u);
}

TEST(HistoryTest, ChanceLevelsAndParentsRoundTripAndAnOlderFileGetsTheirColumns) {
  testing::TempDir dir;
  const std::string path = dir.file("h.sqlite");
  std::vector<ScoreRow> with_chance = scores(0.5);
  with_chance[0].chance = 0.25;
  with_chance[4].chance = 0.3125;
  with_chance[0].parent = "all";  // quiz is a member of the group all
  {
    History h = History::open(path);
    const int64_t run = h.begin_run("cfg", {}, "");
    h.record(run, checkpoint("step-1", 1), "cfg", "complete", with_chance, {});
    expect_rows_equal(h.trend("cfg")[0].scores, with_chance);
  }
  // The file as a gpueval from before the column wrote it: no chance column, and a record
  // written the way that build writes one (its columns named).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* old_build =
      "ALTER TABLE scores DROP COLUMN chance;"
      "ALTER TABLE scores DROP COLUMN parent;"
      "INSERT INTO checkpoints (fingerprint, path, name, mtime) VALUES ('fp-step-2', '/s2', 'step-2', 2);"
      "INSERT INTO scored (checkpoint, config, run_id, scored_at, state) VALUES ('fp-step-2', 'cfg', 1, 5, 'complete');"
      "INSERT INTO scores (checkpoint, config, ordinal, task, metric, filter, value, stderr, n, higher_is_better,"
      " is_group) VALUES ('fp-step-2', 'cfg', 0, 'quiz', 'acc', 'none', 0.75, 0.1, 3, 1, 0);";
  ASSERT_EQ(sqlite3_exec(db, old_build, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);

  History h = History::open(path, /*create=*/false);  // adds the column back, empty
  std::vector<ScoredCheckpoint> trend = h.trend("cfg");
  ASSERT_EQ(trend.size(), 2u);
  for (const ScoreRow& r : trend[0].scores) {
    EXPECT_FALSE(r.chance) << r.task << " " << r.metric;
    EXPECT_EQ(r.parent, "") << r.task << " " << r.metric;
  }
  ASSERT_EQ(trend[1].scores.size(), 1u);
  EXPECT_FALSE(trend[1].scores[0].chance);
  EXPECT_EQ(trend[1].scores[0].value, 0.75);
  h.record(trend[0].run_id, checkpoint("step-1", 1), "cfg", "complete", with_chance, {});
  expect_rows_equal(h.trend("cfg")[0].scores, with_chance);

  // And an older build's insert still works on the file with the column.
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "INSERT INTO scores (checkpoint, config, ordinal, task, metric, filter, value, stderr, n,"
                         " higher_is_better, is_group) VALUES ('fp-step-2', 'cfg', 1, 'quiz', 'acc_norm', 'none', 0.5,"
                         " 0.1, 3, 1, 0);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  EXPECT_EQ(h.trend("cfg")[1].scores.size(), 2u);
}

// The training step orders the trend when every checkpoint has one, whatever order they were
// written in; without one for every checkpoint, the write time does. A file from before the step
// column gets it, empty.
TEST(HistoryTest, StepsOrderTheTrendAndAnOlderFileGetsTheirColumn) {
  testing::TempDir dir;
  const std::string path = dir.file("h.sqlite");
  const auto at_step = [](const std::string& name, double mtime, int64_t step) {
    CheckpointInfo c = checkpoint(name, mtime);
    c.step = step;
    return c;
  };
  {
    History h = History::open(path);
    const int64_t run = h.begin_run("cfg", {}, "");
    h.record(run, at_step("step-1000", 1, 1000), "cfg", "complete", scores(0.7), {});
    h.record(run, at_step("step-0", 2, 0), "cfg", "complete", scores(0.3), {});
    h.record(run, at_step("step-500", 3, 500), "cfg", "complete", scores(0.5), {});
    std::vector<std::string> names;
    for (const ScoredCheckpoint& c : h.trend("cfg")) names.push_back(c.checkpoint.name);
    EXPECT_EQ(names, (std::vector<std::string>{"step-0", "step-500", "step-1000"}));
    EXPECT_EQ(h.trend("cfg")[2].checkpoint.step, 1000);
    h.record(run, checkpoint("final", 4), "cfg", "complete", scores(0.8), {});  // no step: by write time
    names.clear();
    for (const ScoredCheckpoint& c : h.trend("cfg")) names.push_back(c.checkpoint.name);
    EXPECT_EQ(names, (std::vector<std::string>{"step-1000", "step-0", "step-500", "final"}));
  }
  // The file as a gpueval from before the column wrote it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE checkpoints DROP COLUMN step;", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  History h = History::open(path, /*create=*/false);
  const std::vector<ScoredCheckpoint> trend = h.trend("cfg");
  ASSERT_EQ(trend.size(), 4u);
  for (const ScoredCheckpoint& c : trend) EXPECT_FALSE(c.checkpoint.step.has_value()) << c.checkpoint.name;
  EXPECT_EQ(trend[0].checkpoint.name, "step-1000");
}

TEST(HistoryTest, RecordReplacesTheEarlierRecordAndForgetRemovesIt) {
  testing::TempDir dir;
  History h = History::open(dir.file("h.sqlite"));
  const int64_t run1 = h.begin_run("cfg", {}, "run 1");
  h.record(run1, checkpoint("a", 1), "cfg", "incomplete", scores(0.3), samples({1, 1, 1}));
  EXPECT_FALSE(h.is_scored("fp-a", "cfg"));
  const int64_t run2 = h.begin_run("cfg", {}, "run 2");
  EXPECT_GT(run2, run1);
  CheckpointInfo moved = checkpoint("a", 5);
  moved.path = "/elsewhere/a";
  h.record(run2, moved, "cfg", "complete", {row("quiz", "acc", 0.9, 0.01, 3)}, samples({0, 1}));
  EXPECT_TRUE(h.is_scored("fp-a", "cfg"));
  auto trend = h.trend("cfg");
  ASSERT_EQ(trend.size(), 1u);
  EXPECT_EQ(trend[0].run_id, run2);
  EXPECT_EQ(trend[0].checkpoint.path, "/elsewhere/a");
  EXPECT_EQ(trend[0].checkpoint.mtime, 5);
  expect_rows_equal(trend[0].scores, {row("quiz", "acc", 0.9, 0.01, 3)});
  EXPECT_EQ(h.samples("fp-a", "cfg").size(), 3u);  // two quiz docs and the story one, not the earlier four

  // The same checkpoint under another config is another record.
  h.record(run2, checkpoint("a", 5), "other", "complete", scores(0.2), {});
  h.forget("fp-a", "cfg");
  EXPECT_FALSE(h.is_scored("fp-a", "cfg"));
  EXPECT_TRUE(h.trend("cfg").empty());
  EXPECT_TRUE(h.samples("fp-a", "cfg").empty());
  EXPECT_TRUE(h.is_scored("fp-a", "other"));
  EXPECT_EQ(h.trend("other").size(), 1u);
  h.forget("fp-never", "cfg");  // nothing to forget is fine
}

TEST(HistoryTest, BadRecordsAreRefusedWhole) {
  testing::TempDir dir;
  const std::string path = dir.file("h.sqlite");
  History h = History::open(path);
  const int64_t run = h.begin_run("cfg", {}, "");
  h.record(run, checkpoint("a", 1), "cfg", "complete", scores(0.5), {});
  EXPECT_THAT(testing::error_of([&] { h.record(run, checkpoint("a", 1), "cfg", "done", scores(0.1), {}); }),
              HasSubstr("state 'done'"));
  // A repeated key fails the transaction: the earlier record stays as it was.
  std::vector<ScoreRow> twice = scores(0.1);
  twice.push_back(twice.front());
  const std::string err = testing::error_of([&] { h.record(run, checkpoint("a", 1), "cfg", "complete", twice, {}); });
  EXPECT_THAT(err, HasSubstr(path));
  const auto trend = h.trend("cfg");
  ASSERT_EQ(trend.size(), 1u);
  expect_rows_equal(trend[0].scores, scores(0.5));
  // The connection is usable after the rollback.
  h.record(run, checkpoint("b", 2), "cfg", "complete", scores(0.7), {});
  EXPECT_EQ(h.trend("cfg").size(), 2u);
}

// A metric that came out NaN (a perplexity of nothing, a stderr of one document) or infinite (a
// perplexity past the double range) is recorded as it is and read back the same, never refused.
TEST(HistoryTest, NonFiniteScoresAreRecordedAndReadBack) {
  testing::TempDir dir;
  History h = History::open(dir.file("h.sqlite"));
  const int64_t run = h.begin_run("cfg", {}, "");
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<ScoreRow> rows = {row("quiz", "acc", std::nan(""), std::nan(""), 0),
                                      row("story", "word_perplexity", inf, std::nullopt, 2, false),
                                      row("story", "bits_per_byte", -inf, 0.5, 2, false)};
  h.record(run, checkpoint("a", 1), "cfg", "complete", rows, {SampleRow{"quiz", "acc", 0, std::nan("")}});
  const auto trend = h.trend("cfg");
  ASSERT_EQ(trend.size(), 1u);
  ASSERT_EQ(trend[0].scores.size(), 3u);
  EXPECT_TRUE(std::isnan(trend[0].scores[0].value));
  EXPECT_FALSE(trend[0].scores[0].stderr_value.has_value());  // a NaN stderr is none: stored as NULL
  EXPECT_EQ(trend[0].scores[1].value, inf);
  EXPECT_FALSE(trend[0].scores[1].stderr_value.has_value());
  EXPECT_EQ(trend[0].scores[2].value, -inf);
  EXPECT_EQ(trend[0].scores[2].stderr_value, 0.5);
}

TEST(HistoryTest, ConfigsMostRecentFirstAndTheirLatestConfig) {
  testing::TempDir dir;
  History h = History::open(dir.file("h.sqlite"));
  EXPECT_TRUE(h.configs().empty());
  h.begin_run("old", {{"model", "m1"}}, "");
  h.begin_run("new", {{"model", "m2"}}, "");
  h.begin_run("old", {{"model", "m3"}, {"limit", 5}}, "");
  EXPECT_EQ(h.configs(), (std::vector<std::string>{"old", "new"}));
  EXPECT_EQ(h.config_of("old"), (nlohmann::json{{"model", "m3"}, {"limit", 5}}));
  EXPECT_EQ(h.config_of("new")["model"], "m2");
  EXPECT_TRUE(h.config_of("missing").is_null());
}

TEST(HistoryTest, RefusesFilesThatAreNotAHistory) {
  testing::TempDir dir;
  const std::string garbage = dir.write("garbage.sqlite", std::string(4096, 'x') + "not sqlite at all");
  std::string err = testing::error_of([&] { History::open(garbage); });
  EXPECT_EQ(err.rfind(garbage + ": ", 0), 0u) << err;
  EXPECT_THAT(err, HasSubstr("not a gpueval history"));
  EXPECT_EQ(err.find('\n'), std::string::npos);

  // A SQLite file of something else.
  const std::string other = dir.file("other.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE calibration (x INTEGER)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  err = testing::error_of([&] { History::open(other); });
  EXPECT_EQ(err.rfind(other + ": ", 0), 0u) << err;
  EXPECT_THAT(err, HasSubstr("not a gpueval history"));
  EXPECT_THAT(err, HasSubstr("calibration"));

  // A history written by a newer gpueval.
  const std::string newer = dir.file("newer.sqlite");
  History::open(newer);
  ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  err = testing::error_of([&] { History::open(newer); });
  EXPECT_EQ(err.rfind(newer + ": ", 0), 0u) << err;
  EXPECT_THAT(err, HasSubstr("schema version 99"));

  // A file cut short is damaged, and says so.
  const std::string cut = dir.file("cut.sqlite");
  {
    History h = History::open(cut);
    const int64_t run = h.begin_run("cfg", {}, "");
    for (int i = 0; i < 200; ++i) {
      std::vector<SampleRow> many;
      for (int d = 0; d < 50; ++d) many.push_back(SampleRow{"quiz", "acc", d, static_cast<double>(d % 2)});
      h.record(run, checkpoint("c" + std::to_string(i), i), "cfg", "complete", scores(0.5), many);
    }
  }
  ASSERT_EQ(sqlite3_open(cut.c_str(), &db), SQLITE_OK);  // fold the WAL into the file first
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string bytes = io::read_file(cut);
  ASSERT_GT(bytes.size(), 40000u);
  testing::write_text(cut, bytes.substr(0, bytes.size() / 2));
  err = testing::error_of([&] { History::open(cut).trend("cfg"); });
  EXPECT_EQ(err.rfind(cut + ": ", 0), 0u) << err;

  err = testing::error_of([&] { History::open(dir.file("absent.sqlite"), /*create=*/false); });
  EXPECT_EQ(err, dir.file("absent.sqlite") + ": no history file");
  EXPECT_FALSE(io::path_exists(dir.file("absent.sqlite")));
}

// Two processes, each with its own connection, write the same file at once, as two nightly
// runs would: every record of both arrives, none is lost to "database is locked".
TEST(HistoryTest, ConcurrentWritersInTwoProcesses) {
  testing::TempDir dir;
  const std::string path = dir.file("shared/history.sqlite");
  constexpr int kEach = 25;
  std::vector<pid_t> children;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        History h = History::open(path);  // both may create the file
        const std::string config = "cfg" + std::to_string(w);
        const int64_t run = h.begin_run(config, {{"writer", w}}, "");
        for (int i = 0; i < kEach; ++i) {
          std::vector<SampleRow> s;
          for (int d = 0; d < 200; ++d) s.push_back(SampleRow{"quiz", "acc", d, static_cast<double>((d + i) % 2)});
          h.record(run, checkpoint("w" + std::to_string(w) + "-" + std::to_string(i), i), config, "complete",
                   scores(i / 100.0), s);
          h.record(run, checkpoint("shared-" + std::to_string(i), i), "both", "complete", scores(w), {});
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer %d: %s\n", w, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed: status " << status;
  }
  const History h = History::open(path, false);
  for (int w = 0; w < 2; ++w) {
    const auto trend = h.trend("cfg" + std::to_string(w));
    ASSERT_EQ(trend.size(), static_cast<size_t>(kEach));
    for (const ScoredCheckpoint& sc : trend) {
      EXPECT_EQ(sc.scores.size(), scores(0).size());
      EXPECT_EQ(h.samples(sc.checkpoint.fingerprint, "cfg" + std::to_string(w)).size(), 200u);
    }
  }
  const auto both = h.trend("both");
  ASSERT_EQ(both.size(), static_cast<size_t>(kEach));
  for (const ScoredCheckpoint& sc : both) EXPECT_EQ(sc.scores.size(), scores(0).size());  // one writer's, whole
  EXPECT_EQ(h.configs().size(), 2u);  // "both" has no begin_run
}

TEST(HistoryTest, TwoConnectionsInOneProcessWriteInTurns) {
  testing::TempDir dir;
  const std::string path = dir.file("h.sqlite");
  History a = History::open(path);
  History b = History::open(path);
  const int64_t ra = a.begin_run("cfg", {}, "a");
  const int64_t rb = b.begin_run("cfg", {}, "b");
  EXPECT_NE(ra, rb);
  for (int i = 0; i < 6; ++i) {
    History& h = i % 2 ? b : a;
    h.record(i % 2 ? rb : ra, checkpoint("c" + std::to_string(i), i), "cfg", "complete", scores(i / 10.0), {});
    EXPECT_EQ((i % 2 ? a : b).trend("cfg").size(), static_cast<size_t>(i + 1));  // the other connection sees it
  }
  History moved = std::move(a);
  EXPECT_TRUE(moved.is_scored("fp-c0", "cfg"));
}

TEST(HistoryTest, DefaultPath) {
  struct Env {
    std::string name;
    std::optional<std::string> saved;
  };
  std::vector<Env> env = {{"GPUEVAL_HISTORY", {}}, {"XDG_DATA_HOME", {}}, {"HOME", {}}};
  for (Env& e : env) {
    if (const char* v = std::getenv(e.name.c_str())) e.saved = v;
  }
  ::setenv("GPUEVAL_HISTORY", "/h/explicit.sqlite", 1);
  ::setenv("XDG_DATA_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(History::default_path("cfg/h.sqlite"), "cfg/h.sqlite");
  EXPECT_EQ(History::default_path(), "/h/explicit.sqlite");
  ::unsetenv("GPUEVAL_HISTORY");
  EXPECT_EQ(History::default_path(), "/xdg/gpueval/history.sqlite");
  ::setenv("XDG_DATA_HOME", "", 1);
  EXPECT_EQ(History::default_path(), "/home/u/.local/share/gpueval/history.sqlite");
  for (const Env& e : env) {
    if (e.saved) {
      ::setenv(e.name.c_str(), e.saved->c_str(), 1);
    } else {
      ::unsetenv(e.name.c_str());
    }
  }
}

// A real run of the demo config records one row per task, metric and filter of its results.json,
// in the file's order, values and stderrs as written (the rows come from the aggregator's scores,
// not from the file).
TEST(HistoryTest, ScoresOfARealRunAreTheScoresOfItsResults) {
  testing::TempDir dir;
  const std::string cfg = dir.file("demo.yaml");
  testing::write_text(cfg, "model: " + testing::source_dir() +
                               "/models/stories260K\n"
                               "tasks: [demo_choice, demo_perplexity]\noutput: " +
                               dir.file("out") +
                               "\nlimit: 12\n"
                               "history: " +
                               dir.file("h.sqlite") + "\n");
  const auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Ordered results = Ordered::parse(io::read_file(dir.file("out/results.json")));
  const History history = History::open(dir.file("h.sqlite"), /*create=*/false);
  ASSERT_EQ(history.configs().size(), 1u);
  const std::vector<ScoredCheckpoint> trend = history.trend(history.configs()[0]);
  ASSERT_EQ(trend.size(), 1u);
  const std::vector<ScoreRow>& rows = trend[0].scores;

  std::vector<std::string> want_keys;
  for (const auto& [task, entry] : results["results"].items()) {
    for (const auto& [key, value] : entry.items()) {
      if (key.find(',') != std::string::npos && key.find("_stderr,") == std::string::npos)
        want_keys.push_back(task + " " + key);
    }
  }
  ASSERT_EQ(rows.size(), want_keys.size());
  ASSERT_GE(rows.size(), 5u);  // acc, acc_norm; word_perplexity, byte_perplexity, bits_per_byte
  for (size_t i = 0; i < rows.size(); ++i) {
    const ScoreRow& row = rows[i];
    SCOPED_TRACE(want_keys[i]);
    EXPECT_EQ(row.task + " " + row.metric + "," + row.filter, want_keys[i]);
    const Ordered& entry = results["results"][row.task];
    EXPECT_EQ(row.value, entry[row.metric + "," + row.filter].get<double>());
    const Ordered& se = entry[row.metric + "_stderr," + row.filter];
    if (se.is_number()) {
      ASSERT_TRUE(row.stderr_value);
      EXPECT_EQ(*row.stderr_value, se.get<double>());
    } else {
      EXPECT_EQ(se, "N/A");
      EXPECT_FALSE(row.stderr_value);
    }
    EXPECT_EQ(row.n, 12);
    EXPECT_EQ(row.higher_is_better, results["higher_is_better"][row.task][row.metric].get<bool>());
    EXPECT_FALSE(row.is_group);
  }
  EXPECT_EQ(rows[0].task, "demo_choice");
  EXPECT_EQ(rows[0].metric, "acc");  // the primary metric comes first
  EXPECT_TRUE(rows[0].stderr_value);
  const auto ppl =
      std::find_if(rows.begin(), rows.end(), [](const ScoreRow& r) { return r.task == "demo_perplexity"; });
  ASSERT_NE(ppl, rows.end());
  EXPECT_EQ(ppl->metric, "word_perplexity");
  EXPECT_FALSE(ppl->higher_is_better);
  EXPECT_FALSE(ppl->stderr_value);
}

TEST(HistoryTest, SamplesFromRecordsKeepPerDocumentNumbersOfTheFirstFilter) {
  testing::TempDir dir;
  const Task quiz =
      Task::load(testing::write_quiz_task(dir,
                                          "{\"question\": \"Sky?\", \"choices\": [\"blue\", \"green\"], \"label\": 0}\n"
                                          "{\"question\": \"Sun?\", \"choices\": [\"hot\", \"cold\"], \"label\": 1}\n"),
                 {});
  const Task story = Task::load(testing::write_story_task(dir, "{\"text\": \"One day.\"}\n"), {});
  auto result = [](double logprob) {
    RequestResult r;
    r.logprob = logprob;
    return r;
  };
  std::vector<DocRecord> records;
  auto add = [&](const Task& task, const Document& doc, std::vector<RequestResult> results) {
    records.push_back(testing::scored_record(task, doc, std::move(results)));
  };
  add(quiz, quiz.documents()[1], {result(-0.5), result(-2.0)});  // picks "hot", the label is 1: wrong
  add(story, story.documents()[0], {result(-9.0)});
  add(quiz, quiz.documents()[0], {result(-0.5), result(-2.0)});  // picks "blue": right

  const std::vector<SampleRow> rows = samples_from_records(records);
  // acc and acc_norm of both quiz documents; the story's metrics are all weighted pairs.
  ASSERT_EQ(rows.size(), 4u);
  for (const SampleRow& r : rows) EXPECT_EQ(r.task, "quiz");
  EXPECT_EQ(rows[0].metric, "acc");
  EXPECT_EQ(rows[0].doc_id, 0);
  EXPECT_EQ(rows[0].value, 1.0);
  EXPECT_EQ(rows[1].doc_id, 1);
  EXPECT_EQ(rows[1].value, 0.0);
  EXPECT_EQ(rows[2].metric, "acc_norm");
  for (const SampleRow& r : rows) {
    const DocRecord& rec = records[r.doc_id == 0 ? 2 : 0];
    EXPECT_EQ(rec.metrics[0].at(r.metric).value, r.value);
  }
}

}  // namespace
}  // namespace gpueval
