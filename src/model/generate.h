// Batched autoregressive generation on the KV cache: prompts are left-padded
// into one batch, prefilled in one forward, then decoded a token per step.
// Greedy by default; with a temperature, each row samples from its own CPU
// generator seeded by the caller, so a row's text does not depend on which
// other rows share its batch or on the device. Finished rows leave the batch,
// on a stop token, on the length limit, or when the caller's RowCheck says so
// (stop strings, per-row token limits), so a row never waits on its batch mates.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "gpueval/model.h"

namespace gpueval {

// How one row picks its next token, as transformers' sampling warpers do in their order:
// logits / temperature, then top-k, then top-p (nucleus), then a draw.
struct Sampler {
  double temperature = 0.0;  // 0: greedy (first argmax)
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
};

struct SamplingOptions {
  int64_t max_new_tokens = 256;
  double temperature = 0.0;  // the Sampler of every row, unless `per_row` gives each its own
  int64_t top_k = 0;
  double top_p = 1.0;
  std::vector<Sampler> per_row;        // one per prompt; empty: the three fields above for all
  std::vector<uint64_t> seeds;         // one per prompt; empty: `seed` for all
  uint64_t seed = 0;
  std::vector<int64_t> stop_token_ids;  // generation of a row ends after one of these (not returned)
};

struct Generation {
  std::vector<int32_t> tokens;  // new tokens, stop token excluded
  bool stopped = false;         // ended on a stop token
  bool ended_by_check = false;  // ended because the RowCheck returned true
};

// Called after each step with (prompt index, new token); the stop token is reported too.
using TokenCallback = std::function<void(size_t, int32_t)>;

// Called after a token (not a stop token) joins a row, with (prompt index, the
// row's new tokens so far); returning true ends that row, keeping the token.
using RowCheck = std::function<bool(size_t, const std::vector<int32_t>&)>;

std::vector<Generation> generate(const LlamaModelImpl& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingOptions& options, const TokenCallback& on_token = nullptr,
                                 const RowCheck& end_row = nullptr);

}  // namespace gpueval
