// The journal on its own: exact storage, identity checks, corruption, a full disk.
#include "store/journal.h"

#include <gmock/gmock.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/file_io.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

const JournalIdentity kId{"aaaa1111bbbb2222", "models/m", "cccc3333dddd4444"};

ItemResult item(int64_t index, double logprob, std::string text = "", int32_t part = 0, int32_t parts = 1) {
  ItemResult r;
  r.request_index = index;
  r.part = part;
  r.parts = parts;
  r.logprob = logprob;
  r.is_greedy = index % 2 == 0;
  r.num_tokens = 3 + index;
  r.text = std::move(text);
  return r;
}

uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

std::string key(int i) { return "key" + std::to_string(1000 + i); }

// Rows in the results table, read with SQLite directly.
int64_t count_rows(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM results", -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  int64_t n = -1;
  if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

TEST(Journal, StoresResultsBitExactly) {
  testing::TempDir dir;
  const std::string path = dir.file("journal.sqlite");
  const double nan_payload = [] {
    uint64_t u = 0x7ff8000000012345ull;
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
  }();
  const std::vector<double> values = {-0.0,
                                      0.0,
                                      std::numeric_limits<double>::denorm_min(),
                                      -std::numeric_limits<double>::denorm_min() * 12345,
                                      1.0 / 3.0,
                                      -std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::max(),
                                      -123456.78901234567,
                                      nan_payload};
  const std::vector<std::string> texts = {"", std::string("a\0b", 3), "\xff\xfe not UTF-8", "ünïcödé", "x"};
  std::vector<JournalItem> batch;
  for (size_t i = 0; i < values.size(); ++i)
    batch.emplace_back(key(static_cast<int>(i)), item(static_cast<int64_t>(i), values[i], texts[i % texts.size()]));
  batch.emplace_back(key(99), item(99, -1.5, "", 2, 3));
  {
    Journal j = Journal::open(path, kId, false);
    EXPECT_TRUE(j.load().empty());
    j.record_batch(batch);
  }
  Journal j = Journal::open(path, kId, false);
  std::vector<JournalItem> got = j.load();
  ASSERT_EQ(got.size(), batch.size());
  std::sort(batch.begin(), batch.end(), [](const JournalItem& a, const JournalItem& b) { return a.first < b.first; });
  for (size_t i = 0; i < got.size(); ++i) {
    const ItemResult& want = batch[i].second;
    const ItemResult& have = got[i].second;
    EXPECT_EQ(got[i].first, batch[i].first);
    EXPECT_EQ(bits(have.logprob), bits(want.logprob)) << "logprob " << want.logprob << " of " << batch[i].first;
    EXPECT_EQ(have.text, want.text);
    EXPECT_EQ(have.request_index, want.request_index);
    EXPECT_EQ(have.part, want.part);
    EXPECT_EQ(have.parts, want.parts);
    EXPECT_EQ(have.is_greedy, want.is_greedy);
    EXPECT_EQ(have.num_tokens, want.num_tokens);
  }
}

TEST(Journal, ReplacesAPartRecordedTwice) {
  testing::TempDir dir;
  Journal j = Journal::open(dir.file("j.sqlite"), kId, false);
  j.record_batch({{key(1), item(1, -1.0)}, {key(1), item(1, -2.0, "", 1, 2)}});
  j.record_batch({{key(1), item(1, -3.0)}});
  auto got = j.load();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].second.logprob, -3.0);
  EXPECT_EQ(got[1].second.part, 1);
}

TEST(Journal, KeepsTheBatchBudget) {
  testing::TempDir dir;
  const std::string path = dir.file("j.sqlite");
  {
    Journal j = Journal::open(path, kId, false);
    EXPECT_FALSE(j.batch_tokens());
    j.set_batch_tokens(1536);
  }
  EXPECT_EQ(Journal::open(path, kId, false).batch_tokens(), 1536);
}

TEST(Journal, RefusesAnotherModelOrConfigAndFreshStartsOver) {
  testing::TempDir dir;
  const std::string path = dir.file("j.sqlite");
  Journal::open(path, kId, false).record_batch({{key(1), item(1, -1.0)}});
  JournalIdentity other_model = kId;
  other_model.model_fingerprint = "eeee5555ffff6666";
  other_model.model_path = "models/other";
  std::string msg = testing::error_of([&] { Journal::open(path, other_model, false); });
  EXPECT_THAT(msg,
              HasSubstr(path + ": journal was written for model models/m (fingerprint aaaa1111…), not models/other"));
  EXPECT_THAT(msg, HasSubstr("run with --fresh to start over, or use another output directory"));
  JournalIdentity other_config = kId;
  other_config.config_fingerprint = "0000";
  msg = testing::error_of([&] { Journal::open(path, other_config, false); });
  EXPECT_THAT(msg,
              HasSubstr(path + ": journal was written for model models/m (fingerprint aaaa1111…) with another config"));
  EXPECT_THAT(msg, HasSubstr("--fresh"));
  EXPECT_EQ(count_rows(path), 1);  // refusing never changes the journal

  Journal fresh = Journal::open(path, other_config, true);
  EXPECT_TRUE(fresh.load().empty());
  EXPECT_FALSE(fresh.batch_tokens());
}

TEST(Journal, AFileThatIsNotSqliteIsCorrupt) {
  testing::TempDir dir;
  const std::string path = dir.write("j.sqlite", std::string(10000, 'x'));
  const std::string msg = testing::error_of([&] { Journal::open(path, kId, false); });
  EXPECT_THAT(msg, HasSubstr(path + ": journal is corrupt ("));
  EXPECT_THAT(msg, HasSubstr("run with --fresh to start over"));
  EXPECT_TRUE(Journal::open(path, kId, true).load().empty());
}

TEST(Journal, AnotherSqliteDatabaseIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("j.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_THAT(testing::error_of([&] { Journal::open(path, kId, false); }), HasSubstr("not a gpueval journal"));
}

// Writes `n` rows with a recognisable text, closes the journal (SQLite checkpoints the WAL
// into the database on the last close) and returns the database's bytes.
std::string journal_bytes(const std::string& path, int n) {
  {
    Journal j = Journal::open(path, kId, false);
    std::vector<JournalItem> batch;
    for (int i = 0; i < n; ++i) batch.emplace_back(key(i), item(i, -0.25 * i, "MARKER-" + std::to_string(i) + "-TEXT"));
    j.record_batch(batch);
  }
  EXPECT_FALSE(io::path_exists(path + "-wal"));
  return io::read_file(path);
}

TEST(Journal, ADamagedPageIsCorrupt) {
  testing::TempDir dir;
  const std::string path = dir.file("j.sqlite");
  std::string bytes = journal_bytes(path, 400);
  ASSERT_GT(bytes.size(), 8u * 4096);
  // Overwrite the middle page with garbage.
  const size_t page = bytes.size() / 4096 / 2;
  for (size_t i = 0; i < 4096; ++i) bytes[page * 4096 + i] = static_cast<char>(0xa5 ^ i);
  testing::write_text(path, bytes);
  EXPECT_THAT(testing::error_of([&] { Journal::open(path, kId, false); }), HasSubstr(path + ": journal is corrupt ("));
}

TEST(Journal, AFlippedByteInsideARowFailsItsChecksum) {
  testing::TempDir dir;
  const std::string path = dir.file("j.sqlite");
  std::string bytes = journal_bytes(path, 20);
  const size_t at = bytes.find("MARKER-7-TEXT");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 7] = '8';  // same length, still well-formed: quick_check cannot see it
  testing::write_text(path, bytes);
  Journal j = Journal::open(path, kId, false);
  const std::string msg = testing::error_of([&] { j.load(); });
  EXPECT_THAT(msg, HasSubstr(path + ": journal is corrupt (the result for request 7 part 0 fails its checksum)"));
}

TEST(Journal, AFullDiskRollsTheBatchBackAndKeepsEarlierOnes) {
  testing::TempDir dir;
  const std::string path = dir.file("j.sqlite");
  ::setenv("GPUEVAL_JOURNAL_MAX_PAGES", "8", 1);
  std::string msg;
  {
    Journal j = Journal::open(path, kId, false);
    j.record_batch({{key(1), item(1, -1.0)}, {key(2), item(2, -2.0)}});
    std::vector<JournalItem> big;
    for (int i = 10; i < 60; ++i) big.emplace_back(key(i), item(i, -1.0, std::string(1000, 'y')));
    msg = testing::error_of([&] { j.record_batch(big); });
    j.record_batch({{key(3), item(3, -3.0)}});  // the connection is still usable
  }
  ::unsetenv("GPUEVAL_JOURNAL_MAX_PAGES");
  EXPECT_EQ(msg, path + ": cannot record results: database or disk is full");
  std::vector<JournalItem> got = Journal::open(path, kId, false).load();
  ASSERT_EQ(got.size(), 3u);  // none of the failed batch
  EXPECT_EQ(got[0].first, key(1));
  EXPECT_EQ(got[1].first, key(2));
  EXPECT_EQ(got[2].first, key(3));
}

}  // namespace
}  // namespace gpueval
