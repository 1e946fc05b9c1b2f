// More than one machine: a run cut into shards that machines run independently (the tasks of a
// Slurm job array, the pods of a Kubernetes Indexed Job, or commands started by hand), then
// merged into exactly the reports a one-machine run writes. Every machine reads and writes one
// directory on shared storage:
//   gpueval plan CONFIG --output DIR --shards N   plan once: DIR/plan.json (the budget chosen here)
//   gpueval run DIR --shard i/N                   shard i: its batches, journaled in DIR/shards/i/
//   gpueval merge DIR                             every shard's journal -> DIR's reports and history
//   gpueval status DIR                            each shard: done, running, failed, pending; ETA
//   gpueval slurm CONFIG --nodes N ...            the three Slurm jobs (plan, array, merge)
// The merged results.json "results" and samples files equal a one-machine run's byte for byte,
// whatever the number of shards or machines, the order they ran in, or how often one was killed
// and started again. SQLite journals are per shard and never shared between machines.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "gpueval/evaluation.h"
#include "gpueval/run_config.h"

namespace gpueval {

struct ShardId {
  int index = 0;  // 0 .. count-1
  int count = 1;
};

// "i/N" with 0 <= i < N; Error "--shard: ..." otherwise.
ShardId parse_shard(const std::string& spec);

// The shard a Slurm job array task or a Kubernetes Indexed Job pod is: SLURM_ARRAY_TASK_ID
// (less SLURM_ARRAY_TASK_MIN) of SLURM_ARRAY_TASK_COUNT, else JOB_COMPLETION_INDEX of `shards`
// (the plan's count); nullopt when neither is set. Error when the count disagrees with `shards`
// or the index is out of range.
std::optional<ShardId> shard_from_environment(int shards);

// `gpueval plan`: writes <config.output>/plan.json for `shards` shards; returns 0.
int run_plan_command(const RunConfig& config, int shards, const EvaluationOptions& options);

struct ShardRunOptions {
  EvaluationOptions evaluation;
  std::string gpus;  // --gpus for this machine; "" = the plan's config's, else cpu
  // The config the command named (`gpueval run CONFIG` whose output holds the plan): it must be
  // the plan's (the same config fingerprint), else an Error says to plan again.
  std::optional<RunConfig> config;
};

// `gpueval run DIR --shard i/N` (or the shard from the environment): one shard of DIR's plan.
int run_shard_command(const std::string& dir, std::optional<ShardId> shard, const ShardRunOptions& options);

// `gpueval merge DIR`: 0 when merged (or already merged: nothing is written again); Error naming
// the missing or incomplete shards and the commands that run them again.
int run_merge_command(const std::string& dir, const EvaluationOptions& options);

// `gpueval status DIR`: one line per shard and a summary; json: the same as one JSON object.
// Returns 0 when every shard is complete, 3 otherwise.
int run_status_command(const std::string& dir, bool json, std::ostream& out);

// `gpueval slurm CONFIG`: the job scripts of a sharded run on Slurm.
struct SlurmOptions {
  int nodes = 1;  // shards: one job array task per node
  int gpus_per_node = 0;  // 0: CPU workers (cpu_workers of them)
  int cpu_workers = 1;  // with gpus_per_node 0
  int cpus_per_task = 0;  // 0: Slurm's default with GPUs, cpu_workers * the config's cpu_threads without
  std::string partition, time, account, qos, mem;
  std::vector<std::string> sbatch_args;  // extra `#SBATCH` options, verbatim (--constraint=h100)
  int max_requeues = 3;  // a shard killed on its node is requeued at most this often
  bool submit = false;  // submit with sbatch (else only write the scripts)
  std::string executable;  // this binary (absolute), on storage every node sees
};

// Writes <config.output>/slurm/{plan,shards,merge}.sbatch and submit.sh; with submit, submits
// them (the array after the plan, the merge after the array, `afterok`) and prints the job ids.
int run_slurm_command(const RunConfig& config, const SlurmOptions& options, std::ostream& out);

}  // namespace gpueval
