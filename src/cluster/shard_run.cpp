#include "cluster/shard_run.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "common/file_io.h"
#include "evaluation/checkpoint_evaluation.h"
#include "evaluation/output_lock.h"
#include "evaluation/run_identity.h"
#include "evaluation/run_journal.h"
#include "evaluation/run_loop.h"
#include "gpueval/error.h"
#include "plan/shards.h"
#include "run/progress.h"
#include "run/scheduler.h"

namespace gpueval {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// shard.json of an earlier attempt of this shard under the same plan (null otherwise): what it
// computed adds to this attempt's figures.
json earlier_attempts(const std::string& path, const std::string& plan_fp) {
  if (!io::path_exists(path)) return json();
  json j = json::parse(io::read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("plan_fingerprint", "") != plan_fp) return json();
  return j;
}

// The shard's batches in the journal, resumed and computed, in status.json ("shard_batches_done").
class BatchCount : public RunSink {
 public:
  BatchCount(int64_t& done, ProgressReporter& progress) : done_(done), progress_(progress) {}
  void resumed(size_t batches_stored, size_t) override { show(done_ += static_cast<int64_t>(batches_stored)); }
  void batch_done() override { show(++done_); }

 private:
  void show(int64_t done) { progress_.set_extra("shard_batches_done", done); }
  int64_t& done_;
  ProgressReporter& progress_;
};

// status.json's shard, host and Slurm job (what `gpueval status` reads), and the batch counts.
void show_shard(ProgressReporter& progress, const ShardedPlan& sp, ShardId shard, int64_t total) {
  progress.set_extra("shard", shard.index);
  progress.set_extra("shards", shard.count);
  progress.set_extra("plan_fingerprint", sp.fingerprint);
  progress.set_extra("host", host_name());
  progress.set_extra("pid", static_cast<int64_t>(::getpid()));
  progress.set_extra("slurm_job_id", env_or("SLURM_JOB_ID"));  // what scancel and scontrol take
  if (!env_or("SLURM_ARRAY_JOB_ID").empty())
    progress.set_extra("slurm_array_task", env_or("SLURM_ARRAY_JOB_ID") + "_" + env_or("SLURM_ARRAY_TASK_ID"));
  progress.set_extra("shard_batches_total", total);
  progress.set_extra("shard_batches_done", int64_t{0});
}

// shard.json's entry of one checkpoint: what this attempt computed, added to `before` (the
// earlier attempts' entry, null if none).
json checkpoint_record(const PlanRunReport& ran, const RunJournal& journal, const json& before) {
  const SchedulerReport& report = ran.scheduler;
  auto sum = [&](const char* key, int64_t now) { return now + (before.is_null() ? 0 : before.value(key, int64_t{0})); };
  return {{"batches", ran.batches},
          {"batches_resumed", ran.batches_resumed},
          {"batches_computed", journal.batches_computed()},
          {"requests_computed", journal.requests_computed()},
          {"tokens_computed", sum("tokens_computed", report.stats.tokens_computed)},
          {"prefix_tokens_computed", sum("prefix_tokens_computed", report.stats.prefix_tokens)},
          {"oom_splits", sum("oom_splits", report.stats.oom_splits)},
          // this checkpoint's compute windows (scheduler.h's RunTiming), summed over the shard's attempts
          {"compute_s", report.timing.compute_s + (before.is_null() ? 0.0 : before.value("compute_s", 0.0))},
          {"quarantined", report.quarantined.size()}};
}

}  // namespace

int run_shard(const ShardedPlan& sp, ShardId shard, const ShardRunOptions& options) {
  const auto t0 = Clock::now();
  const std::string dir = sp.shard_dir(shard.index);
  RunConfig config = sp.config;
  config.output = dir;
  if (!options.gpus.empty()) config.gpus = options.gpus;
  const DirectoryLock lock = lock_output(dir, options.evaluation);  // two copies of one shard never both run
  io::make_directories(dir + "/logs");
  const std::vector<DeviceSlot> slots = run_device_slots(config);
  Scheduler scheduler(scheduler_options(config, options.evaluation, slots));
  ProgressReporter progress(dir + "/status.json", fmt::format("{} shard {}/{}", sp.dir, shard.index, shard.count),
                            options.evaluation.live_progress);
  const int64_t total = sp.batches_of(shard.index);
  int64_t done = 0;
  show_shard(progress, sp, shard, total);
  std::cerr << fmt::format("[shard] {}/{} of {} (plan {}): {} batches on {}\n", shard.index, shard.count, sp.dir,
                           sp.fingerprint.substr(0, 12), total, config.gpus.empty() ? "cpu" : config.gpus);

  const std::string shard_json_path = dir + "/shard.json";
  const json earlier = earlier_attempts(shard_json_path, sp.fingerprint);
  json record = {{"shard", shard.index},
                 {"shards", shard.count},
                 {"plan_fingerprint", sp.fingerprint},
                 {"host", host_name()},
                 {"attempts", earlier.is_null() ? 1 : earlier.value("attempts", 0) + 1},
                 // what earlier attempts computed, until this one adds to it
                 {"checkpoints", earlier.is_null() ? json::object() : earlier.value("checkpoints", json::object())},
                 {"wall_seconds", earlier.is_null() ? 0.0 : earlier.value("wall_seconds", 0.0)}};
  // Written now too, so that an attempt killed before its end still counts.
  record["state"] = "running";
  io::write_file_atomic(shard_json_path, record.dump(2) + "\n");
  std::string state = "complete";
  int exit_code = 0;
  for (const ShardedCheckpoint& c : sp.checkpoints) {
    if (c.batches_of(shard.index) == 0) continue;
    progress.set_extra("checkpoint", c.checkpoint.name);
    CheckpointWork work = plan_checkpoint(sp, c, config.gpus, options.evaluation.executable);
    const std::string jdir = sp.journal_dir(shard.index, c);
    io::make_directories(jdir);
    RunJournal journal(jdir, c.checkpoint.fingerprint, work.in.model_dir, config_fingerprint(config, work.in.requests),
                       work.in.requests, options.evaluation.fresh);
    const std::optional<std::string> journal_plan = journal.plan_fingerprint();
    if (journal_plan && *journal_plan != sp.fingerprint)
      throw Error(fmt::format("{}: computed against another plan ({}, this one is {}); --fresh starts this shard over",
                              journal.path(), journal_plan->substr(0, 12), sp.fingerprint.substr(0, 12)));
    if (!journal_plan) {
      journal.set_plan_fingerprint(sp.fingerprint);
      journal.set_batch_tokens(c.batch_tokens);
    }
    const Plan part = plan_slice(work.plan, c.shard_batches[shard.index], c.shard_batches[shard.index + 1]);
    BatchCount count(done, progress);  // the items stay in the journal: the merge aggregates them
    const PlanRunReport ran = run_plan(part, work.in, config.dtype, journal, scheduler, progress, {&count});
    const SchedulerReport& report = ran.scheduler;

    const json before =
        earlier.is_null() ? json() : earlier.value("checkpoints", json::object()).value(c.checkpoint.name, json());
    record["checkpoints"][c.checkpoint.name] = checkpoint_record(ran, journal, before);
    for (const QuarantinedBatch& q : report.quarantined)
      std::cerr << fmt::format("[shard] {}: batch {} quarantined after {} attempts ({})\n", c.checkpoint.name,
                               q.batch_id, q.attempts, q.last_failure);
    if (!report.fatal_error.empty()) {
      progress.finish("failed");
      throw Error(report.fatal_error);
    }
    if (report.interrupted) {
      state = "interrupted";
      exit_code = 128 + report.signal;
      break;
    }
    if (!report.quarantined.empty()) {
      state = "incomplete";
      exit_code = kExitIncomplete;
    }
  }
  scheduler.shutdown();
  progress.set_extra("checkpoint", nullptr);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  record["state"] = state;
  record["wall_seconds"] = wall + (earlier.is_null() ? 0.0 : earlier.value("wall_seconds", 0.0));
  io::write_file_atomic(shard_json_path, record.dump(2) + "\n");
  std::cerr << fmt::format("[shard] {}/{} {}: {} of {} batches in the journal, {:.1f}s; status in {}/status.json\n",
                           shard.index, shard.count, state, done, total, wall, dir);
  progress.finish(state);
  return exit_code;
}

}  // namespace gpueval
