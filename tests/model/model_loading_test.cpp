// Bad checkpoints and configs must fail with one line naming the file and the
// problem; the llama2.c converter must be exact and refuse malformed files;
// generation_config.json's eos tokens end generation and enter the fingerprint where
// they differ from config.json's.
#include <cstring>
#include <fstream>
#include <functional>
#include <set>

#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "gpueval/model.h"
#include "model/decoder/generate.h"
#include "model/config/generation_config.h"
#include "cli/llama2c_convert.h"
#include "model/loading/model_fingerprint.h"
#include "model/loading/safetensors.h"
#include "test_util.h"
#include "tiny_model.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Runs `f`, expects an Error, returns its message.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error spans several lines: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no gpueval::Error thrown";
  return "";
}

struct LoadingFixture : ::testing::Test {
  void SetUp() override {
    config = testing::tiny_config(testing::TinyModelSpec{});
    weights = testing::tiny_weights(config, 1);
  }
  std::string write(const json& cfg, const std::map<std::string, at::Tensor>& w) {
    io::make_directories(dir.path() + "/m");
    io::write_file_atomic(dir.path() + "/m/config.json", cfg.dump());
    write_safetensors(dir.path() + "/m/model.safetensors", {w.begin(), w.end()});
    return dir.path() + "/m";
  }
  testing::TempDir dir;
  ModelConfig config;
  std::map<std::string, at::Tensor> weights;
};

TEST_F(LoadingFixture, MissingTensorNamesTheTensor) {
  auto w = weights;
  w.erase("model.layers.1.mlp.up_proj.weight");
  std::string d = write(config.to_json(), w);
  std::string msg = error_of([&] { load_model(d); });
  EXPECT_THAT(msg, HasSubstr(d));
  EXPECT_THAT(msg, HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight'"));
}

TEST_F(LoadingFixture, WrongShapeNamesFileTensorAndShapes) {
  auto w = weights;
  w["model.layers.0.self_attn.k_proj.weight"] = at::zeros({3, 32});
  std::string d = write(config.to_json(), w);
  std::string msg = error_of([&] { load_model(d); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("'model.layers.0.self_attn.k_proj.weight' has shape [3, 32]"));
  EXPECT_THAT(msg, HasSubstr("[16, 32]"));
}

TEST_F(LoadingFixture, IntegerWeightsAreRefused) {
  auto w = weights;
  w["model.norm.weight"] = at::ones({32}, at::kLong);
  std::string d = write(config.to_json(), w);
  EXPECT_THAT(error_of([&] { load_model(d); }), HasSubstr("'model.norm.weight' has dtype"));
}

TEST_F(LoadingFixture, UntiedModelWithoutHeadIsRefused) {
  auto w = weights;
  w.erase("lm_head.weight");
  std::string d = write(config.to_json(), w);
  EXPECT_THAT(error_of([&] { load_model(d); }), HasSubstr("lm_head.weight"));
}

TEST_F(LoadingFixture, ShardedCheckpointLoadsLikeOneFile) {
  std::vector<std::pair<std::string, at::Tensor>> a, b;
  json map;
  for (const auto& [name, t] : weights) {
    const bool first = name.find("layers.1.") == std::string::npos;
    (first ? a : b).emplace_back(name, t);
    map[name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  io::make_directories(dir.path() + "/sharded");
  io::write_file_atomic(dir.path() + "/sharded/config.json", config.to_json().dump());
  write_safetensors(dir.path() + "/sharded/model-00001-of-00002.safetensors", a);
  write_safetensors(dir.path() + "/sharded/model-00002-of-00002.safetensors", b);
  io::write_file_atomic(dir.path() + "/sharded/model.safetensors.index.json",
                        json{{"metadata", json::object()}, {"weight_map", map}}.dump());
  std::string single = write(config.to_json(), weights);
  DecoderModel m1 = load_model(dir.path() + "/sharded"), m2 = load_model(single);
  auto p1 = m1->named_parameters(), p2 = m2->named_parameters();
  ASSERT_EQ(p1.size(), p2.size());
  for (const auto& p : p1) EXPECT_TRUE(p.value().equal(p2[p.key()])) << p.key();
}

// True when `ptr` lies in a memory mapping of the file `path` (per /proc/self/maps).
bool is_mapped_from(const void* ptr, const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  while (std::getline(maps, line)) {
    if (line.size() < path.size() || line.compare(line.size() - path.size(), path.size(), path) != 0) continue;
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) return true;
  }
  return false;
}

TEST_F(LoadingFixture, Fp32WeightsAreZeroCopyViewsOfTheMappedFile) {
  std::string d = write(config.to_json(), weights);
  DecoderModel m = load_model(d);
  at::Tensor w = m->named_parameters()["model.layers.0.mlp.up_proj.weight"];
  EXPECT_TRUE(w.equal(weights.at("model.layers.0.mlp.up_proj.weight")));
  EXPECT_TRUE(is_mapped_from(w.data_ptr(), d + "/model.safetensors"));
  // A dtype change has to copy, so that tensor lives elsewhere.
  DecoderModel h = load_model(d, LoadOptions{at::kCPU, at::kBFloat16});
  EXPECT_FALSE(
      is_mapped_from(h->named_parameters()["model.layers.0.mlp.up_proj.weight"].data_ptr(), d + "/model.safetensors"));
}

struct BadConfig {
  std::string name;
  std::function<void(json&)> edit;
  std::string expected;
};

TEST_F(LoadingFixture, BadConfigValuesNameTheKey) {
  std::vector<BadConfig> cases = {
      {"missing", [](json& j) { j.erase("hidden_size"); }, "missing required key 'hidden_size'"},
      {"type", [](json& j) { j["num_hidden_layers"] = "two"; }, "'num_hidden_layers' must be an integer"},
      {"negative", [](json& j) { j["vocab_size"] = -5; }, "'vocab_size' must be >= 1"},
      {"gqa", [](json& j) { j["num_key_value_heads"] = 3; }, "not a multiple of num_key_value_heads"},
      {"arch", [](json& j) { j["model_type"] = "jamba"; }, "unsupported model_type 'jamba'"},
      {"act", [](json& j) { j["hidden_act"] = "relu"; }, "unsupported hidden_act"},
      {"rope",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "proportional"}, {"factor", 2.0}};
       },
       "unsupported rope_scaling type 'proportional'"},
      {"eos", [](json& j) { j["eos_token_id"] = "x"; }, "'eos_token_id' must be an integer"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    json j = config.to_json();
    c.edit(j);
    std::string d = write(j, weights);
    std::string msg = error_of([&] { load_model(d); });
    EXPECT_THAT(msg, HasSubstr(d + "/config.json"));
    EXPECT_THAT(msg, HasSubstr(c.expected));
  }
}

TEST_F(LoadingFixture, ConfigThatIsNotJson) {
  std::string d = write(config.to_json(), weights);
  io::write_file_atomic(d + "/config.json", "{\"hidden_size\": 32,");
  EXPECT_THAT(error_of([&] { load_model(d); }), HasSubstr("config.json: not valid JSON"));
}

// generation_config.json's eos_token_id replaces config.json's as the tokens that end generation
// (transformers' generate() reads that file): a row stops on a token only that file names.
TEST_F(LoadingFixture, GenerationConfigsEosTokensEndGeneration) {
  c10::InferenceMode guard;
  const std::string d = write(config.to_json(), weights);
  DecoderModel plain = load_model(d);
  ASSERT_EQ(plain->config().eos_token_ids, (std::vector<int64_t>{2}));
  SamplingOptions o;
  o.max_new_tokens = 8;
  o.stop_token_ids = plain->config().eos_token_ids;
  const std::vector<int32_t> prompt = {1, 5, 9, 4};
  const std::vector<int32_t> free_run = generate(*plain, {prompt}, o)[0].tokens;
  // The first generated token after the first that is new (not earlier in the run, not config's eos).
  size_t k = 1;
  std::set<int32_t> seen{free_run.empty() ? 0 : free_run[0]};
  while (k < free_run.size() && (seen.count(free_run[k]) || free_run[k] == 2)) seen.insert(free_run[k++]);
  ASSERT_LT(k, free_run.size()) << "the random model repeats one token; no later token to stop on";
  const int32_t stop = free_run[k];

  io::write_file_atomic(d + "/generation_config.json", json{{"eos_token_id", {2, stop}}, {"max_length", 20}}.dump());
  DecoderModel with = load_model(d);
  EXPECT_EQ(with->config().eos_token_ids, (std::vector<int64_t>{2, stop}));
  o.stop_token_ids = with->config().eos_token_ids;
  const Generation g = generate(*with, {prompt}, o)[0];
  EXPECT_TRUE(g.stopped);
  EXPECT_EQ(g.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + static_cast<std::ptrdiff_t>(k)));

  // No eos_token_id (or null) in the file: config.json's.
  io::write_file_atomic(d + "/generation_config.json", R"({"eos_token_id": null, "do_sample": false})");
  EXPECT_EQ(load_model(d)->config().eos_token_ids, (std::vector<int64_t>{2}));
  io::write_file_atomic(d + "/generation_config.json", R"({"bos_token_id": 1})");
  EXPECT_EQ(load_model(d)->config().eos_token_ids, (std::vector<int64_t>{2}));
}

TEST_F(LoadingFixture, ABadGenerationConfigIsOneLineNamingIt) {
  const std::string d = write(config.to_json(), weights);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"eos_token_id\": [2,", "not a JSON object"},
      {"[2, 3]", "not a JSON object"},
      {"{\"eos_token_id\": \"</s>\"}", "eos_token_id must be a token id or a list of token ids"},
      {"{\"eos_token_id\": [2, -1]}", "eos_token_id must be a token id or a list of token ids, not -1"},
      {"{\"eos_token_id\": []}", "eos_token_id is an empty list"},
  };
  for (const auto& [text, expected] : cases) {
    SCOPED_TRACE(text);
    io::write_file_atomic(d + "/generation_config.json", text);
    const std::string msg = error_of([&] { load_model(d); });
    EXPECT_THAT(msg, HasSubstr(d + "/generation_config.json"));
    EXPECT_THAT(msg, HasSubstr(expected));
  }
}

// The fingerprint counts generation_config.json's eos only where it differs from config.json's, so
// checkpoints whose two files agree keep the fingerprint they had.
TEST_F(LoadingFixture, TheFingerprintCountsAGenerationEosThatDiffers) {
  const std::string d = write(config.to_json(), weights);
  const std::string bare = model_fingerprint(d);
  io::write_file_atomic(d + "/generation_config.json", R"({"eos_token_id": 2, "max_length": 64})");
  EXPECT_EQ(model_fingerprint(d), bare);
  io::write_file_atomic(d + "/generation_config.json", R"({"eos_token_id": [2]})");
  EXPECT_EQ(model_fingerprint(d), bare);
  io::write_file_atomic(d + "/generation_config.json", R"({"eos_token_id": [2, 7]})");
  const std::string other = model_fingerprint(d);
  EXPECT_NE(other, bare);
  io::write_file_atomic(d + "/generation_config.json", R"({"eos_token_id": [7, 2]})");
  EXPECT_NE(model_fingerprint(d), other) << "the order is the file's";
}

TEST(Llama2cConvert, PermutationMapsInterleavedPairsToHalves) {
  // One head of size 4: rows (0,1) and (2,3) are pairs in llama2.c; HF wants (0,2) and (1,3).
  at::Tensor w = at::arange(8, at::kFloat).view({4, 2});
  at::Tensor p = permute_interleaved_to_halves(w, 1);
  EXPECT_TRUE(p.equal(at::tensor({0.f, 1.f, 4.f, 5.f, 2.f, 3.f, 6.f, 7.f}).view({4, 2})));
}

TEST(Llama2cConvert, TruncatedAndMalformedCheckpointsAreRefused) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  std::string bytes = io::read_file(testing::shared_dir() + "/data/stories260K/stories260K.bin");
  io::write_file_atomic(dir.file("short.bin"), bytes.substr(0, bytes.size() - 100));
  std::string msg = error_of([&] { read_llama2c_checkpoint(dir.file("short.bin")); });
  EXPECT_THAT(msg, HasSubstr("short.bin"));
  EXPECT_THAT(msg, HasSubstr("does not match its header"));
  io::write_file_atomic(dir.file("tiny.bin"), "abc");
  EXPECT_THAT(error_of([&] { read_llama2c_checkpoint(dir.file("tiny.bin")); }), HasSubstr("too short"));
  std::string garbage = bytes;
  int32_t bad = -7;
  std::memcpy(garbage.data(), &bad, 4);  // dim
  io::write_file_atomic(dir.file("garbage.bin"), garbage);
  EXPECT_THAT(error_of([&] { read_llama2c_checkpoint(dir.file("garbage.bin")); }), HasSubstr("implausible"));
}

TEST(Llama2cConvert, ShippedDefaultModelIsThisConverterOutput) {
  GPUEVAL_REQUIRE_SHARED();
  const std::string shipped = testing::source_dir() + "/models/stories260K";
  const std::string fresh = testing::converted_stories260k();
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(io::read_file(shipped + "/" + f), io::read_file(fresh + "/" + f)) << f;
  }
}

}  // namespace
}  // namespace gpueval
