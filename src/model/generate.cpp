#include "model/generate.h"

#include <algorithm>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

// logits: [V] float32 on CPU.
int32_t pick_token(const at::Tensor& logits, const Sampler& o, at::Generator& gen) {
  if (o.temperature <= 0) return static_cast<int32_t>(logits.argmax().item<int64_t>());
  at::Tensor scaled = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < scaled.size(0)) {
    at::Tensor kth = std::get<0>(scaled.topk(o.top_k)).min();
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = scaled.sort(/*dim=*/-1, /*descending=*/true);
    at::Tensor cumulative = at::softmax(sorted, -1).cumsum(-1);
    // Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    at::Tensor drop_sorted = (cumulative - at::softmax(sorted, -1)) >= o.top_p;
    at::Tensor drop = at::zeros_like(drop_sorted).scatter(0, order, drop_sorted);
    scaled = scaled.masked_fill(drop, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scaled, -1);
  return static_cast<int32_t>(at::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>());
}

}  // namespace

std::vector<Generation> generate(const LlamaModelImpl& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingOptions& o, const TokenCallback& on_token,
                                 const RowCheck& end_row) {
  const int64_t b = static_cast<int64_t>(prompts.size());
  std::vector<Generation> out(b);
  if (b == 0) return out;
  if (!o.seeds.empty() && static_cast<int64_t>(o.seeds.size()) != b)
    throw Error(fmt::format("generate: {} seeds for {} prompts", o.seeds.size(), b));
  if (!o.per_row.empty() && static_cast<int64_t>(o.per_row.size()) != b)
    throw Error(fmt::format("generate: {} samplers for {} prompts", o.per_row.size(), b));
  const Sampler common{o.temperature, o.top_k, o.top_p};
  const int64_t context = model.config().max_position_embeddings;
  int64_t longest = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw Error("generate: empty prompt (no tokens, not even BOS)");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  if (longest > context)
    throw Error(fmt::format("generate: prompt of {} tokens exceeds the model's context of {}", longest, context));
  const int64_t max_new = std::min<int64_t>(o.max_new_tokens, context - longest + 1);
  if (max_new <= 0) return out;

  c10::InferenceMode guard;
  const at::Device device = model.options().device;
  std::vector<at::Generator> gens;
  for (int64_t i = 0; i < b; ++i) gens.push_back(at::make_generator<at::CPUGeneratorImpl>(o.seeds.empty() ? o.seed : o.seeds[i]));

  // Left padding aligns every prompt's last token in the final column.
  at::Tensor tokens = at::zeros({b, longest}, at::kLong);  // [B, L]
  at::Tensor valid = at::zeros({b, longest}, at::kBool);   // [B, L]
  at::Tensor positions = at::zeros({b, longest}, at::kLong);
  std::vector<int64_t> next_position(b);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size()), pad = longest - n;
    for (int64_t j = 0; j < n; ++j) {
      tokens[i][pad + j] = prompts[i][j];
      valid[i][pad + j] = true;
      positions[i][pad + j] = j;
    }
    next_position[i] = n;
  }
  KVCache cache = model.make_cache(b, longest + max_new - 1);
  at::Tensor hidden = model.forward(tokens.to(device), positions.to(device), valid.to(device), &cache);  // [B, L, D]
  at::Tensor last = hidden.select(1, longest - 1);                                                      // [B, D]

  std::vector<int64_t> active(b);  // cache row -> prompt index
  for (int64_t i = 0; i < b; ++i) active[i] = i;
  for (int64_t step = 0; step < max_new && !active.empty(); ++step) {
    at::Tensor logits = model.logits(last).to(at::kFloat).to(at::kCPU);  // [B', V]
    std::vector<int64_t> keep_rows, still_active, next_tokens, next_pos;
    for (size_t r = 0; r < active.size(); ++r) {
      const int64_t i = active[r];
      const int32_t tok = pick_token(logits[r], o.per_row.empty() ? common : o.per_row[i], gens[i]);
      if (on_token) on_token(static_cast<size_t>(i), tok);
      if (std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), tok) != o.stop_token_ids.end()) {
        out[i].stopped = true;
        continue;
      }
      out[i].tokens.push_back(tok);
      if (end_row && end_row(static_cast<size_t>(i), out[i].tokens)) {
        out[i].ended_by_check = true;
        continue;
      }
      if (step + 1 == max_new) continue;
      keep_rows.push_back(static_cast<int64_t>(r));
      still_active.push_back(i);
      next_tokens.push_back(tok);
      next_pos.push_back(next_position[i]++);
    }
    if (still_active.empty()) break;
    if (still_active.size() != active.size()) cache.select_rows(at::tensor(keep_rows, at::kLong).to(device));
    active = still_active;
    const int64_t n = static_cast<int64_t>(active.size());
    at::Tensor step_tokens = at::tensor(next_tokens, at::kLong).view({n, 1}).to(device);
    at::Tensor step_pos = at::tensor(next_pos, at::kLong).view({n, 1}).to(device);
    at::Tensor step_valid = at::ones({n, 1}, at::TensorOptions().dtype(at::kBool).device(device));
    last = model.forward(step_tokens, step_pos, step_valid, &cache).select(1, 0);  // [B', D]
  }
  return out;
}

}  // namespace gpueval
