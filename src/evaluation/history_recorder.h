// What a run keeps in the history database (gpueval/history.h): every checkpoint it scores, with
// the per-task scores and per-document outcomes that the trend report and the regression check
// (--fail-on-regression) read. One HistoryRecorder per run; not thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// The config file's name without its folder and extension ("configs/mmlu.yaml" -> "mmlu"); what
// names its TensorBoard run.
std::string config_name(const RunConfig& config);

}  // namespace gpueval
