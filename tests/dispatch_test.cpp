#include "run/dispatch.h"

#include <gtest/gtest.h>

namespace gpueval {
namespace {

using Action = DispatchChoice::Action;

// The queue position an idle worker holding the checkpoint gets.
size_t position(const std::vector<int64_t>& queued, int64_t held, const std::vector<int64_t>& others) {
  const DispatchChoice c = choose_dispatch(queued, /*holds_checkpoint=*/true, held, others);
  EXPECT_EQ(c.action, Action::kSend);
  return c.position;
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

TEST(DispatchTest, FallsBackToPlanOrderWhenEveryPrefixIsHeldElsewhere) {
  EXPECT_EQ(position({3, 9, 3}, -1, {9, 3}), 0u);
  EXPECT_EQ(position({3}, 2, {3, 3}), 0u);
}

TEST(DispatchTest, BatchesWithoutAPrefixAreFree) {
  EXPECT_EQ(position({3, -1, 3}, -1, {3}), 1u);
  // A worker that holds no prefix does not match batches without one either: plan order decides.
  EXPECT_EQ(position({-1, -1}, -1, {-1}), 0u);
  // Other workers that hold nothing (-1) never make a batch look taken.
  EXPECT_EQ(position({6, -1}, -1, {-1, -1}), 0u);
}

TEST(DispatchTest, AWorkerOnThePreviousCheckpointSwitchesFirst) {
  const DispatchChoice c = choose_dispatch({7, 8}, /*holds_checkpoint=*/false, 7, {});
  EXPECT_EQ(c.action, Action::kSwitchCheckpoint);
}

TEST(DispatchTest, NothingQueuedMeansWaitEvenForASwitch) {
  EXPECT_EQ(choose_dispatch({}, true, 3, {}).action, Action::kWait);
  // With nothing left to run, a worker keeps the checkpoint it holds.
  EXPECT_EQ(choose_dispatch({}, false, 3, {}).action, Action::kWait);
}

}  // namespace
}  // namespace gpueval
