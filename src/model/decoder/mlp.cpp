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

MlpImpl::MlpImpl(const ModelConfig& c, const WeightSource& source, int64_t layer, MlpRole role, int64_t expert)
    : activation_(c.arch.activation) {
  using W = WeightKind;
  const auto [gate, up, down] =
      role == MlpRole::kExpert   ? std::tuple{W::kExpertGateProj, W::kExpertUpProj, W::kExpertDownProj}
      : role == MlpRole::kShared ? std::tuple{W::kSharedGateProj, W::kSharedUpProj, W::kSharedDownProj}
                                 : std::tuple{W::kGateProj, W::kUpProj, W::kDownProj};
  if (role != MlpRole::kDense || c.arch.gated_mlp)
    gate_proj_ = register_module("gate_proj", projection(c, source, gate, layer, expert));
  up_proj_ = register_module("up_proj", projection(c, source, up, layer, expert));
  down_proj_ = register_module("down_proj", projection(c, source, down, layer, expert));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) const {
  // In place on the fresh projections: the same bits as silu(gate) * up without two more tensors.
  at::Tensor gate = (gate_proj_ ? gate_proj_ : up_proj_)->forward(x);
  switch (activation_) {
    case Activation::kSilu: at::silu_(gate); break;
    case Activation::kGeluTanh: gate = at::gelu(gate, "tanh"); break;
    case Activation::kGelu: gate = at::gelu(gate); break;
  }
  if (gate_proj_) gate.mul_(up_proj_->forward(x));
  return down_proj_->forward(gate);
}

}  // namespace gpueval
