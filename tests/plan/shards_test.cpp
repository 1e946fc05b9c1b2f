// Cutting work into shards (plan/shards.h): balanced by tokens, cuts moved to checkpoint and
// prefix-run boundaries within the tolerance, and a plan fingerprint that sees every token.
#include "plan/shards.h"

#include <gtest/gtest.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

std::vector<ShardPiece> uniform(size_t n, int64_t w = 10) {
  std::vector<ShardPiece> p(n, ShardPiece{w, CutPlace::kBatch});
  if (!p.empty()) p[0].before = CutPlace::kCheckpoint;
  return p;
}

int64_t weight(const std::vector<ShardPiece>& p, size_t a, size_t b) {
  int64_t w = 0;
  for (size_t k = a; k < b; ++k) w += p[k].weight;
  return w;
}

TEST(CutShards, EqualPiecesSplitEvenly) {
  const auto p = uniform(12);
  EXPECT_EQ(cut_shards(p, 3), (std::vector<size_t>{0, 4, 8, 12}));
  EXPECT_EQ(cut_shards(p, 1), (std::vector<size_t>{0, 12}));
}

TEST(CutShards, BalancesByWeightNotByCount) {
  // One heavy batch first (longest first, as plans are), then many light ones.
  std::vector<ShardPiece> p = uniform(11, 1);
  p[0].weight = 10;
  const auto cut = cut_shards(p, 2);
  EXPECT_EQ(cut, (std::vector<size_t>{0, 1, 11}));
  EXPECT_EQ(weight(p, 0, 1), weight(p, 1, 11));
}

TEST(CutShards, MovesToACheckpointBoundaryWithinTheTolerance) {
  // Two checkpoints of 11 and 9 batches: the even cut (10) moves to the checkpoint end (11), 5%
  // of the mean shard weight away; a 20% move is too far.
  std::vector<ShardPiece> p = uniform(20);
  p[11].before = CutPlace::kCheckpoint;
  EXPECT_EQ(cut_shards(p, 2, 0.1), (std::vector<size_t>{0, 11, 20}));
  std::vector<ShardPiece> q = uniform(20);
  q[14].before = CutPlace::kCheckpoint;
  EXPECT_EQ(cut_shards(q, 2, 0.1), (std::vector<size_t>{0, 10, 20}));
}

TEST(CutShards, PrefersAPrefixRunBoundaryToAMidRunCut) {
  std::vector<ShardPiece> p = uniform(20);
  p[9].before = CutPlace::kPrefixRun;  // a few-shot prefix's batches start at 9
  EXPECT_EQ(cut_shards(p, 2, 0.1), (std::vector<size_t>{0, 9, 20}));
  p[11].before = CutPlace::kCheckpoint;  // a checkpoint boundary as near wins over it
  EXPECT_EQ(cut_shards(p, 2, 0.1), (std::vector<size_t>{0, 11, 20}));
}

TEST(CutShards, MoreShardsThanBatchesLeavesSomeEmpty) {
  const auto p = uniform(2);
  const auto cut = cut_shards(p, 5);
  ASSERT_EQ(cut.size(), 6u);
  EXPECT_EQ(cut.front(), 0u);
  EXPECT_EQ(cut.back(), 2u);
  for (size_t k = 1; k < cut.size(); ++k) EXPECT_LE(cut[k - 1], cut[k]);
  EXPECT_TRUE(cut_shards({}, 3) == (std::vector<size_t>{0, 0, 0, 0}));
}

TEST(CutShards, ManyShardsStayNearTheMean) {
  std::vector<ShardPiece> p;
  for (int k = 0; k < 500; ++k) p.push_back({1000 - k, k % 7 == 0 ? CutPlace::kPrefixRun : CutPlace::kBatch});
  p[0].before = CutPlace::kCheckpoint;
  const int shards = 8;
  const auto cut = cut_shards(p, shards);
  const int64_t total = weight(p, 0, p.size());
  for (int i = 0; i < shards; ++i) {
    const int64_t w = weight(p, cut[i], cut[i + 1]);
    // Each of its two cuts is at most the tolerance plus half the largest piece from its aim.
    const double mean = static_cast<double>(total) / shards;
    EXPECT_NEAR(static_cast<double>(w), mean, 2 * (0.1 * mean + 500)) << i;
  }
}

TEST(CutShards, RejectsNoShards) { EXPECT_THROW(cut_shards(uniform(3), 0), Error); }

Plan two_batch_plan() {
  Plan plan;
  for (int64_t id = 0; id < 3; ++id) {
    Batch b;
    b.id = id;
    WorkItem w;
    w.request_index = id;
    w.tokens = {1, 2, static_cast<int32_t>(3 + id)};
    b.items.push_back(w);
    b.padded_tokens = 2;
    b.prefix_id = id < 2 ? 0 : -1;
    if (id < 2) b.prefix = {1, 2};
    plan.batches.push_back(b);
  }
  return plan;
}

TEST(ShardPieces, PrefixRunsAndWeights) {
  const auto p = shard_pieces(two_batch_plan());
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].before, CutPlace::kCheckpoint);
  EXPECT_EQ(p[0].weight, 4);  // rows + the prefix, once
  EXPECT_EQ(p[1].before, CutPlace::kBatch);
  EXPECT_EQ(p[1].weight, 2);
  EXPECT_EQ(p[2].before, CutPlace::kPrefixRun);
}

TEST(PlanFingerprint, SeesEveryTokenAndIgnoresNothingThatMatters) {
  const Plan a = two_batch_plan();
  Plan b = a;
  EXPECT_EQ(plan_fingerprint(a), plan_fingerprint(b));
  b.batches[2].items[0].tokens[1] = 7;
  EXPECT_NE(plan_fingerprint(a), plan_fingerprint(b));
  b = a;
  b.batches[1].items[0].first_target = 2;
  EXPECT_NE(plan_fingerprint(a), plan_fingerprint(b));
  b = a;
  std::swap(b.batches[0].items, b.batches[1].items);
  EXPECT_NE(plan_fingerprint(a), plan_fingerprint(b));
}

TEST(PlanSlice, KeepsIdsInRange) {
  const Plan part = plan_slice(two_batch_plan(), 1, 3);
  ASSERT_EQ(part.batches.size(), 2u);
  EXPECT_EQ(part.batches[0].id, 1);
  EXPECT_EQ(part.batches[1].id, 2);
}

}  // namespace
}  // namespace gpueval
