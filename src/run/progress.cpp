#include "run/progress.h"

#include <chrono>
#include <ctime>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/console.h"
#include "common/file_io.h"

namespace gpueval {
namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string format_duration(double s, const char* unknown) {
  if (s < 0) return unknown;
  const int64_t total = static_cast<int64_t>(s + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}s", total);
}

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (size_t at = digits.size(); at > 3; at -= 3) digits.insert(at - 3, ",");
  return n < 0 ? "-" + digits : digits;
}

ProgressReporter::ProgressReporter(std::string status_path, std::string run_name, bool live_terminal,
                                   double log_every_s)
    : status_path_(std::move(status_path)),
      run_name_(std::move(run_name)),
      live_(live_terminal),
      log_every_s_(log_every_s),
      extra_(nlohmann::json::object()) {}

void ProgressReporter::set_extra(const std::string& key, const nlohmann::json& value) { extra_[key] = value; }

nlohmann::json ProgressReporter::to_json(const SchedulerStatus& s) {
  nlohmann::json workers = nlohmann::json::array();
  for (const WorkerStatus& w : s.workers) {
    workers.push_back({{"name", w.name},
                       {"state", w.state},
                       {"pid", w.pid},
                       {"batch", w.batch},
                       {"batches_in_flight", w.batches_in_flight},
                       {"batches_done", w.batches_done},
                       {"tokens_done", w.tokens_done},
                       {"tokens_per_second", w.tokens_per_second},
                       {"heartbeat_age_s", w.heartbeat_age_s},
                       {"restarts", w.restarts}});
  }
  return {{"batches_total", s.batches_total},
          {"batches_done", s.batches_done},
          {"batches_quarantined", s.batches_quarantined},
          {"tokens_total", s.tokens_total},
          {"tokens_done", s.tokens_done},
          {"items_ahead", s.items_ahead},
          {"elapsed_s", s.elapsed_s},
          {"eta_s", s.eta_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.eta_s)},
          {"workers", workers},
          {"timing", s.timing.to_json()}};
}

void ProgressReporter::write_status(const std::string& state) {
  nlohmann::json j = to_json(last_);
  j["run"] = run_name_;
  j["updated_at"] = utc_now();
  j["state"] = state;
  for (auto it = extra_.begin(); it != extra_.end(); ++it) j[it.key()] = it.value();
  try {
    io::write_file_atomic(status_path_, j.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::cerr << "[sched] cannot write status: " << e.what() << "\n";
  }
}

void ProgressReporter::finish(const std::string& outcome) {
  if (live_) Console::clear_status();
  write_status(outcome);
}

void ProgressReporter::phase(const std::string& what) {
  if (live_) Console::set_status(what + "...");
}

std::string ProgressReporter::programs_part(const nlohmann::json& e) {
  if (!e.is_object() || !e.contains("max_sandboxes")) return "";
  return fmt::format(", sandboxes {}/{} busy, programs {} done, {} queued", e.value("sandboxes_busy", 0),
                     e.value("max_sandboxes", 0), format_count(e.value("programs_done", int64_t{0})),
                     format_count(e.value("programs_queued", int64_t{0})));
}

void ProgressReporter::programs(const nlohmann::json& execution) {
  extra_["code_execution"] = execution;
  write_status("running programs");
  const std::string line = "running programs" + programs_part(execution);
  if (live_ && Console::set_status(line)) return;
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now - last_programs_log_s_ < log_every_s_) return;
  last_programs_log_s_ = now;
  std::cerr << "[exec] " << line << "\n";
}

std::string ProgressReporter::status_line(const SchedulerStatus& s, const nlohmann::json& task_progress,
                                          const nlohmann::json& execution) {
  constexpr int kBarWidth = 24;
  const double done = s.batches_total ? static_cast<double>(s.batches_done) / s.batches_total : 1.0;
  const int filled = static_cast<int>(done * kBarWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  std::string line =
      fmt::format("[{}] {}/{} batches", bar, format_count(s.batches_done), format_count(s.batches_total));
  if (task_progress.is_object()) {
    int64_t docs = 0, docs_done = 0;
    for (const auto& [task, p] : task_progress.items()) {
      docs += p.value("documents", int64_t{0});
      docs_done += p.value("documents_done", int64_t{0});
    }
    line += fmt::format(", {}/{} documents", format_count(docs_done), format_count(docs));
  }
  size_t up = 0, busy = 0;
  for (const WorkerStatus& w : s.workers) {
    up += w.state == "idle" || w.state == "busy";
    busy += w.state == "busy";
  }
  if (s.batches_done == 0 && busy == 0 && up == 0 && !s.workers.empty())
    return line + fmt::format(", waiting for {} to load", s.workers.size() == 1
                                                              ? std::string("the worker")
                                                              : fmt::format("{} workers", s.workers.size()));
  const double tok_s = s.elapsed_s > 0 ? s.tokens_done / s.elapsed_s : 0;
  line += fmt::format(", {} tok/s, ETA {}, {}/{} workers busy", format_count(static_cast<int64_t>(tok_s + 0.5)),
                      format_duration(s.eta_s), busy, s.workers.size());
  if (s.batches_quarantined) line += fmt::format(", {} quarantined", s.batches_quarantined);
  return line + programs_part(execution);
}

void ProgressReporter::update(const SchedulerStatus& s, bool final) {
  last_ = s;
  write_status(final ? "finishing" : "running");
  if (live_ && !final &&
      Console::set_status(status_line(s, extra_.value("task_progress", nlohmann::json()),
                                      extra_.value("code_execution", nlohmann::json()))))
    return;
  if (live_) Console::clear_status();
  if (!final && s.elapsed_s - last_log_s_ < log_every_s_) return;
  last_log_s_ = s.elapsed_s;
  const double tok_s = s.elapsed_s > 0 ? s.tokens_done / s.elapsed_s : 0;
  std::string line = fmt::format("[sched] {}/{} batches ({:.0f}%), {:.0f} tok/s, elapsed {}, ETA {}", s.batches_done,
                                 s.batches_total, s.batches_total ? 100.0 * s.batches_done / s.batches_total : 100.0,
                                 tok_s, format_duration(s.elapsed_s), final ? "0s" : format_duration(s.eta_s));
  if (s.batches_quarantined) line += fmt::format(", {} quarantined", s.batches_quarantined);
  line += programs_part(extra_.value("code_execution", nlohmann::json()));
  for (const WorkerStatus& w : s.workers)
    line += fmt::format(" | {} {} {:.0f} tok/s", w.name, w.state, w.tokens_per_second);
  std::cerr << line << "\n";
}

}  // namespace gpueval
