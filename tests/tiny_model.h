// A tiny random-weight Llama-family model for tests, covering what stories260K
// does not: untied head, llama3 rope scaling, q/k/v bias, GQA with several
// groups. Plus an independent plain-LibTorch reference forward (one sequence,
// no cache, no padding, explicit per-head loops) to check LlamaModel against.
#pragma once

#include <map>
#include <string>

#include <ATen/ATen.h>

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

// ids: one sequence; returns logits [T, V] float64, computed independently of gpueval's model code.
at::Tensor reference_logits(const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
                            const std::vector<int64_t>& ids);

}  // namespace gpueval::testing
