#include "run/devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

// "cuda:0 cuda:2", the slots' names in order.
std::string names(const std::vector<DeviceSlot>& slots) {
  std::string out;
  for (const DeviceSlot& s : slots) out += (out.empty() ? "" : " ") + s.name();
  return out;
}

std::vector<int> threads(const std::vector<DeviceSlot>& slots) {
  std::vector<int> out;
  for (const DeviceSlot& s : slots) out.push_back(s.threads);
  return out;
}

// The one-line message parse_device_spec throws; fails the test if it parses.
std::string error_of(const std::string& spec, int cuda_devices, int cpu_cores = 8) {
  try {
    auto slots = parse_device_spec(spec, cuda_devices, cpu_cores);
    ADD_FAILURE() << "'" << spec << "' parsed as " << names(slots);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

TEST(DevicesTest, GpuForms) {
  EXPECT_EQ(names(parse_device_spec("0-3", 4, 16)), "cuda:0 cuda:1 cuda:2 cuda:3");
  EXPECT_EQ(names(parse_device_spec("0,2,5", 8, 16)), "cuda:0 cuda:2 cuda:5");
  EXPECT_EQ(names(parse_device_spec("1", 2, 16)), "cuda:1");
  EXPECT_EQ(names(parse_device_spec("all", 3, 16)), "cuda:0 cuda:1 cuda:2");
  EXPECT_EQ(names(parse_device_spec("0,0", 1, 16)), "cuda:0 cuda:0");
  EXPECT_EQ(names(parse_device_spec("0-1,0-1", 2, 16)), "cuda:0 cuda:1 cuda:0 cuda:1");
  EXPECT_EQ(names(parse_device_spec("3,1-2", 4, 16)), "cuda:3 cuda:1 cuda:2");
  EXPECT_EQ(names(parse_device_spec(" 0 , 2 ", 4, 16)), "cuda:0 cuda:2");
  EXPECT_EQ(names(parse_device_spec("2-2", 4, 16)), "cuda:2");
}

TEST(DevicesTest, GpuSlotsKeepTheUsersOrdinalAndFewThreads) {
  const auto slots = parse_device_spec("5,7", 8, 64);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].kind, DeviceSlot::Kind::kCuda);
  EXPECT_EQ(slots[0].index, 5);
  EXPECT_EQ(slots[1].index, 7);
  EXPECT_EQ(threads(slots), (std::vector<int>{kCudaWorkerThreads, kCudaWorkerThreads}));
  EXPECT_EQ(threads(parse_device_spec("0", 1, 1)), std::vector<int>{1});  // never more threads than cores
}

TEST(DevicesTest, CpuWorkersSplitTheCores) {
  auto one = parse_device_spec("cpu", 0, 8);
  EXPECT_EQ(names(one), "cpu:0");
  EXPECT_EQ(one[0].kind, DeviceSlot::Kind::kCpu);
  EXPECT_EQ(threads(one), std::vector<int>{8});
  EXPECT_EQ(threads(parse_device_spec("cpu:2", 0, 8)), (std::vector<int>{4, 4}));
  EXPECT_EQ(threads(parse_device_spec("cpu:3", 0, 2)), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(threads(parse_device_spec("cpu:3", 0, 8)), (std::vector<int>{3, 3, 2}));
  EXPECT_EQ(threads(parse_device_spec("cpu:4", 0, 7)), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(threads(parse_device_spec("cpu:1", 0, 16)), std::vector<int>{16});
  EXPECT_EQ(threads(parse_device_spec("cpu", 0, 0)), std::vector<int>{1});
  EXPECT_EQ(names(parse_device_spec("cpu:3", 0, 8)), "cpu:0 cpu:1 cpu:2");
  // CPU workers are asked for by name, so a visible GPU changes nothing.
  EXPECT_EQ(names(parse_device_spec("cpu:2", 4, 8)), "cpu:0 cpu:1");
}

TEST(DevicesTest, MalformedSpecsNameTheFlagAndSpec) {
  EXPECT_THAT(error_of("3-1", 4), HasSubstr("--gpus 3-1: range end is below its start"));
  EXPECT_THAT(error_of("x", 4), HasSubstr("--gpus x: 'x' is not a GPU index or range"));
  EXPECT_THAT(error_of("", 4), HasSubstr("--gpus '': is empty"));
  EXPECT_THAT(error_of("  ", 4), HasSubstr("--gpus '': is empty"));
  EXPECT_THAT(error_of("cpu:0", 0), HasSubstr("--gpus cpu:0: needs at least one CPU worker"));
  EXPECT_THAT(error_of("cpu:", 0), HasSubstr("--gpus cpu:: '' is not a number of CPU workers"));
  EXPECT_THAT(error_of("cpu:two", 0), HasSubstr("--gpus cpu:two: 'two' is not a number of CPU workers"));
  EXPECT_THAT(error_of("cpu:-1", 0), HasSubstr("--gpus cpu:-1: '-1' is not a number"));
  EXPECT_THAT(error_of("-1", 4), HasSubstr("--gpus -1: '-1' is not a GPU index or range"));
  EXPECT_THAT(error_of("0,,1", 4), HasSubstr("--gpus 0,,1: has an empty entry between commas"));
  EXPECT_THAT(error_of("0,", 4), HasSubstr("--gpus 0,: has an empty entry"));
  EXPECT_THAT(error_of("1-", 4), HasSubstr("--gpus 1-: '1-' is not a GPU index or range"));
  EXPECT_THAT(error_of("0-1-2", 4), HasSubstr("is not a GPU index or range"));
  EXPECT_THAT(error_of("cuda:0", 4), HasSubstr("--gpus cuda:0: 'cuda:0' is not a GPU index"));
  EXPECT_THAT(error_of("0,all", 4), HasSubstr("--gpus 0,all: 'all' cannot be combined"));
  EXPECT_THAT(error_of("0,cpu", 4), HasSubstr("--gpus 0,cpu: 'cpu' cannot be combined with GPU indices"));
  EXPECT_THAT(error_of("cpu:5000", 0), HasSubstr("--gpus cpu:5000: asks for more than 1024 workers"));
  EXPECT_THAT(error_of("cpu:99999999999999999999999", 0), HasSubstr("asks for more than 1024 workers"));
}

TEST(DevicesTest, GpusWithoutCudaIsAnErrorNotACpuRun) {
  const std::string advice =
      "no CUDA device is visible (this build of LibTorch has no CUDA support or no GPU is present); "
      "use --gpus cpu or cpu:N";
  EXPECT_THAT(error_of("0-3", 0), HasSubstr("--gpus 0-3: " + advice));
  EXPECT_THAT(error_of("0", 0), HasSubstr("--gpus 0: " + advice));
  EXPECT_THAT(error_of("all", 0), HasSubstr("--gpus all: " + advice));
  // A malformed spec is reported as such first, whatever the machine.
  EXPECT_THAT(error_of("3-1", 0), HasSubstr("range end is below its start"));
}

TEST(DevicesTest, IndexOutOfRange) {
  EXPECT_THAT(error_of("4", 2), HasSubstr("--gpus 4: only 2 CUDA devices (0-1) are visible"));
  EXPECT_THAT(error_of("0-3", 2), HasSubstr("--gpus 0-3: only 2 CUDA devices (0-1) are visible"));
  EXPECT_THAT(error_of("0,1", 1), HasSubstr("--gpus 0,1: only 1 CUDA device (0) is visible"));
  EXPECT_THAT(error_of("0-99999999999999999999", 8), HasSubstr("only 8 CUDA devices (0-7) are visible"));
  std::string many;
  for (int i = 0; i < 1025; ++i) many += i ? ",0" : "0";
  EXPECT_THAT(error_of(many, 1), HasSubstr("asks for more than 1024 workers"));
}

TEST(DevicesTest, SyntaxCheckAloneNeedsNoDevices) {
  EXPECT_NO_THROW(check_device_spec_syntax("0-7", "run.yaml:3: key 'gpus'"));
  EXPECT_NO_THROW(check_device_spec_syntax("all", "run.yaml:3: key 'gpus'"));
  EXPECT_NO_THROW(check_device_spec_syntax("cpu:4", "run.yaml:3: key 'gpus'"));
  try {
    check_device_spec_syntax("7-0", "run.yaml:3: key 'gpus'");
    FAIL() << "accepted 7-0";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "run.yaml:3: key 'gpus': range end is below its start");
  }
}

}  // namespace
}  // namespace gpueval
