// write_random_model() and `gpueval init-model`: a random Llama with the real Llama-2 SentencePiece
// tokenizer that loads, gives finite logits, and is a pure function of its spec and seed.
#include "cli/random_model.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>

#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/model.h"
#include "gpueval/tokenizer.h"
#include "model/loading/checkpoint.h"
#include "test_util.h"

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;

std::string sentencepiece_dir() { return testing::shared_dir() + "/data/tokenizers/llama2_sentencepiece"; }

bool have_sentencepiece() { return io::path_exists(sentencepiece_dir() + "/tokenizer.model"); }

#define REQUIRE_SENTENCEPIECE()                                                           \
  do {                                                                                    \
    GPUEVAL_REQUIRE_SENTENCEPIECE();                                                      \
    if (!have_sentencepiece()) GTEST_SKIP() << "no tokenizer at " << sentencepiece_dir(); \
  } while (0)

// Small enough to write in well under a second; the 32000-row embedding dominates.
RandomModelSpec small_spec(uint64_t seed = 7) {
  RandomModelSpec s;
  s.hidden = 64;
  s.intermediate = 96;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.max_positions = 128;
  s.seed = seed;
  return s;
}

TEST(RandomModel, LoadsWithTheTokenizersVocabularyAndGivesFiniteLogits) {
  REQUIRE_SENTENCEPIECE();
  TempDir tmp;
  const std::string out = tmp.file("model");
  write_random_model(out, small_spec(), sentencepiece_dir());

  const auto source_tok = load_tokenizer(sentencepiece_dir());
  const auto tok = load_tokenizer(out);  // the copy in the model directory
  const ModelConfig c = ModelConfig::load(out + "/config.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, source_tok->vocab_size());
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_FALSE(c.tie_word_embeddings);
  ASSERT_TRUE(source_tok->bos_id() && source_tok->eos_id());
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(*source_tok->bos_id()));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{*source_tok->eos_id()});
  EXPECT_EQ(io::read_file(out + "/tokenizer.model"), io::read_file(sentencepiece_dir() + "/tokenizer.model"));

  const std::string text = "The quick brown fox jumps over the lazy dog.\nAnswer: B";
  const std::vector<int32_t> ids = tok->encode(text, true);
  EXPECT_EQ(ids, source_tok->encode(text, true));
  ASSERT_GT(ids.size(), 5u);

  // Weights: normal(0, 0.02) projections, RMSNorm weights exactly 1.
  const CheckpointFiles ckpt = CheckpointFiles::open(out);
  const at::Tensor embed = ckpt.tensor("model.embed_tokens.weight");
  EXPECT_EQ(embed.sizes(), (std::vector<int64_t>{c.vocab_size, 64}));
  EXPECT_NEAR(embed.std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(embed.mean().item<double>(), 0.0, 0.001);
  EXPECT_TRUE(at::equal(ckpt.tensor("model.layers.1.input_layernorm.weight"), at::ones({64})));
  EXPECT_TRUE(at::equal(ckpt.tensor("model.norm.weight"), at::ones({64})));
  EXPECT_EQ(ckpt.info("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_FALSE(at::equal(ckpt.tensor("lm_head.weight"), embed));

  c10::InferenceMode guard;
  DecoderModel model = load_model(out);
  const int64_t t = static_cast<int64_t>(ids.size());
  const at::Tensor tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).view({1, t});
  const at::Tensor positions = at::arange(t).view({1, t});
  const at::Tensor logits = model->logits(model->forward(tokens, positions, at::ones({1, t}, at::kBool)));
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{1, t, c.vocab_size}));
  EXPECT_TRUE(at::isfinite(logits).all().item<bool>());
  // Random weights, yet not a constant function of the input.
  EXPECT_GT((logits[0][0] - logits[0][t - 1]).abs().max().item<double>(), 1e-4);
}

TEST(RandomModel, SameSeedGivesIdenticalFilesAndAnotherSeedDoesNot) {
  REQUIRE_SENTENCEPIECE();
  TempDir tmp;
  write_random_model(tmp.file("a"), small_spec(7), sentencepiece_dir());
  write_random_model(tmp.file("b"), small_spec(7), sentencepiece_dir());
  write_random_model(tmp.file("c"), small_spec(8), sentencepiece_dir());
  const std::string a = io::read_file(tmp.file("a/model.safetensors"));
  EXPECT_TRUE(a == io::read_file(tmp.file("b/model.safetensors")));
  EXPECT_EQ(io::read_file(tmp.file("a/config.json")), io::read_file(tmp.file("b/config.json")));
  const std::string c = io::read_file(tmp.file("c/model.safetensors"));
  ASSERT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c);
  // Not just the metadata: every projection differs.
  const CheckpointFiles ca = CheckpointFiles::open(tmp.file("a")), cc = CheckpointFiles::open(tmp.file("c"));
  EXPECT_FALSE(
      at::equal(ca.tensor("model.layers.1.mlp.down_proj.weight"), cc.tensor("model.layers.1.mlp.down_proj.weight")));
}

TEST(RandomModel, TiedBfloat16AndLargerVocab) {
  REQUIRE_SENTENCEPIECE();
  TempDir tmp;
  RandomModelSpec s = small_spec();
  s.tied = true;
  s.dtype = "bf16";
  const int64_t tok_vocab = load_tokenizer(sentencepiece_dir())->vocab_size();
  s.vocab = tok_vocab + 64;
  write_random_model(tmp.path(), s, sentencepiece_dir());
  const ModelConfig c = ModelConfig::load(tmp.file("config.json"));
  EXPECT_EQ(c.vocab_size, tok_vocab + 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  const CheckpointFiles ckpt = CheckpointFiles::open(tmp.path());
  EXPECT_FALSE(ckpt.contains("lm_head.weight"));
  EXPECT_EQ(ckpt.info("model.embed_tokens.weight").dtype, at::kBFloat16);
  LoadOptions o;
  o.dtype = at::kBFloat16;
  EXPECT_EQ(load_model(tmp.path(), o)->config().vocab_size, tok_vocab + 64);
}

TEST(RandomModel, ConvertsALlama2cTokenizerBin) {
  REQUIRE_SENTENCEPIECE();
  TempDir tmp;
  io::make_directories(tmp.file("tok"));
  io::write_file_atomic(tmp.file("tok/tokenizer.bin"), io::read_file(sentencepiece_dir() + "/tokenizer.bin"));
  write_random_model(tmp.file("model"), small_spec(), tmp.file("tok"));
  const auto tok = load_tokenizer(tmp.file("model"));
  EXPECT_EQ(tok->origin(), tmp.file("model") + "/tokenizer.json");
  EXPECT_EQ(ModelConfig::load(tmp.file("model/config.json")).vocab_size, tok->vocab_size());
  // llama2.c's tokenizer.bin is the same vocabulary as the SentencePiece model.
  const std::string text = "Once upon a time, there was a dog.";
  EXPECT_EQ(tok->encode(text, true), load_tokenizer(sentencepiece_dir())->encode(text, true));
}

TEST(RandomModel, BadSpecsAndTokenizersAreOneLineErrorsThatWriteNothing) {
  REQUIRE_SENTENCEPIECE();
  TempDir tmp;
  const std::string out = tmp.file("model");
  auto error_for = [&](RandomModelSpec s, const std::string& tok_dir) {
    return error_of([&] { write_random_model(out, s, tok_dir); });
  };
  RandomModelSpec s = small_spec();
  s.heads = 5;
  EXPECT_THAT(error_for(s, sentencepiece_dir()), HasSubstr("--heads 5 does not divide --hidden 64"));
  s = small_spec();
  s.kv_heads = 3;
  EXPECT_THAT(error_for(s, sentencepiece_dir()), HasSubstr("--kv-heads 3 does not divide --heads 4"));
  s = small_spec();
  s.heads = 64;
  s.kv_heads = 64;
  EXPECT_THAT(error_for(s, sentencepiece_dir()), HasSubstr("must be even"));
  s = small_spec();
  s.layers = 0;
  EXPECT_THAT(error_for(s, sentencepiece_dir()), HasSubstr("--layers must be positive"));
  s = small_spec();
  s.vocab = 1000;
  EXPECT_THAT(error_for(s, sentencepiece_dir()), HasSubstr("--vocab 1000 is smaller than the tokenizer's"));
  s = small_spec();
  s.dtype = "int8";
  EXPECT_THAT(error_for(s, sentencepiece_dir()), HasSubstr("--dtype: unknown dtype 'int8'"));
  io::make_directories(tmp.file("empty"));
  EXPECT_EQ(error_for(small_spec(), tmp.file("empty")),
            tmp.file("empty") +
                ": holds no tokenizer (expected tokenizer.json, tokenizer.model or a llama2.c tokenizer.bin)");
  EXPECT_EQ(error_for(small_spec(), tmp.file("nope")), tmp.file("nope") + ": tokenizer directory does not exist");
  EXPECT_FALSE(io::path_exists(out));
  // The tokenizer directory itself is never the output: writing there would clobber its files.
  io::make_directories(tmp.file("tok"));
  io::write_file_atomic(tmp.file("tok/tokenizer.model"), io::read_file(sentencepiece_dir() + "/tokenizer.model"));
  EXPECT_THAT(error_of([&] { write_random_model(tmp.file("tok"), small_spec(), tmp.file("tok")); }),
              HasSubstr("is the tokenizer directory"));
}

TEST(RandomModel, CliWritesAModelAndRefusesANonEmptyDirectoryWithoutForce) {
  REQUIRE_SENTENCEPIECE();
  TempDir tmp;
  const std::string out = tmp.file("m");
  const std::vector<std::string> base = {"init-model",
                                         "--tokenizer",
                                         sentencepiece_dir(),
                                         "--out",
                                         out,
                                         "--hidden",
                                         "32",
                                         "--layers",
                                         "1",
                                         "--heads",
                                         "2",
                                         "--kv-heads",
                                         "1",
                                         "--intermediate",
                                         "64",
                                         "--max-positions",
                                         "64"};
  std::vector<std::string> args = base;
  for (const char* a : {"--seed", "3", "--tied"}) args.push_back(a);
  auto r = testing::run_gpueval(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[gpueval] wrote " + out));
  const ModelConfig c = ModelConfig::load(out + "/config.json");
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_TRUE(c.tie_word_embeddings);
  // The CLI and the library agree on what seed 3 means.
  RandomModelSpec s;
  s.hidden = 32, s.layers = 1, s.heads = 2, s.kv_heads = 1, s.intermediate = 64, s.max_positions = 64, s.seed = 3;
  s.tied = true;
  write_random_model(tmp.file("lib"), s, sentencepiece_dir());
  EXPECT_TRUE(io::read_file(out + "/model.safetensors") == io::read_file(tmp.file("lib/model.safetensors")));

  const std::string before = io::read_file(out + "/model.safetensors");
  std::vector<std::string> again = base;  // untied and another seed: the overwrite must change the files
  for (const char* a : {"--seed", "4"}) again.push_back(a);
  r = testing::run_gpueval(again);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "gpueval: " + out + ": --out directory is not empty (pass --force to overwrite the model there)\n");
  EXPECT_TRUE(io::read_file(out + "/model.safetensors") == before);
  again.push_back("--force");
  r = testing::run_gpueval(again);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(ModelConfig::load(out + "/config.json").tie_word_embeddings);

  r = testing::run_gpueval(
      {"init-model", "--tokenizer", sentencepiece_dir(), "--out", tmp.file("x"), "--hidden", "100", "--heads", "12"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "gpueval: init-model: --heads 12 does not divide --hidden 100\n");
  EXPECT_FALSE(io::path_exists(tmp.file("x")));
}

}  // namespace
}  // namespace gpueval
