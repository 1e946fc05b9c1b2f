#include "evaluation/program_runs.h"

#include <chrono>
#include <csignal>
#include <cmath>
#include <iostream>
#include <map>

#include <pthread.h>

#include <fmt/format.h>

#include "common/sha256.h"
#include "gpueval/error.h"
#include "sandbox/program_pool.h"

namespace gpueval {

std::string execution_key(const std::string& program, const SandboxLimits& limits, const Sandbox& sandbox) {
  const nlohmann::json what = {{"mode", "code_eval"},
                               {"cpu_seconds", limits.cpu_seconds},
                               {"wall_seconds", limits.wall_ceiling()},
                               {"memory", limits.memory},
                               {"file_size", limits.file_size},
                               {"tmpfs_size", limits.tmpfs_size},
                               {"max_output", limits.max_output},
                               {"max_open_files", limits.max_open_files},
                               {"max_subprocesses", limits.max_subprocesses},
                               {"sandbox", sandbox.describe()}};
  return sha256_hex(what.dump() + '\0' + program);
}

SandboxOptions sandbox_options(const RunConfig::CodeExecution& config) {
  SandboxOptions options;
  options.unsafe_no_sandbox = config.unsafe_no_sandbox;
  options.offer_unsafe = true;
  return options;
}

ProgramRunSettings program_run_settings(const RunConfig::CodeExecution& config, int busy_cores) {
  ProgramRunSettings settings;
  settings.limits.cpu_seconds = config.cpu_seconds;
  settings.limits.wall_seconds = config.wall_seconds;
  settings.limits.memory = config.memory;
  settings.limits.max_subprocesses = static_cast<int>(config.max_subprocesses);
  settings.max_sandboxes = static_cast<int>(config.max_sandboxes);
  settings.busy_cores = busy_cores;
  return settings;
}

int ProgramRunSettings::sandboxes() const {
  return max_sandboxes > 0 ? max_sandboxes : default_max_sandboxes(busy_cores);
}

nlohmann::json ProgramRunStatus::to_json() const {
  return {{"sandboxes_busy", sandboxes_busy},
          {"max_sandboxes", max_sandboxes},
          {"programs_done", programs_done},
          {"programs_queued", programs_queued}};
}

nlohmann::json ProgramRunReport::summary(const Sandbox& sandbox, const ProgramRunSettings& settings) const {
  nlohmann::json j = sandbox.describe();
  j["mode"] = "code_eval";
  j["cpu_seconds"] = settings.limits.cpu_seconds;
  j["wall_ceiling_seconds"] = settings.limits.wall_ceiling();
  j["memory_bytes"] = settings.limits.memory;
  j["max_subprocesses"] = settings.limits.max_subprocesses;
  j["max_sandboxes"] = settings.sandboxes();
  j["programs"] = static_cast<int64_t>(verdicts.size());
  j["programs_run"] = run;
  j["programs_resumed"] = resumed;
  j["passed"] = passed;
  j["failed"] = failed;
  j["timed_out"] = timed_out;
  j["seconds"] = std::round(seconds * 1000) / 1000;
  return j;
}

ProgramRunner::ProgramRunner(const Sandbox& sandbox, ProgramRunSettings settings, RunJournal* journal)
    : sandbox_(sandbox), settings_(std::move(settings)), journal_(journal) {
  if (journal_) stored_ = journal_->load_verdicts();
}

ProgramRunner::~ProgramRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ProgramRunner::start_threads() {
  // The threads block every signal a process is stopped or told with, so SIGINT, SIGTERM and
  // SIGCHLD reach the scheduler's thread, which waits for them (run/signals.h).
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  const int n = settings_.sandboxes();
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void ProgramRunner::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const size_t index = queue_.front();
    queue_.pop_front();
    ++busy_;
    const std::string program = programs_[index];  // submit() may grow programs_ meanwhile
    lock.unlock();
    Verdict v = sandbox_.run(program, settings_.limits, ProgramMode::kCodeEval);
    lock.lock();
    --busy_;
    done_.push_back(Done{index, std::move(v)});
    done_ready_.notify_all();
  }
}

namespace {

void count(ProgramRunReport& report, const std::string& verdict) {
  if (verdict == "passed")
    ++report.passed;
  else if (verdict == "timed out")
    ++report.timed_out;
  else
    ++report.failed;
}

}  // namespace

void ProgramRunner::submit(const std::vector<std::string>& programs) {
  std::vector<size_t> queued;
  for (const std::string& program : programs) {
    if (report_.verdicts.count(program)) continue;
    const std::string key = execution_key(program, settings_.limits, sandbox_);
    const auto it = stored_.find(key);
    if (it != stored_.end()) {
      report_.verdicts[program] = it->second.verdict == "passed";
      report_.outcomes[program] = ProgramOutcome{it->second.verdict, it->second.detail};
      count(report_, it->second.verdict);
      ++report_.resumed;
      continue;
    }
    report_.verdicts[program] = false;  // its place; set when it ends
    std::lock_guard<std::mutex> lock(mutex_);
    programs_.push_back(program);
    keys_.push_back(key);
    queued.push_back(programs_.size() - 1);
  }
  if (queued.empty()) return;
  if (!ran_any_) {
    ran_any_ = true;
    first_run_ = std::chrono::steady_clock::now();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.insert(queue_.end(), queued.begin(), queued.end());
  }
  if (threads_.empty()) start_threads();
  work_ready_.notify_all();
}

void ProgramRunner::collect() {
  std::vector<Done> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done.swap(done_);
  }
  std::vector<std::pair<std::string, Journal::StoredVerdict>> store;
  for (Done& d : done) {
    const std::string& program = programs_[d.index];
    const Verdict& v = d.verdict;
    if (v.kind == Verdict::Kind::kError) {
      if (error_.empty())
        error_ = fmt::format("the sandbox could not run a program ({}...): {}", program.substr(0, program.find('\n')),
                             v.detail);
      continue;
    }
    const std::string verdict = verdict_name(v.kind);
    store.emplace_back(keys_[d.index], Journal::StoredVerdict{verdict, v.detail, v.cpu_seconds, v.wall_seconds});
    report_.verdicts[program] = v.kind == Verdict::Kind::kPassed;
    report_.outcomes[program] = ProgramOutcome{verdict, v.detail};
    count(report_, verdict);
    ++report_.run;
  }
  if (journal_ && !store.empty()) journal_->record_verdicts(store);
}

void ProgramRunner::throw_if_failed() const {
  if (!error_.empty()) fail("code execution", "{}", error_);
}

ProgramRunStatus ProgramRunner::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ProgramRunStatus s;
  s.sandboxes_busy = busy_;
  s.max_sandboxes = settings_.sandboxes();
  s.programs_done = report_.resumed + report_.run;  // collected, so journaled: a resume keeps them
  s.programs_queued = static_cast<int64_t>(queue_.size());
  return s;
}

ProgramRunReport ProgramRunner::finish(const std::function<void(const ProgramRunStatus&)>& on_progress) {
  for (;;) {
    collect();
    throw_if_failed();
    if (on_progress) on_progress(status());
    std::unique_lock<std::mutex> lock(mutex_);
    if (queue_.empty() && busy_ == 0 && done_.empty()) break;
    done_ready_.wait_for(lock, std::chrono::seconds(1), [&] { return !done_.empty(); });
  }
  if (ran_any_) report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_run_).count();
  std::cerr << fmt::format(
      "[exec] {} programs: {} from the journal, ran {} in {:.1f}s with {} sandboxes: {} passed, "
      "{} failed, {} timed out\n",
      report_.verdicts.size(), report_.resumed, report_.run, report_.seconds, settings_.sandboxes(), report_.passed,
      report_.failed, report_.timed_out);
  return report_;
}

namespace {

// Each code document's program verdicts and details, for the samples file.
void attach_program_outcomes(std::vector<DocRecord>& scored,
                             const std::unordered_map<std::string, ProgramOutcome>& outcomes) {
  for (DocRecord& rec : scored) {
    if (!rec.task->runs_programs()) continue;
    for (size_t f = 0; f < rec.task->filters().size(); ++f) {
      nlohmann::json list = nlohmann::json::array();
      for (const std::string& program : rec.task->programs(rec.doc, rec.results, f)) {
        const auto it = outcomes.find(program);
        if (it == outcomes.end()) {
          list.push_back({{"verdict", nullptr}, {"detail", ""}});
        } else {
          list.push_back({{"verdict", it->second.verdict}, {"detail", it->second.detail}});
        }
      }
      rec.programs.push_back(std::move(list));
    }
  }
}

}  // namespace

Aggregator::Documents scored_documents(const Aggregator& aggregator, const ProgramRunReport* ran) {
  const ProgramVerdicts none;
  Aggregator::Documents docs = aggregator.documents(ran ? &ran->verdicts : &none);
  if (ran) attach_program_outcomes(docs.scored, ran->outcomes);
  return docs;
}

ProgramSink::ProgramSink(const Sandbox& sandbox, ProgramRunSettings settings, RunJournal& journal,
                         Aggregator& aggregator, ProgressReporter& progress)
    : sandbox_(sandbox),
      settings_(settings),
      aggregator_(aggregator),
      progress_(progress),
      runner_(sandbox, settings, &journal) {}

void ProgramSink::hand() {
  if (!status_error_.empty()) throw Error(status_error_);
  runner_.submit(aggregator_.take_ready_programs());
  runner_.collect();
  runner_.throw_if_failed();  // in the result callback: ends the run (scheduler.h)
  progress_.set_extra("code_execution", runner_.status().to_json());
}

void ProgramSink::status(const SchedulerStatus&, bool) {
  if (!status_error_.empty()) return;
  // Journaled now; an error verdict (or a failed write) ends the run with the next batch or at the end.
  try {
    runner_.collect();
  } catch (const std::exception& e) {
    status_error_ = e.what();
  }
  progress_.set_extra("code_execution", runner_.status().to_json());
}

ProgramRunReport ProgramSink::finish() {
  hand();  // throws what status() kept
  return runner_.finish([&](const ProgramRunStatus& s) {
    progress_.set_extra("code_execution", s.to_json());
    progress_.programs(s.to_json());
  });
}

ProgramRunReport run_task_programs(const std::vector<std::string>& programs, const Sandbox& sandbox,
                                   const ProgramRunSettings& settings, RunJournal* journal) {
  ProgramRunner runner(sandbox, settings, journal);
  runner.submit(programs);
  return runner.finish();
}

}  // namespace gpueval
