// Converts a llama2.c checkpoint (legacy version-0 `.bin`, or the version-1
// float32 export with the "ak42" magic) and its tokenizer `.bin` into a Hugging
// Face layout directory: config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json, generation_config.json.
//
// llama2.c rotates interleaved pairs (q[2i], q[2i+1]); HF-layout Llama rotates
// halves (q[i], q[i + head_dim/2]). The q and k projection rows are permuted per
// head so the converted model computes exactly the same attention scores.
#pragma once

#include <map>
#include <string>

#include <ATen/ATen.h>

#include "gpueval/model_config.h"

namespace gpueval {

struct Llama2cCheckpoint {
  ModelConfig config;
  std::map<std::string, at::Tensor> weights;  // HF names, float32, rows already permuted
};

// Reads and validates the checkpoint (size must match the header exactly).
Llama2cCheckpoint read_llama2c_checkpoint(const std::string& path);

// Writes the HF directory (created if absent); files are written atomically.
void convert_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path, const std::string& out_dir);

// [n_heads * head_dim, dim] interleaved-pair rows -> rotate-halves rows.
at::Tensor permute_interleaved_to_halves(const at::Tensor& w, int64_t n_heads);

}  // namespace gpueval
