// Packing decides how a batch's scoring work shares computation, so that no
// token is pushed through the model twice:
//   - a context group: the work items (continuations) that share one context
//     run as one row, the context once (the row's trunk) and each
//     continuation's inputs as a branch after it that sees the trunk but not
//     the other branches; a single-token continuation needs no branch at all,
//     its target is read from the trunk's last state;
//   - a family: one document's items whose contexts differ but share one continuation
//     (lm-eval's multiple-input tasks, Winogrande) run as one row too, the trunk being the
//     longest prefix their contexts share and each item's own context and continuation a
//     branch after it;
//   - a shared prefix: the tokens every row of a batch starts with (MMLU's
//     few-shot examples) are computed once per worker and attended to by each
//     row (model.h's PrefixKV);
//   - packed sequences: short rows are packed side by side into sequences
//     Batch::sequence_width wide (first fit, in batch order), each row a part
//     that sees only itself and the prefix, so short rows after a long prefix
//     (MMLU's questions) do not pad the batch.
// The planner uses the grouping and the prefix search to cut batches, the
// executor uses pack_rows to lay a batch out, and batch validation uses the
// same costs: the three always agree because they are the same functions.
// Everything here is a pure function of its arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/planner.h"

namespace gpueval {

// Items of one context, in the order given; `context` (the row's trunk) is tokens[0,
// first_target) of each, or for a family the longest prefix of all their contexts.
struct ContextGroup {
  std::vector<int32_t> context;
  std::vector<size_t> items;  // indices into the item list the group was made from
};

// Groups scoring items by identical context, in order of first appearance.
// Items join their context's group while the group's continuation inputs add
// up to no more than the context (or kMinBranchRoom tokens): sharing pays for
// the context once and never makes a row much longer than its sequences, so a
// short context with long continuations (a rolling text's first window after
// BOS) is not turned into one long row. Beyond that a new group starts.
// Items of one family (WorkItem::family) form one group, however long, whose context is the
// longest prefix their contexts share (at least one token; else a new group starts).
// With share = false every item is its own group (no sharing).
constexpr int64_t kMinBranchRoom = 16;
std::vector<ContextGroup> group_by_context(const std::vector<WorkItem>& items, bool share);

// Tokens a group's row occupies after a prefix of `prefix_length` tokens: the
// context beyond the prefix plus every continuation's inputs (all but its last token).
int64_t row_cost(const ContextGroup& group, const std::vector<WorkItem>& items, size_t prefix_length);

// Groups sharing a prefix: `groups` indexes the input, `prefix_length` tokens of
// their contexts are equal, and every context is longer than that, so each row
// keeps at least one token of its own.
struct PrefixCluster {
  std::vector<size_t> groups;
  size_t prefix_length = 0;
};

// Splits context groups into clusters that share a prefix of at least
// `min_prefix` tokens, choosing cut points that maximise the tokens saved
// (greedily, over the groups in lexicographic order of their contexts).
// Groups with no worthwhile partner come back as clusters of one with
// prefix_length 0. Clusters are ordered by their smallest group index.
std::vector<PrefixCluster> find_shared_prefixes(const std::vector<ContextGroup>& groups, size_t min_prefix);

// First-fit packing of rows into sequences `width` tokens wide: a row goes into the first
// sequence with room for it, else opens a new one. The planner cuts batches with it and
// pack_rows lays them out with it, so the two always agree on a batch's sequences.
class SequenceFill {
 public:
  explicit SequenceFill(int64_t width) : width_(width) {}
  // Whether a row of `length` tokens would open a new sequence.
  bool opens(int64_t length) const;
  // Places the row; returns its sequence (== sequences() before the call when it opens one).
  size_t place(int64_t length);
  size_t sequences() const { return room_.size(); }

 private:
  int64_t width_;
  std::vector<int64_t> room_;  // tokens left in each sequence
};

// One sequence of a packed forward: one row, or several packed side by side (parts).
struct PackedRow {
  std::vector<int32_t> tokens;  // per part: trunk (context after the prefix), then each branch's inputs
  std::vector<int64_t> positions;  // absolute: each trunk starts at the prefix length, branches follow their trunk
  // part * kSegmentsPerPart + branch: branch 0 for a part's trunk, k = 1, 2, ... for its k-th
  // branch (model.h's forward_packed).
  std::vector<int64_t> segments;
  struct Target {
    size_t item;  // index into the batch's items
    int64_t column;  // the row column whose state predicts it
    int32_t token;
  };
  std::vector<Target> targets;  // per item in batch order, each item's targets in token order
};

// Lays out a batch's scoring items as rows (Batch::share_contexts groups them by
// context, else one row per item) after Batch::prefix; with share_contexts, rows
// are packed into sequences Batch::sequence_width wide (the longest row's when 0;
// SequenceFill, rows in batch order). Items with nothing to predict get no row. Throws Error if an item
// does not start with the prefix, leaves no context token after it, or has
// first_target outside [1, size].
std::vector<PackedRow> pack_rows(const Batch& batch);

// A packed sequence's parts as rows of their own (the layout pack_rows gives without packing):
// what the executor runs instead when the sequence alone does not fit in memory. A sequence of
// one part comes back as itself.
std::vector<PackedRow> split_parts(const PackedRow& sequence);

}  // namespace gpueval
