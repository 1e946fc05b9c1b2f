// The journal: a run's per-request results, committed to a SQLite database
// (<output>/journal.sqlite, WAL mode, synchronous=FULL) batch by batch as they
// arrive, so that a run that was killed, lost its machine or filled its disk
// resumes by computing only what is missing (run_journal.h does that).
//
// A journal belongs to one model and one config (run_identity.h): its meta
// table holds the schema version, the model's fingerprint and path, the
// config's fingerprint and the batch budget the run planned with (and, for a shard of a sharded
// run, the plan's fingerprint). Opening it
// for another model or config, or opening a file that is not a sound journal
// (PRAGMA quick_check fails, a row's checksum does not match), is a one-line
// Error that says how to start over (--fresh); a journal that failed a check
// never yields results.
//
// Results are keyed by (request key, part) and stored exactly: the logprob as
// its IEEE-754 bit pattern (so -0.0, denormals, infinities and NaN survive,
// which SQLite's REAL would not promise), the text as a BLOB, and a checksum
// of every field. record_batch() is one transaction: after a crash a batch is
// either all in the journal or not at all, and SQLite drops a torn WAL tail.
//
// Fault injection (tests): GPUEVAL_JOURNAL_MAX_PAGES=N sets PRAGMA
// max_page_count=N on open, so the journal hits a real SQLITE_FULL ("database
// or disk is full") once it grows past N pages.
//
// A Journal owns one SQLite connection; movable, not copyable, not
// thread-safe (one thread at a time).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/item_result.h"

namespace gpueval {

namespace sqlite {
class Db;
}

struct JournalIdentity {
  std::string model_fingerprint;  // model_fingerprint.h
  std::string model_path;  // for messages only
  std::string config_fingerprint;  // run_identity.h
};

// One stored result: the request key (run_identity.h's request_key) and the
// item (one part of a request). The item's request_index is the one it was
// recorded with.
using JournalItem = std::pair<std::string, ItemResult>;

class Journal {
 public:
  static constexpr int64_t kSchemaVersion = 1;

  // Opens or creates the journal at `path`. fresh: delete it (and its -wal
  // and -shm files) first. Throws Error naming `path` when the journal was
  // written for another model or config, when it is corrupt or unreadable,
  // or when it cannot be created.
  static Journal open(const std::string& path, const JournalIdentity& id, bool fresh);

  Journal(Journal&& other) noexcept;
  Journal& operator=(Journal&& other) noexcept;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  const std::string& path() const { return path_; }

  // Every stored result, in key order. Throws Error ("journal is corrupt")
  // when a row fails its checksum or cannot be read.
  std::vector<JournalItem> load() const;

  // Stores the items in one transaction (INSERT OR REPLACE on (key, part)):
  // all of them or, when it throws, none. Throws Error
  // "<path>: cannot record results: <SQLite's message>" (e.g. "database or
  // disk is full"); what earlier calls committed stays.
  void record_batch(const std::vector<JournalItem>& items);

  // Program verdicts (src/sandbox/) by execution key (evaluation/program_runs.h): what a code
  // task's programs gave, so a resumed run does not run them again. Stored exactly, with a
  // checksum; a row that fails it is an Error ("journal is corrupt").
  struct StoredVerdict {
    std::string verdict;  // "passed", "failed", "timed out" ("error" is never stored: it is retried)
    std::string detail;
    double cpu_seconds = 0;
    double wall_seconds = 0;
  };
  std::map<std::string, StoredVerdict> load_verdicts() const;
  // One transaction; errors as record_batch's.
  void record_verdicts(const std::vector<std::pair<std::string, StoredVerdict>>& verdicts);

  // The batch budget the run that started this journal planned with.
  std::optional<int64_t> batch_tokens() const;
  void set_batch_tokens(int64_t tokens);

  // The sharded plan (cluster/sharded_plan.h) a shard's journal was computed against; nullopt
  // for the journal of a one-machine run.
  std::optional<std::string> plan_fingerprint() const;
  void set_plan_fingerprint(const std::string& fingerprint);

 private:
  Journal(std::string path, std::unique_ptr<sqlite::Db> db);

  std::string path_;
  std::unique_ptr<sqlite::Db> db_;
};

}  // namespace gpueval
