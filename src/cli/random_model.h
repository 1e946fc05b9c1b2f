// A random-weight Llama checkpoint with a real tokenizer, for benchmarks: the speed of scoring and
// the length of prompts depend on the architecture and the tokenizer, not on what the weights
// learned, so a model of the size under study can be made without downloading one.
//
// write_random_model() writes a Hugging Face layout directory that load_model() and
// load_tokenizer() accept: config.json (architecture "llama", bos/eos ids from the tokenizer),
// model.safetensors, generation_config.json, and the tokenizer's files. Weights follow the usual
// Llama initialisation: every projection and the embedding drawn from normal(0, 0.02), every
// RMSNorm weight 1. They come from one CPU generator seeded with spec.seed and drawn in a fixed
// order, so the same spec and tokenizer give a byte-identical model.safetensors.
//
// A pure function of its arguments apart from the files it writes; safe to call from any thread
// for different output directories.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpueval/model_config.h"

namespace gpueval {

struct RandomModelSpec {
  int64_t hidden = 768;
  int64_t intermediate = 2048;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t kv_heads = 12;
  int64_t max_positions = 2048;
  int64_t vocab = 0;  // 0: the tokenizer's vocab_size(); otherwise at least that
  double rope_theta = 10000.0;
  bool tied = false;  // lm_head shares the embedding
  uint64_t seed = 1;
  std::string dtype = "float32";  // float32 | bfloat16 | float16 (as parse_dtype reads it)
};

// The config.json that write_random_model() writes for `spec` with a tokenizer of `tokenizer_vocab`
// ids and these special ids. Throws Error naming the offending field (e.g. "heads: 5 does not
// divide hidden 768") when the spec does not describe a loadable model.
ModelConfig random_model_config(const RandomModelSpec& spec, int64_t tokenizer_vocab, std::optional<int32_t> bos_id,
                                std::optional<int32_t> eos_id);

// Writes the checkpoint into out_dir (created if absent; files there of the same names are
// replaced atomically). tokenizer_dir must hold a tokenizer.json or tokenizer.model (copied with
// tokenizer_config.json and special_tokens_map.json when present), or else a llama2.c
// tokenizer.bin (converted to tokenizer.json). Everything is validated before anything is written:
// a bad spec or tokenizer throws Error and leaves out_dir untouched.
void write_random_model(const std::string& out_dir, const RandomModelSpec& spec, const std::string& tokenizer_dir);

}  // namespace gpueval
