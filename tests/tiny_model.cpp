#include "tiny_model.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "model/loading/safetensors.h"
#include "model/loading/weight_names.h"

namespace gpueval::testing {

ModelConfig tiny_config(const TinyModelSpec& s) {
  ModelConfig c;
  c.model_type = s.qkv_bias ? "qwen2" : "llama";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.max_position_embeddings = s.max_positions;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = s.tied;
  c.attention_bias = s.qkv_bias;
  c.torch_dtype = "float32";
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (s.llama3_rope) {
    c.rope_scaling.type = RopeScalingType::kLlama3;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    // Small, so that all three llama3 frequency bands occur with head_dim 8.
    c.rope_scaling.original_max_position_embeddings = 32;
  }
  return c;
}

std::map<std::string, at::Tensor> tiny_weights(const ModelConfig& c, uint64_t seed) {
  using W = WeightKind;
  at::manual_seed(seed);
  std::map<std::string, at::Tensor> w;
  auto normal = [&](W kind, double std) { return at::randn(weight_shape(c, kind), at::kFloat) * std; };
  // Drawn in this order (not the table's), which fixes the values every test was written against.
  w[weight_name(W::kEmbedTokens)] = normal(W::kEmbedTokens, 1.0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (W kind : {W::kInputLayernorm, W::kPostAttentionLayernorm}) w[weight_name(kind, l)] = 1.0 + normal(kind, 0.1);
    for (W kind : {W::kQProj, W::kKProj, W::kVProj, W::kOProj}) w[weight_name(kind, l)] = normal(kind, 0.3);
    for (W kind : {W::kQProj, W::kKProj, W::kVProj})
      if (has_bias(c, kind))
        w[bias_name(weight_name(kind, l))] = at::randn({weight_shape(c, kind)[0]}, at::kFloat) * 0.3;
    for (W kind : {W::kGateProj, W::kUpProj, W::kDownProj}) w[weight_name(kind, l)] = normal(kind, 0.3);
  }
  w[weight_name(W::kNorm)] = 1.0 + normal(W::kNorm, 0.1);
  if (!c.tie_word_embeddings) w[weight_name(W::kLmHead)] = normal(W::kLmHead, 0.3);
  return w;
}

void write_tiny_model(const std::string& dir, const ModelConfig& config,
                      const std::map<std::string, at::Tensor>& weights) {
  io::make_directories(dir);
  io::write_file_atomic(dir + "/config.json", config.to_json().dump(2));
  std::vector<std::pair<std::string, at::Tensor>> tensors(weights.begin(), weights.end());
  write_safetensors(dir + "/model.safetensors", tensors);
}

namespace {

// Inverse frequency of rotary pair j, in double, straight from the formulas.
double inv_freq(const ModelConfig& c, int64_t j) {
  double f = 1.0 / std::pow(c.rope_theta, 2.0 * j / c.head_dim);
  const auto& s = c.rope_scaling;
  if (s.type == RopeScalingType::kLinear) return f / s.factor;
  if (s.type != RopeScalingType::kLlama3) return f;
  const double wavelen = 2 * M_PI / f;
  const double ctx = static_cast<double>(s.original_max_position_embeddings);
  if (wavelen < ctx / s.high_freq_factor) return f;
  if (wavelen > ctx / s.low_freq_factor) return f / s.factor;
  const double smooth = (ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * f / s.factor + smooth * f;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * x / at::sqrt(x.pow(2).mean(-1, true) + eps);
}

}  // namespace

at::Tensor reference_rotary(const ModelConfig& c, const at::Tensor& x, const std::vector<int64_t>& positions) {
  const int64_t t = x.size(0), half = c.head_dim / 2;
  at::Tensor in = x.to(at::kDouble).contiguous();
  at::Tensor out = in.clone();
  const double* src = in.data_ptr<double>();
  double* dst = out.data_ptr<double>();
  for (int64_t row = 0; row < t; ++row) {
    const double pos = static_cast<double>(positions.empty() ? row : positions.at(static_cast<size_t>(row)));
    for (int64_t i = 0; i < half; ++i) {
      const double a = pos * inv_freq(c, i);
      const double x1 = src[row * c.head_dim + i], x2 = src[row * c.head_dim + i + half];
      dst[row * c.head_dim + i] = x1 * std::cos(a) - x2 * std::sin(a);
      dst[row * c.head_dim + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  }
  return out;
}

at::Tensor reference_logits(const ModelConfig& c, const std::map<std::string, at::Tensor>& weights,
                            const std::vector<int64_t>& ids) {
  using W = WeightKind;
  auto w = [&](W kind, int64_t layer = 0) { return weights.at(weight_name(kind, layer)).to(at::kDouble); };
  const int64_t t = static_cast<int64_t>(ids.size()), hd = c.head_dim;
  at::Tensor x = w(W::kEmbedTokens).index_select(0, at::tensor(ids, at::kLong));  // [T, D]
  at::Tensor causal = at::ones({t, t}, at::kBool).tril();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    at::Tensor h = rms_norm(x, w(W::kInputLayernorm, l), c.rms_norm_eps);
    auto proj = [&](W kind) {
      at::Tensor y = at::matmul(h, w(kind, l).t());
      const std::string bias = bias_name(weight_name(kind, l));
      if (weights.count(bias)) y = y + weights.at(bias).to(at::kDouble);
      return y;
    };
    at::Tensor q = proj(W::kQProj), k = proj(W::kKProj), v = proj(W::kVProj);  // [T, H*hd], [T, KV*hd] x2
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < c.num_attention_heads; ++head) {
      const int64_t kv_head = head / (c.num_attention_heads / c.num_key_value_heads);
      at::Tensor qh = reference_rotary(c, q.narrow(1, head * hd, hd));
      at::Tensor kh = reference_rotary(c, k.narrow(1, kv_head * hd, hd));
      at::Tensor vh = v.narrow(1, kv_head * hd, hd);
      at::Tensor scores = at::matmul(qh, kh.t()) / std::sqrt(static_cast<double>(hd));
      scores = scores.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(at::matmul(at::softmax(scores, -1), vh));
    }
    x = x + at::matmul(at::cat(heads, 1), w(W::kOProj, l).t());
    at::Tensor m = rms_norm(x, w(W::kPostAttentionLayernorm, l), c.rms_norm_eps);
    at::Tensor gate = at::matmul(m, w(W::kGateProj, l).t());
    at::Tensor up = at::matmul(m, w(W::kUpProj, l).t());
    x = x + at::matmul(gate * at::sigmoid(gate) * up, w(W::kDownProj, l).t());
  }
  x = rms_norm(x, w(W::kNorm), c.rms_norm_eps);
  at::Tensor head = c.tie_word_embeddings ? w(W::kEmbedTokens) : w(W::kLmHead);
  return at::matmul(x, head.t());
}

}  // namespace gpueval::testing
