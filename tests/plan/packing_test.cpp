// Packing: which items share a row, which contexts share a prefix, and the
// row layout the executor runs (positions, branch segments, target columns).
#include <algorithm>
#include <numeric>

#include <gmock/gmock.h>

#include "gpueval/error.h"
#include "gpueval/model.h"
#include "plan/packing.h"
#include "test_util.h"

namespace gpueval {
namespace {

WorkItem item(int64_t index, std::vector<int32_t> context, std::vector<int32_t> continuation) {
  WorkItem w;
  w.request_index = index;
  w.first_target = static_cast<int64_t>(context.size());
  w.tokens = std::move(context);
  w.tokens.insert(w.tokens.end(), continuation.begin(), continuation.end());
  return w;
}

std::vector<int32_t> range(int32_t from, int32_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<int32_t> join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Packing, ItemsOfOneContextShareAGroupOnlyWhenAsked) {
  const std::vector<WorkItem> items = {item(0, {1, 5, 6}, {7}), item(1, {1, 5, 6}, {8}), item(2, {1, 5}, {6, 7}),
                                       item(3, {1, 5, 6}, {9, 10})};
  const auto shared = group_by_context(items, true);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0].context, (std::vector<int32_t>{1, 5, 6}));
  EXPECT_EQ(shared[0].items, (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(shared[1].items, (std::vector<size_t>{2}));
  // Row cost: the context once plus every continuation's inputs (all but its last token).
  EXPECT_EQ(row_cost(shared[0], items, 0), 3 + 0 + 0 + 1);
  EXPECT_EQ(row_cost(shared[0], items, 2), 1 + 1);
  EXPECT_EQ(row_cost(shared[1], items, 0), 2 + 1);
  // A short context with long continuations: groups close once their inputs outgrow the context.
  std::vector<WorkItem> windows;
  for (int32_t w = 0; w < 5; ++w) windows.push_back(item(w, {1}, range(100 * w, 8)));  // 7 inputs each
  const auto rolling = group_by_context(windows, true);
  ASSERT_EQ(rolling.size(), 3u);  // 7 + 7 <= kMinBranchRoom (16) < 7 + 7 + 7
  EXPECT_EQ(rolling[0].items, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(rolling[1].items, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(rolling[2].items, (std::vector<size_t>{4}));
  windows.push_back(item(5, {1}, range(900, 20)));  // alone: more inputs than the room, never split
  EXPECT_EQ(group_by_context(windows, true).back().items, std::vector<size_t>{5});
  const auto alone = group_by_context(items, false);
  ASSERT_EQ(alone.size(), 4u);
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(alone[i].items, std::vector<size_t>{i});
    EXPECT_EQ(row_cost(alone[i], items, 0), items[i].cost());  // unshared: exactly the item's own inputs
  }
}

TEST(Packing, ContextsSharingALongPrefixFormOneClusterPerPrefix) {
  // Two "subjects" of 6 questions each: a 40-token few-shot prefix, then a question of its own.
  const std::vector<int32_t> fewshot_a = range(100, 40), fewshot_b = join({100, 101, 102}, range(300, 37));
  std::vector<ContextGroup> groups;
  for (int32_t q = 0; q < 6; ++q) groups.push_back({join(fewshot_a, range(500 + 10 * q, 5)), {}});
  for (int32_t q = 0; q < 6; ++q) groups.push_back({join(fewshot_b, range(700 + 10 * q, 3 + q)), {}});
  groups.push_back({range(900, 30), {}});  // a loner
  const auto clusters = find_shared_prefixes(groups, 16);
  ASSERT_EQ(clusters.size(), 3u);
  EXPECT_EQ(clusters[0].groups, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(clusters[0].prefix_length, 40u);
  EXPECT_EQ(clusters[1].groups, (std::vector<size_t>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(clusters[1].prefix_length, 40u);
  EXPECT_EQ(clusters[2].groups, std::vector<size_t>{12});
  EXPECT_EQ(clusters[2].prefix_length, 0u);
  // A higher threshold than the shared length leaves everyone alone.
  for (const PrefixCluster& c : find_shared_prefixes(groups, 41)) EXPECT_EQ(c.prefix_length, 0u);
}

TEST(Packing, ASharedPrefixLeavesEveryContextATokenOfItsOwn) {
  // One context is a prefix of the other: at most all but its last token can be shared.
  const std::vector<ContextGroup> groups = {{range(1, 20), {}}, {range(1, 30), {}}};
  const auto clusters = find_shared_prefixes(groups, 4);
  ASSERT_EQ(clusters.size(), 1u);
  EXPECT_EQ(clusters[0].prefix_length, 19u);
}

TEST(Packing, JoiningNeverLowersTheTokensSaved) {
  // Five contexts share 100 tokens; a sixth shares only 20 with them. Taking it in would save
  // 5 * 20 = 100 tokens instead of 4 * 100 = 400, so it stays out.
  std::vector<ContextGroup> groups;
  for (int32_t q = 0; q < 5; ++q) groups.push_back({join(range(1, 100), {1000 + q, 7}), {}});
  groups.push_back({join(range(1, 20), {2000, 7, 8}), {}});
  const auto clusters = find_shared_prefixes(groups, 8);
  ASSERT_EQ(clusters.size(), 2u);
  EXPECT_EQ(clusters[0].groups.size(), 5u);
  EXPECT_EQ(clusters[0].prefix_length, 100u);
  EXPECT_EQ(clusters[1].prefix_length, 0u);
}

TEST(Packing, SingleTokenContinuationsAreReadFromTheTrunksLastState) {
  Batch batch;
  batch.share_contexts = true;
  batch.prefix = {1, 5};
  for (int32_t c = 0; c < 4; ++c) batch.items.push_back(item(c, {1, 5, 6, 7}, {20 + c}));
  const auto rows = pack_rows(batch);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].tokens, (std::vector<int32_t>{6, 7}));  // the context after the prefix, once
  EXPECT_EQ(rows[0].positions, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(rows[0].segments, (std::vector<int64_t>{0, 0}));
  ASSERT_EQ(rows[0].targets.size(), 4u);
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(rows[0].targets[c].item, c);
    EXPECT_EQ(rows[0].targets[c].column, 1);
    EXPECT_EQ(rows[0].targets[c].token, static_cast<int32_t>(20 + c));
  }
  EXPECT_EQ(batch_padded_tokens(batch), 2);
}

TEST(Packing, MultiTokenContinuationsBranchAfterTheTrunk) {
  Batch batch;
  batch.share_contexts = true;
  batch.items = {item(0, {1, 2, 3}, {10, 11, 12}), item(1, {1, 2, 3}, {20}), item(2, {1, 2, 3}, {30, 31}),
                 item(3, {1, 4}, {40, 41})};
  const auto rows = pack_rows(batch);
  ASSERT_EQ(rows.size(), 2u);
  // Trunk [1 2 3], branch 1 = inputs [10 11] of item 0, item 1 has none, branch 2 = [30] of item 2.
  EXPECT_EQ(rows[0].tokens, (std::vector<int32_t>{1, 2, 3, 10, 11, 30}));
  EXPECT_EQ(rows[0].positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 3}));
  EXPECT_EQ(rows[0].segments, (std::vector<int64_t>{0, 0, 0, 1, 1, 2}));
  std::vector<std::tuple<size_t, int64_t, int32_t>> got;
  for (const auto& t : rows[0].targets) got.emplace_back(t.item, t.column, t.token);
  EXPECT_EQ(got, (std::vector<std::tuple<size_t, int64_t, int32_t>>{
                     {0, 2, 10}, {0, 3, 11}, {0, 4, 12}, {1, 2, 20}, {2, 2, 30}, {2, 5, 31}}));
  EXPECT_EQ(rows[1].tokens, (std::vector<int32_t>{1, 4, 40}));
  EXPECT_EQ(batch_padded_tokens(batch), 2 * 6);
  // Unshared: one row per item, exactly the item's inputs, as without packing.
  batch.share_contexts = false;
  const auto plain = pack_rows(batch);
  ASSERT_EQ(plain.size(), 4u);
  for (size_t i = 0; i < plain.size(); ++i) {
    const auto& tokens = batch.items[i].tokens;
    EXPECT_EQ(plain[i].tokens, std::vector<int32_t>(tokens.begin(), tokens.end() - 1));
    for (size_t j = 0; j < plain[i].positions.size(); ++j) EXPECT_EQ(plain[i].positions[j], static_cast<int64_t>(j));
  }
}

TEST(Packing, ShortRowsArePackedSideBySideAsPartsOfOneSequence) {
  Batch batch;
  batch.share_contexts = true;
  batch.prefix = {1, 5};
  batch.items = {item(0, {1, 5, 6, 7, 8, 9}, {20}), item(1, {1, 5, 10, 11}, {21}), item(2, {1, 5, 12, 13}, {22}),
                 item(3, {1, 5, 14}, {23, 24})};
  constexpr int64_t K = kSegmentsPerPart;
  // As wide as the longest row (4 tokens): the two 2-token rows share the second sequence.
  auto rows = pack_rows(batch);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].tokens, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(rows[1].positions, (std::vector<int64_t>{2, 3, 2, 3}));  // each part's trunk starts after the prefix
  EXPECT_EQ(rows[1].segments, (std::vector<int64_t>{0, 0, K, K}));
  ASSERT_EQ(rows[1].targets.size(), 2u);
  EXPECT_EQ(rows[1].targets[0].item, 1u);
  EXPECT_EQ(rows[1].targets[0].column, 1);
  EXPECT_EQ(rows[1].targets[1].item, 2u);
  EXPECT_EQ(rows[1].targets[1].column, 3);  // the second part's last trunk token, offset by where it starts
  EXPECT_EQ(batch_padded_tokens(batch), 3 * 4);
  // Eight wide: three rows in the first sequence, first fit in batch order.
  batch.sequence_width = 8;
  rows = pack_rows(batch);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].tokens, (std::vector<int32_t>{6, 7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(rows[0].positions, (std::vector<int64_t>{2, 3, 4, 5, 2, 3, 2, 3}));
  EXPECT_EQ(rows[0].segments, (std::vector<int64_t>{0, 0, 0, 0, K, K, 2 * K, 2 * K}));
  std::vector<std::tuple<size_t, int64_t, int32_t>> got;
  for (const auto& t : rows[0].targets) got.emplace_back(t.item, t.column, t.token);
  EXPECT_EQ(got, (std::vector<std::tuple<size_t, int64_t, int32_t>>{{0, 3, 20}, {1, 5, 21}, {2, 7, 22}}));
  // The row with a branch keeps its own layout: trunk [14], branch 1 = [23].
  EXPECT_EQ(rows[1].tokens, (std::vector<int32_t>{14, 23}));
  EXPECT_EQ(rows[1].segments, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(batch_padded_tokens(batch), 2 * 8);
  // Unshared batches are never packed.
  batch.share_contexts = false;
  batch.sequence_width = 0;
  EXPECT_EQ(pack_rows(batch).size(), 4u);
}

TEST(Packing, SplitPartsUndoesThePacking) {
  Batch batch;
  batch.share_contexts = true;
  batch.prefix = {1, 5};
  batch.items = {item(0, {1, 5, 6, 7, 8, 9}, {20}), item(1, {1, 5, 10, 11}, {21}), item(2, {1, 5, 12, 13}, {22}),
                 item(3, {1, 5, 14}, {23, 24})};
  batch.sequence_width = 8;
  const auto packed = pack_rows(batch);
  ASSERT_EQ(packed.size(), 2u);
  batch.sequence_width = 1;  // narrower than every row: each row a sequence of its own
  const auto rows = pack_rows(batch);
  ASSERT_EQ(rows.size(), 4u);
  auto parts = split_parts(packed[0]);
  const auto rest = split_parts(packed[1]);
  ASSERT_EQ(parts.size(), 3u);
  ASSERT_EQ(rest.size(), 1u);
  parts.push_back(rest[0]);
  for (size_t r = 0; r < rows.size(); ++r) {
    EXPECT_EQ(parts[r].tokens, rows[r].tokens) << r;
    EXPECT_EQ(parts[r].positions, rows[r].positions) << r;
    EXPECT_EQ(parts[r].segments, rows[r].segments) << r;
    ASSERT_EQ(parts[r].targets.size(), rows[r].targets.size()) << r;
    for (size_t k = 0; k < rows[r].targets.size(); ++k) {
      EXPECT_EQ(parts[r].targets[k].item, rows[r].targets[k].item);
      EXPECT_EQ(parts[r].targets[k].column, rows[r].targets[k].column);
      EXPECT_EQ(parts[r].targets[k].token, rows[r].targets[k].token);
    }
  }
}

TEST(Packing, SequenceFillIsFirstFit) {
  SequenceFill fill(10);
  EXPECT_TRUE(fill.opens(1));
  EXPECT_EQ(fill.place(7), 0u);
  EXPECT_TRUE(fill.opens(4));
  EXPECT_EQ(fill.place(6), 1u);
  EXPECT_FALSE(fill.opens(3));
  EXPECT_EQ(fill.place(3), 0u);  // the first sequence with room, not the emptiest
  EXPECT_EQ(fill.place(4), 1u);
  EXPECT_EQ(fill.place(1), 2u);
  EXPECT_EQ(fill.sequences(), 3u);
  SequenceFill narrow(2);
  EXPECT_EQ(narrow.place(5), 0u);  // a row wider than the sequences gets one of its own
  EXPECT_EQ(narrow.place(1), 1u);
}

TEST(Packing, SequenceWidthIsFourMediansAtLeastTheNinetiethPercentileAtMostTheBudget) {
  EXPECT_EQ(packed_sequence_width({202, 137, 129, 109, 106, 90, 60, 55, 50, 40}, 4096), 360);  // 4 x the median 90
  EXPECT_EQ(packed_sequence_width({202, 137, 129, 109, 106, 90, 60, 55, 50, 40}, 256), 256);
  EXPECT_EQ(packed_sequence_width({2000, 50, 48, 47, 40}, 1 << 20), 192);  // the outlier gets a sequence of its own
  EXPECT_EQ(packed_sequence_width({10, 10, 10, 10, 10, 10, 100, 100, 100, 100}, 1 << 20),
            100);  // the 90th percentile row fits
  EXPECT_EQ(packed_sequence_width({7}, 1 << 20), 28);
  EXPECT_EQ(packed_sequence_width({}, 1024), 0);
}

TEST(Packing, ItemsWithNothingToPredictGetNoRow) {
  Batch batch;
  batch.share_contexts = true;
  WorkItem empty;  // an empty rolling text: the prefix token alone
  empty.tokens = {1};
  empty.first_target = 1;
  batch.items = {empty, item(1, {1, 2}, {3})};
  const auto rows = pack_rows(batch);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].targets.size(), 1u);
  EXPECT_EQ(rows[0].targets[0].item, 1u);
}

TEST(Packing, ItemsMustExtendTheBatchPrefix) {
  Batch batch;
  batch.id = 7;
  batch.share_contexts = true;
  batch.prefix = {1, 2, 3};
  batch.items = {item(0, {1, 2, 9, 4}, {5})};
  EXPECT_THAT(testing::error_of([&] { pack_rows(batch); }),
              ::testing::HasSubstr("does not extend the batch's 3-token prefix"));
  batch.items = {item(0, {1, 2, 3}, {5})};  // nothing of its own after the prefix
  EXPECT_THAT(testing::error_of([&] { pack_rows(batch); }), ::testing::HasSubstr("batch 7"));
  batch.items = {item(0, {1, 2, 3, 4}, {5})};
  EXPECT_NO_THROW(pack_rows(batch));
}

}  // namespace
}  // namespace gpueval
