#include "cli/llama2c_convert.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "model/loading/safetensors.h"
#include "model/loading/weight_names.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace gpueval {
namespace {

constexpr uint32_t kMagic = 0x616b3432;  // "ak42" read as little-endian u32
constexpr size_t kV1HeaderBytes = 256;

struct Cursor {
  const std::string& path;
  const std::string& bytes;
  size_t offset;

  // Next `numel` float32 values as a [shape] tensor (copied out of the file buffer).
  at::Tensor take(std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const size_t n = static_cast<size_t>(numel) * sizeof(float);
    if (offset + n > bytes.size())
      fail(path, "truncated: weights end at byte {}, file has {}", offset + n, bytes.size());
    at::Tensor t = at::empty(shape, at::kFloat);
    std::memcpy(t.data_ptr<float>(), bytes.data() + offset, n);
    offset += n;
    return t;
  }
  void skip(int64_t floats) { offset += static_cast<size_t>(floats) * sizeof(float); }
};

// The weights after the header, in the file's order for `version`, under their HF names; q and
// k rows permuted to rotate halves.
std::map<std::string, at::Tensor> read_weights(Cursor cur, const ModelConfig& c, int version, int64_t seq_len) {
  // The file's order of tensors; each per-layer kind holds all layers, one after another.
  using W = WeightKind;
  const std::vector<W> order =
      version == 0 ? std::vector<W>{W::kEmbedTokens, W::kInputLayernorm,         W::kQProj,    W::kKProj,    W::kVProj,
                                    W::kOProj,       W::kPostAttentionLayernorm, W::kGateProj, W::kDownProj, W::kUpProj,
                                    W::kNorm}
                   : std::vector<W>{W::kInputLayernorm, W::kPostAttentionLayernorm,
                                    W::kNorm,           W::kEmbedTokens,
                                    W::kQProj,          W::kKProj,
                                    W::kVProj,          W::kOProj,
                                    W::kGateProj,       W::kDownProj,
                                    W::kUpProj};
  std::map<std::string, at::Tensor> w;
  for (W kind : order) {
    const std::vector<int64_t> shape = weight_shape(c, kind);
    if (!is_per_layer(kind)) {
      w[weight_name(kind)] = cur.take(shape);
      continue;
    }
    std::vector<int64_t> full = {c.num_hidden_layers};  // [n_layers, ...shape]
    full.insert(full.end(), shape.begin(), shape.end());
    at::Tensor t = cur.take(full);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) w[weight_name(kind, l)] = t[l].clone();
  }
  if (version == 0) cur.skip(seq_len * c.head_dim);
  if (!c.tie_word_embeddings) w[weight_name(W::kLmHead)] = cur.take(weight_shape(c, W::kLmHead));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (auto [kind, n] : {std::pair{W::kQProj, c.num_attention_heads}, std::pair{W::kKProj, c.num_key_value_heads}}) {
      at::Tensor& t = w[weight_name(kind, l)];
      t = permute_interleaved_to_halves(t, n);
    }
  }
  return w;
}

}  // namespace

at::Tensor permute_interleaved_to_halves(const at::Tensor& w, int64_t n_heads) {
  const int64_t rows = w.size(0), cols = w.size(1);
  return w.view({n_heads, rows / n_heads / 2, 2, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}

Llama2cCheckpoint read_llama2c_checkpoint(const std::string& path) {
  const std::string bytes = io::read_file(path);
  if (bytes.size() < 28) fail(path, "too short for a llama2.c header ({} bytes)", bytes.size());
  uint32_t magic;
  std::memcpy(&magic, bytes.data(), 4);
  size_t offset = 0;
  int version = 0;
  if (magic == kMagic) {
    int32_t v;
    std::memcpy(&v, bytes.data() + 4, 4);
    if (v != 1) fail(path, "llama2.c export version {} is not supported (only 0 and 1, float32)", v);
    version = 1;
    offset = 8;
  }
  int32_t h[7];
  if (bytes.size() < offset + sizeof(h)) fail(path, "too short for a llama2.c header");
  std::memcpy(h, bytes.data() + offset, sizeof(h));
  const int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4], seq_len = h[6];
  bool shared = h[5] > 0;
  const int64_t vocab = h[5] > 0 ? h[5] : -static_cast<int64_t>(h[5]);
  if (version == 1) {
    shared = bytes.size() > offset + sizeof(h) && bytes[offset + sizeof(h)] != 0;
    offset = kV1HeaderBytes;
  } else {
    offset = sizeof(h);
  }
  if (dim <= 0 || hidden <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || vocab <= 0 || seq_len <= 0 ||
      dim % heads != 0 || heads % kv_heads != 0 || (dim / heads) % 2 != 0 || dim > (1 << 16) || layers > 1024 ||
      vocab > (1 << 24) || hidden > (1 << 20) || seq_len > (1 << 24))
    fail(path,
         "implausible llama2.c header (dim={}, hidden_dim={}, n_layers={}, n_heads={}, n_kv_heads={}, "
         "vocab_size={}, seq_len={})",
         dim, hidden, layers, heads, kv_heads, h[5], seq_len);
  const int64_t head_dim = dim / heads, kv_dim = kv_heads * head_dim;

  Llama2cCheckpoint out;
  ModelConfig& c = out.config;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = dim;
  c.intermediate_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = seq_len;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = shared;
  c.torch_dtype = "float32";
  c.bos_token_id = 1;
  c.eos_token_ids = {2};

  // Expected size first, so a wrong file fails with one clear message.
  const int64_t per_layer = 2 * dim + dim * dim * 2 + 2 * dim * kv_dim + 3 * dim * hidden;
  int64_t floats = vocab * dim + layers * per_layer + dim;
  if (version == 0) floats += seq_len * head_dim;  // legacy freq_cis_real/imag, unused
  if (!shared) floats += vocab * dim;
  const uint64_t expected = offset + static_cast<uint64_t>(floats) * sizeof(float);
  if (bytes.size() != expected)
    fail(path, "size {} bytes does not match its header (expected {} for dim={}, n_layers={}, vocab_size={})",
         bytes.size(), expected, dim, layers, vocab);

  out.weights = read_weights(Cursor{path, bytes, offset}, c, version, seq_len);
  return out;
}

void convert_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path,
                     const std::string& out_dir) {
  Llama2cCheckpoint ckpt = read_llama2c_checkpoint(checkpoint_path);
  nlohmann::json tokenizer = llama2c_tokenizer_to_json(tokenizer_path);
  const int64_t tok_vocab = static_cast<int64_t>(tokenizer["model"]["vocab"].size());
  if (tok_vocab != ckpt.config.vocab_size)
    fail(tokenizer_path, "tokenizer has {} tokens but the checkpoint's vocab_size is {}", tok_vocab,
         ckpt.config.vocab_size);
  io::make_directories(out_dir);
  std::vector<std::pair<std::string, at::Tensor>> tensors(ckpt.weights.begin(), ckpt.weights.end());
  write_safetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}});
  io::write_file_atomic(out_dir + "/config.json", ckpt.config.to_json().dump(2) + "\n");
  io::write_file_atomic(out_dir + "/tokenizer.json", tokenizer.dump(2) + "\n");
  nlohmann::json tok_config = {{"add_bos_token", true},
                               {"add_eos_token", false},
                               {"bos_token", "<s>"},
                               {"eos_token", "</s>"},
                               {"unk_token", "<unk>"},
                               {"clean_up_tokenization_spaces", false},
                               {"model_max_length", ckpt.config.max_position_embeddings},
                               {"tokenizer_class", "LlamaTokenizerFast"}};
  io::write_file_atomic(out_dir + "/tokenizer_config.json", tok_config.dump(2) + "\n");
  nlohmann::json gen_config = {{"bos_token_id", 1}, {"eos_token_id", 2}};
  io::write_file_atomic(out_dir + "/generation_config.json", gen_config.dump(2) + "\n");
}

}  // namespace gpueval
