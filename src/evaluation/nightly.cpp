#include "evaluation/nightly.h"

#include <iostream>
#include <map>
#include <string>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <nlohmann/json.hpp>

#include "common/console.h"
#include "evaluation/checkpoint_evaluation.h"
#include "gpueval/error.h"
#include "gpueval/history.h"
#include "report/trend_report.h"

namespace gpueval {

int run_checkpoints(const RunConfig& config, const EvaluationOptions& options, const RunTasks& tasks,
                    const std::vector<Checkpoint>& checkpoints, Scheduler& scheduler, ProgressReporter& progress,
                    HistoryRecorder& recorder) {
  History& history = recorder.history();
  const std::string& config_fp = recorder.config_fingerprint();
  nlohmann::json lines = nlohmann::json::array();
  std::vector<std::string> names;
  std::map<std::string, const ScoredCheckpoint*> earlier;  // fingerprint -> its history record
  const std::vector<ScoredCheckpoint> trend = history.trend(config_fp);
  for (const ScoredCheckpoint& sc : trend) earlier[sc.checkpoint.fingerprint] = &sc;
  size_t skipped = 0;
  for (const Checkpoint& c : checkpoints) {
    nlohmann::json line = {
        {"name", c.name}, {"path", c.path}, {"fingerprint", c.fingerprint.substr(0, 16)}, {"state", "queued"}};
    if (c.error.empty() && options.fresh) history.forget(c.fingerprint, config_fp);
    if (c.error.empty() && !options.fresh && history.is_scored(c.fingerprint, config_fp)) {
      line["state"] = "skipped";
      if (earlier.count(c.fingerprint)) line["scores"] = HistoryRecorder::primary_json(earlier[c.fingerprint]->scores);
      ++skipped;
    }
    lines.push_back(line);
    names.push_back(c.name);
  }
  std::cerr << fmt::format("[sched] {} checkpoints, oldest first: {}\n", checkpoints.size(), fmt::join(names, ", "));
  if (skipped > 0)
    std::cerr << fmt::format(
        "[sched] {} already scored for this config (history {}): skipped; --fresh scores them again\n", skipped,
        history.path());
  progress.set_extra("checkpoints", lines);
  bool failed = false, incomplete = false;
  for (size_t k = 0; k < checkpoints.size(); ++k) {
    const Checkpoint& c = checkpoints[k];
    if (lines[k]["state"] == "skipped") {
      std::cerr << fmt::format("[sched] checkpoint {} of {}: {} already scored, skipped\n", k + 1, checkpoints.size(),
                               c.name);
      continue;
    }
    lines[k]["state"] = "running";
    progress.set_extra("checkpoint", c.name);
    progress.set_extra("checkpoints", lines);
    std::cerr << fmt::format("[sched] checkpoint {} of {}: {} ({})\n", k + 1, checkpoints.size(), c.name, c.path);
    try {
      if (!c.error.empty()) throw Error(c.error);
      const CheckpointOutcome outcome = evaluate_checkpoint(config, options, tasks, c, config.output + "/" + c.name,
                                                            scheduler, progress, recorder.recorder(c, &lines[k]));
      lines[k]["state"] = outcome.state;
      progress.set_extra("checkpoints", lines);
      if (!outcome.table.empty()) show_scores(options, c.name, outcome.table, config.output + "/" + c.name);
      if (outcome.state == "interrupted") {
        progress.finish("interrupted");
        return outcome.exit_code;
      }
      incomplete = incomplete || outcome.exit_code != 0;
    } catch (const Error& e) {
      Console::error(fmt::format("[sched] checkpoint {} failed: {}", c.name, e.what()));  // shown even when quiet
      lines[k]["state"] = "failed";
      lines[k]["error"] = e.what();
      progress.set_extra("checkpoints", lines);
      failed = true;
    }
  }
  scheduler.shutdown();
  progress.set_extra("checkpoint", nullptr);
  write_trend_reports(config.output, history, config_fp, config.fail_on_regression);
  std::cerr << fmt::format("[sched] trend of {} checkpoints: {}/report.md, {}/report.html\n",
                           history.trend(config_fp).size(), config.output, config.output);
  const bool regressed = config.fail_on_regression && !recorder.regressions(*config.fail_on_regression).empty();
  recorder.export_tensorboard(config.tensorboard, config_name(config));
  const char* state = failed ? "failed" : regressed ? "regressed" : incomplete ? "incomplete" : "complete";
  progress.finish(state);
  if (options.scores_out) *options.scores_out << "trend report: " << config.output << "/report.md" << std::endl;
  return failed ? 1 : regressed ? kExitRegression : incomplete ? kExitIncomplete : 0;
}

}  // namespace gpueval
