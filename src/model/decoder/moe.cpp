#include "gpueval/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <c10/core/InferenceMode.h>
#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <torch/nn/modules/container/modulelist.h>

#include "gpueval/error.h"
#include "model/decoder/module_parts.h"
#include "model/decoder/rope.h"
#include "model/kernels/cpu_attention.h"
#include "model/kernels/cpu_matmul.h"
#include "model/kernels/cpu_parallel.h"
#include "model/kernels/cuda_kernels.h"
#include "model/kernels/row_invariant.h"
#include "model/loading/weight_names.h"

namespace gpueval {

MoeImpl::MoeImpl(const ModelConfig& c, const WeightSource& source, int64_t layer) : layer_(layer), moe_(c.arch.moe) {
  router_ = register_module("gate", projection(c, source, WeightKind::kRouter, layer));
  if (moe_.score == RouterScore::kSigmoid) router_float_ = router_->weight().to(at::kFloat);
  if (moe_.correction_bias)
    correction_ = router_->register_parameter(
        "e_score_correction_bias",
        source(weight_name(WeightKind::kRouterCorrection, layer), weight_shape(c, WeightKind::kRouterCorrection))
            .to(at::kFloat),
        /*requires_grad=*/false);
  // Registered as "experts.E" under "mlp": each parameter is named as the checkpoint names it.
  torch::nn::ModuleList list;
  for (int64_t e = 0; e < moe_.num_experts; ++e) {
    experts_.push_back(Mlp(c, source, layer, MlpRole::kExpert, e));
    list->push_back(experts_.back());
  }
  register_module("experts", list);
  if (moe_.shared_intermediate_size > 0)
    shared_ = register_module("shared_experts", Mlp(c, source, layer, MlpRole::kShared));
}

namespace {

// torch.sigmoid's formula, 1 / (1 + exp(-x)), with the same scalar code for every element on the CPU:
// at::sigmoid takes a vectorised exp for most of a tensor and a scalar one for its tail, whose bits can
// differ, so a token's scores would depend on how many rows share its tensor.
at::Tensor sigmoid_per_element(const at::Tensor& x) {
  if (!x.device().is_cpu() || x.scalar_type() != at::kFloat) return x.sigmoid();
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0, n = in.numel(); i < n; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  return out;
}

}  // namespace

at::Tensor MoeImpl::router_logits(const at::Tensor& x) const {
  // A softmax router multiplies in the model's dtype (transformers' nn.Linear), a sigmoid one in float32.
  const at::Tensor& w = router_float_.defined() ? router_float_ : router_->weight();
  const at::Tensor in = router_float_.defined() ? x.to(at::kFloat) : x;
  if (row_invariant_product_applies(in, w)) return row_invariant_product(in, w);
  return at::linear(in, w).to(at::kFloat);
}

at::Tensor MoeImpl::choose(const at::Tensor& x, at::Tensor* weights) const {
  const at::Tensor logits = router_logits(x);  // [N, E] float32
  at::Tensor top, chosen;
  if (moe_.score == RouterScore::kSoftmax) {
    // transformers: softmax in float32, topk of the probabilities (its order), renormalised with
    // norm_topk_prob (Mixtral: always).
    std::tie(top, chosen) = at::topk(at::softmax(logits, -1), moe_.top_k, -1);
    if (moe_.normalize_top_k) top.div_(top.sum(-1, /*keepdim=*/true));
    if (moe_.weights_in_model_dtype) top = top.to(x.scalar_type());
  } else {
    // DeepSeek-V3 (transformers' DeepseekV3TopkRouter): sigmoid scores; the choice reads them plus the
    // correction bias, within the top_groups groups ranked by their two best; the weights are the
    // uncorrected scores, renormalised, times routed_scaling.
    const at::Tensor scores = sigmoid_per_element(logits);
    at::Tensor choice = correction_.defined() ? scores + correction_ : scores;
    const int64_t n = choice.size(0), per_group = moe_.num_experts / moe_.groups;
    const at::Tensor group_scores = std::get<0>(choice.view({n, moe_.groups, per_group}).topk(2, -1)).sum(-1);
    const at::Tensor best_groups = std::get<1>(at::topk(group_scores, moe_.top_groups, -1, true, /*sorted=*/false));
    const at::Tensor in_group = at::zeros_like(group_scores)
                                    .scatter_(1, best_groups, 1.0)
                                    .unsqueeze(-1)
                                    .expand({n, moe_.groups, per_group})
                                    .reshape({n, moe_.num_experts});
    choice = choice.masked_fill(in_group.logical_not(), -std::numeric_limits<float>::infinity());
    chosen = std::get<1>(at::topk(choice, moe_.top_k, -1, true, /*sorted=*/false));
    top = scores.gather(1, chosen);
    if (moe_.normalize_top_k) top.div_(top.sum(-1, /*keepdim=*/true) + 1e-20);
    top = top * moe_.routed_scaling;
  }
  if (weights) *weights = top;
  return chosen;
}

namespace {

// Consecutive runs of experts with about equal rows, at most `threads` of them: run r is experts
// [runs[r], runs[r + 1]). A function of the counts and the thread count.
std::vector<size_t> expert_runs(const int64_t* count, size_t experts, int64_t threads) {
  int64_t total = 0;
  for (size_t e = 0; e < experts; ++e) total += count[e];
  std::vector<size_t> runs{0};
  int64_t rows = 0;
  for (size_t e = 0; e < experts; ++e) {
    rows += count[e];
    // Cut after expert e once the runs so far hold their share of the rows.
    const int64_t share = total * static_cast<int64_t>(runs.size()) / std::max<int64_t>(threads, 1);
    if (e + 1 < experts && rows >= share && static_cast<int64_t>(runs.size()) < threads) runs.push_back(e + 1);
  }
  runs.push_back(experts);
  return runs;
}

}  // namespace

at::Tensor MoeImpl::forward(const at::Tensor& x) const {
  const int64_t d = x.size(-1);
  const at::Tensor flat = x.reshape({-1, d});
  at::Tensor weights;
  const at::Tensor chosen = choose(flat, &weights);  // [N, k]
  if (observer_) observer_(layer_, chosen, weights);
  const int64_t top_k = moe_.top_k;
  // Each expert's tokens in one product; each (token, slot) output times its weight (float32, or the
  // model's dtype with weights_in_model_dtype) kept in its slot, then a token's top_k slots summed in
  // their topk order and cast to the model's dtype once: transformers 5's default (grouped_mm) experts
  // path, whose order no other token changes.
  const at::Tensor flat_chosen = chosen.reshape({-1});
  const at::Tensor order = at::argsort(flat_chosen, /*stable=*/true);
  const at::Tensor counts = at::bincount(flat_chosen, {}, static_cast<int64_t>(experts_.size())).cpu();
  const int64_t* count = counts.data_ptr<int64_t>();
  at::Tensor slot_out = at::empty({flat_chosen.size(0), d},
                                  flat.options().dtype(at::promote_types(flat.scalar_type(), weights.scalar_type())));
  const size_t n_experts = experts_.size();
  std::vector<int64_t> first(n_experts + 1, 0);  // expert e's slots: order[first[e], first[e + 1])
  for (size_t e = 0; e < n_experts; ++e) first[e + 1] = first[e] + count[e];
  const at::Tensor flat_weights = weights.reshape({-1});
  std::vector<at::Tensor> weighted(n_experts);  // expert e's outputs times their weights, [count[e], d]
  const auto run_expert = [&](size_t e) {
    const at::Tensor slots = order.narrow(0, first[e], count[e]);  // positions in [N * k]
    const at::Tensor y = experts_[e]->forward(flat.index_select(0, at::floor_divide(slots, top_k)));
    weighted[e] = y * flat_weights.index_select(0, slots).unsqueeze(1);
  };
  if (flat.device().is_cpu()) {
    // The worker's threads share the experts, each expert's products on one thread (cut by its own
    // rows alone, so the bits do not depend on the threads): runs of consecutive experts with about
    // equal rows, one per thread. An expert's 512 rows or fewer are one block of project(), one thread.
    // The products a pool thread takes follow the caller's: RowInvariantProducts is per thread.
    const std::vector<size_t> runs = expert_runs(count, n_experts, at::get_num_threads());
    const bool invariant = row_invariant_products_on();
    cpu_parallel_for(0, static_cast<int64_t>(runs.size()) - 1, 1, [&](int64_t b, int64_t end) {
      std::optional<RowInvariantProducts> as_the_caller;
      if (invariant) as_the_caller.emplace();
      for (int64_t r = b; r < end; ++r)
        for (size_t e = runs[static_cast<size_t>(r)]; e < runs[static_cast<size_t>(r) + 1]; ++e)
          if (count[e] > 0) run_expert(e);
    });
  } else {
    for (size_t e = 0; e < n_experts; ++e)
      if (count[e] > 0) run_expert(e);
  }
  for (size_t e = 0; e < n_experts; ++e)
    if (count[e] > 0) slot_out.index_copy_(0, order.narrow(0, first[e], count[e]), weighted[e]);
  at::Tensor out = slot_out.view({flat.size(0), top_k, d}).sum(1).to(flat.scalar_type());
  if (shared_) out.add_(shared_->forward(flat));  // transformers: routed + shared_experts(x)
  return out.view(x.sizes());
}

}  // namespace gpueval
