// ProgressReporter shows a run's progress to people and to machines. On a
// terminal it redraws one live line (done/total batches, tokens/s per worker,
// ETA); otherwise it logs a line every `log_every_s` seconds. Every update
// also rewrites `<output>/status.json` atomically (temp file + rename), so
// cron jobs and CI can watch a run without parsing logs; its "timing" is the
// scheduler's RunTiming so far (the compute window, each worker's load and
// busy time). Not thread-safe: the scheduler's loop is its only caller.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "run/scheduler.h"

namespace gpueval {

// A duration for people: "42s", "3m07s", "2h05m"; `unknown` for a negative one.
std::string format_duration(double seconds, const char* unknown = "?");

class ProgressReporter {
 public:
  ProgressReporter(std::string status_path, std::string run_name, bool live_terminal, double log_every_s = 5.0);
  void update(const SchedulerStatus& status, bool final);
  // Adds fields (e.g. per-task progress, the final state) to every later status.json.
  void set_extra(const std::string& key, const nlohmann::json& value);

  // Rewrites status.json one last time with the run's outcome
  // ("complete", "incomplete", "interrupted", "failed").
  void finish(const std::string& outcome);

  static nlohmann::json to_json(const SchedulerStatus& status);

 private:
  void write_status(const std::string& state);

  std::string status_path_;
  std::string run_name_;
  bool live_;
  double log_every_s_;
  double last_log_s_ = -1e9;
  size_t last_line_width_ = 0;
  nlohmann::json extra_;
  SchedulerStatus last_;
};

}  // namespace gpueval
