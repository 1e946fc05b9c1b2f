// `gpueval merge DIR` (gpueval/cluster.h): every shard's journal read back, checked whole and
// against the plan, and aggregated into the reports and history entries of a one-machine run.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)

#include "aggregate/aggregator.h"
#include "cluster/sharded_plan.h"
#include "common/console.h"
#include "common/file_io.h"
#include "common/sha256.h"
#include "evaluation/checkpoint_evaluation.h"
#include "evaluation/history_recorder.h"
#include "evaluation/output_lock.h"
#include "evaluation/program_runs.h"
#include "evaluation/run_identity.h"
#include "evaluation/run_journal.h"
#include "gpueval/cluster.h"
#include "gpueval/error.h"
#include "plan/shards.h"
#include "report/trend_report.h"

namespace gpueval {
namespace {

using nlohmann::json;

// What one checkpoint's merge works with: its plan and inputs, and every item the shards stored.
struct MergedCheckpoint {
  const ShardedCheckpoint* plan_entry = nullptr;
  CheckpointWork work;
  std::vector<std::vector<ItemResult>> items;  // [request index]
};

// Why each shard cannot be merged yet, by shard.
using Problems = std::map<int, std::vector<std::string>>;

json read_shard_json(const ShardedPlan& sp, int shard) {
  const std::string path = sp.shard_dir(shard) + "/shard.json";
  if (!io::path_exists(path)) return json();
  json j = json::parse(io::read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("plan_fingerprint", "") != sp.fingerprint) return json();
  return j;
}

// Reads checkpoint c's items from each shard's journal; what is missing goes into `problems`.
MergedCheckpoint collect(const ShardedPlan& sp, const ShardedCheckpoint& c, const EvaluationOptions& options,
                         Problems& problems) {
  MergedCheckpoint m{&c, plan_checkpoint(sp, c, "cpu", options.executable), {}};
  m.items.resize(m.work.in.requests.size());
  for (int i = 0; i < sp.shards; ++i) {
    const int64_t n = c.batches_of(i);
    if (n == 0) continue;
    const std::string jdir = sp.journal_dir(i, c);
    if (!io::path_exists(jdir + "/journal.sqlite")) {
      problems[i].push_back(fmt::format("has not run ({} has no journal.sqlite)", jdir));
      continue;
    }
    RunJournal journal(jdir, c.checkpoint.fingerprint, m.work.in.model_dir,
                       config_fingerprint(sp.config, m.work.in.requests), m.work.in.requests, false);
    const std::optional<std::string> fp = journal.plan_fingerprint();
    if (!fp || *fp != sp.fingerprint)
      throw Error(fmt::format(
          "{}: computed against another plan ({}, {}/plan.json is {}); shards of two plans cannot "
          "be merged: run shard {} again with --fresh",
          journal.path(), fp ? fp->substr(0, 12) : std::string("none"), sp.dir, sp.fingerprint.substr(0, 12), i));
    const Plan part = plan_slice(m.work.plan, c.shard_batches[i], c.shard_batches[i + 1]);
    const Plan missing = journal.remaining(part, m.items);
    if (!missing.batches.empty())
      problems[i].push_back(
          fmt::format("is incomplete ({}: {} of {} batches missing)", c.checkpoint.name, missing.batches.size(), n));
  }
  return m;
}

// One line: every shard that cannot be merged, why, and how to run it again.
std::string problems_line(const ShardedPlan& sp, const Problems& problems) {
  std::vector<std::string> parts, commands;
  for (const auto& [shard, why] : problems) {
    parts.push_back(fmt::format("shard {} {}", shard, fmt::join(why, "; ")));
    commands.push_back(fmt::format("gpueval run {} --shard {}/{}", sp.dir, shard, sp.shards));
  }
  return fmt::format("{}: cannot merge: {} of {} shards not done: {}; run them (again): {}, then gpueval merge {}",
                     sp.dir, problems.size(), sp.shards, fmt::join(parts, ", "), fmt::join(commands, " && "), sp.dir);
}

// A digest of everything the merge's output depends on: the plan, every stored item, and what
// each shard says it computed. The same digest in merge.json: nothing to write again.
std::string merge_digest(const ShardedPlan& sp, const std::vector<MergedCheckpoint>& merged,
                         const std::vector<json>& shard_records) {
  std::string bytes = sp.fingerprint;
  for (const MergedCheckpoint& m : merged)
    for (const std::vector<ItemResult>& items : m.items)
      for (const ItemResult& r : items) {
        uint64_t bits = 0;
        std::memcpy(&bits, &r.logprob, sizeof bits);
        bytes += fmt::format("|{} {} {} {:016x} {} {} {}:", r.request_index, r.part, r.parts, bits, r.is_greedy,
                             r.num_tokens, r.text.size());
        bytes += r.text;
      }
  for (const json& j : shard_records) bytes += j.dump();
  return sha256_hex(bytes);
}

// results.json's "journal" and the computed figures of one merged checkpoint.
struct ShardFigures {
  json journal;
  ExecutionStats stats;
  double wall_seconds = 0;  // the slowest shard's
  json timing;  // results.json "timing": each shard's compute window, the slowest, the rate
};

ShardFigures figures(const ShardedPlan& sp, const ShardedCheckpoint& c, const std::vector<json>& records) {
  ShardFigures f;
  json shards = json::array();
  json compute = json::array();
  double slowest = 0;
  for (int i = 0; i < sp.shards; ++i) {
    if (c.batches_of(i) == 0) continue;
    const json& r = records[static_cast<size_t>(i)];
    const json ck = r.is_null() ? json() : r.value("checkpoints", json::object()).value(c.checkpoint.name, json());
    json line = {{"shard", i}, {"path", sp.journal_dir(i, c) + "/journal.sqlite"}, {"batches", c.batches_of(i)}};
    if (!ck.is_null()) {
      f.stats.tokens_computed += ck.value("tokens_computed", int64_t{0});
      f.stats.prefix_tokens += ck.value("prefix_tokens_computed", int64_t{0});
      f.stats.oom_splits += ck.value("oom_splits", int64_t{0});
      line["host"] = r.value("host", "");
      line["attempts"] = r.value("attempts", 0);
      line["batches_resumed_last_attempt"] = ck.value("batches_resumed", int64_t{0});
      line["batches_computed_last_attempt"] = ck.value("batches_computed", int64_t{0});
      const double c_s = ck.value("compute_s", 0.0);
      compute.push_back(
          {{"shard", i}, {"compute_s", c_s}, {"tokens_computed", ck.value("tokens_computed", int64_t{0})}});
      slowest = std::max(slowest, c_s);
    }
    if (!r.is_null()) f.wall_seconds = std::max(f.wall_seconds, r.value("wall_seconds", 0.0));
    shards.push_back(line);
  }
  f.journal = {{"plan", sp.plan_path()}, {"plan_fingerprint", sp.fingerprint}, {"shards", shards}};
  // The shards run side by side: the merged run's window is its slowest shard's, and its rate is
  // every shard's computed tokens over that window.
  f.timing = {{"compute_s", slowest},
              {"tokens_computed", f.stats.tokens_computed},
              {"computed_tokens_per_s",
               slowest > 0 ? json(static_cast<double>(f.stats.tokens_computed) / slowest) : json(nullptr)},
              {"shards", compute}};
  return f;
}

}  // namespace

int run_merge_command(const std::string& dir, const EvaluationOptions& options) {
  const ShardedPlan sp = read_sharded_plan(dir);
  const DirectoryLock lock = lock_output(sp.dir, options);
  Problems problems;
  std::vector<MergedCheckpoint> merged;
  for (const ShardedCheckpoint& c : sp.checkpoints) merged.push_back(collect(sp, c, options, problems));
  if (!problems.empty()) throw Error(problems_line(sp, problems));

  std::vector<json> records;
  for (int i = 0; i < sp.shards; ++i) records.push_back(read_shard_json(sp, i));
  const std::string digest = merge_digest(sp, merged, records);
  const std::string marker = sp.dir + "/merge.json";
  if (io::path_exists(marker)) {
    const json j = json::parse(io::read_file(marker), nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("digest", "") == digest) {
      std::cerr << fmt::format("[merge] {} is merged from these shards already ({}): nothing to write\n", sp.dir,
                               marker);
      if (options.scores_out)
        for (const ShardedCheckpoint& c : sp.checkpoints)
          *options.scores_out << "full report: " << c.output << "/report.md\n";
      return 0;
    }
  }

  HistoryRecorder recorder(sp.config, sp.config_fingerprint);
  json lines = json::array();
  bool incomplete = false;
  for (MergedCheckpoint& m : merged) {
    const ShardedCheckpoint& c = *m.plan_entry;
    RunConfig config = sp.config;
    config.output = c.output;
    config.models = {c.checkpoint.path};
    Aggregator aggregator(m.work.in.tasks, m.work.in.requests);
    for (std::vector<ItemResult>& items : m.items) aggregator.add(std::move(items));
    // The code tasks' programs run here, once every shard's generations are in (program_runs.h).
    std::optional<ProgramRunReport> ran;
    json code_execution = json::object();
    if (std::any_of(m.work.in.tasks.begin(), m.work.in.tasks.end(), [](const Task& t) { return t.runs_programs(); })) {
      const Sandbox sandbox(sandbox_options(config.code_execution));
      const ProgramRunSettings settings = program_run_settings(config.code_execution, 0);
      ran = run_task_programs(aggregator.programs(), sandbox, settings, nullptr);
      code_execution = ran->summary(sandbox, settings);
    }
    const Aggregator::Documents docs = scored_documents(aggregator, ran ? &*ran : nullptr);
    const ShardFigures f = figures(sp, c, records);
    Budget budget{m.work.options, c.budget_source};
    RunSummary summary =
        run_summary(config, m.work.in, budget, m.work.plan, f.stats, f.journal, f.wall_seconds, docs.incomplete);
    summary.date = sp.created;  // the run's start: the plan's, so a second merge writes the same bytes
    summary.timing = f.timing;
    summary.code_execution = code_execution;
    const std::string state = docs.incomplete.empty() ? "complete" : "incomplete";
    incomplete = incomplete || !docs.incomplete.empty();
    const CheckpointReports written = write_checkpoint_reports(config, m.work.in, docs, summary);
    json line = {{"name", c.checkpoint.name}, {"state", state}};
    recorder.recorder(c.checkpoint, &line)(docs.scored, written.scores, summary, state);
    lines.push_back(line);
    std::cerr << fmt::format("[merge] {}: {} documents from {} shards; report in {}\n", c.checkpoint.name,
                             docs.scored.size(), sp.shards, c.output);
    show_scores(options, sp.nightly ? c.checkpoint.name : "", written.table, c.output);
  }
  for (const json& f : sp.failed)
    Console::error(
        fmt::format("[merge] checkpoint {} failed when planned: {}", f.value("name", ""), f.value("error", "")));
  if (sp.nightly) {
    write_trend_reports(sp.dir, recorder.history(), sp.config_fingerprint, sp.config.fail_on_regression);
    std::cerr << fmt::format("[merge] trend of {} checkpoints: {}/report.md, {}/report.html\n",
                             recorder.history().trend(sp.config_fingerprint).size(), sp.dir, sp.dir);
    if (options.scores_out) *options.scores_out << "trend report: " << sp.dir << "/report.md" << std::endl;
  }
  recorder.export_tensorboard(sp.config.tensorboard, io::base_name(sp.dir));
  io::write_file_atomic(
      marker, json{{"plan_fingerprint", sp.fingerprint}, {"digest", digest}, {"checkpoints", lines}}.dump(2) + "\n");
  const bool regressed = sp.config.fail_on_regression && !recorder.regressions(*sp.config.fail_on_regression).empty();
  if (!sp.failed.empty()) return 1;
  return regressed ? kExitRegression : incomplete ? kExitIncomplete : 0;
}

}  // namespace gpueval
