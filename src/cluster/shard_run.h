// One shard of a sharded run (`gpueval run DIR --shard i/N`): its share of the plan's batches
// (sharded_plan.h), on this machine's devices with one worker per device as a one-machine run
// has, journaled into <dir>/shards/<i>/. A shard killed, preempted or requeued and started again
// computes only the batches its journal lacks; each batch is computed whole, as planned, so its
// results are those of a one-machine run bit for bit. The shard's status.json (the run's progress
// plus shard, host, Slurm job) is what `gpueval status` reads; shard.json, written when the shard
// ends, adds what it computed over all its attempts.
#pragma once

#include <optional>
#include <string>

#include "cluster/sharded_plan.h"
#include "gpueval/cluster.h"

namespace gpueval {

// Runs shard `shard` of `sp` to completion. Returns 0 (complete), kExitIncomplete (a batch was
// quarantined: run the shard again) or 128 + signal (interrupted); a fatal error (a journal of
// another plan, a checkpoint that plans differently here, a full disk) is thrown as Error.
int run_shard(const ShardedPlan& sp, ShardId shard, const ShardRunOptions& options);

}  // namespace gpueval
