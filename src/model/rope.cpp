#include "model/rope.h"

#include <cmath>

namespace gpueval {

at::Tensor rope_inv_freq(const ModelConfig& c, at::Device device) {
  const int64_t half = c.head_dim / 2;
  // 1 / theta^(2j / head_dim), computed in float32 like the reference implementation.
  at::Tensor exponents = at::arange(0, c.head_dim, 2, at::kLong).to(at::kFloat) / static_cast<float>(c.head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(static_cast<double>(c.rope_theta), exponents);  // [half]
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kLinear) {
    inv_freq = inv_freq / s.factor;
  } else if (s.type == RopeScalingType::kLlama3) {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = old_ctx / s.low_freq_factor;
    const double high_freq_wavelen = old_ctx / s.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
    at::Tensor smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    at::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
    at::Tensor is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
    inv_freq = at::where(is_medium, blended, scaled);
  }
  TORCH_CHECK(inv_freq.size(0) == half);
  return inv_freq.to(at::kFloat).to(device);
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype) {
  at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, half]
  at::Tensor emb = at::cat({angles, angles}, -1).unsqueeze(1);          // [B, 1, T, head_dim]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& t) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);  // [B, H, T, head_dim]
  return x * t.cos + rotated * t.sin;
}

}  // namespace gpueval
