#include "model/decoder/module_parts.h"

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)
#include <torch/version.h>

#include "model/kernels/cpu_matmul.h"
#include "model/kernels/cuda_kernels.h"
#include "model/kernels/row_invariant.h"
#include "model/loading/weight_names.h"

namespace gpueval {

std::string shape_str(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Fused attention (at::scaled_dot_product_attention) runs where LibTorch has it (2.x) and the tensors
// are on a GPU; CPU runs keep the explicit path below, so their results are the same on every LibTorch.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kHaveSdpa = true;
#else
constexpr bool kHaveSdpa = false;
#endif
bool use_sdpa(const at::Tensor& x) { return kHaveSdpa && x.is_cuda(); }

at::Tensor as_parameter(torch::nn::Module& m, const std::string& name, at::Tensor t) {
  return m.register_parameter(name, std::move(t), /*requires_grad=*/false);
}

// The projection of kind `w` in `layer`: its in and out sizes and its bias from the one weight table.
Projection projection(const ModelConfig& c, const WeightSource& source, WeightKind w, int64_t layer, int64_t expert) {
  const std::vector<int64_t> shape = weight_shape(c, w);  // [out, in]
  return Projection(source, weight_name(w, layer, expert), shape[1], shape[0], has_bias(c, w));
}

ProjectionImpl::ProjectionImpl(const WeightSource& source, const std::string& weight, int64_t in, int64_t out,
                               bool bias) {
  weight_ = as_parameter(*this, "weight", source(weight, {out, in}));
  if (bias) bias_ = as_parameter(*this, "bias", source(bias_name(weight), {out}));
}

at::Tensor ProjectionImpl::forward(const at::Tensor& x) const {
  if (row_invariant_products_on() && row_invariant_project_applies(x, weight_, bias_))
    return row_invariant_project(x, weight_, bias_);
  if (packed_ && project_uses_packed(x, *packed_, bias_)) return project(x, *packed_, bias_);
  return project(x, weight_, bias_);
}

int64_t ProjectionImpl::pack_for_cpu() {
  packed_ = PackedWeight::pack(weight_);
  return packed_ ? packed_->bytes() : 0;
}

EmbeddingImpl::EmbeddingImpl(const WeightSource& source, const std::string& name, int64_t vocab, int64_t dim) {
  weight_ = as_parameter(*this, "weight", source(name, {vocab, dim}));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& tokens) const { return at::embedding(weight_, tokens); }

NormImpl::NormImpl(const WeightSource& source, const std::string& name, int64_t dim, double eps, NormKind kind,
                   bool unit_offset)
    : eps_(eps) {
  weight_ = as_parameter(*this, "weight", source(name, {dim}));
  if (kind == NormKind::kLayerNorm) bias_ = as_parameter(*this, "bias", source(bias_name(name), {dim}));
  if (unit_offset) scale_ = 1.0 + weight_.to(at::promote_types(weight_.scalar_type(), at::kFloat));
}

at::Tensor NormImpl::forward(const at::Tensor& x) const {
  if (bias_.defined()) return at::layer_norm(x, {weight_.size(0)}, weight_, bias_, eps_);
  if (!scale_.defined()) return rms_norm(x, weight_, eps_);
  const at::Tensor xf = x.to(scale_.scalar_type());
  return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_) * scale_).to(x.scalar_type());
}

}  // namespace gpueval
