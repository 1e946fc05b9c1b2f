// What a run keeps in the history database (gpueval/history.h): every checkpoint it scores, with
// the per-task scores and per-document outcomes that the trend report and the regression check
// (--fail-on-regression) read. One HistoryRecorder per run; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "evaluation/checkpoint_evaluation.h"
#include "evaluation/checkpoints.h"
#include "gpueval/history.h"
#include "gpueval/run_config.h"
#include "report/trend.h"

namespace gpueval {

class HistoryRecorder {
 public:
  // Opens the config's history database (History::default_path) and begins this run in it.
  HistoryRecorder(const RunConfig& config, const std::string& config_fp);
  History& history() { return history_; }
  const std::string& config_fingerprint() const { return config_fp_; }
  // The callback evaluate_checkpoint() calls once `c` is scored; `line` (its status.json line)
  // gets its primary scores. `c` and `line` must outlive the callback.
  ScoredCallback recorder(const Checkpoint& c, nlohmann::json* line);
  // A task's primary score per task, for status.json: {task: {metric, value, stderr}}.
  static nlohmann::json primary_json(const std::vector<ScoreRow>& scores);
  // Drops against the previous checkpoint of more than `points` where the newer one was scored
  // by this run, each logged as one line naming the task.
  std::vector<Regression> regressions(double points) const;
  // When `logdir` is set: the config's trend as TensorBoard scalars (report/tensorboard.h), only
  // the checkpoints its run folder does not hold yet, and one log line saying what was written.
  // `name` names the TensorBoard run (with the config fingerprint). Errors name the file.
  void export_tensorboard(const std::string& logdir, const std::string& name) const;

 private:
  History history_;
  std::string config_fp_;
  int64_t run_id_ = 0;
  std::vector<std::string> scored_;
};

// The history's rows of a run's scores (gpueval/history.h's ScoreRow): one per task and group,
// metric and filter, tasks and groups by name and each one's metrics in their order (the first a
// task's primary one), stderr nullopt where there is none; n: the task's documents under `limit`
// (a group: the sum over the tasks under it, through nested groups); parent: the first group that
// lists it as a member; higher_is_better: the task's metric spec (a group: a suite score's own,
// else the first task under it with the metric; true if none); chance: the metric's chance level.
std::vector<ScoreRow> score_rows(const Scores& scores, std::optional<int64_t> limit);

// The config file's name without its folder and extension ("configs/mmlu.yaml" -> "mmlu"); what
// names its TensorBoard run.
std::string config_name(const RunConfig& config);

}  // namespace gpueval
