#include "gpueval/history.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "store/sqlite_db.h"

namespace gpueval {
namespace {

constexpr const char* kFormat = "gpueval-history";
constexpr int64_t kSchemaVersion = 1;

const char* const kSchema =
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, config TEXT NOT NULL, config_json TEXT NOT NULL,"
    " command TEXT NOT NULL, started REAL NOT NULL);"
    "CREATE INDEX runs_by_config ON runs (config);"
    "CREATE TABLE checkpoints (fingerprint TEXT PRIMARY KEY, path TEXT NOT NULL, name TEXT NOT NULL,"
    " mtime REAL NOT NULL, step INTEGER);"
    "CREATE TABLE scored (checkpoint TEXT NOT NULL, config TEXT NOT NULL, run_id INTEGER NOT NULL,"
    " scored_at REAL NOT NULL, state TEXT NOT NULL, PRIMARY KEY (checkpoint, config));"
    "CREATE INDEX scored_by_config ON scored (config);"
    // value is NULL for NaN, which SQLite cannot store as a REAL.
    "CREATE TABLE scores (checkpoint TEXT NOT NULL, config TEXT NOT NULL, ordinal INTEGER NOT NULL,"
    " task TEXT NOT NULL, metric TEXT NOT NULL, filter TEXT NOT NULL, value REAL, stderr REAL,"
    " n INTEGER NOT NULL, higher_is_better INTEGER NOT NULL, is_group INTEGER NOT NULL, chance REAL, parent TEXT,"
    " PRIMARY KEY (checkpoint, config, task, metric, filter)) WITHOUT ROWID;"
    "CREATE TABLE samples (checkpoint TEXT NOT NULL, config TEXT NOT NULL, task TEXT NOT NULL,"
    " metric TEXT NOT NULL, doc_id INTEGER NOT NULL, value REAL,"
    " PRIMARY KEY (checkpoint, config, task, metric, doc_id)) WITHOUT ROWID;";

using sqlite::Statement;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<double> non_nan(double v) { return std::isnan(v) ? std::nullopt : std::optional<double>(v); }

// PRAGMA quick_check, run by hand so that a file that is not SQLite at all reads as "not a
// gpueval history" rather than as a failed statement.
void quick_check(const sqlite::Db& db) {
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(db.get(), "PRAGMA quick_check", -1, &st, nullptr);
  std::string result;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      result = t ? reinterpret_cast<const char*>(t) : "";
    }
  }
  const std::string message = sqlite3_errmsg(db.get());
  sqlite3_finalize(st);
  if (rc == SQLITE_NOTADB) fail(db.path(), "not a gpueval history file ({})", message);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) fail(db.path(), "PRAGMA quick_check: {}", message);
  if (result != "ok") fail(db.path(), "damaged history file: PRAGMA quick_check says '{}'", result);
}

std::vector<std::string> table_names(const sqlite::Db& db) {
  Statement s(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
  std::vector<std::string> names;
  while (s.step()) names.push_back(s.text_at(0));
  return names;
}

// True when the file holds our schema (checked), false when it holds no tables at all.
bool has_schema(const sqlite::Db& db) {
  const std::vector<std::string> tables = table_names(db);
  if (tables.empty()) return false;
  if (std::find(tables.begin(), tables.end(), "meta") == tables.end()) {
    std::string list;
    for (const std::string& t : tables) list += (list.empty() ? "" : ", ") + t;
    fail(db.path(), "not a gpueval history file (its tables are {})", list);
  }
  Statement s(db, "SELECT key, value FROM meta WHERE key IN ('format', 'schema_version')");
  std::map<std::string, std::string> meta;
  while (s.step()) meta[s.text_at(0)] = s.text_at(1);
  if (meta["format"] != kFormat) fail(db.path(), "not a gpueval history file (meta format '{}')", meta["format"]);
  char* end = nullptr;
  const long long version = std::strtoll(meta["schema_version"].c_str(), &end, 10);
  if (meta["schema_version"].empty() || *end != '\0' || version < 1) {
    fail(db.path(), "history schema version '{}' is not a number", meta["schema_version"]);
  }
  if (version > kSchemaVersion) {
    fail(db.path(), "history schema version {} is newer than this gpueval's ({}); use a newer gpueval", version,
         kSchemaVersion);
  }
  return true;
}

// Columns added to schema 1 after its first release: scores.chance, scores.parent and checkpoints.step. A file
// written before one gets it here (nullable; builds that predate it name their columns, so they read
// and write such a file as before).
bool has_column(const sqlite::Db& db, const std::string& table, const std::string& column) {
  Statement s(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2");
  s.bind(1, table);
  s.bind(2, column);
  return s.step();
}

void add_column(sqlite::Db& db, const std::string& table, const std::string& column, const std::string& type) {
  if (has_column(db, table, column)) return;
  sqlite::WriteTransaction tx(db);
  if (!has_column(db, table, column)) db.exec(("ALTER TABLE " + table + " ADD COLUMN " + column + " " + type).c_str());
  tx.commit();
}

}  // namespace

struct History::Connection {
  explicit Connection(const std::string& path, bool create) : db(path, create) {}
  sqlite::Db db;
};

History::History(std::string path, std::unique_ptr<Connection> connection)
    : path_(std::move(path)), connection_(std::move(connection)) {}
History::History(History&&) noexcept = default;
History& History::operator=(History&&) noexcept = default;
History::~History() = default;

History History::open(const std::string& path, bool create) {
  if (path.empty()) fail("history", "empty path");
  if (!create && !io::path_exists(path)) fail(path, "no history file");
  if (create) io::make_directories(io::dir_of(path));
  auto connection = std::make_unique<Connection>(path, create);
  sqlite::Db& db = connection->db;
  quick_check(db);
  db.enable_wal();
  if (!has_schema(db)) {
    // Two processes may create the file at once: the second finds the schema under the lock.
    sqlite::WriteTransaction tx(db);
    if (!has_schema(db)) {
      db.exec(kSchema);
      Statement s(db, "INSERT INTO meta (key, value) VALUES (?1, ?2)");
      s.bind(1, std::string("format"));
      s.bind(2, std::string(kFormat));
      s.step();
      s.reset();
      s.bind(1, std::string("schema_version"));
      s.bind(2, std::to_string(kSchemaVersion));
      s.step();
    }
    tx.commit();
  }
  add_column(db, "scores", "chance", "REAL");
  add_column(db, "scores", "parent", "TEXT");
  add_column(db, "checkpoints", "step", "INTEGER");
  return History(path, std::move(connection));
}

std::string History::default_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (!env("GPUEVAL_HISTORY").empty()) return env("GPUEVAL_HISTORY");
  if (!env("XDG_DATA_HOME").empty()) return env("XDG_DATA_HOME") + "/gpueval/history.sqlite";
  const std::string home = env("HOME").empty() ? "." : env("HOME");
  return home + "/.local/share/gpueval/history.sqlite";
}

int64_t History::begin_run(const std::string& config_fingerprint, const nlohmann::json& config,
                           const std::string& command) {
  sqlite::Db& db = connection_->db;
  sqlite::WriteTransaction tx(db);
  Statement s(db, "INSERT INTO runs (config, config_json, command, started) VALUES (?1, ?2, ?3, ?4)");
  s.bind(1, config_fingerprint);
  s.bind(2, config.dump());
  s.bind(3, command);
  s.bind(4, now_seconds());
  s.step();
  const int64_t id = sqlite3_last_insert_rowid(db.get());
  tx.commit();
  return id;
}

bool History::is_scored(const std::string& checkpoint_fingerprint, const std::string& config_fingerprint) const {
  Statement s(connection_->db, "SELECT 1 FROM scored WHERE checkpoint = ?1 AND config = ?2 AND state = 'complete'");
  s.bind(1, checkpoint_fingerprint);
  s.bind(2, config_fingerprint);
  return s.step();
}

namespace {

void delete_record(const sqlite::Db& db, const std::string& checkpoint, const std::string& config) {
  for (const char* sql : {"DELETE FROM scored WHERE checkpoint = ?1 AND config = ?2",
                          "DELETE FROM scores WHERE checkpoint = ?1 AND config = ?2",
                          "DELETE FROM samples WHERE checkpoint = ?1 AND config = ?2"}) {
    Statement s(db, sql);
    s.bind(1, checkpoint);
    s.bind(2, config);
    s.step();
  }
}

}  // namespace

void History::record(int64_t run_id, const CheckpointInfo& ckpt, const std::string& config_fingerprint,
                     const std::string& state, const std::vector<ScoreRow>& scores,
                     const std::vector<SampleRow>& samples) {
  if (state != "complete" && state != "incomplete") {
    fail(path_, "record of checkpoint {}: state '{}' is neither complete nor incomplete", ckpt.fingerprint, state);
  }
  if (ckpt.fingerprint.empty()) fail(path_, "record of checkpoint '{}': empty fingerprint", ckpt.path);
  sqlite::Db& db = connection_->db;
  sqlite::WriteTransaction tx(db);
  delete_record(db, ckpt.fingerprint, config_fingerprint);
  {
    Statement s(
        db, "INSERT OR REPLACE INTO checkpoints (fingerprint, path, name, mtime, step) VALUES (?1, ?2, ?3, ?4, ?5)");
    s.bind(1, ckpt.fingerprint);
    s.bind(2, ckpt.path);
    s.bind(3, ckpt.name);
    s.bind(4, ckpt.mtime);
    s.bind(5, ckpt.step);
    s.step();
  }
  {
    Statement s(db, "INSERT INTO scored (checkpoint, config, run_id, scored_at, state) VALUES (?1, ?2, ?3, ?4, ?5)");
    s.bind(1, ckpt.fingerprint);
    s.bind(2, config_fingerprint);
    s.bind(3, run_id);
    s.bind(4, now_seconds());
    s.bind(5, state);
    s.step();
  }
  {
    Statement s(
        db,
        "INSERT INTO scores (checkpoint, config, ordinal, task, metric, filter, value, stderr, n,"
        " higher_is_better, is_group, chance, parent) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
    int64_t ordinal = 0;
    for (const ScoreRow& r : scores) {
      s.reset();
      s.bind(1, ckpt.fingerprint);
      s.bind(2, config_fingerprint);
      s.bind(3, ordinal++);
      s.bind(4, r.task);
      s.bind(5, r.metric);
      s.bind(6, r.filter);
      s.bind(7, non_nan(r.value));
      s.bind(8, r.stderr_value ? non_nan(*r.stderr_value) : std::nullopt);
      s.bind(9, r.n);
      s.bind(10, int64_t{r.higher_is_better});
      s.bind(11, int64_t{r.is_group});
      s.bind(12, r.chance ? non_nan(*r.chance) : std::nullopt);
      s.bind(13, r.parent);
      s.step();
    }
  }
  {
    Statement s(db,
                "INSERT INTO samples (checkpoint, config, task, metric, doc_id, value)"
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    for (const SampleRow& r : samples) {
      s.reset();
      s.bind(1, ckpt.fingerprint);
      s.bind(2, config_fingerprint);
      s.bind(3, r.task);
      s.bind(4, r.metric);
      s.bind(5, r.doc_id);
      s.bind(6, non_nan(r.value));
      s.step();
    }
  }
  tx.commit();
}

void History::forget(const std::string& checkpoint_fingerprint, const std::string& config_fingerprint) {
  sqlite::Db& db = connection_->db;
  sqlite::WriteTransaction tx(db);
  delete_record(db, checkpoint_fingerprint, config_fingerprint);
  tx.commit();
}

std::vector<ScoredCheckpoint> History::trend(const std::string& config_fingerprint) const {
  sqlite::Db& db = connection_->db;
  // One read transaction, so that a writer committing meanwhile cannot split the answer.
  db.exec("BEGIN");
  std::vector<ScoredCheckpoint> out;
  try {
    Statement s(db,
                "SELECT c.fingerprint, c.path, c.name, c.mtime, s.run_id, s.scored_at, s.state, c.step"
                " FROM scored s JOIN checkpoints c ON c.fingerprint = s.checkpoint WHERE s.config = ?1"
                " ORDER BY c.mtime, c.name, c.fingerprint");
    s.bind(1, config_fingerprint);
    while (s.step()) {
      ScoredCheckpoint sc;
      sc.checkpoint.fingerprint = s.text_at(0);
      sc.checkpoint.path = s.text_at(1);
      sc.checkpoint.name = s.text_at(2);
      sc.checkpoint.mtime = s.double_at(3);
      sc.run_id = s.int_at(4);
      sc.scored_at = s.double_at(5);
      sc.state = s.text_at(6);
      if (!s.null_at(7)) sc.checkpoint.step = s.int_at(7);
      out.push_back(std::move(sc));
    }
    Statement rows(
        db,
        "SELECT task, metric, filter, value, stderr, n, higher_is_better, is_group, chance, parent FROM scores"
        " WHERE checkpoint = ?1 AND config = ?2 ORDER BY ordinal");
    for (ScoredCheckpoint& sc : out) {
      rows.reset();
      rows.bind(1, sc.checkpoint.fingerprint);
      rows.bind(2, config_fingerprint);
      while (rows.step()) {
        ScoreRow r;
        r.task = rows.text_at(0);
        r.metric = rows.text_at(1);
        r.filter = rows.text_at(2);
        r.value = rows.null_at(3) ? std::nan("") : rows.double_at(3);
        r.stderr_value = rows.optional_double_at(4);
        r.n = rows.int_at(5);
        r.higher_is_better = rows.int_at(6) != 0;
        r.is_group = rows.int_at(7) != 0;
        r.chance = rows.optional_double_at(8);
        if (!rows.null_at(9)) r.parent = rows.text_at(9);
        sc.scores.push_back(std::move(r));
      }
    }
  } catch (...) {
    sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  db.exec("COMMIT");
  // By training step where every checkpoint has one (copies synced from elsewhere arrive in any
  // order); else as written, the query's order.
  if (std::all_of(out.begin(), out.end(), [](const ScoredCheckpoint& c) { return c.checkpoint.step.has_value(); }))
    std::stable_sort(out.begin(), out.end(), [](const ScoredCheckpoint& a, const ScoredCheckpoint& b) {
      return *a.checkpoint.step < *b.checkpoint.step;
    });
  return out;
}

std::vector<std::string> History::configs() const {
  Statement s(connection_->db, "SELECT config FROM runs GROUP BY config ORDER BY MAX(id) DESC");
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text_at(0));
  return out;
}

nlohmann::json History::config_of(const std::string& config_fingerprint) const {
  Statement s(connection_->db, "SELECT config_json FROM runs WHERE config = ?1 ORDER BY id DESC LIMIT 1");
  s.bind(1, config_fingerprint);
  if (!s.step()) return nullptr;
  try {
    return nlohmann::json::parse(s.text_at(0));
  } catch (const nlohmann::json::exception& e) {
    fail(path_, "config of {} is not JSON: {}", config_fingerprint, e.what());
  }
}

std::vector<SampleRow> History::samples(const std::string& checkpoint_fingerprint,
                                        const std::string& config_fingerprint, const std::string& task) const {
  Statement s(connection_->db,
              "SELECT task, metric, doc_id, value FROM samples WHERE checkpoint = ?1 AND config = ?2"
              " AND (?3 = '' OR task = ?3) ORDER BY task, metric, doc_id");
  s.bind(1, checkpoint_fingerprint);
  s.bind(2, config_fingerprint);
  s.bind(3, task);
  std::vector<SampleRow> out;
  while (s.step()) {
    SampleRow r;
    r.task = s.text_at(0);
    r.metric = s.text_at(1);
    r.doc_id = s.int_at(2);
    r.value = s.null_at(3) ? std::nan("") : s.double_at(3);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<SampleRow> samples_from_records(const std::vector<DocRecord>& records) {
  std::vector<SampleRow> out;
  for (const DocRecord& record : records) {
    if (!record.task || record.metrics.empty()) continue;
    for (const auto& [metric, value] : record.metrics.front()) {
      if (value.count || !std::isfinite(value.value)) continue;
      out.push_back(SampleRow{record.task->name(), metric, record.doc.doc_id, value.value});
    }
  }
  std::sort(out.begin(), out.end(), [](const SampleRow& a, const SampleRow& b) {
    return std::tie(a.task, a.metric, a.doc_id) < std::tie(b.task, b.metric, b.doc_id);
  });
  return out;
}

}  // namespace gpueval
