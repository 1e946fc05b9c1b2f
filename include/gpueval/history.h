// The history database: every checkpoint of a training run that gpueval scored, with its
// per-task scores and per-document metric values, kept across nights so that trends,
// regressions and flipped documents can be shown (trend.h, trend_report.h).
//
// One SQLite file (WAL mode) at the run config's `history:` key or --history, else
// $GPUEVAL_HISTORY, else $XDG_DATA_HOME/gpueval/history.sqlite, else
// ~/.local/share/gpueval/history.sqlite. Tables (schema version in `meta`):
//   runs        one row per begin_run(): config fingerprint, config JSON, command line, start time;
//   checkpoints fingerprint -> path, name, mtime;
//   scored      (checkpoint, config) -> run, time scored, state (complete|incomplete);
//   scores      (checkpoint, config, task, metric, filter) -> value, stderr, n, direction, group,
//               chance, parent (nullable; added within schema 1: open() adds the columns to an
//               older file);
//   samples     (checkpoint, config, task, metric, doc_id) -> the document's metric value.
// A record of (checkpoint, config) is written in one transaction and replaces any earlier one,
// so a reader sees the old record or the new one, never a mix.
//
// Several processes may write one file at once (two nightly runs): every write is a BEGIN
// IMMEDIATE transaction, and a connection waits up to a busy timeout for another writer. A
// History object owns one connection; it is movable, not copyable, and belongs to one thread
// at a time. Every failure throws gpueval::Error "<path>: <problem>".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/task.h"

namespace gpueval {

struct CheckpointInfo {
  std::string fingerprint;  // identifies the weights (the lead's checkpoint fingerprint)
  std::string path;
  std::string name;  // shown on charts and tables, e.g. "step-1000"
  double mtime = 0;  // UNIX time; orders the trend unless every checkpoint has a step
  std::optional<int64_t> step;  // the training step (evaluation/training_step.h); orders the trend when all have one
};

// One score of a checkpoint: a task's (or group's) metric under one filter, as results.json has
// it (a run makes them from the aggregator's scores, not from the file).
struct ScoreRow {
  std::string task;
  std::string metric;
  std::string filter = "none";
  double value = 0;
  std::optional<double> stderr_value;  // nullopt where results.json has "N/A"
  int64_t n = 0;  // documents scored
  bool higher_is_better = true;
  bool is_group = false;
  // What a uniform guess scores (results.json "chance": multiple-choice accuracies and the
  // groups over them); nullopt where there is none.
  std::optional<double> chance;
  // The group this task or group is a member of (the first in results.json's group_subtasks that
  // lists it); "" at the top level of the run.
  std::string parent;
};

// One document's value of a per-document metric (acc 0/1, exact_match 0/1, ...), first filter.
struct SampleRow {
  std::string task;
  std::string metric;
  int64_t doc_id = 0;
  double value = 0;
};

struct ScoredCheckpoint {
  CheckpointInfo checkpoint;
  int64_t run_id = 0;
  double scored_at = 0;
  std::string state;  // "complete" | "incomplete"
  std::vector<ScoreRow> scores;  // in the order record() was given them
};

class History {
 public:
  // Opens or creates the file (parent directories created). With create == false a missing
  // file is an Error "<path>: no history file". A file that is not a gpueval history, fails
  // PRAGMA quick_check or has a newer schema: Error "<path>: ...".
  static History open(const std::string& path, bool create = true);
  // `configured` (the run config's `history:` key or --history) when non-empty, else
  // $GPUEVAL_HISTORY, else $XDG_DATA_HOME/gpueval/history.sqlite, else
  // ~/.local/share/gpueval/history.sqlite.
  static std::string default_path(const std::string& configured = "");

  History(History&&) noexcept;
  History& operator=(History&&) noexcept;
  ~History();

  const std::string& path() const { return path_; }

  // Records that a run of this config started (the clock's time); the id record() takes.
  int64_t begin_run(const std::string& config_fingerprint, const nlohmann::json& config, const std::string& command);
  // Whether a complete record of (checkpoint, config) exists.
  bool is_scored(const std::string& checkpoint_fingerprint, const std::string& config_fingerprint) const;
  // One transaction: replaces any earlier record of (checkpoint, config) with these scores and
  // samples. `state` is "complete" or "incomplete"; anything else is an Error. Rows that repeat a
  // key (task, metric, filter) or (task, metric, doc_id) are an Error.
  void record(int64_t run_id, const CheckpointInfo& ckpt, const std::string& config_fingerprint,
              const std::string& state, const std::vector<ScoreRow>& scores, const std::vector<SampleRow>& samples);
  // Deletes the record of (checkpoint, config), if any (--fresh).
  void forget(const std::string& checkpoint_fingerprint, const std::string& config_fingerprint);

  // Every scored checkpoint of this config, oldest first: by training step when every one has a
  // step, else by checkpoint mtime, then name, then fingerprint; empty for an unknown config.
  std::vector<ScoredCheckpoint> trend(const std::string& config_fingerprint) const;
  // Config fingerprints that have runs, most recently begun first.
  std::vector<std::string> configs() const;
  // The config JSON of the config's latest run; null when the config has no run.
  nlohmann::json config_of(const std::string& config_fingerprint) const;
  // The per-document values of one recorded checkpoint, by task, metric and doc_id; `task`
  // empty: every task.
  std::vector<SampleRow> samples(const std::string& checkpoint_fingerprint, const std::string& config_fingerprint,
                                 const std::string& task = "") const;

 private:
  struct Connection;
  History(std::string path, std::unique_ptr<Connection> connection);

  std::string path_;
  std::unique_ptr<Connection> connection_;
};

// The per-document values of DocRecord::metrics: the first filter only, numeric per-document
// metrics only (weighted metrics such as word_perplexity, whose per-document value is a
// (loglikelihood, count) pair, and non-finite values are skipped); ordered by task, metric, doc_id.
std::vector<SampleRow> samples_from_records(const std::vector<DocRecord>& records);

}  // namespace gpueval
