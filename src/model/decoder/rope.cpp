#include "model/decoder/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/kernels/cpu_parallel.h"

#include "gpueval/error.h"

namespace gpueval {

namespace {

// arange(0, dim, 2) / dim in float32: the exponents of 1 / theta^(2j / dim).
at::Tensor exponents(int64_t dim) { return at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<float>(dim); }

at::Tensor default_inv_freq(double theta, int64_t dim) { return 1.0 / at::pow(theta, exponents(dim)); }

at::Tensor llama3_inv_freq(at::Tensor inv_freq, const RopeScaling& s) {
  // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_ctx / s.low_freq_factor;
  const double high_freq_wavelen = old_ctx / s.high_freq_factor;
  at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  at::Tensor smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  at::Tensor is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(is_medium, blended, scaled);
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// YaRN's NTK-by-parts: dimensions that turn fewer than beta_slow times over the original context are
// interpolated (/ factor), more than beta_fast times kept, a linear ramp between.
at::Tensor yarn_inv_freq(double theta, int64_t dim, const RopeScaling& s) {
  at::Tensor pos_freqs = at::pow(theta, exponents(dim));
  at::Tensor extrapolation = 1.0 / pos_freqs;
  at::Tensor interpolation = 1.0 / (s.factor * pos_freqs);
  const double original = static_cast<double>(s.original_max_position_embeddings);
  const auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no division by zero
  at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  at::Tensor extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

// transformers' _compute_dynamic_ntk_parameters for a sequence of `length` > max tokens: the new
// base is a float32 tensor there, so it is here.
at::Tensor dynamic_inv_freq(double theta, int64_t dim, double factor, int64_t max_positions, int64_t length) {
  at::Tensor base = at::scalar_tensor(static_cast<double>(length), at::kFloat) * factor;
  base = base / static_cast<double>(max_positions) - (factor - 1);
  base = at::pow(base, static_cast<double>(dim) / static_cast<double>(dim - 2)) * theta;
  return 1.0 / at::pow(base, exponents(dim));
}

at::Tensor longrope_inv_freq(double theta, int64_t dim, const std::vector<double>& factors) {
  at::Tensor ext = at::tensor(factors, at::kDouble).to(at::kFloat);
  return 1.0 / (ext * at::pow(theta, exponents(dim)));
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t rotary_dim, double theta, const RopeScaling& scaling,
                                 int64_t max_position_embeddings, at::Device device)
    : head_dim_(head_dim),
      rotary_dim_(rotary_dim),
      theta_(theta),
      scaling_(scaling),
      max_position_embeddings_(max_position_embeddings),
      device_(device) {
  if (rotary_dim <= 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    throw Error(fmt::format("RoPE: rotary_dim {} must be even and in (0, head_dim {}]", rotary_dim, head_dim));
  const RopeScaling& s = scaling_;
  const int64_t half = rotary_dim / 2;
  at::Tensor inv_freq = default_inv_freq(theta, rotary_dim);  // [half]
  switch (s.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear: inv_freq = inv_freq / s.factor; break;
    case RopeScalingType::kLlama3: inv_freq = llama3_inv_freq(inv_freq, s); break;
    case RopeScalingType::kDynamic:
      if (rotary_dim <= 2) throw Error("RoPE: dynamic scaling needs rotary_dim > 2");
      threshold_ = max_position_embeddings;
      break;
    case RopeScalingType::kYarn:
      inv_freq = yarn_inv_freq(theta, rotary_dim, s);
      attention_factor_ = s.attention_factor ? *s.attention_factor
                          : s.mscale != 0 && s.mscale_all_dim != 0
                              ? yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim)
                              : yarn_mscale(s.factor, 1.0);
      break;
    case RopeScalingType::kLongRope: {
      for (const auto* list : {&s.short_factor, &s.long_factor})
        if (static_cast<int64_t>(list->size()) != half)
          throw Error(fmt::format("RoPE: longrope factor lists must hold rotary_dim / 2 = {} values, got {}", half,
                                  list->size()));
      inv_freq = longrope_inv_freq(theta, rotary_dim, s.short_factor);
      long_inv_freq_ = longrope_inv_freq(theta, rotary_dim, s.long_factor).to(device);
      const double original = static_cast<double>(s.original_max_position_embeddings);
      attention_factor_ = s.attention_factor ? *s.attention_factor
                          : s.factor <= 1.0  ? 1.0
                                             : std::sqrt(1 + std::log(s.factor) / std::log(original));
      threshold_ = s.original_max_position_embeddings;
      break;
    }
  }
  TORCH_CHECK(inv_freq.size(0) == half);
  base_inv_freq_ = inv_freq.to(at::kFloat).to(device);
}

RotaryEmbedding RotaryEmbedding::from_config(const ModelConfig& c, at::Device device) {
  return RotaryEmbedding(c.head_dim, c.rotary_dim(), c.rope_theta, c.rope_scaling, c.max_position_embeddings, device);
}

at::Tensor RotaryEmbedding::inv_freq(int64_t length) const {
  if (!threshold_ || length <= *threshold_) return base_inv_freq_;
  if (scaling_.type == RopeScalingType::kLongRope) return long_inv_freq_;
  return dynamic_inv_freq(theta_, rotary_dim_, scaling_.factor, max_position_embeddings_, length).to(device_);
}

RopeTables RotaryEmbedding::tables(const at::Tensor& positions, at::ScalarType dtype) const {
  if (!threshold_ || positions.numel() == 0) return rope_tables(base_inv_freq_, positions, dtype, attention_factor_);
  // Each row's length is its largest position + 1 (padding sits at or below a row's real positions).
  const at::Tensor lengths = (positions.amax(1) + 1).to(at::kCPU).contiguous();  // [B]
  const int64_t* len = lengths.data_ptr<int64_t>();
  bool any_long = false;
  for (int64_t b = 0; b < lengths.size(0); ++b) any_long = any_long || len[b] > *threshold_;
  if (!any_long) return rope_tables(base_inv_freq_, positions, dtype, attention_factor_);
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < lengths.size(0); ++b) rows.push_back(inv_freq(len[b]));
  return rope_tables(at::stack(rows).unsqueeze(1), positions, dtype, attention_factor_);  // inv_freq [B, 1, half]
}

at::Tensor rope_inv_freq(const ModelConfig& c, at::Device device) {
  return RotaryEmbedding::from_config(c, device).inv_freq(0);
}

RopeTables rope_tables(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype,
                       double attention_factor) {
  at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, half]
  at::Tensor emb = at::cat({angles, angles}, -1).unsqueeze(1);  // [B, 1, T, rotary_dim]
  at::Tensor cos = emb.cos(), sin = emb.sin();
  if (attention_factor != 1.0) {
    cos = cos * attention_factor;
    sin = sin * attention_factor;
  }
  return {cos.to(dtype), sin.to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& t) {
  const int64_t rotary = t.cos.size(-1);
  if (rotary < x.size(-1)) {
    // [B, H, T, rotary_dim] rotated, then the rest of each head as it was.
    at::Tensor rotated = apply_rope(x.narrow(-1, 0, rotary), t);
    return at::cat({rotated, x.narrow(-1, rotary, x.size(-1) - rotary)}, -1);
  }
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
  return hd % 2 == 0 && x.stride(3) == 1 && table_ok(t.cos) && table_ok(t.sin) && t.cos.size(0) == t.sin.size(0);
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
  cpu_parallel_for(0, b * heads * seq, 1024, [&](int64_t begin, int64_t end) {
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
