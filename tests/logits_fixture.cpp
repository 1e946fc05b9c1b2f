#include "logits_fixture.h"

#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <fstream>

namespace gpueval::testing {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return nlohmann::json::parse(in);
}

std::vector<LogitsSequence> expected_logits(const std::string& dir) {
  std::vector<LogitsSequence> out;
  const nlohmann::json j = read_json(dir + "/expected_logits.json");
  for (const auto& s : j.at("sequences")) {
    std::vector<at::Tensor> rows;
    for (const auto& row : s["logits"]) rows.push_back(at::tensor(row.get<std::vector<float>>(), at::kFloat));
    out.push_back({s["ids"].get<std::vector<int64_t>>(), at::stack(rows)});
  }
  return out;
}

double relative_error(const at::Tensor& ours, const at::Tensor& theirs) {
  return (ours.to(at::kFloat) - theirs).abs().max().item<double>() / theirs.abs().max().item<double>();
}

at::Tensor ids_row(const std::vector<int64_t>& ids, int64_t begin, int64_t end) {
  return at::tensor(std::vector<int64_t>(ids.begin() + begin, ids.begin() + end), at::kLong).view({1, end - begin});
}

at::Tensor full_logits(const DecoderModel& model, const std::vector<int64_t>& ids) {
  c10::InferenceMode guard;
  const int64_t t = static_cast<int64_t>(ids.size());
  return model->logits(
      model->forward(ids_row(ids, 0, t), at::arange(t, at::kLong).view({1, t}), at::ones({1, t}, at::kBool)))[0];
}

PrefixCacheErrors prefix_and_cache_errors(const DecoderModel& model, const LogitsSequence& s, int64_t p) {
  c10::InferenceMode guard;
  const int64_t t = static_cast<int64_t>(s.ids.size());
  PrefixCacheErrors e;
  PrefixKV prefix = model->prefill(std::vector<int32_t>(s.ids.begin(), s.ids.begin() + p));
  at::Tensor packed = model->logits(
      model->forward_packed(ids_row(s.ids, p, t), at::arange(p, t, at::kLong).view({1, t - p}),
                            at::ones({1, t - p}, at::kBool), at::zeros({1, t - p}, at::kLong), &prefix))[0];
  e.packed = relative_error(packed, s.logits.narrow(0, p, t - p));
  KVCache cache = model->make_cache(1, t);
  std::vector<at::Tensor> steps;
  for (int64_t begin = 0; begin < t;) {
    const int64_t end = begin == 0 ? p : begin + 1;
    steps.push_back(model->logits(model->forward(ids_row(s.ids, begin, end),
                                                 at::arange(begin, end, at::kLong).view({1, end - begin}),
                                                 at::ones({1, end - begin}, at::kBool), &cache))[0]);
    begin = end;
  }
  e.cached = relative_error(at::cat(steps), s.logits);
  return e;
}

}  // namespace gpueval::testing
