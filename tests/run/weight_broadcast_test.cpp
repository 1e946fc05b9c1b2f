#include "run/weight_broadcast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpueval {
namespace {

using ::testing::HasSubstr;

std::vector<DeviceSlot> slots(const std::string& spec) { return parse_device_spec(spec, /*cuda_devices=*/4, 8); }

#ifdef GPUEVAL_WITH_NCCL
TEST(WeightBroadcast, WhichSlotsCanBroadcast) {
  EXPECT_EQ(broadcast_fallback_reason(slots("0,1")), "");
  EXPECT_EQ(broadcast_fallback_reason(slots("0-3")), "");
  EXPECT_EQ(broadcast_fallback_reason(slots("2")), "there is only one worker");
  EXPECT_EQ(broadcast_fallback_reason(slots("cpu:2")), "the workers are not all on GPUs");
  EXPECT_THAT(broadcast_fallback_reason(slots("0,0")), HasSubstr("two workers share GPU 0"));
  EXPECT_THAT(broadcast_fallback_reason(slots("1,2,1")), HasSubstr("two workers share GPU 1"));
}
#else
TEST(WeightBroadcast, WithoutNcclEverySlotSetFallsBack) {
  for (const char* spec : {"0,1", "0-3", "cpu:2", "0,0"})
    EXPECT_EQ(broadcast_fallback_reason(slots(spec)), "this build has no NCCL") << spec;
}
#endif

}  // namespace
}  // namespace gpueval
