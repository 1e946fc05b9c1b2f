// Cutting the work of a run into shards that separate machines run (cluster/, `gpueval plan`):
// a plan's fingerprint, the weight of each batch, and the cut itself. A sharded run's plans (one
// per checkpoint) are laid end to end, oldest checkpoint first, each in batch order, and cut into
// N contiguous pieces balanced by the tokens their batches compute; a cut moves, within a
// tolerance, to the end of a checkpoint or else of a run of batches that share a prefix, so that
// a checkpoint's batches, and a few-shot prefix's, stay on one machine where they can (one model
// load, one prefix computation). The cut never changes a result: every batch is computed alone,
// exactly as in a one-machine run (planner.h). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/planner.h"

namespace gpueval {

// How good a place the cut before a batch is.
enum class CutPlace : int { kBatch = 0, kPrefixRun = 1, kCheckpoint = 2 };

// One batch in the sequence that is cut.
struct ShardPiece {
  int64_t weight = 0;  // tokens it computes: padded rows, and its prefix when it starts a run
  CutPlace before = CutPlace::kBatch;  // the place just before it
};

// The plan's batches as pieces, in batch order. The first is a checkpoint's start, a batch whose
// prefix differs from the previous one's starts a prefix run (and then carries its prefix).
std::vector<ShardPiece> shard_pieces(const Plan& plan);

// N + 1 offsets into `pieces`: shard i gets pieces [offsets[i], offsets[i+1]). Cut j aims at j/N of
// the total weight; it goes to the best place (checkpoint, then prefix run) within tolerance * the
// mean shard weight of that aim, else to the batch boundary nearest it. A shard may be empty when
// there are fewer pieces than shards. Throws Error for shards < 1 or a negative weight.
std::vector<size_t> cut_shards(const std::vector<ShardPiece>& pieces, int shards, double tolerance = 0.1);

// SHA-256 (hex) over everything in the plan's batches that a result depends on: ids, items
// (request, part, tokens, targets, stops, limits, seeds, families) and prefixes. Two machines
// that plan the same requests with the same tokenizer and options agree on it.
std::string plan_fingerprint(const Plan& plan);

// The batches of `plan` with ids in [first, last), ids kept (the plan's other fields unchanged).
Plan plan_slice(const Plan& plan, int64_t first, int64_t last);

}  // namespace gpueval
