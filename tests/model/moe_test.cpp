// Mixtures of experts and latent attention beyond their logits (architecture_test.cpp checks those
// against transformers): a token's experts and their weights do not depend on the other tokens of its
// batch, bit for bit, nor on the threads; DeepSeek-V3's group-limited choice stays within its top groups and its
// weights add up to routed_scaling_factor; the router's fixed-order product agrees with a BLAS product and keeps its
// bits at any row count; and latent attention's KV cache holds one latent per token, stored once; a model larger than
// its device is refused saying what it needs. Fixtures: tests/fixtures/architectures/<family>
// (scripts/verify_architectures.py).
#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "gpueval/model.h"
#include "model/kernels/cpu_matmul.h"
#include "model/kernels/row_invariant.h"
#include "run/device_memory.h"
#include "logits_fixture.h"
#include "test_util.h"

namespace gpueval {
namespace {

std::string fixture_dir(const std::string& family) {
  return testing::source_dir() + "/tests/fixtures/architectures/" + family;
}

// The mixture of the first sparse layer.
std::shared_ptr<MoeImpl> first_mixture(const DecoderModel& model) {
  for (int64_t layer = 0; layer < model->config().num_hidden_layers; ++layer)
    if (model->config().arch.sparse(layer)) {
      auto m = std::dynamic_pointer_cast<MoeImpl>(model->named_modules()[fmt::format("model.layers.{}.mlp", layer)]);
      EXPECT_NE(m, nullptr) << "layer " << layer;
      return m;
    }
  ADD_FAILURE() << "no sparse layer";
  return nullptr;
}

class MixtureFixture : public ::testing::TestWithParam<std::string> {};

// Each token alone, and inside batches of 3 and 37 tokens, gets the same experts and the same weights,
// bit for bit, and the same output within float32 rounding (an expert's product, like every projection,
// may take another kernel for another number of rows: model/kernels/cpu_matmul.h).
TEST_P(MixtureFixture, ATokensExpertsDoNotDependOnItsBatch) {
  c10::InferenceMode guard;
  DecoderModel model = load_model(fixture_dir(GetParam()));
  std::shared_ptr<MoeImpl> moe = first_mixture(model);
  ASSERT_NE(moe, nullptr);
  at::manual_seed(7);
  const at::Tensor x = at::randn({37, model->config().hidden_size});
  at::Tensor all_weights;
  const at::Tensor all_chosen = moe->choose(x, &all_weights);
  const at::Tensor all_out = moe->forward(x);
  std::set<int64_t> used;
  for (int64_t i = 0; i < x.size(0); ++i) {
    const at::Tensor one = x.narrow(0, i, 1);
    at::Tensor weights;
    const at::Tensor chosen = moe->choose(one, &weights);
    EXPECT_TRUE(chosen.equal(all_chosen.narrow(0, i, 1))) << GetParam() << " token " << i;
    EXPECT_TRUE(weights.equal(all_weights.narrow(0, i, 1))) << GetParam() << " token " << i;
    EXPECT_TRUE(at::allclose(moe->forward(one), all_out.narrow(0, i, 1), 1e-5, 1e-6)) << GetParam() << " token " << i;
    for (int64_t k = 0; k < chosen.size(1); ++k) used.insert(chosen[0][k].item<int64_t>());
  }
  const at::Tensor three = x.narrow(0, 10, 3);
  at::Tensor three_weights;
  EXPECT_TRUE(moe->choose(three, &three_weights).equal(all_chosen.narrow(0, 10, 3))) << GetParam();
  EXPECT_TRUE(three_weights.equal(all_weights.narrow(0, 10, 3))) << GetParam();
  EXPECT_TRUE(at::allclose(moe->forward(three), all_out.narrow(0, 10, 3), 1e-5, 1e-6)) << GetParam();
  // No tokens (a batch whose rows hold none at a layer): an empty output, not an error.
  EXPECT_EQ(moe->forward(x.narrow(0, 0, 0)).sizes(), (std::vector<int64_t>{0, x.size(1)})) << GetParam();
  // The random states reach several experts, so the sums over experts are exercised.
  EXPECT_GE(used.size(), 3u) << GetParam();
}

// On the CPU a worker's threads share the experts (each expert on one thread): the output is the
// same bits on one thread or two, under inference mode or not (the threads take the caller's modes).
TEST_P(MixtureFixture, AMixturesOutputIsTheSameBitsOnOneThreadOrTwo) {
  const int saved = at::get_num_threads();
  DecoderModel model = load_model(fixture_dir(GetParam()));
  std::shared_ptr<MoeImpl> moe = first_mixture(model);
  ASSERT_NE(moe, nullptr);
  at::manual_seed(8);
  const at::Tensor x = at::randn({300, model->config().hidden_size});
  at::set_num_threads(1);
  at::Tensor one;
  {
    c10::InferenceMode guard;
    one = moe->forward(x);
  }
  at::set_num_threads(2);
  {
    c10::InferenceMode guard;
    EXPECT_TRUE(moe->forward(x).equal(one)) << GetParam();
  }
  {
    at::NoGradGuard no_grad;
    EXPECT_TRUE(moe->forward(x).equal(one)) << GetParam() << " (no inference mode)";
  }
  at::set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Families, MixtureFixture,
                         ::testing::Values("mixtral", "qwen3_moe", "olmoe", "deepseek_v3", "deepseek_v3-plain"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// DeepSeek-V3: every token's experts lie in at most topk_group of the n_group groups, and renormalised
// weights sum to routed_scaling_factor (the plain fixture's, unnormalised, do not).
TEST(DeepseekV3Router, ChoosesWithinTheTopGroupsAndScalesTheWeights) {
  c10::InferenceMode guard;
  DecoderModel model = load_model(fixture_dir("deepseek_v3"));
  const MixtureOfExperts& m = model->config().arch.moe;
  ASSERT_EQ(m.score, RouterScore::kSigmoid);
  ASSERT_GT(m.groups, m.top_groups);
  std::shared_ptr<MoeImpl> moe = first_mixture(model);
  ASSERT_NE(moe, nullptr);
  at::manual_seed(11);
  at::Tensor weights;
  const at::Tensor chosen = moe->choose(at::randn({64, model->config().hidden_size}), &weights);
  const int64_t per_group = m.num_experts / m.groups;
  std::set<int64_t> all_groups;
  for (int64_t i = 0; i < chosen.size(0); ++i) {
    std::set<int64_t> groups;
    for (int64_t k = 0; k < m.top_k; ++k) groups.insert(chosen[i][k].item<int64_t>() / per_group);
    EXPECT_LE(static_cast<int64_t>(groups.size()), m.top_groups) << "token " << i;
    all_groups.insert(groups.begin(), groups.end());
  }
  EXPECT_EQ(static_cast<int64_t>(all_groups.size()), m.groups);  // every group is chosen somewhere
  EXPECT_TRUE(at::allclose(weights.sum(-1), at::full({chosen.size(0)}, m.routed_scaling), 1e-6, 1e-6));
  EXPECT_TRUE(weights.gt(0).all().item<bool>());
}

// The router's product: within float32 rounding of at::matmul; each row's bits the same computed alone,
// in a batch of any size, and with one thread or two.
TEST(RowInvariantProduct, AgreesWithMatmulAndKeepsItsBitsAtAnyRowCount) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({70, 203}), w = at::randn({9, 203});
  ASSERT_TRUE(row_invariant_product_applies(x, w));
  const at::Tensor all = row_invariant_product(x, w);
  EXPECT_TRUE(at::allclose(all, at::matmul(x, w.t()), 1e-5, 1e-4));
  for (int64_t rows : {1, 2, 17}) {
    const at::Tensor part = row_invariant_product(x.narrow(0, 5, rows), w);
    EXPECT_TRUE(part.equal(all.narrow(0, 5, rows))) << rows << " rows";
  }
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor single = row_invariant_product(x, w);
  at::set_num_threads(threads);
  EXPECT_TRUE(single.equal(all));
  // A strided (transposed) input reads the same values.
  EXPECT_TRUE(row_invariant_product(x.t().contiguous().t(), w).equal(all));
  EXPECT_FALSE(row_invariant_product_applies(x.to(at::kDouble), w));
  EXPECT_FALSE(row_invariant_product_applies(x, at::randn({9, 202})));
}

// Latent attention caches one head of kv_lora_rank + qk_rope_head_dim per token, its values the keys'
// own storage; a prefix's bytes count it once.
TEST(LatentAttention, TheCacheHoldsTheLatentOnce) {
  c10::InferenceMode guard;
  DecoderModel model = load_model(fixture_dir("deepseek_v3"));
  const ModelConfig& c = model->config();
  ASSERT_TRUE(c.latent_attention());
  EXPECT_EQ(c.cache_heads(), 1);
  EXPECT_EQ(c.cache_head_dim(), c.arch.mla.kv_lora_rank + c.arch.mla.qk_rope_head_dim);
  KVCache cache = model->make_cache(2, 8);
  const at::Tensor tokens = at::tensor({1, 5, 9, 2, 7, 3}, at::kLong).view({2, 3});
  const at::Tensor positions = at::arange(3, at::kLong).repeat({2, 1});
  model->forward(tokens, positions, at::ones({2, 3}, at::kBool), &cache);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const at::Tensor k = cache.keys(layer), v = cache.values(layer);
    EXPECT_EQ(k.sizes(), (std::vector<int64_t>{2, 1, 3, c.cache_head_dim()}));
    EXPECT_TRUE(v.is_alias_of(k)) << "layer " << layer;
  }
  const PrefixKV prefix = model->prefill({1, 5, 9, 2});
  int64_t key_bytes = 0;
  for (const at::Tensor& k : prefix.keys) key_bytes += static_cast<int64_t>(k.storage().nbytes());
  EXPECT_EQ(prefix.bytes(), key_bytes);
  EXPECT_EQ(key_bytes, c.num_hidden_layers * 4 * c.cache_head_dim() * static_cast<int64_t>(sizeof(float)));
}

// Memory honest: a replica's weights count every expert, and a model whose weights exceed the device is
// refused in one line saying what it needs, before any worker starts.
TEST(MemoryCheck, AModelLargerThanTheDeviceIsRefusedSayingWhatItNeeds) {
  const ModelConfig small = ModelConfig::load(fixture_dir("deepseek_v3") + "/config.json");
  EXPECT_EQ(weight_bytes(small, at::kFloat), small.num_parameters() * 4);
  EXPECT_EQ(weight_bytes(small, at::kBFloat16), small.num_parameters() * 2);
  EXPECT_NO_THROW(check_weights_fit(small, at::kFloat, at::kCPU, 2, "tiny"));
  // DeepSeek-V3's own shape (671B parameters, 256 experts in 58 of 61 layers).
  nlohmann::json j = testing::read_json(fixture_dir("deepseek_v3") + "/config.json");
  const nlohmann::json v3_shape = {{"vocab_size", 129280},
                                   {"hidden_size", 7168},
                                   {"intermediate_size", 18432},
                                   {"moe_intermediate_size", 2048},
                                   {"num_hidden_layers", 61},
                                   {"num_attention_heads", 128},
                                   {"num_key_value_heads", 128},
                                   {"n_routed_experts", 256},
                                   {"num_experts_per_tok", 8},
                                   {"n_group", 8},
                                   {"topk_group", 4},
                                   {"first_k_dense_replace", 3},
                                   {"q_lora_rank", 1536},
                                   {"kv_lora_rank", 512},
                                   {"qk_rope_head_dim", 64},
                                   {"qk_nope_head_dim", 128},
                                   {"v_head_dim", 128}};
  for (const auto& [key, value] : v3_shape.items()) j[key] = value;
  const ModelConfig big = ModelConfig::from_json(j, "v3/config.json");
  // transformers' count for this config (its parameters and correction biases, without the
  // multi-token-prediction layer), built on the meta device.
  EXPECT_EQ(big.num_parameters(), int64_t{671026419200});
  // 1024 CPU workers converting their own bfloat16 copy (the fixture's torch_dtype is float32): 1.25 PiB,
  // past any machine's memory.
  const std::string e = testing::error_of([&] { check_weights_fit(big, at::kBFloat16, at::kCPU, 1024, "/ckpt/v3"); });
  EXPECT_THAT(e, ::testing::HasSubstr("/ckpt/v3: the model does not fit cpu: its weights need 1279881.3 GiB (671.03B "
                                      "parameters, all 256 experts of each sparse layer in bfloat16) x 1024 workers"));
  EXPECT_THAT(e, ::testing::Not(::testing::HasSubstr("\n")));
  // One worker: 1249.9 GiB, refused wherever the machine has less.
  if (weight_bytes(big, at::kBFloat16) > device_total_bytes(at::kCPU))
    EXPECT_THAT(testing::error_of([&] { check_weights_fit(big, at::kBFloat16, at::kCPU, 1, "/ckpt/v3"); }),
                ::testing::HasSubstr("its weights need 1249.9 GiB"));
}

}  // namespace
}  // namespace gpueval
