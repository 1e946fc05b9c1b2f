// The scoring primitives every task reduces to: log-probabilities of chosen
// tokens given their prefix, for a padded batch of sequences in one forward
// pass (loglikelihood), and lm-evaluation-harness's rolling windows for texts
// longer than the model's context (loglikelihood_rolling). Stateless; safe to
// call from several threads on the same model.
#pragma once

#include <cstdint>
#include <vector>

#include "gpueval/model.h"

namespace gpueval {

// Scores tokens[first_target..] each conditioned on all tokens before it.
struct ScoreRequest {
  std::vector<int32_t> tokens;
  int64_t first_target = 1;  // >= 1
};

struct ScoreResult {
  std::vector<float> logprobs;  // one per target token
  std::vector<bool> is_greedy;  // target was the argmax
  double sum() const;
  bool all_greedy() const;
};

// One right-padded forward over all requests; every request must fit the
// model's context (max_position_embeddings).
std::vector<ScoreResult> score_batch(const DecoderModelImpl& model, const std::vector<ScoreRequest>& requests);

// The same numbers computed one token at a time through the KV cache, as
// llama2.c-style decoding does; the baseline the batched path is measured and
// checked against.
ScoreResult score_stepwise(const DecoderModelImpl& model, const ScoreRequest& request);

// Splits `tokens` into windows of at most max_length inputs that together
// predict every token exactly once; the first window is prefixed with
// `prefix_token` (BOS or EOS), later ones carry up to max_length tokens of
// context (lm-evaluation-harness's get_rolling_token_windows with context_len 1).
std::vector<ScoreRequest> rolling_windows(const std::vector<int32_t>& tokens, int32_t prefix_token, int64_t max_length);

}  // namespace gpueval
