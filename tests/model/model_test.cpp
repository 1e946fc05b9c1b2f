// DecoderModel against the independent reference forward in tiny_model.cpp, and
// the invariances scoring relies on: padding, batching and the KV cache must
// not change a sequence's numbers. Every model test runs on each device the
// build has (DeviceTest): on CPU always, on CUDA where there is a GPU.
#include <c10/core/InferenceMode.h>

#include <cstdlib>

#include "gpueval/error.h"
#include "gpueval/model.h"
#include "model/kernels/cpu_matmul.h"
#include "model/decoder/generate.h"
#include "model/decoder/scorer.h"
#include "test_util.h"
#include "tiny_model.h"

namespace gpueval {
namespace {

using testing::TinyModelSpec;

using testing::DeviceTest;

at::Tensor model_logits(const DecoderModelImpl& model, const std::vector<int64_t>& ids) {
  c10::InferenceMode guard;
  const int64_t t = static_cast<int64_t>(ids.size());
  const at::Device dev = model.options().device;
  at::Tensor hidden = model.forward(at::tensor(ids, at::kLong).view({1, t}).to(dev),
                                    at::arange(t, at::kLong).view({1, t}).to(dev), at::ones({1, t}, at::kBool).to(dev));
  return model.logits(hidden)[0].to(at::kCPU, at::kDouble);  // [T, V]
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor t = at::randint(0, vocab, {n}, at::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

class TinyModel : public DeviceTest {
 protected:
  LoadOptions options(at::ScalarType dtype = at::kFloat) const { return LoadOptions{device(), dtype}; }
};

TEST_P(TinyModel, Fp32MatchesIndependentReference) {
  const std::vector<TinyModelSpec> variants = {
      TinyModelSpec{/*tied=*/false, /*qkv_bias=*/true, /*llama3_rope=*/true},
      TinyModelSpec{/*tied=*/true, /*qkv_bias=*/false, /*llama3_rope=*/false},
      TinyModelSpec{/*tied=*/false, /*qkv_bias=*/false, /*llama3_rope=*/true, 96, 32, 48, 2, /*heads=*/4,
                    /*kv_heads=*/4},
      TinyModelSpec{/*tied=*/true, /*qkv_bias=*/true, /*llama3_rope=*/false, 96, 32, 48, 1, /*heads=*/4,
                    /*kv_heads=*/1}};
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    const TinyModelSpec& spec = variants[v];
    ModelConfig config = testing::tiny_config(spec);
    auto weights = testing::tiny_weights(config, spec.seed);
    testing::TempDir dir;
    testing::write_tiny_model(dir.path(), config, weights);
    DecoderModel model = load_model(dir.path(), options());
    // Long enough to reach every llama3 frequency band's behaviour.
    std::vector<int64_t> ids = random_ids(40, config.vocab_size, 7);
    at::Tensor ref = testing::reference_logits(config, weights, ids);
    at::Tensor got = model_logits(*model, ids);
    EXPECT_LE((got - ref).abs().max().item<double>(), 1e-4) << "max |logit| " << ref.abs().max().item<double>();
  }
}

TEST_P(TinyModel, LlamaThreeScalingChangesTheOutput) {
  // Guards against the scaling being silently ignored: the same weights with
  // and without rope_scaling must disagree.
  TinyModelSpec spec;
  ModelConfig scaled = testing::tiny_config(spec);
  ModelConfig plain = scaled;
  plain.rope_scaling = RopeScaling{};
  auto weights = testing::tiny_weights(scaled, spec.seed);
  std::vector<int64_t> ids = random_ids(40, scaled.vocab_size, 8);
  at::Tensor a = model_logits(*build_model(scaled, weights, options()), ids);
  at::Tensor b = model_logits(*build_model(plain, weights, options()), ids);
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-3);
}

TEST_P(TinyModel, Bf16StaysCloseToReference) {
  TinyModelSpec spec;
  ModelConfig config = testing::tiny_config(spec);
  auto weights = testing::tiny_weights(config, spec.seed);
  testing::TempDir dir;
  std::map<std::string, at::Tensor> bf16;
  for (auto& [name, t] : weights) bf16[name] = t.to(at::kBFloat16);
  testing::write_tiny_model(dir.path(), config, bf16);
  DecoderModel model = load_model(dir.path(), options(at::kBFloat16));
  for (const auto& p : model->named_parameters()) {
    EXPECT_EQ(p.value().scalar_type(), at::kBFloat16) << p.key();
    EXPECT_EQ(p.value().device(), device()) << p.key();
  }
  std::vector<int64_t> ids = random_ids(24, config.vocab_size, 9);
  // The reference runs in float64 on the bf16-rounded weights, so only activation rounding differs.
  std::map<std::string, at::Tensor> rounded;
  for (auto& [name, t] : bf16) rounded[name] = t.to(at::kFloat);
  at::Tensor ref = testing::reference_logits(config, rounded, ids);
  at::Tensor got = model_logits(*model, ids);
  const double scale = ref.abs().max().item<double>();
  EXPECT_LE((got - ref).abs().max().item<double>() / scale, 0.05);
  const double agree = got.argmax(-1).eq(ref.argmax(-1)).to(at::kDouble).mean().item<double>();
  EXPECT_GE(agree, 0.9);
}

TEST_P(TinyModel, ParametersHaveHuggingFaceNames) {
  TinyModelSpec spec;
  ModelConfig config = testing::tiny_config(spec);
  auto weights = testing::tiny_weights(config, spec.seed);
  DecoderModel model = build_model(config, weights, options());
  std::set<std::string> names;
  for (const auto& p : model->named_parameters()) names.insert(p.key());
  std::set<std::string> expected;
  for (const auto& [name, t] : weights) expected.insert(name);
  EXPECT_EQ(names, expected);
  // Spelled out once here, apart from the weight table, so a wrong table cannot agree with itself.
  EXPECT_TRUE(names.count("model.layers.1.self_attn.q_proj.bias"));
  EXPECT_TRUE(names.count("model.layers.0.mlp.down_proj.weight"));
  EXPECT_TRUE(names.count("lm_head.weight"));
}

GPUEVAL_INSTANTIATE_DEVICE_TESTS(TinyModel);

// A CPU float32 model packs its projections and its LM head (model/kernels/cpu_matmul.h's PackedWeight)
// where the machine has room; packed or not, it computes the same function, and the parameters
// (what weight_broadcast sends, what load tests check) stay the checkpoint's own.
TEST(CpuPackedWeights, PackedAndPlainModelsAgree) {
  if (!PackedWeight::pack(at::randn({64, 64}))) GTEST_SKIP() << "no brgemm kernel for float32 here";
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied head" : "own head");
    TinyModelSpec spec;
    spec.tied = tied;
    ModelConfig config = testing::tiny_config(spec);
    auto weights = testing::tiny_weights(config, spec.seed);
    testing::TempDir dir;
    testing::write_tiny_model(dir.path(), config, weights);
    const char* saved = std::getenv("GPUEVAL_CPU_PACKED_WEIGHTS");
    ::setenv("GPUEVAL_CPU_PACKED_WEIGHTS", "0", 1);
    DecoderModel plain = load_model(dir.path(), LoadOptions{at::kCPU, at::kFloat});
    ::unsetenv("GPUEVAL_CPU_PACKED_WEIGHTS");
    DecoderModel packed = load_model(dir.path(), LoadOptions{at::kCPU, at::kFloat});
    if (saved) ::setenv("GPUEVAL_CPU_PACKED_WEIGHTS", saved, 1);
    EXPECT_EQ(plain->packed_weight_bytes(), 0);
    // Seven projections per layer and the head, each at least as large packed as its weight.
    int64_t weight_bytes = config.vocab_size * config.hidden_size;
    for (const auto& p : packed->named_parameters())
      if (p.key().find("_proj.weight") != std::string::npos) weight_bytes += p.value().numel();
    EXPECT_GE(packed->packed_weight_bytes(), weight_bytes * static_cast<int64_t>(sizeof(float)));
    const std::vector<int64_t> ids = random_ids(40, config.vocab_size, 8);
    const at::Tensor a = model_logits(*plain, ids), b = model_logits(*packed, ids);
    EXPECT_LE((a - b).abs().max().item<double>(), 1e-4) << "max |logit| " << a.abs().max().item<double>();
    at::Tensor ref = testing::reference_logits(config, weights, ids);
    EXPECT_LE((b - ref).abs().max().item<double>(), 1e-4);
    for (const auto& p : packed->named_parameters()) EXPECT_TRUE(at::equal(p.value(), weights.at(p.key()))) << p.key();
  }
}

class ModelBatch : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    TinyModelSpec spec;
    config = testing::tiny_config(spec);
    weights = testing::tiny_weights(config, spec.seed);
    model = build_model(config, weights, LoadOptions{device(), at::kFloat});
  }
  ModelConfig config;
  std::map<std::string, at::Tensor> weights;
  DecoderModel model{nullptr};
};

TEST_P(ModelBatch, PaddedBatchEqualsEachSequenceAlone) {
  std::vector<ScoreRequest> requests;
  for (int i = 0; i < 5; ++i) {
    std::vector<int64_t> ids = random_ids(3 + 9 * i, config.vocab_size, 100 + i);
    requests.push_back({std::vector<int32_t>(ids.begin(), ids.end()), 1 + i});
  }
  std::vector<ScoreResult> batched = score_batch(*model, requests);
  ASSERT_EQ(batched.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    ScoreResult alone = score_batch(*model, {requests[i]})[0];
    ASSERT_EQ(alone.logprobs.size(), requests[i].tokens.size() - requests[i].first_target);
    ASSERT_EQ(batched[i].logprobs.size(), alone.logprobs.size());
    for (size_t j = 0; j < alone.logprobs.size(); ++j) {
      EXPECT_NEAR(batched[i].logprobs[j], alone.logprobs[j], 1e-5) << "request " << i << " token " << j;
      EXPECT_EQ(batched[i].is_greedy[j], alone.is_greedy[j]);
    }
  }
}

TEST_P(ModelBatch, StepwiseKvCacheEqualsOneForward) {
  std::vector<int64_t> ids = random_ids(30, config.vocab_size, 11);
  ScoreRequest r{std::vector<int32_t>(ids.begin(), ids.end()), 4};
  ScoreResult batched = score_batch(*model, {r})[0];
  ScoreResult stepwise = score_stepwise(*model, r);
  ASSERT_EQ(stepwise.logprobs.size(), batched.logprobs.size());
  for (size_t j = 0; j < batched.logprobs.size(); ++j) EXPECT_NEAR(stepwise.logprobs[j], batched.logprobs[j], 1e-5);
  // And the batched path agrees with the reference's log-softmax.
  at::Tensor ref = at::log_softmax(testing::reference_logits(config, weights, ids), -1);
  for (size_t j = 0; j < batched.logprobs.size(); ++j)
    EXPECT_NEAR(batched.logprobs[j], ref[3 + j][ids[4 + j]].item<double>(), 1e-4);
}

TEST_P(ModelBatch, LeftPaddedGenerationEqualsEachPromptAlone) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    auto ids = random_ids(2 + 5 * i, config.vocab_size, 200 + i);
    prompts.emplace_back(ids.begin(), ids.end());
  }
  SamplingOptions o;
  o.max_new_tokens = 12;
  o.stop_token_ids = {5};  // some rows stop early, which exercises dropping rows from the cache
  auto together = generate(*model, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = generate(*model, {prompts[i]}, o);
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << "prompt " << i;
    EXPECT_EQ(together[i].stopped, alone[0].stopped);
  }
}

TEST_P(ModelBatch, GreedyGenerationFollowsReferenceArgmax) {
  auto ids = random_ids(6, config.vocab_size, 300);
  SamplingOptions o;
  o.max_new_tokens = 8;
  auto gen = generate(*model, {std::vector<int32_t>(ids.begin(), ids.end())}, o)[0];
  ASSERT_EQ(gen.tokens.size(), 8u);
  std::vector<int64_t> seq = ids;
  for (int32_t tok : gen.tokens) {
    at::Tensor ref = testing::reference_logits(config, weights, seq);
    EXPECT_EQ(ref[-1].argmax().item<int64_t>(), tok);
    seq.push_back(tok);
  }
}

TEST_P(ModelBatch, SamplingDependsOnSeedNotOnBatchMates) {
  auto a = random_ids(5, config.vocab_size, 400), b = random_ids(9, config.vocab_size, 401);
  std::vector<int32_t> pa(a.begin(), a.end()), pb(b.begin(), b.end());
  SamplingOptions o;
  o.max_new_tokens = 10;
  o.temperature = 1.0;
  o.seeds = {42, 43};
  auto together = generate(*model, {pa, pb}, o);
  o.seeds = {42};
  auto alone = generate(*model, {pa}, o);
  EXPECT_EQ(together[0].tokens, alone[0].tokens);
  o.seeds = {7};
  auto other_seed = generate(*model, {pa}, o);
  EXPECT_NE(other_seed[0].tokens, alone[0].tokens);
}

GPUEVAL_INSTANTIATE_DEVICE_TESTS(ModelBatch);

TEST(RollingWindows, PredictEveryTokenOnceWithMaximalContext) {
  std::vector<int32_t> tokens(10);
  for (int i = 0; i < 10; ++i) tokens[i] = 100 + i;
  auto windows = rolling_windows(tokens, 1, 4);
  // lm-evaluation-harness, max_seq_len 4, context_len 1:
  // ([1,100,101,102] -> 100..103), ([101..104] -> 104..107) with 3 context, ([105..108] -> 108,109).
  ASSERT_EQ(windows.size(), 3u);
  EXPECT_EQ(windows[0].tokens, (std::vector<int32_t>{1, 100, 101, 102, 103}));
  EXPECT_EQ(windows[0].first_target, 1);
  EXPECT_EQ(windows[1].tokens, (std::vector<int32_t>{103, 104, 105, 106, 107}));
  EXPECT_EQ(windows[1].first_target, 1);
  EXPECT_EQ(windows[2].tokens, (std::vector<int32_t>{105, 106, 107, 108, 109}));
  EXPECT_EQ(windows[2].first_target, 3);
  size_t predicted = 0;
  for (const auto& w : windows) {
    predicted += w.tokens.size() - w.first_target;
    EXPECT_LE(static_cast<int64_t>(w.tokens.size()) - 1, 4);
  }
  EXPECT_EQ(predicted, tokens.size());
}

}  // namespace
}  // namespace gpueval
