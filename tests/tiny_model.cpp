#include "tiny_model.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "model/safetensors.h"

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
  at::manual_seed(seed);
  std::map<std::string, at::Tensor> w;
  auto normal = [](std::vector<int64_t> shape, double std) { return at::randn(shape, at::kFloat) * std; };
  const int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  w["model.embed_tokens.weight"] = normal({c.vocab_size, d}, 1.0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = 1.0 + normal({d}, 0.1);
    w[p + "post_attention_layernorm.weight"] = 1.0 + normal({d}, 0.1);
    w[p + "self_attn.q_proj.weight"] = normal({q, d}, 0.3);
    w[p + "self_attn.k_proj.weight"] = normal({kv, d}, 0.3);
    w[p + "self_attn.v_proj.weight"] = normal({kv, d}, 0.3);
    w[p + "self_attn.o_proj.weight"] = normal({d, q}, 0.3);
    if (c.attention_bias) {
      w[p + "self_attn.q_proj.bias"] = normal({q}, 0.3);
      w[p + "self_attn.k_proj.bias"] = normal({kv}, 0.3);
      w[p + "self_attn.v_proj.bias"] = normal({kv}, 0.3);
    }
    w[p + "mlp.gate_proj.weight"] = normal({c.intermediate_size, d}, 0.3);
    w[p + "mlp.up_proj.weight"] = normal({c.intermediate_size, d}, 0.3);
    w[p + "mlp.down_proj.weight"] = normal({d, c.intermediate_size}, 0.3);
  }
  w["model.norm.weight"] = 1.0 + normal({d}, 0.1);
  if (!c.tie_word_embeddings) w["lm_head.weight"] = normal({c.vocab_size, d}, 0.3);
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

// x: [T, hd] one head; rotates (x[i], x[i + hd/2]) by position * inv_freq(i).
at::Tensor rotate(const ModelConfig& c, const at::Tensor& x) {
  const int64_t t = x.size(0), half = c.head_dim / 2;
  at::Tensor out = x.clone();
  for (int64_t pos = 0; pos < t; ++pos)
    for (int64_t i = 0; i < half; ++i) {
      const double a = pos * inv_freq(c, i);
      const double x1 = x[pos][i].item<double>(), x2 = x[pos][i + half].item<double>();
      out[pos][i] = x1 * std::cos(a) - x2 * std::sin(a);
      out[pos][i + half] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  return out;
}

}  // namespace

at::Tensor reference_logits(const ModelConfig& c, const std::map<std::string, at::Tensor>& weights,
                            const std::vector<int64_t>& ids) {
  auto w = [&](const std::string& name) { return weights.at(name).to(at::kDouble); };
  auto has = [&](const std::string& name) { return weights.count(name) > 0; };
  const int64_t t = static_cast<int64_t>(ids.size()), hd = c.head_dim;
  at::Tensor x = w("model.embed_tokens.weight").index_select(0, at::tensor(ids, at::kLong));  // [T, D]
  at::Tensor causal = at::ones({t, t}, at::kBool).tril();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    at::Tensor h = rms_norm(x, w(p + "input_layernorm.weight"), c.rms_norm_eps);
    auto proj = [&](const std::string& name) {
      at::Tensor y = at::matmul(h, w(p + name + ".weight").t());
      if (has(p + name + ".bias")) y = y + w(p + name + ".bias");
      return y;
    };
    at::Tensor q = proj("self_attn.q_proj"), k = proj("self_attn.k_proj"), v = proj("self_attn.v_proj");
    std::vector<at::Tensor> heads;
    for (int64_t head = 0; head < c.num_attention_heads; ++head) {
      const int64_t kv_head = head / (c.num_attention_heads / c.num_key_value_heads);
      at::Tensor qh = rotate(c, q.narrow(1, head * hd, hd));
      at::Tensor kh = rotate(c, k.narrow(1, kv_head * hd, hd));
      at::Tensor vh = v.narrow(1, kv_head * hd, hd);
      at::Tensor scores = at::matmul(qh, kh.t()) / std::sqrt(static_cast<double>(hd));
      scores = scores.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(at::matmul(at::softmax(scores, -1), vh));
    }
    x = x + at::matmul(at::cat(heads, 1), w(p + "self_attn.o_proj.weight").t());
    at::Tensor m = rms_norm(x, w(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    at::Tensor gate = at::matmul(m, w(p + "mlp.gate_proj.weight").t());
    at::Tensor up = at::matmul(m, w(p + "mlp.up_proj.weight").t());
    x = x + at::matmul(gate * at::sigmoid(gate) * up, w(p + "mlp.down_proj.weight").t());
  }
  x = rms_norm(x, w("model.norm.weight"), c.rms_norm_eps);
  at::Tensor head = c.tie_word_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight");
  return at::matmul(x, head.t());
}

}  // namespace gpueval::testing
