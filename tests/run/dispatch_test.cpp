#include "run/dispatch.h"

#include <gtest/gtest.h>

namespace gpueval {
namespace {

using Action = DispatchChoice::Action;

// Queued batches of these prefixes (-1: none), each `tokens` long after a prefix of `prefix_tokens`.
std::vector<QueuedBatch> batches(const std::vector<int64_t>& prefixes, int64_t prefix_tokens = 100,
                                 int64_t tokens = 256) {
  std::vector<QueuedBatch> out;
  for (int64_t p : prefixes) out.push_back({p, p < 0 ? 0 : prefix_tokens, tokens});
  return out;
}

// The queue position an idle worker holding the checkpoint gets.
size_t position(const std::vector<QueuedBatch>& queued, int64_t held, const std::vector<int64_t>& others) {
  const DispatchChoice c = choose_dispatch(queued, /*holds_checkpoint=*/true, held, others);
  EXPECT_EQ(c.action, Action::kSend);
  return c.position;
}
size_t position(const std::vector<int64_t>& queued, int64_t held, const std::vector<int64_t>& others) {
  return position(batches(queued), held, others);
}

Action action(const std::vector<QueuedBatch>& queued, int64_t held, const std::vector<int64_t>& others) {
  return choose_dispatch(queued, /*holds_checkpoint=*/true, held, others).action;
}

TEST(DispatchTest, PrefersTheFirstBatchWithThePrefixItHolds) {
  EXPECT_EQ(position({4, 7, 5, 7}, 7, {}), 1u);
  // Even when another worker holds that prefix too, and earlier batches are free.
  EXPECT_EQ(position({-1, 4, 7}, 7, {7, 4}), 2u);
}

TEST(DispatchTest, ElseTakesAPrefixNoOtherWorkerHolds) {
  EXPECT_EQ(position({3, 3, 8, 3}, -1, {3}), 2u);
  EXPECT_EQ(position({3, 9, 8}, 5, {3, 9}), 2u);  // its own prefix is not queued any more
}

// A subject's 443-token few-shot prefix and batches of 256 tokens, as in MMLU 5-shot on a CPU.
// Of the work nobody holds, the most first: a prefix counts its length and all its queued batches,
// a batch without a prefix its own tokens; a tie goes to the earlier in the queue.
TEST(DispatchTest, TakesTheLargestWorkNobodyHoldsFirst) {
  EXPECT_EQ(position({3, 3, 8, 8, 8}, -1, {}), 2u);  // 8: 100 + 3 * 256 tokens, 3: 100 + 2 * 256
  EXPECT_EQ(position({3, 3, 8, 8, 8}, -1, {8}), 0u);  // 8 is held elsewhere
  EXPECT_EQ(position({8, 3, 3, 8}, -1, {}), 0u);  // a tie: the earlier prefix, its first batch
  std::vector<QueuedBatch> q = batches({5, 5, 5});
  q.insert(q.begin(), QueuedBatch{-1, 0, 900});
  EXPECT_EQ(position(q, -1, {}), 0u);  // 900 tokens without a prefix before 5's 868
  q.front().tokens = 500;
  EXPECT_EQ(position(q, -1, {}), 1u);
  q.push_back(QueuedBatch{-1, 0, 868});
  EXPECT_EQ(position(q, -1, {}), 1u);  // a tie with 5's work: the earlier
}

TEST(DispatchTest, TakesABatchOfAPrefixHeldElsewhereOnlyWhenThatEndsSooner) {
  // One holder: 443 + 256 tokens of its own against the holder's queued 256 each.
  EXPECT_EQ(action(batches({3}, 443), -1, {3}), Action::kWait);
  EXPECT_EQ(action(batches({3, 3}, 443), -1, {3}), Action::kWait);  // 699 >= 512
  EXPECT_EQ(position(batches({3, 3, 3}, 443), -1, {3}), 2u);  // 699 < 768: the last one
  // Two holders share the queue: 5 batches are 640 tokens each, 6 are 768.
  EXPECT_EQ(action(batches({3, 3, 3, 3, 3}, 443), -1, {3, 3}), Action::kWait);
  EXPECT_EQ(position(batches({3, 3, 3, 3, 3, 3}, 443), 8, {3, 3}), 5u);
  // A prefix held by nobody up is free, however short the queue.
  EXPECT_EQ(position(batches({3}, 443), -1, {5}), 0u);
}

TEST(DispatchTest, TakesFromThePrefixWhoseHoldersHaveTheMostQueuedWorkEach) {
  const std::vector<QueuedBatch> q = batches({3, 3, 3, 3, 9, 9, 9});
  EXPECT_EQ(position(q, -1, {3, 9}), 3u);  // 1024 tokens for 3's holder, 768 for 9's
  EXPECT_EQ(position(q, -1, {3, 3, 9}), 6u);  // 512 each for 3's two holders, 768 for 9's
  // Tokens count, not batches: 9's two batches are the longer work.
  std::vector<QueuedBatch> sized = batches({3, 3, 3, 9, 9});
  sized[3].tokens = sized[4].tokens = 2000;
  EXPECT_EQ(position(sized, -1, {3, 9}), 4u);
  // Never the whole queue of a prefix in one batch: its holder ends that one sooner.
  sized.pop_back();
  EXPECT_EQ(position(sized, -1, {3, 9}), 2u);
}

TEST(DispatchTest, BatchesWithoutAPrefixAreFree) {
  EXPECT_EQ(position({3, -1, 3}, -1, {3}), 1u);
  // A worker that holds no prefix does not match batches without one either: plan order decides.
  EXPECT_EQ(position({-1, -1}, -1, {-1}), 0u);
  // Other workers that hold nothing (-1) never make a batch look taken.
  EXPECT_EQ(position({6, -1}, -1, {-1, -1}), 0u);
}

TEST(DispatchTest, AWorkerOnThePreviousCheckpointSwitchesFirst) {
  const DispatchChoice c = choose_dispatch(batches({7, 8}), /*holds_checkpoint=*/false, 7, {});
  EXPECT_EQ(c.action, Action::kSwitchCheckpoint);
}

TEST(DispatchTest, NothingQueuedMeansWaitEvenForASwitch) {
  EXPECT_EQ(choose_dispatch(batches({}), true, 3, {}).action, Action::kWait);
  // With nothing left to run, a worker keeps the checkpoint it holds.
  EXPECT_EQ(choose_dispatch(batches({}), false, 3, {}).action, Action::kWait);
}

// The look-ahead: a worker whose generation batch is draining (a sequence has ended, and those still
// running fit its rows) gets the next queued generation batch with its prefix, while the queue holds a
// batch for every worker that is up.
TEST(DispatchTest, ADrainingGenerationBatchGetsTheNextOneWithItsPrefixAhead) {
  std::vector<QueuedBatch> q = batches({4, 7, 7, 7});
  q[1].generation = false;  // a scoring batch of the same prefix never joins a running set
  q[2].generation = q[3].generation = true;
  const FlightBatch draining{/*generation=*/true, /*prefix_id=*/7, /*items=*/32, /*ended=*/28, /*rows=*/4};
  EXPECT_EQ(choose_ahead(q, {draining}, 2), std::optional<size_t>(2));
  EXPECT_EQ(choose_ahead(q, {draining}, 4), std::optional<size_t>(2));
  // Not yet: more sequences to run than rows (a prompt still waits), or none has ended.
  FlightBatch waiting = draining;
  waiting.ended = 27;
  EXPECT_EQ(choose_ahead(q, {waiting}, 2), std::nullopt);
  FlightBatch fresh{true, 7, 4, 0, 4};
  EXPECT_EQ(choose_ahead(q, {fresh}, 2), std::nullopt);
  fresh.ended = 1;
  EXPECT_EQ(choose_ahead(q, {fresh}, 2), std::optional<size_t>(2));
  // max_rows 0: all its items run at once.
  EXPECT_EQ(choose_ahead(q, {FlightBatch{true, 7, 5, 1, 0}}, 2), std::optional<size_t>(2));
  // Never a second batch ahead, never for a scoring batch, never another prefix.
  EXPECT_EQ(choose_ahead(q, {draining, draining}, 2), std::nullopt);
  FlightBatch scoring = draining;
  scoring.generation = false;
  EXPECT_EQ(choose_ahead(q, {scoring}, 2), std::nullopt);
  FlightBatch other = draining;
  other.prefix_id = 4;
  EXPECT_EQ(choose_ahead(q, {other}, 2), std::nullopt);
  // The last batches go to whichever worker is free first: fewer queued than workers up.
  EXPECT_EQ(choose_ahead(q, {draining}, 5), std::nullopt);
  EXPECT_EQ(choose_ahead({}, {draining}, 1), std::nullopt);
}

}  // namespace
}  // namespace gpueval
