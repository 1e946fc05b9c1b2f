#include "evaluation/program_runs.h"

#include <chrono>
#include <iostream>
#include <map>

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

nlohmann::json ProgramRunReport::summary(const Sandbox& sandbox, const ProgramRunSettings& settings) const {
  nlohmann::json j = sandbox.describe();
  j["mode"] = "code_eval";
  j["cpu_seconds"] = settings.limits.cpu_seconds;
  j["wall_ceiling_seconds"] = settings.limits.wall_ceiling();
  j["memory_bytes"] = settings.limits.memory;
  j["max_subprocesses"] = settings.limits.max_subprocesses;
  j["programs"] = static_cast<int64_t>(verdicts.size());
  j["programs_run"] = run;
  j["programs_resumed"] = resumed;
  j["passed"] = passed;
  j["failed"] = failed;
  j["timed_out"] = timed_out;
  return j;
}

ProgramRunReport run_task_programs(const std::vector<std::string>& programs, const Sandbox& sandbox,
                                   const ProgramRunSettings& settings, RunJournal* journal) {
  const auto t0 = std::chrono::steady_clock::now();
  ProgramRunReport report;
  const std::map<std::string, Journal::StoredVerdict> stored =
      journal ? journal->load_verdicts() : std::map<std::string, Journal::StoredVerdict>();
  std::vector<ProgramRequest> todo;
  std::vector<std::string> todo_keys;
  std::vector<const std::string*> todo_programs;
  auto count = [&](const std::string& verdict) {
    if (verdict == "passed") ++report.passed;
    else if (verdict == "timed out") ++report.timed_out;
    else ++report.failed;
  };
  for (const std::string& program : programs) {
    if (report.verdicts.count(program)) continue;
    const std::string key = execution_key(program, settings.limits, sandbox);
    const auto it = stored.find(key);
    if (it != stored.end()) {
      report.verdicts[program] = it->second.verdict == "passed";
      count(it->second.verdict);
      ++report.resumed;
      continue;
    }
    report.verdicts[program] = false;  // its place; set when it ends
    todo.push_back({program, settings.limits, ProgramMode::kCodeEval});
    todo_keys.push_back(key);
    todo_programs.push_back(&program);
  }
  const int parallel = settings.max_sandboxes > 0 ? settings.max_sandboxes : default_max_sandboxes(0);
  std::string error;
  run_programs(sandbox, todo, parallel, [&](size_t i, const Verdict& v) {
    if (v.kind == Verdict::Kind::kError) {
      if (error.empty()) {
        const std::string& program = *todo_programs[i];
        error = fmt::format("the sandbox could not run a program ({}...): {}", program.substr(0, program.find('\n')),
                            v.detail);
      }
      return;
    }
    const std::string verdict = verdict_name(v.kind);
    if (journal)
      journal->record_verdicts({{todo_keys[i], Journal::StoredVerdict{verdict, v.detail, v.cpu_seconds, v.wall_seconds}}});
    report.verdicts[*todo_programs[i]] = v.kind == Verdict::Kind::kPassed;
    count(verdict);
    ++report.run;
  });
  if (!error.empty()) fail("code execution", "{}", error);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << fmt::format("[exec] {} programs: {} from the journal, ran {} in {:.1f}s with {} sandboxes: {} passed, "
                           "{} failed, {} timed out\n",
                           report.verdicts.size(), report.resumed, report.run, report.seconds, parallel, report.passed,
                           report.failed, report.timed_out);
  return report;
}

}  // namespace gpueval
