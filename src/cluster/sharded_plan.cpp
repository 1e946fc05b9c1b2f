#include "cluster/sharded_plan.h"

#include <chrono>
#include <filesystem>
#include <iostream>

#include "common/file_io.h"
#include "common/sha256.h"
#include "evaluation/checkpoint_evaluation.h"
#include "evaluation/run_identity.h"
#include "gpueval/error.h"
#include "gpueval/history.h"
#include "plan/shards.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string compute_fingerprint(const ShardedPlan& sp) {
  json j = {{"version", ShardedPlan::kVersion}, {"config", sp.config_fingerprint}, {"shards", sp.shards}};
  for (const ShardedCheckpoint& c : sp.checkpoints)
    j["checkpoints"].push_back(
        {c.checkpoint.name, c.checkpoint.fingerprint, c.batch_tokens, c.plan_fingerprint, c.shard_batches});
  return sha256_hex(j.dump());
}

json to_json(const ShardedPlan& sp) {
  json cks = json::array();
  for (const ShardedCheckpoint& c : sp.checkpoints)
    cks.push_back({{"name", c.checkpoint.name},
                   {"path", c.checkpoint.path},
                   {"fingerprint", c.checkpoint.fingerprint},
                   {"mtime", c.checkpoint.mtime},
                   {"step", c.checkpoint.step ? json(*c.checkpoint.step) : json(nullptr)},
                   {"output", c.output},
                   {"batch_tokens", c.batch_tokens},
                   {"generation_workers", c.generation_workers},
                   {"generation_kv_positions", c.generation_kv_positions},
                   {"budget_source", c.budget_source},
                   {"plan_fingerprint", c.plan_fingerprint},
                   {"batches", c.batches},
                   {"requests", c.requests},
                   {"weight", c.weight},
                   {"shard_batches", c.shard_batches},
                   {"shard_weights", c.shard_weights}});
  return {{"gpueval_sharded_plan", ShardedPlan::kVersion},
          {"fingerprint", sp.fingerprint},
          {"created", sp.created},
          {"shards", sp.shards},
          {"nightly", sp.nightly},
          {"config_fingerprint", sp.config_fingerprint},
          {"config", sp.config.to_json()},
          {"checkpoints", cks},
          {"skipped", sp.skipped},
          {"failed", sp.failed}};
}

// The slots run_inputs would open for `gpus` do not matter to planning with a fixed budget; a
// planning machine without the shards' GPUs plans on "cpu".
RunConfig checkpoint_config(const RunConfig& config, const Checkpoint& c, const std::string& output,
                            const std::string& gpus) {
  RunConfig cc = config;
  cc.models = {c.path};
  cc.output = output;
  cc.gpus = gpus;
  return cc;
}

bool fixed_budget(const RunConfig& config) { return config.batch_size != "auto" || config.batch_tokens > 0; }

}  // namespace

int64_t ShardedPlan::batches_of(int shard) const {
  int64_t n = 0;
  for (const ShardedCheckpoint& c : checkpoints) n += c.batches_of(shard);
  return n;
}

int64_t ShardedPlan::weight_of(int shard) const {
  int64_t w = 0;
  for (const ShardedCheckpoint& c : checkpoints)
    if (static_cast<size_t>(shard) < c.shard_weights.size()) w += c.shard_weights[shard];
  return w;
}

bool has_sharded_plan(const std::string& dir) { return io::path_exists(dir + "/plan.json"); }

ShardedPlan read_sharded_plan(const std::string& dir_in) {
  const std::string dir = fs::absolute(dir_in).lexically_normal().string();
  ShardedPlan sp;
  sp.dir = dir.size() > 1 && dir.back() == '/' ? dir.substr(0, dir.size() - 1) : dir;
  const std::string path = sp.plan_path();
  if (!io::path_exists(path))
    throw Error(fmt::format("{}: no plan; make one with `gpueval plan CONFIG --output {} --shards N`", path, dir_in));
  const json j = json::parse(io::read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": not a JSON object");
  try {
    if (j.value("gpueval_sharded_plan", 0) != ShardedPlan::kVersion)
      throw Error(fmt::format("{}: not a version {} gpueval plan", path, ShardedPlan::kVersion));
    sp.config = run_config_from_json(j.at("config"), path, "/");
    sp.config.output = sp.dir;  // the plan may have been moved with its folder
    sp.config_fingerprint = j.at("config_fingerprint").get<std::string>();
    sp.shards = j.at("shards").get<int>();
    sp.nightly = j.at("nightly").get<bool>();
    sp.created = j.at("created").get<double>();
    sp.skipped = j.at("skipped");
    sp.failed = j.at("failed");
    for (const json& c : j.at("checkpoints")) {
      ShardedCheckpoint sc;
      sc.checkpoint.name = c.at("name").get<std::string>();
      sc.checkpoint.path = c.at("path").get<std::string>();
      sc.checkpoint.fingerprint = c.at("fingerprint").get<std::string>();
      sc.checkpoint.mtime = c.at("mtime").get<double>();
      if (c.contains("step") && !c.at("step").is_null()) sc.checkpoint.step = c.at("step").get<int64_t>();
      sc.output = sp.nightly ? sp.dir + "/" + sc.checkpoint.name : sp.dir;
      sc.batch_tokens = c.at("batch_tokens").get<int64_t>();
      sc.generation_workers = c.value("generation_workers", int64_t{-1});
      sc.generation_kv_positions = c.value("generation_kv_positions", int64_t{-1});
      sc.budget_source = c.at("budget_source").get<std::string>();
      sc.plan_fingerprint = c.at("plan_fingerprint").get<std::string>();
      sc.batches = c.at("batches").get<int64_t>();
      sc.requests = c.at("requests").get<int64_t>();
      sc.weight = c.at("weight").get<int64_t>();
      sc.shard_batches = c.at("shard_batches").get<std::vector<int64_t>>();
      sc.shard_weights = c.value("shard_weights", std::vector<int64_t>{});
      if (static_cast<int>(sc.shard_batches.size()) != sp.shards + 1 || sc.shard_batches.front() != 0 ||
          sc.shard_batches.back() != sc.batches)
        throw Error(fmt::format("{}: checkpoint {}: shard_batches does not cut {} batches into {} shards", path,
                                sc.checkpoint.name, sc.batches, sp.shards));
      sp.checkpoints.push_back(std::move(sc));
    }
    sp.fingerprint = j.at("fingerprint").get<std::string>();
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed plan: {}", path, e.what()));
  }
  if (sp.shards < 1) throw Error(path + ": shards must be at least 1");
  if (compute_fingerprint(sp) != sp.fingerprint)
    throw Error(path + ": its fingerprint does not match its contents (edited by hand?); make the plan again");
  return sp;
}

ShardedPlan make_sharded_plan(const RunConfig& config_in, int shards, const EvaluationOptions& options) {
  if (shards < 1) throw Error(fmt::format("--shards: must be at least 1, got {}", shards));
  ShardedPlan sp;
  sp.config = with_absolute_paths(config_in);
  sp.dir = sp.config.output;
  sp.shards = shards;
  sp.created = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const RunConfig& config = sp.config;
  const std::vector<Checkpoint> checkpoints = resolve_checkpoints(config.models, config.source);
  sp.nightly = config.models.size() > 1 || is_glob(config.models[0]);
  if (!sp.nightly && !checkpoints[0].error.empty()) throw Error(checkpoints[0].error);
  sp.config_fingerprint = config_fingerprint(config, load_tasks(config, options.executable).requests);
  io::make_directories(sp.dir + "/logs");

  // Nightly: what the history holds complete for this config is not planned again, as a
  // one-machine nightly run skips it.
  std::vector<const Checkpoint*> todo;
  if (sp.nightly) {
    History history = History::open(History::default_path(config.history));
    for (const Checkpoint& c : checkpoints) {
      if (!c.error.empty()) {
        sp.failed.push_back({{"name", c.name}, {"path", c.path}, {"error", c.error}});
      } else if (!options.fresh && history.is_scored(c.fingerprint, sp.config_fingerprint)) {
        sp.skipped.push_back({{"name", c.name}, {"path", c.path}});
        std::cerr << fmt::format("[plan] {} already scored for this config (history {}): skipped\n", c.name,
                                 history.path());
      } else {
        todo.push_back(&c);
      }
    }
  } else {
    todo.push_back(&checkpoints[0]);
  }

  std::vector<ShardPiece> pieces;
  std::vector<size_t> first_piece;  // [checkpoint]: its first piece in `pieces`
  for (const Checkpoint* c : todo) {
    ShardedCheckpoint sc;
    sc.checkpoint = *c;
    sc.output = sp.nightly ? sp.dir + "/" + c->name : sp.dir;
    const RunConfig cc = checkpoint_config(config, *c, sp.dir, fixed_budget(config) ? "cpu" : config.gpus);
    const RunInputs in = load_run_inputs(cc, options.executable, c->path);
    Plan plan = make_plan(in.requests, *in.tokenizer, in.plan_options);
    const Budget budget = calibrated_budget(cc, options, in, plan);
    sc.batch_tokens = budget.options.batch_tokens;
    sc.generation_workers = in.plan_options.workers;
    sc.generation_kv_positions = in.plan_options.generation_kv_positions;
    sc.budget_source = budget.source;
    sc.plan_fingerprint = plan_fingerprint(plan);
    sc.batches = static_cast<int64_t>(plan.batches.size());
    sc.requests = static_cast<int64_t>(in.requests.size());
    std::vector<ShardPiece> own = shard_pieces(plan);
    for (const ShardPiece& p : own) sc.weight += p.weight;
    first_piece.push_back(pieces.size());
    pieces.insert(pieces.end(), own.begin(), own.end());
    std::cerr << fmt::format("[plan] {}: {} requests, {} batches, budget {} tokens ({}), plan {}\n", c->name,
                             sc.requests, sc.batches, sc.batch_tokens, sc.budget_source,
                             sc.plan_fingerprint.substr(0, 12));
    sp.checkpoints.push_back(std::move(sc));
  }

  // One cut over every checkpoint's batches, end to end; each checkpoint's share per shard.
  const std::vector<size_t> cut = cut_shards(pieces, shards);
  for (size_t k = 0; k < sp.checkpoints.size(); ++k) {
    ShardedCheckpoint& sc = sp.checkpoints[k];
    const int64_t base = static_cast<int64_t>(first_piece[k]);
    for (size_t g : cut) sc.shard_batches.push_back(std::clamp<int64_t>(static_cast<int64_t>(g) - base, 0, sc.batches));
    for (int i = 0; i < shards; ++i) {
      int64_t w = 0;
      for (int64_t b = sc.shard_batches[i]; b < sc.shard_batches[i + 1]; ++b) w += pieces[base + b].weight;
      sc.shard_weights.push_back(w);
    }
  }
  sp.fingerprint = compute_fingerprint(sp);

  bool clear_shards = options.fresh;
  if (has_sharded_plan(sp.dir)) {
    const ShardedPlan old = read_sharded_plan(sp.dir);
    const std::string merge_path = sp.dir + "/merge.json";
    const json merged = io::path_exists(merge_path) ? json::parse(io::read_file(merge_path), nullptr, false) : json();
    if (old.fingerprint == sp.fingerprint) {
      sp.created = old.created;  // the same plan: what the shards computed stays valid, the merge's date too
    } else if (merged.is_object() && merged.value("plan_fingerprint", "") == old.fingerprint) {
      // The last plan (last night's) was merged: its results are in the reports and the history.
      std::cerr << fmt::format("[plan] the previous plan {} was merged: its shards are cleared\n",
                               old.fingerprint.substr(0, 12));
      clear_shards = true;
    } else if (io::path_exists(sp.dir + "/shards") && !options.fresh) {
      throw Error(
          fmt::format("{}: holds shards of another plan ({}) that were never merged; merge them first "
                      "(gpueval merge {}), or --fresh starts over (deletes {}/shards)",
                      sp.plan_path(), old.fingerprint.substr(0, 12), sp.dir, sp.dir));
    }
  }
  if (clear_shards) {
    fs::remove_all(sp.dir + "/shards");
    fs::remove(sp.dir + "/merge.json");
  }
  io::write_file_atomic(sp.plan_path(), to_json(sp).dump(2) + "\n");
  for (int i = 0; i < shards; ++i) {
    // Where the shard starts: a checkpoint's start, a prefix run's (its few-shot prefix computed
    // once here as on one machine), or inside a run (that prefix is computed on both sides).
    const size_t at = cut[static_cast<size_t>(i)];
    const CutPlace place = at == 0 || at >= pieces.size() ? CutPlace::kCheckpoint : pieces[at].before;
    std::cerr << fmt::format("[plan] shard {}/{}: {} batches, {} tokens, starting at {}\n", i, shards, sp.batches_of(i),
                             sp.weight_of(i),
                             place == CutPlace::kCheckpoint  ? "a checkpoint"
                             : place == CutPlace::kPrefixRun ? "a prefix run"
                                                             : "a batch inside a prefix run");
  }
  std::cerr << fmt::format("[plan] {} checkpoint(s) in {} shards: {} (plan {})\n", sp.checkpoints.size(), shards,
                           sp.plan_path(), sp.fingerprint.substr(0, 12));
  return sp;
}

CheckpointWork plan_checkpoint(const ShardedPlan& sp, const ShardedCheckpoint& c, const std::string& gpus,
                               const std::string& executable) {
  const RunConfig cc = checkpoint_config(sp.config, c.checkpoint, sp.dir, gpus);
  CheckpointWork w{load_run_inputs(cc, executable, c.checkpoint.path), Plan{}, PlanOptions{}};
  // As a one-machine run plans: under the config's options, re-cut under a calibrated budget; the
  // generation batches as the planning machine cut them, whatever this machine's workers and memory.
  if (c.generation_workers > 0) w.in.plan_options.workers = c.generation_workers;
  if (c.generation_kv_positions >= 0) w.in.plan_options.generation_kv_positions = c.generation_kv_positions;
  w.options = w.in.plan_options;
  w.plan = make_plan(w.in.requests, *w.in.tokenizer, w.options);
  if (c.batch_tokens != w.options.batch_tokens) {
    w.options.batch_tokens = c.batch_tokens;
    w.plan = rebatch(w.plan, w.options);
  }
  const std::string fp = plan_fingerprint(w.plan);
  if (fp != c.plan_fingerprint)
    throw Error(
        fmt::format("{}: checkpoint {} plans differently on this machine (plan {}, here {}): another gpueval "
                    "build, or changed data, tasks or tokenizer; make the plan again",
                    sp.plan_path(), c.checkpoint.name, c.plan_fingerprint.substr(0, 12), fp.substr(0, 12)));
  return w;
}

}  // namespace gpueval
