// Target-token log-probabilities from final hidden states: logits for a chunk
// of rows, log-softmax in float32, gather of the target column, and whether the
// target is the argmax. Only one chunk of logits exists at a time, so a
// [batch, seq, vocab] float32 tensor is never materialised. This is the plain
// LibTorch reference of the fused kernel, and the CPU path.
#pragma once

#include <ATen/ATen.h>

#include "gpueval/model.h"

namespace gpueval {

struct TargetScores {
  at::Tensor logprobs;  // [N] float32
  at::Tensor is_greedy;  // [N] bool: target is the first argmax of its row
};

// logits: [N, V] any float dtype; targets: [N] int64.
TargetScores logprob_gather_reference(const at::Tensor& logits, const at::Tensor& targets);

// hidden: [N, D] final-norm states; targets: [N] int64. Rows are processed in
// chunks of at most `chunk_elements` logits.
TargetScores target_logprobs(const DecoderModelImpl& model, const at::Tensor& hidden, const at::Tensor& targets,
                             int64_t chunk_elements = int64_t{1} << 24);

}  // namespace gpueval
