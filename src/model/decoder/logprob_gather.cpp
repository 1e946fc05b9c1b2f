#include "model/decoder/logprob_gather.h"

#include <algorithm>

#include "model/kernels/cuda_kernels.h"

namespace gpueval {

TargetScores logprob_gather_reference(const at::Tensor& logits, const at::Tensor& targets) {
  at::Tensor lf = logits.to(at::kFloat);  // [N, V]
  at::Tensor logprobs = at::log_softmax(lf, -1);  // [N, V]
  at::Tensor idx = targets.to(at::kLong).unsqueeze(1);  // [N, 1]
  at::Tensor picked = logprobs.gather(1, idx).squeeze(1);  // [N]
  at::Tensor greedy = lf.argmax(-1).eq(targets.to(at::kLong));  // [N]
  return {picked, greedy};
}

TargetScores target_logprobs(const DecoderModelImpl& model, const at::Tensor& hidden, const at::Tensor& targets,
                             int64_t chunk_elements) {
  const int64_t n = hidden.size(0);
  const int64_t vocab = model.config().vocab_size;
  const int64_t rows = std::max<int64_t>(1, chunk_elements / vocab);
  std::vector<at::Tensor> logprobs, greedy;
  for (int64_t start = 0; start < n; start += rows) {
    const int64_t len = std::min(rows, n - start);
    TargetScores s = logprob_gather(model.logits(hidden.narrow(0, start, len)), targets.narrow(0, start, len));
    logprobs.push_back(s.logprobs);
    greedy.push_back(s.is_greedy);
  }
  if (logprobs.empty())
    return {at::empty({0}, hidden.options().dtype(at::kFloat)), at::empty({0}, hidden.options().dtype(at::kBool))};
  return {at::cat(logprobs), at::cat(greedy)};
}

}  // namespace gpueval
