#include "evaluation/history_recorder.h"

#include <algorithm>
#include <iostream>

#include "common/console.h"
#include "common/file_io.h"
#include "gpueval/error.h"
#include "report/tensorboard.h"

namespace gpueval {
namespace {

CheckpointInfo info(const Checkpoint& c) { return CheckpointInfo{c.fingerprint, c.path, c.name, c.mtime, c.step}; }

}  // namespace

HistoryRecorder::HistoryRecorder(const RunConfig& config, const std::string& config_fp)
    : history_(History::open(History::default_path(config.history))), config_fp_(config_fp) {
  run_id_ = history_.begin_run(config_fp, config.to_json(), config.source);
}

ScoredCallback HistoryRecorder::recorder(const Checkpoint& c, nlohmann::json* line) {
  return [this, &c, line](const std::vector<DocRecord>& records, const nlohmann::ordered_json& results,
                          const std::string& state) {
    const std::vector<ScoreRow> scores = scores_from_results(results);
    history_.record(run_id_, info(c), config_fp_, state == "complete" ? "complete" : "incomplete", scores,
                    samples_from_records(records));
    if (line) (*line)["scores"] = primary_json(scores);
    scored_.push_back(c.name);
  };
}

nlohmann::json HistoryRecorder::primary_json(const std::vector<ScoreRow>& scores) {
  ScoredCheckpoint sc;
  sc.scores = scores;
  nlohmann::json out = nlohmann::json::object();
  for (const ScoreRow& r : primary_scores(sc))
    out[r.task] = {{"metric", r.metric}, {"value", r.value},
                   {"stderr", r.stderr_value ? nlohmann::json(*r.stderr_value) : nlohmann::json()}};
  return out;
}

std::vector<Regression> HistoryRecorder::regressions(double points) const {
  std::vector<Regression> out;
  for (const Regression& r : find_regressions(history_.trend(config_fp_), points)) {
    if (std::find(scored_.begin(), scored_.end(), r.current) == scored_.end()) continue;
    // Why the run exits 4: shown even when quiet.
    Console::error(fmt::format("[sched] regression: {} {} went from {:.4f} ({}) to {:.4f} ({}): {:.2f} {} worse, more than {}",
                               r.task, r.metric, r.before, r.previous, r.after, r.current, r.drop_points,
                               r.in_points ? "points" : "units", points));
    out.push_back(r);
  }
  return out;
}

std::string config_name(const RunConfig& config) {
  std::string name = io::base_name(config.source);
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

void HistoryRecorder::export_tensorboard(const std::string& logdir, const std::string& name) const {
  if (logdir.empty()) return;
  tensorboard::ExportResult r;
  try {
    r = tensorboard::export_trend(logdir, name, config_fp_, history_.trend(config_fp_));
  } catch (const Error& e) {
    throw Error(std::string("TensorBoard export (the scores are in the reports and the history): ") + e.what());
  }
  if (r.checkpoints == 0)
    std::cerr << fmt::format("[sched] tensorboard: {} holds every checkpoint already ({})\n", r.run_dir, r.already);
  else
    std::cerr << fmt::format("[sched] tensorboard: {} checkpoint{}, {} scalars written to {}\n", r.checkpoints,
                             r.checkpoints == 1 ? "" : "s", r.scalars, r.file);
}

}  // namespace gpueval
