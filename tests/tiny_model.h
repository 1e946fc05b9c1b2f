// A tiny random-weight Llama-family model for tests, covering what stories260K
// does not: untied head, llama3 rope scaling, q/k/v bias, GQA with several
// groups. Plus an independent plain-LibTorch reference forward (one sequence,
// no cache, no padding, explicit per-head loops) to check DecoderModel against.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "gpueval/model_config.h"

namespace gpueval::testing {

struct TinyModelSpec {
  bool tied = false;
  bool qkv_bias = true;
  bool llama3_rope = true;
  int64_t vocab = 96;
  int64_t hidden = 32;
  int64_t intermediate = 48;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t max_positions = 64;
  uint64_t seed = 1234;
};

ModelConfig tiny_config(const TinyModelSpec& spec);
std::map<std::string, at::Tensor> tiny_weights(const ModelConfig& config, uint64_t seed);

// Writes config.json + model.safetensors into `dir`.
void write_tiny_model(const std::string& dir, const ModelConfig& config,
                      const std::map<std::string, at::Tensor>& weights);

// One head's rotary embedding from its definition, in plain loops and float64: row r of x
// ([T, head_dim]) sits at positions[r] (r when positions is empty); the pair (x[i], x[i + hd/2])
// turns by position * inv_freq(i), inv_freq with config's linear or llama3 scaling. Returns
// [T, head_dim] float64. The oracle for the model's RoPE.
at::Tensor reference_rotary(const ModelConfig& config, const at::Tensor& x, const std::vector<int64_t>& positions = {});

// ids: one sequence; returns logits [T, V] float64, computed independently of gpueval's model code.
at::Tensor reference_logits(const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
                            const std::vector<int64_t>& ids);

// A test run once per device, CTranslate2-style: the CPU instantiation always runs; the CUDA one
// exists only in CUDA builds and skips itself where no CUDA device is present.
class DeviceTest : public ::testing::TestWithParam<at::Device> {
 protected:
  void SetUp() override {
    if (device().is_cuda() && !at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  }
  at::Device device() const { return GetParam(); }
};

inline std::string device_test_name(const ::testing::TestParamInfo<at::Device>& info) {
  return info.param.is_cuda() ? "CUDA" : "CPU";
}

}  // namespace gpueval::testing

// Instantiates the TEST_Ps of `suite` (a DeviceTest) on every device this build has.
#define GPUEVAL_INSTANTIATE_CPU_TESTS(suite) \
  INSTANTIATE_TEST_SUITE_P(CPU, suite, ::testing::Values(at::Device(at::kCPU)), ::gpueval::testing::device_test_name)
#ifdef GPUEVAL_WITH_CUDA
#define GPUEVAL_INSTANTIATE_DEVICE_TESTS(suite)                                      \
  GPUEVAL_INSTANTIATE_CPU_TESTS(suite);                                              \
  INSTANTIATE_TEST_SUITE_P(CUDA, suite, ::testing::Values(at::Device(at::kCUDA, 0)), \
                           ::gpueval::testing::device_test_name)
#else
#define GPUEVAL_INSTANTIATE_DEVICE_TESTS(suite) GPUEVAL_INSTANTIATE_CPU_TESTS(suite)
#endif
