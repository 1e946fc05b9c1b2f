// `gpueval execute`: programs through the code sandbox without a model (commands.h).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/byte_amount.h"
#include "gpueval/error.h"
#include "sandbox/program_pool.h"
#include "sandbox/sandbox.h"

namespace gpueval {
namespace {

ProgramMode parse_mode(const std::string& text, const std::string& where) {
  if (text == "code_eval") return ProgramMode::kCodeEval;
  if (text == "script") return ProgramMode::kScript;
  fail(where, "mode must be code_eval or script, got '{}'", text);
}

int64_t parse_memory(const nlohmann::json& value, const std::string& where) {
  if (value.is_number_integer()) {
    const int64_t bytes = value.get<int64_t>();
    if (bytes < (int64_t{64} << 20)) fail(where, "memory must be at least 64MiB, got {} bytes", bytes);
    return bytes;
  }
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (const std::optional<int64_t> bytes = parse_byte_amount(text, int64_t{64} << 20, where)) return *bytes;
    fail(where, "memory must be an amount such as 2GiB or 512MiB, got '{}'", text);
  }
  fail(where, "memory must be an amount such as \"2GiB\" or a number of bytes");
}

struct Line {
  nlohmann::json id;
  ProgramRequest request;
};

Line parse_line(const std::string& text, const SandboxLimits& defaults, ProgramMode mode, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(where, "not JSON");
  if (!j.is_object()) fail(where, "expected an object {{\"id\", \"program\"}}, got {}", j.type_name());
  static const char* const kKeys[] = {"id", "program", "cpu_seconds", "memory", "mode"};
  for (const auto& [key, value] : j.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      fail(where, "unknown key '{}' (known: id, program, cpu_seconds, memory, mode)", key);
  if (!j.contains("program") || !j["program"].is_string()) fail(where, "'program' must be a string");
  Line line;
  line.id = j.value("id", nlohmann::json());
  line.request.program = j["program"].get<std::string>();
  line.request.limits = defaults;
  line.request.mode = mode;
  if (j.contains("cpu_seconds")) {
    if (!j["cpu_seconds"].is_number()) fail(where, "'cpu_seconds' must be a number");
    line.request.limits.cpu_seconds = j["cpu_seconds"].get<double>();
  }
  if (j.contains("memory")) line.request.limits.memory = parse_memory(j["memory"], where + ": 'memory'");
  if (j.contains("mode")) {
    if (!j["mode"].is_string()) fail(where, "'mode' must be a string");
    line.request.mode = parse_mode(j["mode"].get<std::string>(), where);
  }
  check_sandbox_limits(line.request.limits, where);
  return line;
}

}  // namespace

void run_execute(const ExecuteCommand& cmd, std::istream& in, std::ostream& out) {
  SandboxLimits defaults;
  defaults.cpu_seconds = cmd.cpu_seconds;
  defaults.wall_seconds = cmd.wall_seconds;
  defaults.memory = parse_memory(nlohmann::json(cmd.memory), "--memory");
  defaults.max_subprocesses = cmd.max_subprocesses;
  check_sandbox_limits(defaults, "gpueval execute");
  const ProgramMode mode = parse_mode(cmd.mode, "--mode");
  if (cmd.max_sandboxes < 0) fail("--max-sandboxes", "must be at least 1 (0: every core), got {}", cmd.max_sandboxes);

  std::vector<Line> lines;
  std::string text;
  for (size_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(parse_line(text, defaults, mode, fmt::format("stdin line {}", number)));
  }
  const Sandbox sandbox(SandboxOptions{cmd.python, "/usr/bin/bwrap", cmd.unsafe_no_sandbox});
  if (cmd.unsafe_no_sandbox)
    std::cerr << "[execute] --unsafe-no-sandbox: programs run without a sandbox, as this user, with rlimits only\n";
  const int parallel = cmd.max_sandboxes > 0 ? cmd.max_sandboxes : default_max_sandboxes(0);
  std::vector<ProgramRequest> requests;
  for (const Line& l : lines) requests.push_back(l.request);
  std::vector<std::optional<std::string>> done(lines.size());
  std::map<std::string, int> counts;
  size_t printed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  run_programs(sandbox, requests, parallel, [&](size_t i, const Verdict& v) {
    // {"id", "verdict", "detail", "cpu_s", "wall_s"}, in that order.
    nlohmann::ordered_json j;
    j["id"] = nlohmann::ordered_json::parse(lines[i].id.dump());
    const nlohmann::ordered_json verdict = to_json(v);
    for (const auto& [key, value] : verdict.items()) j[key] = value;
    done[i] = j.dump();
    ++counts[verdict_name(v.kind)];
    // In input order: each line as soon as every one before it is out.
    for (; printed < done.size() && done[printed]; ++printed) out << *done[printed] << "\n" << std::flush;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << fmt::format(
                   "[execute] {} programs in {:.2f} s with {} sandboxes ({:.1f} programs/s): {} passed, {} "
                   "failed, {} timed out, {} error ({}, python {})",
                   lines.size(), seconds, parallel, seconds > 0 ? static_cast<double>(lines.size()) / seconds : 0.0,
                   counts["passed"], counts["failed"], counts["timed out"], counts["error"],
                   cmd.unsafe_no_sandbox ? "no sandbox" : "bwrap", sandbox.interpreter().version)
            << "\n";
}

}  // namespace gpueval
