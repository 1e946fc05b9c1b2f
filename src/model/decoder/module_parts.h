// What the decoder's modules (model/decoder/*.cpp: modules, attention, mlp, moe, layer, model) and the
// loader (model/loading/load_model.cpp) share, private to model/: a shape's text, whether attention
// takes the fused SDPA path, a module's frozen parameters, and a projection sized from the weight table.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "gpueval/model.h"
#include "model/loading/weight_names.h"

namespace gpueval {

// "[2, 3]": a tensor shape as errors print it.
std::string shape_str(at::IntArrayRef shape);

// Fused attention (at::scaled_dot_product_attention) runs where LibTorch has it (2.x) and the tensors
// are on a GPU; CPU runs keep the explicit path, so their results are the same on every LibTorch.
bool use_sdpa(const at::Tensor& x);

// `t` registered on `m` as a parameter that needs no gradient.
at::Tensor as_parameter(torch::nn::Module& m, const std::string& name, at::Tensor t);

// The projection of kind `w` in `layer`: its in and out sizes and its bias from the one weight table.
Projection projection(const ModelConfig& c, const WeightSource& source, WeightKind w, int64_t layer,
                      int64_t expert = 0);

}  // namespace gpueval
