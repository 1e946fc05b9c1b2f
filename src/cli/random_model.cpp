#include "cli/random_model.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "gpueval/model.h"
#include "gpueval/tokenizer.h"
#include "model/loading/safetensors.h"
#include "model/loading/weight_names.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

constexpr double kInitStd = 0.02;  // transformers' LlamaConfig.initializer_range

// Files copied verbatim from the tokenizer directory when present.
const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer.model", "tokenizer.bin", "tokenizer_config.json",
                                       "special_tokens_map.json"};

// The tokenizer in memory plus the files that make it up in the output directory.
struct TokenizerFiles {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::pair<std::string, std::string>> files;  // name in the output directory, contents
};

TokenizerFiles read_tokenizer_dir(const std::string& dir) {
  if (!io::is_directory(dir)) fail(dir, "tokenizer directory does not exist");
  TokenizerFiles t;
  // Read now, so that nothing in the output directory is touched before the whole input is known good.
  for (const char* name : kTokenizerFiles)
    if (io::path_exists(dir + "/" + name)) t.files.emplace_back(name, io::read_file(dir + "/" + name));
  const bool has_json = io::path_exists(dir + "/tokenizer.json");
  const bool has_model = io::path_exists(dir + "/tokenizer.model");
  if (has_json || has_model) {
    t.tokenizer = load_tokenizer(dir);
  } else if (io::path_exists(dir + "/tokenizer.bin")) {
    // A llama2.c tokenizer: load_tokenizer() reads it only once converted, as convert-llama2c does.
    const nlohmann::json converted = llama2c_tokenizer_to_json(dir + "/tokenizer.bin");
    nlohmann::json config = llama2c_tokenizer_config();
    if (io::path_exists(dir + "/tokenizer_config.json"))
      config = nlohmann::json::parse(io::read_file(dir + "/tokenizer_config.json"), nullptr, false);
    if (config.is_discarded()) fail(dir + "/tokenizer_config.json", "not valid JSON");
    t.tokenizer = load_tokenizer_json(converted, dir + "/tokenizer.bin", &config);
    t.files.emplace_back("tokenizer.json", converted.dump(2) + "\n");
    if (!io::path_exists(dir + "/tokenizer_config.json"))
      t.files.emplace_back("tokenizer_config.json", config.dump(2) + "\n");
  } else {
    fail(dir, "holds no tokenizer (expected tokenizer.json, tokenizer.model or a llama2.c tokenizer.bin)");
  }
  return t;
}

// Every weight of `c` in the weight table's order, drawn from one generator, so a seed fixes every byte.
std::vector<std::pair<std::string, at::Tensor>> random_weights(const ModelConfig& c, uint64_t seed,
                                                               at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<std::pair<std::string, at::Tensor>> w;
  for (const WeightSpec& spec : llama_weights(c)) {
    // Drawn in float32 and then cast, so the bfloat16 model is the rounded float32 one.
    at::Tensor t = is_norm(spec.kind)
                       ? at::ones(spec.shape, at::TensorOptions().dtype(dtype))
                       : at::normal(0.0, kInitStd, spec.shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
    w.emplace_back(spec.name, std::move(t));
  }
  return w;
}

}  // namespace

ModelConfig random_model_config(const RandomModelSpec& s, int64_t tokenizer_vocab, std::optional<int32_t> bos_id,
                                std::optional<int32_t> eos_id) {
  const char* kWhere = "init-model";
  auto positive = [&](const char* flag, int64_t v) {
    if (v <= 0) fail(kWhere, "{} must be positive (got {})", flag, v);
  };
  positive("--hidden", s.hidden);
  positive("--intermediate", s.intermediate);
  positive("--layers", s.layers);
  positive("--heads", s.heads);
  positive("--kv-heads", s.kv_heads);
  positive("--max-positions", s.max_positions);
  if (s.vocab < 0) fail(kWhere, "--vocab must be 0 (the tokenizer's) or positive (got {})", s.vocab);
  if (s.hidden % s.heads != 0) fail(kWhere, "--heads {} does not divide --hidden {}", s.heads, s.hidden);
  if (s.heads % s.kv_heads != 0) fail(kWhere, "--kv-heads {} does not divide --heads {}", s.kv_heads, s.heads);
  if ((s.hidden / s.heads) % 2 != 0)
    fail(kWhere, "head dimension --hidden/--heads = {} must be even for rotary embeddings", s.hidden / s.heads);
  if (!(s.rope_theta > 1)) fail(kWhere, "--rope-theta must be > 1 (got {})", s.rope_theta);
  if (s.vocab != 0 && s.vocab < tokenizer_vocab)
    fail(kWhere, "--vocab {} is smaller than the tokenizer's {} ids", s.vocab, tokenizer_vocab);
  at::ScalarType dtype;
  try {
    dtype = parse_dtype(s.dtype);
  } catch (const Error& e) {
    fail(kWhere, "--dtype: {}", e.what());
  }

  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = s.vocab != 0 ? s.vocab : tokenizer_vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.max_position_embeddings = s.max_positions;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = s.rope_theta;
  c.tie_word_embeddings = s.tied;
  c.torch_dtype = dtype_name(dtype);
  if (bos_id) c.bos_token_id = *bos_id;
  if (eos_id) c.eos_token_ids = {*eos_id};
  return c;
}

void write_random_model(const std::string& out_dir, const RandomModelSpec& spec, const std::string& tokenizer_dir) {
  TokenizerFiles tok = read_tokenizer_dir(tokenizer_dir);
  const ModelConfig config =
      random_model_config(spec, tok.tokenizer->vocab_size(), tok.tokenizer->bos_id(), tok.tokenizer->eos_id());
  // Round trip through the reader, so a config that load_model() would refuse never reaches disk.
  ModelConfig::from_json(config.to_json(), out_dir + "/config.json");
  const auto weights = random_weights(config, spec.seed, parse_dtype(spec.dtype));

  std::error_code same_error;
  if (fs::exists(out_dir) && fs::equivalent(out_dir, tokenizer_dir, same_error))
    fail(out_dir, "is the tokenizer directory; write the model somewhere else");
  io::make_directories(out_dir);
  // Files of another checkpoint here would shadow ours: a sharded index, a tokenizer of the other kind.
  for (const char* name : {"model.safetensors.index.json", "tokenizer.json", "tokenizer.model", "tokenizer.bin",
                           "tokenizer_config.json", "special_tokens_map.json"}) {
    std::error_code ec;
    fs::remove(out_dir + "/" + name, ec);
    if (ec) fail(out_dir + "/" + name, "cannot remove the previous file: {}", ec.message());
  }
  for (const auto& [name, contents] : tok.files) io::write_file_atomic(out_dir + "/" + name, contents);

  write_safetensors(out_dir + "/model.safetensors", weights,
                    {{"format", "pt"}, {"gpueval_init", fmt::format("normal(0, {}) seed {}", kInitStd, spec.seed)}});
  nlohmann::json generation = nlohmann::json::object();
  if (config.bos_token_id) generation["bos_token_id"] = *config.bos_token_id;
  if (!config.eos_token_ids.empty()) generation["eos_token_id"] = config.eos_token_ids[0];
  io::write_file_atomic(out_dir + "/generation_config.json", generation.dump(2) + "\n");
  // config.json last: a directory that has one holds a complete checkpoint.
  io::write_file_atomic(out_dir + "/config.json", config.to_json().dump(2) + "\n");
}

}  // namespace gpueval
