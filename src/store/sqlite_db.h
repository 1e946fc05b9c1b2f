// A thin RAII layer over one SQLite connection, shared by the project's SQLite files (the
// calibration cache, the history database): a connection with a busy timeout, prepared
// statements with typed binds and columns, and a write transaction. Every failure throws
// sqlite::Failure, a gpueval::Error naming the database file and SQLite's message ("<path>: step:
// database is locked"), which keeps SQLite's message apart for a caller that says what the failure
// means (the journal: "<path>: journal is corrupt (<message>)"). Private to src/. A connection
// belongs to one thread at a time (SQLITE_OPEN_NOMUTEX).
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "gpueval/error.h"

namespace gpueval::sqlite {

// How long a connection waits for another writer's lock before failing with SQLITE_BUSY.
constexpr int kBusyTimeoutMs = 10000;

class Failure : public Error {
 public:
  // what: the call that failed ("open", "step"), or empty for a statement run by exec().
  Failure(const std::string& path, const std::string& what, const std::string& sqlite_message)
      : Error(path + ": " + (what.empty() ? "" : what + ": ") + sqlite_message), sqlite_message_(sqlite_message) {}
  const std::string& sqlite_message() const { return sqlite_message_; }

 private:
  std::string sqlite_message_;
};

class Db {
 public:
  Db(const std::string& path, bool create) : path_(path) {
    const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX;
    const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) {
      const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close(db_);
      db_ = nullptr;
      throw Failure(path_, "open", message);
    }
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string m = message ? message : sqlite3_errmsg(db_);
      sqlite3_free(message);
      throw Failure(path_, "", m);
    }
  }
  // PRAGMA journal_mode=WAL. Changing the mode needs an exclusive lock, and SQLite answers
  // SQLITE_BUSY at once, without the busy handler, while another process opening the same new
  // file holds a lock on it; so this retries until the busy timeout, as any other statement waits.
  void enable_wal() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    for (;;) {
      char* message = nullptr;
      const int rc = sqlite3_exec(db_, "PRAGMA journal_mode=WAL", nullptr, nullptr, &message);
      const std::string m = rc == SQLITE_OK ? "" : (message ? message : sqlite3_errmsg(db_));
      sqlite3_free(message);
      if (rc == SQLITE_OK) return;
      if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() > deadline)
        throw Failure(path_, "PRAGMA journal_mode=WAL", m);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void check(int rc, const char* what) const {
    if (rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
      throw Failure(path_, what, db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
  }
  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

class Statement {
 public:
  Statement(const Db& db, const char* sql) : db_(db) {
    db.check(sqlite3_prepare_v2(db.get(), sql, -1, &st_, nullptr), "prepare");
  }
  ~Statement() { sqlite3_finalize(st_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int i, const std::string& s) {
    db_.check(sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT), "bind");
  }
  void bind_blob(int i, const std::string& s) {
    // A zero-length blob must still be a blob: sqlite3_bind_blob with a null pointer binds NULL.
    static const char kEmpty = 0;
    db_.check(sqlite3_bind_blob(st_, i, s.empty() ? &kEmpty : s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT),
              "bind");
  }
  void bind(int i, int64_t v) { db_.check(sqlite3_bind_int64(st_, i, v), "bind"); }
  void bind(int i, double v) { db_.check(sqlite3_bind_double(st_, i, v), "bind"); }
  void bind(int i, const std::optional<double>& v) {
    if (v) {
      bind(i, *v);
    } else {
      db_.check(sqlite3_bind_null(st_, i), "bind");
    }
  }
  void bind(int i, const std::optional<int64_t>& v) {
    if (v) {
      bind(i, *v);
    } else {
      db_.check(sqlite3_bind_null(st_, i), "bind");
    }
  }
  bool step() {
    const int rc = sqlite3_step(st_);
    db_.check(rc, "step");
    return rc == SQLITE_ROW;
  }
  // Makes the statement ready to run again with new binds.
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  int64_t int_at(int i) const { return sqlite3_column_int64(st_, i); }
  double double_at(int i) const { return sqlite3_column_double(st_, i); }
  bool null_at(int i) const { return sqlite3_column_type(st_, i) == SQLITE_NULL; }
  std::optional<double> optional_double_at(int i) const {
    return null_at(i) ? std::nullopt : std::optional<double>(double_at(i));
  }
  int type_at(int i) const { return sqlite3_column_type(st_, i); }
  // The column's bytes, embedded NULs included (a BLOB, or TEXT as stored).
  std::string bytes_at(int i) const {
    const void* p = sqlite3_column_blob(st_, i);
    const int n = sqlite3_column_bytes(st_, i);
    return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
  }
  std::string text_at(int i) const {
    const unsigned char* t = sqlite3_column_text(st_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }

 private:
  const Db& db_;
  sqlite3_stmt* st_ = nullptr;
};

// BEGIN IMMEDIATE on construction (the write lock is taken up front, so two writers queue on the
// busy timeout instead of one failing at its first write), ROLLBACK on destruction unless
// commit() ran.
class WriteTransaction {
 public:
  explicit WriteTransaction(Db& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }
  ~WriteTransaction() {
    if (!done_) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit() {
    db_.exec("COMMIT");
    done_ = true;
  }

 private:
  Db& db_;
  bool done_ = false;
};

}  // namespace gpueval::sqlite
