// Autoregressive generation on the KV cache with continuous batching: up to max_rows sequences
// are decoded together, a token each per step; when one ends (a stop token, the length limit, or
// the caller's RowCheck: stop strings, per-row token limits), its cache row takes the next
// waiting prompt, so the running set stays full while prompts wait. A waiting prompt's prefill
// joins the decode steps (DecoderModelImpl::forward_ragged: one pass reads the weights for the
// decoding rows and the prompt's tokens together), a chunk of prefill_chunk tokens per step so
// that a long prompt does not stall the decoders; with no sequence decoding, every waiting
// prompt's next chunk goes in one pass. While rows are free and no prompt waits, the caller may hand
// over more prompts after the same prefix (MorePrompts: the next batch of a worker's queue), so
// the set stays full from one batch into the next. Prompts after a shared prefix prefill only their own
// tokens, and prompts equal to each other (a task's repeats) are prefilled once.
//
// A sequence's tokens do not depend on which others share its steps: a prompt's chunks are cut
// from its own start (never by what shares the step), its keys sit contiguous in its row wherever
// the row is (KVCache::place_row, realign), tiled attention scores exactly a row's own keys
// (cpu_attention.h), generate() multiplies the projections and the LM head with the row-invariant
// product (row_invariant.h's RowInvariantProducts: a row's bits whatever the other rows, on CPUs
// with AVX2+FMA; a caller computing the prefix holds one too), and every sequence samples from its
// own generator seeded by the caller. Greedy by default.
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
  int64_t top_k = 0;  // 0: off
  double top_p = 1.0;  // 1: off
};

// The prefill chunk generate() uses unless told otherwise. A prompt's chunks set the order of some
// sums, so a run's tokens follow this number: changing it is changing the engine.
constexpr int64_t kPrefillChunk = 256;

struct SamplingOptions {
  int64_t max_new_tokens = 256;
  double temperature = 0.0;  // the Sampler of every row, unless `per_row` gives each its own
  int64_t top_k = 0;
  double top_p = 1.0;
  std::vector<Sampler> per_row;  // one per prompt; empty: the three fields above for all
  int64_t max_rows = 0;  // sequences decoded together; 0: every prompt at once
  std::vector<uint64_t> seeds;  // one per prompt; empty: `seed` for all
  uint64_t seed = 0;
  std::vector<int64_t> stop_token_ids;  // generation of a row ends after one of these (not returned)
  int64_t prefill_chunk = kPrefillChunk;  // a prompt's tokens per prefill step (a longer one takes several)
};

struct Generation {
  std::vector<int32_t> tokens;  // new tokens, stop token excluded
  bool stopped = false;  // ended on a stop token
  bool ended_by_check = false;  // ended because the RowCheck returned true
};

// Called after each step with (prompt index, new token); the stop token is reported too.
using TokenCallback = std::function<void(size_t, int32_t)>;

// Called after a token (not a stop token) joins a row, with (prompt index, the
// row's new tokens so far); returning true ends that row, keeping the token.
using RowCheck = std::function<bool(size_t, const std::vector<int32_t>&)>;

// Called once per prompt, as soon as its sequence has ended, with (prompt index, its generation).
using RowDone = std::function<void(size_t, const Generation&)>;

// A prompt that joins a generate() under way (MorePrompts): its tokens (the run's prefix first), its
// own seed, sampler and limit of new tokens.
struct JoiningPrompt {
  std::vector<int32_t> tokens;
  uint64_t seed = 0;
  Sampler sampler;
  int64_t max_new_tokens = 0;
};

// Asked while a row is free and no prompt waits (after every step then, and before generate()
// returns): prompts to join the running set, or none for now. They take the indices after the
// prompts so far, in order, and are generated as if they had been in `prompts` from the start
// (with their own seeds and samplers), so joining changes no sequence's tokens.
using MorePrompts = std::function<std::vector<JoiningPrompt>()>;

// With a prefix, every prompt starts with its tokens (and has at least one more): its keys and
// values are shared by all rows, computed once by the caller (DecoderModelImpl::prefill). Returns a
// Generation per prompt, those that joined (`more`) after the others.
std::vector<Generation> generate(const DecoderModelImpl& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingOptions& options, const TokenCallback& on_token = nullptr,
                                 const RowCheck& end_row = nullptr, const PrefixKV* prefix = nullptr,
                                 const RowDone& on_done = nullptr, const MorePrompts& more = nullptr);

// Whether generate() on a model on `device` with weights of `dtype` gives each sequence the same
// tokens whatever else shares its steps or batch: a CPU model in float32 where the row-invariant
// product runs (row_invariant_vector_code(), and GPUEVAL_ROW_INVARIANT_PRODUCTS is not 0). Where
// it holds, a batch's sequences can be computed in any grouping (a crashed batch's unfinished
// ones alone); elsewhere only the batch as planned gives the planned tokens.
bool generation_rows_independent(const at::Device& device, at::ScalarType dtype);
bool generation_rows_independent(const DecoderModelImpl& model);

}  // namespace gpueval
