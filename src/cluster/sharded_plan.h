// The plan of a sharded run: what `gpueval plan` writes once to <dir>/plan.json on storage that
// every machine reads, and what every shard (shard_run.h) and the merge (merge.h) work from. It
// holds the run config with absolute paths, the checkpoints with their fingerprints, one batch
// budget per checkpoint (the config's, or calibration's: the cache or one probe on the planning
// machine, never one per shard), each checkpoint's plan fingerprint (plan/shards.h) and the cut of
// its batches into shards. Shards do not read batches from the file: each plans its checkpoints
// again from the same inputs (the plan is a pure function of them) and refuses to run when the
// fingerprint differs (another binary, changed data or tokenizer), so every machine computes
// exactly the batches a one-machine run computes.
//
// Layout of <dir>: plan.json; shards/<i>/ per shard (journal.sqlite, or <checkpoint>/journal.sqlite
// for several checkpoints; status.json, shard.json, logs/); the merged reports where a one-machine
// run writes them (<dir>/results.json, or <dir>/<checkpoint>/ and the trend in <dir>).
// Plain values; the functions throw Error naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evaluation/checkpoints.h"
#include "evaluation/run_inputs.h"
#include "gpueval/evaluation.h"
#include "gpueval/run_config.h"
#include "plan/planner.h"

namespace gpueval {

// One checkpoint of a sharded plan.
struct ShardedCheckpoint {
  Checkpoint checkpoint;  // path, name, fingerprint, mtime
  std::string output;  // where the merge writes its reports
  int64_t batch_tokens = 0;  // the budget its plan is cut under
  // What generate_until batches are cut under (PlanOptions' workers and generation_kv_positions),
  // as the planning machine saw them: every shard and the merge plan with these, whatever their own
  // workers and memory. Absent in plan files written before they were recorded (then -1: the
  // machine's own, as those files were planned).
  int64_t generation_workers = -1;
  int64_t generation_kv_positions = -1;
  std::string budget_source;  // config | probed | cache
  std::string plan_fingerprint;  // plan/shards.h
  int64_t batches = 0;
  int64_t requests = 0;
  int64_t weight = 0;  // tokens its batches compute (plan/shards.h's weights)
  std::vector<int64_t> shard_batches;  // shards + 1 batch ids: shard i runs [shard_batches[i], shard_batches[i+1])
  std::vector<int64_t> shard_weights;  // [shard]: the tokens of its batches here
  int64_t batches_of(int shard) const { return shard_batches[shard + 1] - shard_batches[shard]; }
};

struct ShardedPlan {
  static constexpr int kVersion = 1;
  std::string dir;  // where plan.json is (absolute)
  RunConfig config;  // absolute paths; output = dir
  std::string config_fingerprint;  // run_identity.h
  int shards = 1;
  bool nightly = false;  // several checkpoints (a list or a glob): one output per checkpoint
  double created = 0;  // UNIX time the plan was made: the merged reports' date
  std::vector<ShardedCheckpoint> checkpoints;
  nlohmann::json skipped = nlohmann::json::array();  // nightly: checkpoints the history holds {name, path}
  nlohmann::json failed = nlohmann::json::array();  // checkpoints that cannot be read {name, path, error}
  std::string fingerprint;  // over everything above that decides what the shards compute

  std::string plan_path() const { return dir + "/plan.json"; }
  std::string shard_dir(int shard) const { return dir + "/shards/" + std::to_string(shard); }
  // Where shard `shard` journals checkpoint `c`.
  std::string journal_dir(int shard, const ShardedCheckpoint& c) const {
    return nightly ? shard_dir(shard) + "/" + c.checkpoint.name : shard_dir(shard);
  }
  int64_t batches_of(int shard) const;  // over every checkpoint
  int64_t weight_of(int shard) const;  // tokens its batches compute (plan/shards.h's weights)
};

// Plans `config` (its paths made absolute) into `shards` shards under <config.output>: resolves the
// checkpoints (nightly: leaves out those the history holds complete unless options.fresh), plans
// each and chooses its budget (calibrated_budget: the config's, the calibration cache's, or a probe
// on config.gpus), cuts the work, writes plan.json atomically and logs the shards' sizes.
// Over an earlier plan: the same plan keeps its shards; a merged one (last night's) has its shards
// cleared; shards of an unmerged other plan are refused (--fresh deletes them).
ShardedPlan make_sharded_plan(const RunConfig& config, int shards, const EvaluationOptions& options);

// Reads <dir>/plan.json. Error "<dir>/plan.json: ..." when it is missing, malformed, or of another
// version.
ShardedPlan read_sharded_plan(const std::string& dir);
bool has_sharded_plan(const std::string& dir);

// One checkpoint's work as a shard or the merge sees it: the inputs loaded from the plan's config
// (`gpus` devices for the slots), the plan made and cut under the plan's budget, its fingerprint
// checked: Error "<dir>/plan.json: checkpoint X plans differently here (...)" when it differs.
struct CheckpointWork {
  RunInputs in;
  Plan plan;
  PlanOptions options;
};
CheckpointWork plan_checkpoint(const ShardedPlan& sp, const ShardedCheckpoint& c, const std::string& gpus,
                               const std::string& executable);

}  // namespace gpueval
