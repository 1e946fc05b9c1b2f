#include "plan/shards.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/sha256.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

// Fixed-width little-endian integers and length-prefixed bytes: an encoding in which no two
// different plans look alike.
class Encoder {
 public:
  void i64(int64_t v) {
    for (int k = 0; k < 8; ++k) out_.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff));
  }
  void f64(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    i64(static_cast<int64_t>(bits));
  }
  void bytes(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    out_ += s;
  }
  void tokens(const std::vector<int32_t>& t) {
    i64(static_cast<int64_t>(t.size()));
    for (int32_t id : t) i64(id);
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace

std::vector<ShardPiece> shard_pieces(const Plan& plan) {
  std::vector<ShardPiece> pieces;
  pieces.reserve(plan.batches.size());
  int64_t previous_prefix = -2;
  for (const Batch& b : plan.batches) {
    ShardPiece p;
    p.weight = b.padded_tokens;
    const bool new_run = b.prefix_id < 0 || b.prefix_id != previous_prefix;
    if (new_run) p.weight += static_cast<int64_t>(b.prefix.size());
    p.before = pieces.empty() ? CutPlace::kCheckpoint : new_run ? CutPlace::kPrefixRun : CutPlace::kBatch;
    previous_prefix = b.prefix_id;
    pieces.push_back(p);
  }
  return pieces;
}

std::vector<size_t> cut_shards(const std::vector<ShardPiece>& pieces, int shards, double tolerance) {
  if (shards < 1) throw Error(fmt::format("cannot cut a plan into {} shards", shards));
  const size_t n = pieces.size();
  std::vector<double> at(n + 1, 0.0);  // at[k]: weight before piece k
  bool any_weight = false;
  for (size_t k = 0; k < n; ++k) {
    if (pieces[k].weight < 0) throw Error("a shard piece has a negative weight");
    any_weight = any_weight || pieces[k].weight > 0;
  }
  for (size_t k = 0; k < n; ++k) at[k + 1] = at[k] + (any_weight ? static_cast<double>(pieces[k].weight) : 1.0);
  const double total = at[n];
  const double window = tolerance * total / shards;
  auto place = [&](size_t k) { return k == 0 || k == n ? CutPlace::kCheckpoint : pieces[k].before; };
  std::vector<size_t> offsets(static_cast<size_t>(shards) + 1, 0);
  offsets[static_cast<size_t>(shards)] = n;
  for (int j = 1; j < shards; ++j) {
    const double aim = total * j / shards;
    const size_t lo = offsets[static_cast<size_t>(j) - 1];
    // The boundary nearest the aim (ties: the earlier one), at or after the previous cut.
    size_t best = static_cast<size_t>(std::lower_bound(at.begin() + static_cast<long>(lo), at.end(), aim) - at.begin());
    if (best > n) best = n;
    if (best > lo && std::abs(at[best - 1] - aim) <= std::abs(at[best] - aim)) --best;
    // A better place within the window wins, nearest first.
    for (CutPlace wanted : {CutPlace::kCheckpoint, CutPlace::kPrefixRun}) {
      if (place(best) >= wanted) break;
      size_t found = n + 1;
      double found_distance = window;
      for (size_t k = lo; k <= n; ++k) {
        if (at[k] < aim - window) continue;
        if (at[k] > aim + window) break;
        const double d = std::abs(at[k] - aim);
        if (place(k) >= wanted && d <= found_distance && (found > n || d < found_distance)) {
          found = k;
          found_distance = d;
        }
      }
      if (found <= n) {
        best = found;
        break;
      }
    }
    offsets[static_cast<size_t>(j)] = std::max(best, lo);
  }
  return offsets;
}

std::string plan_fingerprint(const Plan& plan) {
  Encoder e;
  e.bytes("gpueval plan 2");
  e.i64(static_cast<int64_t>(plan.batches.size()));
  for (const Batch& b : plan.batches) {
    e.i64(b.id);
    e.i64(b.share_contexts ? 1 : 0);
    e.i64(b.prefix_id);
    e.tokens(b.prefix);
    e.i64(b.padded_tokens);
    e.i64(b.sequence_width);
    if (b.max_rows > 0) e.i64(b.max_rows);  // only when set, so that plans without it keep their fingerprints
    if (!b.stop_ids.empty()) e.tokens(b.stop_ids);  // likewise
    e.i64(static_cast<int64_t>(b.items.size()));
    for (const WorkItem& w : b.items) {
      e.i64(w.request_index);
      e.i64(w.part);
      e.i64(w.parts);
      e.i64(static_cast<int64_t>(w.type));
      e.tokens(w.tokens);
      e.i64(w.first_target);
      e.i64(static_cast<int64_t>(w.stops.size()));
      for (const std::string& s : w.stops) e.bytes(s);
      e.i64(w.max_tokens);
      e.f64(w.temperature);
      if (w.temperature > 0) {  // only when sampling, so that greedy plans keep their fingerprints
        e.i64(w.top_k);
        e.f64(w.top_p);
      }
      e.i64(static_cast<int64_t>(w.seed));
      e.i64(w.family);
    }
  }
  return sha256_hex(e.str());
}

Plan plan_slice(const Plan& plan, int64_t first, int64_t last) {
  Plan part = plan;
  part.batches.clear();
  for (const Batch& b : plan.batches)
    if (b.id >= first && b.id < last) part.batches.push_back(b);
  return part;
}

}  // namespace gpueval
