#include "store/journal.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)

#include "common/file_io.h"
#include "gpueval/error.h"
#include "store/sqlite_db.h"

namespace gpueval {
namespace {

const char* kSchema =
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE results ("
    " request_key TEXT NOT NULL, part INTEGER NOT NULL, parts INTEGER NOT NULL,"
    " request_index INTEGER NOT NULL, logprob_bits INTEGER NOT NULL, is_greedy INTEGER NOT NULL,"
    " num_tokens INTEGER NOT NULL, text BLOB NOT NULL, checksum INTEGER NOT NULL,"
    " PRIMARY KEY (request_key, part)) WITHOUT ROWID;";

// Added beside the results: a journal written before it has no such table and gets it on open.
const char* kVerdictsTable =
    "CREATE TABLE IF NOT EXISTS verdicts (exec_key TEXT PRIMARY KEY, verdict TEXT NOT NULL, detail BLOB NOT NULL,"
    " cpu_bits INTEGER NOT NULL, wall_bits INTEGER NOT NULL, checksum INTEGER NOT NULL) WITHOUT ROWID;";

// A failed SQLite call is a sqlite::Failure; the journal turns SQLite's message into an Error
// that says what the failure means (a corrupt journal on open, a failed write when recording).
using sqlite::Statement;

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

double bits_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// FNV-1a over every stored field, so a row damaged in a way quick_check does not see (a
// flipped byte inside a cell) is caught on load.
class Fnv {
 public:
  Fnv& add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 1099511628211ull;
    return *this;
  }
  Fnv& add(const std::string& s) {
    add(static_cast<uint64_t>(s.size()));
    return add(s.data(), s.size());
  }
  Fnv& add(uint64_t v) { return add(&v, sizeof v); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

int64_t row_checksum(const std::string& key, const ItemResult& r) {
  Fnv f;
  f.add(key)
      .add(static_cast<uint64_t>(r.part))
      .add(static_cast<uint64_t>(r.parts))
      .add(static_cast<uint64_t>(r.request_index))
      .add(double_bits(r.logprob))
      .add(static_cast<uint64_t>(r.is_greedy))
      .add(static_cast<uint64_t>(r.num_tokens))
      .add(r.text);
  return static_cast<int64_t>(f.value());
}

int64_t verdict_checksum(const std::string& key, const Journal::StoredVerdict& v) {
  Fnv f;
  f.add(key).add(v.verdict).add(v.detail).add(double_bits(v.cpu_seconds)).add(double_bits(v.wall_seconds));
  return static_cast<int64_t>(f.value());
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail(path, "unlink failed: {}", std::strerror(errno));
}

std::string short_fp(const std::string& fp) { return fp.substr(0, 8) + "…"; }

std::map<std::string, std::string> read_meta(const sqlite::Db& db) {
  std::map<std::string, std::string> meta;
  Statement s(db, "SELECT key, value FROM meta");
  while (s.step()) meta[s.bytes_at(0)] = s.bytes_at(1);
  return meta;
}

void put_meta(const sqlite::Db& db, const std::string& key, const std::string& value) {
  Statement s(db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)");
  s.bind(1, key);
  s.bind(2, value);
  s.step();
}

std::string corrupt(const std::string& path, const std::string& why) {
  return fmt::format("{}: journal is corrupt ({}); run with --fresh to start over", path, why);
}

}  // namespace

Journal Journal::open(const std::string& path, const JournalIdentity& id, bool fresh) {
  if (fresh) remove_file(path);
  const bool existed = io::path_exists(path);
  // A -wal left without its database would be replayed into the new, empty one.
  if (fresh || !existed) {
    remove_file(path + "-wal");
    remove_file(path + "-shm");
  }
  std::unique_ptr<sqlite::Db> connection;
  try {
    connection = std::make_unique<sqlite::Db>(path, /*create=*/true);
  } catch (const sqlite::Failure& f) {
    fail(path, "cannot open journal: {}", f.sqlite_message());
  }
  Journal journal(path, std::move(connection));
  sqlite::Db& db = *journal.db_;

  std::map<std::string, std::string> meta;
  try {
    db.enable_wal();
    db.exec("PRAGMA synchronous=FULL");
    if (existed) {
      Statement check(db, "PRAGMA quick_check");
      std::string verdict;
      while (check.step()) verdict += (verdict.empty() ? "" : "; ") + check.bytes_at(0);
      if (verdict != "ok") throw Error(corrupt(path, verdict));
    }
    Statement tables(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    std::vector<std::string> names;
    while (tables.step()) names.push_back(tables.bytes_at(0));
    if (!names.empty()) {
      if (names != std::vector<std::string>{"meta", "results"} &&
          names != std::vector<std::string>{"meta", "results", "verdicts"})
        throw Error(corrupt(path, "not a gpueval journal: tables " + fmt::format("{}", fmt::join(names, ", "))));
      meta = read_meta(db);
    }
  } catch (const sqlite::Failure& f) {
    throw Error(corrupt(path, f.sqlite_message()));
  }

  if (!meta.empty()) {
    const std::string version = meta.count("schema_version") ? meta["schema_version"] : "?";
    if (version != std::to_string(kSchemaVersion))
      fail(path,
           "journal has schema version {}, this gpueval writes {}; run with --fresh to start over, or use "
           "another output directory",
           version, kSchemaVersion);
    if (meta["model_fingerprint"] != id.model_fingerprint)
      fail(path,
           "journal was written for model {} (fingerprint {}), not {} ({}); run with --fresh to start over, "
           "or use another output directory",
           meta["model_path"], short_fp(meta["model_fingerprint"]), id.model_path, short_fp(id.model_fingerprint));
    if (meta["config_fingerprint"] != id.config_fingerprint)
      fail(path,
           "journal was written for model {} (fingerprint {}) with another config (tasks, limit, few-shot, "
           "seed, dtype, add_bos or max_length differ); run with --fresh to start over, or use another output "
           "directory",
           meta["model_path"], short_fp(meta["model_fingerprint"]));
  }
  try {
    if (meta.empty()) {
      sqlite::WriteTransaction tx(db);
      db.exec(kSchema);
      put_meta(db, "schema_version", std::to_string(kSchemaVersion));
      put_meta(db, "model_fingerprint", id.model_fingerprint);
      put_meta(db, "model_path", id.model_path);
      put_meta(db, "config_fingerprint", id.config_fingerprint);
      tx.commit();
    }
    db.exec(kVerdictsTable);
    if (const char* pages = std::getenv("GPUEVAL_JOURNAL_MAX_PAGES"); pages && *pages) {
      const std::string sql = fmt::format("PRAGMA max_page_count={}", std::strtoll(pages, nullptr, 10));
      db.exec(sql.c_str());
    }
  } catch (const sqlite::Failure& f) {
    fail(path, "cannot create journal: {}", f.sqlite_message());
  }
  return journal;
}

Journal::Journal(std::string path, std::unique_ptr<sqlite::Db> db) : path_(std::move(path)), db_(std::move(db)) {}
Journal::Journal(Journal&&) noexcept = default;
Journal& Journal::operator=(Journal&&) noexcept = default;
Journal::~Journal() = default;

std::vector<JournalItem> Journal::load() const {
  std::vector<JournalItem> out;
  try {
    Statement s(*db_,
                "SELECT request_key, part, parts, request_index, logprob_bits, is_greedy, num_tokens, text, checksum"
                " FROM results ORDER BY request_key, part");
    while (s.step()) {
      JournalItem item;
      item.first = s.bytes_at(0);
      ItemResult& r = item.second;
      for (int c = 1; c <= 6; ++c)
        if (s.type_at(c) != SQLITE_INTEGER) throw Error(corrupt(path_, fmt::format("column {} is not an integer", c)));
      if (s.type_at(7) != SQLITE_BLOB) throw Error(corrupt(path_, "a result's text is not a blob"));
      r.part = static_cast<int32_t>(s.int_at(1));
      r.parts = static_cast<int32_t>(s.int_at(2));
      r.request_index = s.int_at(3);
      r.logprob = bits_double(static_cast<uint64_t>(s.int_at(4)));
      r.is_greedy = s.int_at(5) != 0;
      r.num_tokens = s.int_at(6);
      r.text = s.bytes_at(7);
      if (row_checksum(item.first, r) != s.int_at(8) || s.int_at(5) > 1 || r.parts < 1 || r.part < 0 ||
          r.part >= r.parts)
        throw Error(corrupt(
            path_, fmt::format("the result for request {} part {} fails its checksum", r.request_index, r.part)));
      out.push_back(std::move(item));
    }
  } catch (const sqlite::Failure& f) {
    throw Error(corrupt(path_, f.sqlite_message()));
  }
  return out;
}

void Journal::record_batch(const std::vector<JournalItem>& items) {
  try {
    sqlite::WriteTransaction tx(*db_);
    Statement s(*db_,
                "INSERT OR REPLACE INTO results (request_key, part, parts, request_index, logprob_bits, is_greedy,"
                " num_tokens, text, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    for (const auto& [key, r] : items) {
      s.bind(1, key);
      s.bind(2, static_cast<int64_t>(r.part));
      s.bind(3, static_cast<int64_t>(r.parts));
      s.bind(4, r.request_index);
      s.bind(5, static_cast<int64_t>(double_bits(r.logprob)));
      s.bind(6, static_cast<int64_t>(r.is_greedy));
      s.bind(7, r.num_tokens);
      s.bind_blob(8, r.text);
      s.bind(9, row_checksum(key, r));
      s.step();
      s.reset();
    }
    tx.commit();
  } catch (const sqlite::Failure& f) {
    fail(path_, "cannot record results: {}", f.sqlite_message());
  }
}

std::map<std::string, Journal::StoredVerdict> Journal::load_verdicts() const {
  std::map<std::string, StoredVerdict> out;
  try {
    Statement s(*db_, "SELECT exec_key, verdict, detail, cpu_bits, wall_bits, checksum FROM verdicts");
    while (s.step()) {
      StoredVerdict v;
      const std::string key = s.bytes_at(0);
      v.verdict = s.bytes_at(1);
      v.detail = s.bytes_at(2);
      v.cpu_seconds = bits_double(static_cast<uint64_t>(s.int_at(3)));
      v.wall_seconds = bits_double(static_cast<uint64_t>(s.int_at(4)));
      if (verdict_checksum(key, v) != s.int_at(5))
        throw Error(corrupt(path_, fmt::format("the verdict {} fails its checksum", key.substr(0, 12))));
      out.emplace(key, std::move(v));
    }
  } catch (const sqlite::Failure& f) {
    throw Error(corrupt(path_, f.sqlite_message()));
  }
  return out;
}

void Journal::record_verdicts(const std::vector<std::pair<std::string, StoredVerdict>>& verdicts) {
  try {
    sqlite::WriteTransaction tx(*db_);
    Statement s(*db_,
                "INSERT OR REPLACE INTO verdicts (exec_key, verdict, detail, cpu_bits, wall_bits, checksum)"
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    for (const auto& [key, v] : verdicts) {
      s.bind(1, key);
      s.bind(2, v.verdict);
      s.bind_blob(3, v.detail);
      s.bind(4, static_cast<int64_t>(double_bits(v.cpu_seconds)));
      s.bind(5, static_cast<int64_t>(double_bits(v.wall_seconds)));
      s.bind(6, verdict_checksum(key, v));
      s.step();
      s.reset();
    }
    tx.commit();
  } catch (const sqlite::Failure& f) {
    fail(path_, "cannot record verdicts: {}", f.sqlite_message());
  }
}

std::optional<int64_t> Journal::batch_tokens() const {
  try {
    Statement s(*db_, "SELECT value FROM meta WHERE key = 'batch_tokens'");
    if (!s.step()) return std::nullopt;
    const std::string v = s.bytes_at(0);
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n <= 0) throw Error(corrupt(path_, "batch_tokens is '" + v + "'"));
    return static_cast<int64_t>(n);
  } catch (const sqlite::Failure& f) {
    throw Error(corrupt(path_, f.sqlite_message()));
  }
}

void Journal::set_batch_tokens(int64_t tokens) {
  try {
    put_meta(*db_, "batch_tokens", std::to_string(tokens));
  } catch (const sqlite::Failure& f) {
    fail(path_, "cannot record the batch budget: {}", f.sqlite_message());
  }
}

std::optional<std::string> Journal::plan_fingerprint() const {
  try {
    Statement s(*db_, "SELECT value FROM meta WHERE key = 'plan_fingerprint'");
    if (!s.step()) return std::nullopt;
    return s.bytes_at(0);
  } catch (const sqlite::Failure& f) {
    throw Error(corrupt(path_, f.sqlite_message()));
  }
}

void Journal::set_plan_fingerprint(const std::string& fingerprint) {
  try {
    put_meta(*db_, "plan_fingerprint", fingerprint);
  } catch (const sqlite::Failure& f) {
    fail(path_, "cannot record the plan fingerprint: {}", f.sqlite_message());
  }
}

}  // namespace gpueval
