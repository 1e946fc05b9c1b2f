#include "model/decoder/scorer.h"

#include <algorithm>
#include <numeric>

#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"
#include "model/decoder/logprob_gather.h"

namespace gpueval {

double ScoreResult::sum() const { return std::accumulate(logprobs.begin(), logprobs.end(), 0.0); }

bool ScoreResult::all_greedy() const {
  return std::all_of(is_greedy.begin(), is_greedy.end(), [](bool g) { return g; });
}

namespace {

void check_request(const DecoderModelImpl& model, const ScoreRequest& r) {
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (r.first_target < 1 || r.first_target > n)
    throw Error(fmt::format("score request: first_target {} outside [1, {}]", r.first_target, n));
  if (n - 1 > model.config().max_position_embeddings)
    throw Error(fmt::format("score request: {} input tokens exceed the model's context of {}", n - 1,
                            model.config().max_position_embeddings));
  for (int32_t t : r.tokens)
    if (t < 0 || t >= model.config().vocab_size)
      throw Error(
          fmt::format("score request: token id {} outside the vocabulary [0, {})", t, model.config().vocab_size));
}

ScoreResult to_result(const TargetScores& s) {
  at::Tensor lp = s.logprobs.to(at::kCPU).contiguous();
  at::Tensor gr = s.is_greedy.to(at::kCPU).contiguous();
  ScoreResult r;
  r.logprobs.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
  r.is_greedy.assign(gr.data_ptr<bool>(), gr.data_ptr<bool>() + gr.numel());
  return r;
}

}  // namespace

std::vector<ScoreResult> score_batch(const DecoderModelImpl& model, const std::vector<ScoreRequest>& requests) {
  if (requests.empty()) return {};
  c10::InferenceMode guard;
  const at::Device device = model.options().device;
  const int64_t b = static_cast<int64_t>(requests.size());
  int64_t t = 0;
  for (const auto& r : requests) {
    check_request(model, r);
    t = std::max<int64_t>(t, static_cast<int64_t>(r.tokens.size()) - 1);  // the last token is only a target
  }
  // Inputs are tokens[0..n-2], right-padded; the padding is masked out.
  at::Tensor tokens = at::zeros({b, t}, at::kLong);  // [B, T]
  at::Tensor valid = at::zeros({b, t}, at::kBool);  // [B, T]
  at::Tensor positions = at::arange(t, at::kLong).unsqueeze(0).expand({b, t}).contiguous();  // [B, T]
  std::vector<int64_t> rows, cols, targets;
  auto tok = tokens.accessor<int64_t, 2>();
  auto val = valid.accessor<bool, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const auto& r = requests[i];
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    for (int64_t j = 0; j + 1 < n; ++j) {
      tok[i][j] = r.tokens[j];
      val[i][j] = true;
    }
    for (int64_t j = r.first_target; j < n; ++j) {
      rows.push_back(i);
      cols.push_back(j - 1);  // the state at j-1 predicts token j
      targets.push_back(r.tokens[j]);
    }
  }
  at::Tensor hidden = model.forward(tokens.to(device), positions.to(device), valid.to(device));  // [B, T, D]
  at::Tensor flat_index = (at::tensor(rows, at::kLong) * t + at::tensor(cols, at::kLong)).to(device);  // [N]
  at::Tensor picked = hidden.reshape({b * t, hidden.size(2)}).index_select(0, flat_index);  // [N, D]
  TargetScores scores = target_logprobs(model, picked, at::tensor(targets, at::kLong).to(device));
  ScoreResult all = to_result(scores);
  std::vector<ScoreResult> out(b);
  size_t k = 0;
  for (int64_t i = 0; i < b; ++i) {
    const size_t m = requests[i].tokens.size() - requests[i].first_target;
    out[i].logprobs.assign(all.logprobs.begin() + k, all.logprobs.begin() + k + m);
    out[i].is_greedy.assign(all.is_greedy.begin() + k, all.is_greedy.begin() + k + m);
    k += m;
  }
  return out;
}

ScoreResult score_stepwise(const DecoderModelImpl& model, const ScoreRequest& request) {
  check_request(model, request);
  c10::InferenceMode guard;
  const at::Device device = model.options().device;
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  KVCache cache = model.make_cache(1, n - 1);
  at::Tensor valid = at::ones({1, 1}, at::TensorOptions().dtype(at::kBool).device(device));
  std::vector<at::Tensor> lps, greedy;
  for (int64_t j = 0; j + 1 < n; ++j) {
    at::Tensor tok = at::full({1, 1}, request.tokens[j], at::TensorOptions().dtype(at::kLong).device(device));
    at::Tensor pos = at::full({1, 1}, j, at::TensorOptions().dtype(at::kLong).device(device));
    at::Tensor hidden = model.forward(tok, pos, valid, &cache);  // [1, 1, D]
    if (j + 1 >= request.first_target) {
      at::Tensor target = at::full({1}, request.tokens[j + 1], at::TensorOptions().dtype(at::kLong).device(device));
      TargetScores s = target_logprobs(model, hidden.view({1, -1}), target);
      lps.push_back(s.logprobs);
      greedy.push_back(s.is_greedy);
    }
  }
  return to_result({at::cat(lps), at::cat(greedy)});
}

std::vector<ScoreRequest> rolling_windows(const std::vector<int32_t>& tokens, int32_t prefix_token,
                                          int64_t max_length) {
  if (max_length < 1) throw Error("rolling_windows: max_length must be >= 1");
  std::vector<ScoreRequest> out;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return out;
  // First window: [prefix] + tokens[0 .. first-1) predicts tokens[0 .. first).
  const int64_t first = std::min<int64_t>(max_length, n);
  ScoreRequest head;
  head.tokens.push_back(prefix_token);
  head.tokens.insert(head.tokens.end(), tokens.begin(), tokens.begin() + first);
  head.first_target = 1;
  out.push_back(std::move(head));
  int64_t predicted = first;
  while (predicted < n) {
    const int64_t count = std::min<int64_t>(n - predicted, max_length);
    const int64_t end = predicted + count;
    // Inputs are tokens[end - max_length - 1 .. end - 1); targets the last `count` of tokens[.. end).
    const int64_t begin = std::max<int64_t>(0, end - max_length - 1);
    ScoreRequest w;
    w.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
    w.first_target = static_cast<int64_t>(w.tokens.size()) - count;
    out.push_back(std::move(w));
    predicted = end;
  }
  return out;
}

}  // namespace gpueval
