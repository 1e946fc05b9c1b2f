#include "gpueval/evaluation.h"

#include <string>
#include <vector>

#include "common/file_io.h"
#include "evaluation/checkpoint_evaluation.h"
#include "evaluation/checkpoints.h"
#include "evaluation/history_recorder.h"
#include "evaluation/nightly.h"
#include "evaluation/output_lock.h"
#include "evaluation/run_inputs.h"
#include "gpueval/error.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {

int run_evaluation(const RunConfig& config, const EvaluationOptions& options) {
  const std::vector<Checkpoint> checkpoints = resolve_checkpoints(config.models, config.source);
  const bool nightly = config.models.size() > 1 || is_glob(config.models[0]);
  const std::vector<DeviceSlot> slots = run_device_slots(config);
  if (!nightly && !checkpoints[0].error.empty()) throw Error(checkpoints[0].error);
  // Loaded once: every checkpoint of a night has the same tasks, and the history keys on them.
  const RunTasks tasks = load_run_tasks(config, options.executable);
  HistoryRecorder recorder(config, tasks.config_fp);
  // Taken once the inputs have loaded (a bad task file writes nothing), before the journal is
  // read; held until every report of the run (each checkpoint's of a night, then the trend) is written.
  const DirectoryLock lock = lock_output(config.output, options);
  io::make_directories(config.output + "/logs");
  Scheduler scheduler(scheduler_options(config, options, slots));
  ProgressReporter progress(config.output + "/status.json", config.source, options.live_progress);
  if (nightly) return run_checkpoints(config, options, tasks, checkpoints, scheduler, progress, recorder);
  // One checkpoint: its report in <output>, its scores into the history (it is resumed from its
  // journal, never skipped).
  const CheckpointOutcome outcome =
      evaluate_checkpoint(config, options, tasks, checkpoints[0], config.output, scheduler, progress,
                          recorder.recorder(checkpoints[0], nullptr));
  scheduler.shutdown();
  const bool regressed =
      outcome.exit_code == 0 && config.fail_on_regression && !recorder.regressions(*config.fail_on_regression).empty();
  recorder.export_tensorboard(config.tensorboard, config_name(config));
  progress.finish(regressed ? "regressed" : outcome.state);
  if (!outcome.table.empty()) show_scores(options, "", outcome.table, config.output);
  return regressed ? kExitRegression : outcome.exit_code;
}

}  // namespace gpueval
