// The commands of gpueval/cluster.h that plan and run shards; merge.cpp, shard_status.cpp and
// slurm.cpp hold the others.
#include "gpueval/cluster.h"

#include <charconv>
#include <cstdlib>

#include "cluster/shard_run.h"
#include "cluster/sharded_plan.h"
#include "evaluation/output_lock.h"
#include "evaluation/run_identity.h"
#include "evaluation/run_inputs.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

bool parse_int(const std::string& s, int& out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

ShardId parse_shard(const std::string& spec) {
  const size_t slash = spec.find('/');
  ShardId id;
  if (slash == std::string::npos || !parse_int(spec.substr(0, slash), id.index) ||
      !parse_int(spec.substr(slash + 1), id.count))
    throw Error(fmt::format("--shard: expected i/N (shard i of N, counted from 0), got '{}'", spec));
  if (id.count < 1 || id.index < 0 || id.index >= id.count)
    throw Error(fmt::format("--shard: {} is not a shard of {} (shards are 0 to {})", id.index, id.count, id.count - 1));
  return id;
}

std::optional<ShardId> shard_from_environment(int shards) {
  ShardId id;
  id.count = shards;
  const std::string task = env("SLURM_ARRAY_TASK_ID"), k8s = env("JOB_COMPLETION_INDEX");
  if (!task.empty()) {
    int min = 0, count = shards;
    if (!parse_int(task, id.index)) throw Error("SLURM_ARRAY_TASK_ID: not a number: '" + task + "'");
    if (!env("SLURM_ARRAY_TASK_MIN").empty() && !parse_int(env("SLURM_ARRAY_TASK_MIN"), min))
      throw Error("SLURM_ARRAY_TASK_MIN: not a number: '" + env("SLURM_ARRAY_TASK_MIN") + "'");
    if (!env("SLURM_ARRAY_TASK_COUNT").empty() && !parse_int(env("SLURM_ARRAY_TASK_COUNT"), count))
      throw Error("SLURM_ARRAY_TASK_COUNT: not a number: '" + env("SLURM_ARRAY_TASK_COUNT") + "'");
    id.index -= min;
    if (count != shards)
      throw Error(
          fmt::format("SLURM_ARRAY_TASK_COUNT is {} but the plan has {} shards: submit the array as "
                      "--array=0-{}",
                      count, shards, shards - 1));
  } else if (!k8s.empty()) {
    if (!parse_int(k8s, id.index)) throw Error("JOB_COMPLETION_INDEX: not a number: '" + k8s + "'");
  } else {
    return std::nullopt;
  }
  if (id.index < 0 || id.index >= shards)
    throw Error(fmt::format("{}: shard {} is not one of the plan's {} (0 to {})",
                            task.empty() ? "JOB_COMPLETION_INDEX" : "SLURM_ARRAY_TASK_ID", id.index, shards,
                            shards - 1));
  return id;
}

int run_plan_command(const RunConfig& config, int shards, const EvaluationOptions& options) {
  const DirectoryLock lock = lock_output(with_absolute_paths(config).output, options);
  make_sharded_plan(config, shards, options);
  return 0;
}

int run_shard_command(const std::string& dir, std::optional<ShardId> shard, const ShardRunOptions& options) {
  const ShardedPlan sp = read_sharded_plan(dir);
  if (!shard) shard = shard_from_environment(sp.shards);
  if (!shard)
    throw Error(
        fmt::format("{}: a sharded run: say which shard with --shard i/{} (or run it as a Slurm array task, "
                    "SLURM_ARRAY_TASK_ID, or a Kubernetes Indexed Job pod, JOB_COMPLETION_INDEX)",
                    sp.plan_path(), sp.shards));
  if (options.config) {
    const RunConfig given = with_absolute_paths(*options.config);
    if (config_fingerprint(given, load_tasks(given, options.evaluation.executable).requests) != sp.config_fingerprint)
      throw Error(
          fmt::format("{}: computes other requests than {} (another config, or other flags); plan it again: "
                      "gpueval plan {} --shards {}",
                      options.config->source, sp.plan_path(), options.config->source, sp.shards));
  }
  if (shard->count != sp.shards)
    throw Error(fmt::format("--shard {}/{}: {} has {} shards", shard->index, shard->count, sp.plan_path(), sp.shards));
  return run_shard(sp, *shard, options);
}

}  // namespace gpueval
