// ProgressReporter shows a run's progress to people and to machines. On a
// terminal (the installed Console's status line, common/console.h) it redraws one
// line in place: a bar, batches and documents done, tokens/s, ETA and workers busy,
// and before the first batch the step the run is in (phase()); otherwise it logs a
// line every `log_every_s` seconds, and the last one when the run ends. Every update
// also rewrites `<output>/status.json` atomically (temp file + rename), so
// cron jobs and CI can watch a run without parsing logs; its "timing" is the
// scheduler's RunTiming so far (the compute window, each worker's load and
// busy time). Not thread-safe: the scheduler's loop is its only caller.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "run/scheduler.h"

namespace gpueval {

// A duration for people: "42s", "3m07s", "2h05m"; `unknown` for a negative one.
std::string format_duration(double seconds, const char* unknown = "?");

// A count for people: 56000 -> "56,000".
std::string format_count(int64_t n);

class ProgressReporter {
 public:
  ProgressReporter(std::string status_path, std::string run_name, bool live_terminal, double log_every_s = 5.0);
  void update(const SchedulerStatus& status, bool final);
  // The step a run is in before its batches run ("tokenizing 56,000 requests"), shown as the
  // status line on a terminal until the next update; nothing elsewhere (the logs say it).
  void phase(const std::string& what);
  // Adds fields (e.g. per-task progress, the final state) to every later status.json.
  void set_extra(const std::string& key, const nlohmann::json& value);

  // While a run's programs run after its generations (evaluation/program_runs.h): `execution` is
  // {"sandboxes_busy", "max_sandboxes", "programs_done", "programs_queued"}, kept as status.json's
  // "code_execution" (state "running programs") and shown as the status line or, every
  // `log_every_s`, logged.
  void programs(const nlohmann::json& execution);
  // ", sandboxes 2/2 busy, programs 40 done, 12 queued" from such an object; "" for anything else.
  static std::string programs_part(const nlohmann::json& execution);

  // Rewrites status.json one last time with the run's outcome
  // ("complete", "incomplete", "interrupted", "failed").
  void finish(const std::string& outcome);

  static nlohmann::json to_json(const SchedulerStatus& status);
  // The terminal's status line: bar, batches, documents (from `task_progress`, the aggregator's
  // progress(); null: left out), tok/s, ETA, workers busy; "waiting for workers to load" while
  // no worker is up yet; then programs_part(execution) when code tasks run programs.
  static std::string status_line(const SchedulerStatus& status, const nlohmann::json& task_progress,
                                 const nlohmann::json& execution = nlohmann::json());

 private:
  void write_status(const std::string& state);

  std::string status_path_;
  std::string run_name_;
  bool live_;
  double log_every_s_;
  double last_log_s_ = -1e9;
  double last_programs_log_s_ = -1e9;  // steady-clock seconds
  nlohmann::json extra_;
  SchedulerStatus last_;
};

}  // namespace gpueval
