#include "model/rope.h"

#include <cmath>

#include <ATen/Parallel.h>

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

namespace {

bool cpu_float(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

// One position of one head: out = x·cos + rotate_half(x)·sin, products and sum rounded separately.
#if defined(__clang__)
void rotate_position(const float* x, const float* c, const float* s, float* out, int64_t half) {
#pragma clang fp contract(off)
#elif defined(__GNUC__)
// Vectorised for the widest of AVX-512, AVX2 or the baseline the CPU has (GCC's target clones,
// chosen when the program loads); without contraction each lane rounds as the scalar code does.
__attribute__((optimize("fp-contract=off", "tree-vectorize", "vect-cost-model=dynamic"),
               target_clones("avx512f", "avx2", "default"))) void
rotate_position(const float* x, const float* c, const float* s, float* out, int64_t half) {
#else
void rotate_position(const float* x, const float* c, const float* s, float* out, int64_t half) {
#endif
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i] * c[i], b = x[i + half] * s[i];
    out[i] = a - b;  // x1·cos + (-x2)·sin: (-x2)·sin is exactly -(x2·sin)
  }
  for (int64_t i = half; i < 2 * half; ++i) {
    const float a = x[i] * c[i], b = x[i - half] * s[i];
    out[i] = a + b;
  }
}

}  // namespace

bool apply_rope_cpu_applies(const at::Tensor& x, const RopeTables& t) {
  if (!cpu_float(x) || !cpu_float(t.cos) || !cpu_float(t.sin) || x.dim() != 4) return false;
  const int64_t b = x.size(0), seq = x.size(2), hd = x.size(3);
  const auto table_ok = [&](const at::Tensor& table) {
    return table.dim() == 4 && (table.size(0) == b || table.size(0) == 1) && table.size(1) == 1 &&
           table.size(2) == seq && table.size(3) == hd && table.stride(3) == 1;
  };
  return hd % 2 == 0 && x.stride(3) == 1 && table_ok(t.cos) && table_ok(t.sin) &&
         t.cos.size(0) == t.sin.size(0);
}

at::Tensor apply_rope_cpu(const at::Tensor& x, const RopeTables& t) {
  TORCH_CHECK(apply_rope_cpu_applies(x, t), "apply_rope_cpu: not CPU float32 [B, H, T, hd] with matching tables");
  at::Tensor out = at::empty_like(x);  // x's strides when x is dense (a transposed view included)
  if (out.stride(3) != 1) out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t b = x.size(0), heads = x.size(1), seq = x.size(2), half = x.size(3) / 2;
  const float* xd = x.data_ptr<float>();
  const float* cd = t.cos.data_ptr<float>();
  const float* sd = t.sin.data_ptr<float>();
  float* od = out.data_ptr<float>();
  const int64_t cos_b = t.cos.size(0) == 1 ? 0 : t.cos.stride(0), sin_b = t.sin.size(0) == 1 ? 0 : t.sin.stride(0);
  at::parallel_for(0, b * heads * seq, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = i / (heads * seq), head = (i / seq) % heads, pos = i % seq;
      rotate_position(xd + row * x.stride(0) + head * x.stride(1) + pos * x.stride(2),
                      cd + row * cos_b + pos * t.cos.stride(2), sd + row * sin_b + pos * t.sin.stride(2),
                      od + row * out.stride(0) + head * out.stride(1) + pos * out.stride(2), half);
    }
  });
  return out;
}

}  // namespace gpueval
