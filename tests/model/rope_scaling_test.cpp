// Every rope_scaling type against transformers, and partial rotary against phi3's and gpt_neox's own
// functions. tests/fixtures/rope/<case>/ holds a tiny random Llama checkpoint whose config sets one
// rope_scaling type, and transformers' float32 logits on two sequences, one below and one above the
// length where dynamic and longrope change frequencies (16), each scored alone in a fresh model;
// tests/fixtures/rope/partial_rotary.json holds transformers' inv_freq and attention factor per case
// and its phi3 / gpt_neox rotary outputs (scripts/verify_rope.py --write-fixtures writes them all).
#include <c10/core/InferenceMode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "gpueval/model.h"
#include "model/kernels/cuda_kernels.h"
#include "model/decoder/rope.h"
#include "logits_fixture.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kTolerance = 1e-4;
const char* const kCases[] = {"linear", "dynamic", "llama3", "yarn", "yarn-mscale", "longrope", "longrope-attention"};

std::string fixture_dir(const std::string& name) { return testing::source_dir() + "/tests/fixtures/rope/" + name; }

using testing::ids_row;
using testing::LogitsSequence;
using testing::read_json;
using testing::relative_error;
using Sequence = LogitsSequence;

at::Tensor floats(const nlohmann::json& j) { return at::tensor(j.get<std::vector<float>>(), at::kFloat); }

std::vector<Sequence> expected(const std::string& name) { return testing::expected_logits(fixture_dir(name)); }

class RopeScalingFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(RopeScalingFixture, LogitsMatchTransformersBelowAndAboveTheThreshold) {
  DecoderModel model = load_model(fixture_dir(GetParam()));
  c10::InferenceMode guard;
  const std::vector<Sequence> sequences = expected(GetParam());
  ASSERT_EQ(sequences.size(), 2u);
  // The fixtures straddle 16, the threshold of the length-dependent types.
  EXPECT_LE(sequences[0].ids.size(), 16u);
  EXPECT_GT(sequences[1].ids.size(), 16u);
  const std::optional<int64_t> threshold = model->config().rope_length_threshold();
  if (GetParam() == "dynamic" || GetParam().rfind("longrope", 0) == 0)
    EXPECT_EQ(threshold.value_or(0), 16) << GetParam();
  else
    EXPECT_FALSE(threshold.has_value()) << GetParam();
  for (const Sequence& s : sequences) {
    const at::Tensor logits = testing::full_logits(model, s.ids);
    EXPECT_LE(relative_error(logits, s.logits), kTolerance) << GetParam() << ", " << s.ids.size() << " tokens";
    EXPECT_TRUE(logits.argmax(-1).equal(s.logits.argmax(-1))) << GetParam();
  }
}

// Below the threshold (every length for the static types) a shared prefix and a KV cache filled step
// by step give the same logits; above it only a row of its own does (the planner's rule), which the
// two sequences in one padded batch check: each row chooses its own frequencies.
TEST_P(RopeScalingFixture, PrefixCacheAndBatchRowsAgree) {
  DecoderModel model = load_model(fixture_dir(GetParam()));
  c10::InferenceMode guard;
  const std::vector<Sequence> sequences = expected(GetParam());
  const std::optional<int64_t> threshold = model->config().rope_length_threshold();
  for (const Sequence& s : sequences) {
    const int64_t t = static_cast<int64_t>(s.ids.size()), p = 3;
    if (threshold && t > *threshold) continue;
    const testing::PrefixCacheErrors e = testing::prefix_and_cache_errors(model, s, p);
    EXPECT_LE(e.packed, kTolerance) << GetParam() << " packed";
    EXPECT_LE(e.cached, kTolerance) << GetParam() << " cached";
  }
  // Both sequences in one batch, the short one right-padded.
  const int64_t longest = static_cast<int64_t>(sequences[1].ids.size());
  const int64_t shorter = static_cast<int64_t>(sequences[0].ids.size());
  at::Tensor tokens = at::zeros({2, longest}, at::kLong), valid = at::zeros({2, longest}, at::kBool);
  at::Tensor positions = at::zeros({2, longest}, at::kLong);
  tokens[0].narrow(0, 0, shorter).copy_(ids_row(sequences[0].ids, 0, shorter)[0]);
  tokens[1].copy_(ids_row(sequences[1].ids, 0, longest)[0]);
  valid[0].narrow(0, 0, shorter).fill_(true);
  valid[1].fill_(true);
  positions[0].narrow(0, 0, shorter).copy_(at::arange(shorter, at::kLong));
  positions[1].copy_(at::arange(longest, at::kLong));
  const at::Tensor logits = model->logits(model->forward(tokens, positions, valid));
  EXPECT_LE(relative_error(logits[0].narrow(0, 0, shorter), sequences[0].logits), kTolerance) << GetParam();
  EXPECT_LE(relative_error(logits[1], sequences[1].logits), kTolerance) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Types, RopeScalingFixture,
                         ::testing::ValuesIn(std::vector<std::string>(std::begin(kCases), std::end(kCases))),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// transformers' inv_freq and attention factor of each fixture's config, below and above the threshold.
TEST(RopeScalingTables, InverseFrequenciesAndAttentionFactorsAreTransformers) {
  const nlohmann::json table = read_json(fixture_dir("partial_rotary.json"))["inv_freq"];
  for (const char* name : kCases) {
    const RotaryEmbedding rope = RotaryEmbedding::from_config(ModelConfig::load(fixture_dir(name) + "/config.json"));
    for (const char* which : {"short", "long"}) {
      const nlohmann::json& e = table.at(name).at(which);
      const at::Tensor want = floats(e.at("inv_freq"));
      const at::Tensor got = rope.inv_freq(e.at("length").get<int64_t>());
      ASSERT_EQ(got.sizes(), want.sizes()) << name;
      EXPECT_TRUE(at::allclose(got, want, /*rtol=*/1e-6, /*atol=*/0)) << name << " " << which << "\n" << got << want;
      EXPECT_NEAR(rope.attention_factor(), e.at("attention_factor").get<double>(), 1e-12) << name;
    }
  }
  // Values worth seeing: yarn's 0.1 ln 4 + 1, longrope's sqrt(1 + ln 4 / ln 16).
  EXPECT_NEAR(RotaryEmbedding::from_config(ModelConfig::load(fixture_dir("yarn") + "/config.json")).attention_factor(),
              0.1 * std::log(4.0) + 1, 1e-12);
  EXPECT_NEAR(
      RotaryEmbedding::from_config(ModelConfig::load(fixture_dir("longrope") + "/config.json")).attention_factor(),
      std::sqrt(1 + std::log(4.0) / std::log(16.0)), 1e-12);
}

// phi3 (partial_rotary_factor 0.5) and gpt_neox (rotary_pct 0.25): transformers' rotary embedding and
// apply_rotary_pos_emb on fixed q, k, against our tables and rotary_embedding (the CPU loop on the
// first rotary_dim dimensions) and the reference apply_rope.
TEST(PartialRotary, MatchesPhi3AndGptNeox) {
  const nlohmann::json cases = read_json(fixture_dir("partial_rotary.json"));
  for (const auto& c : cases.at("partial_rotary")) {
    const std::string family = c.at("family");
    const auto shape = c.at("shape").get<std::vector<int64_t>>();
    const int64_t head_dim = c.at("head_dim"), rotary_dim = c.at("rotary_dim");
    nlohmann::json config = {{"model_type", "llama"},        {"vocab_size", 8},        {"hidden_size", 64},
                             {"intermediate_size", 8},       {"num_hidden_layers", 1}, {"num_attention_heads", 4},
                             {"max_position_embeddings", 64}};
    if (family == "gpt_neox")
      config["rotary_pct"] = 0.25;
    else
      config["partial_rotary_factor"] = 0.5;
    const ModelConfig mc = ModelConfig::from_json(config, family);
    ASSERT_EQ(mc.rotary_dim(), rotary_dim) << family;
    const RotaryEmbedding rope = RotaryEmbedding::from_config(mc);
    const auto pos = c.at("positions").get<std::vector<int64_t>>();
    const RopeTables tables = rope.tables(at::tensor(pos, at::kLong).view({1, -1}), at::kFloat);
    ASSERT_EQ(tables.cos.size(-1), rotary_dim);
    for (const char* name : {"q", "k"}) {
      const at::Tensor x = floats(c.at(name)).view(shape);
      const at::Tensor want = floats(c.at(std::string(name) + "_out")).view(shape);
      const at::Tensor fast = rotary_embedding(x, tables), reference = apply_rope(x, tables);
      EXPECT_TRUE(at::equal(fast, reference)) << family;
      EXPECT_TRUE(at::allclose(fast, want, 1e-5, 1e-6)) << family << " " << name;
      // Past rotary_dim each head is x itself.
      EXPECT_TRUE(at::equal(fast.narrow(-1, rotary_dim, head_dim - rotary_dim),
                            x.narrow(-1, rotary_dim, head_dim - rotary_dim)))
          << family;
    }
  }
}

nlohmann::json base_config() {
  return {{"model_type", "llama"},        {"vocab_size", 8},        {"hidden_size", 32},
          {"intermediate_size", 8},       {"num_hidden_layers", 1}, {"num_attention_heads", 2},
          {"max_position_embeddings", 64}};  // head_dim 16: rotary_dim / 2 = 8
}

std::string config_error(const nlohmann::json& rope_scaling, const char* top_key = nullptr,
                         const nlohmann::json& top_value = nullptr) {
  nlohmann::json j = base_config();
  j["rope_scaling"] = rope_scaling;
  if (top_key) j[top_key] = top_value;
  const std::string e = testing::error_of([&] { ModelConfig::from_json(j, "bad/config.json"); });
  EXPECT_THAT(e, Not(HasSubstr("\n")));
  EXPECT_THAT(e, HasSubstr("bad/config.json"));
  return e;
}

TEST(RopeScalingConfig, BadConfigsAreRefusedInOneLineNamingTheKey) {
  using J = nlohmann::json;
  EXPECT_THAT(config_error(J{{"rope_type", "linear"}}), HasSubstr("'linear' needs key 'factor'"));
  EXPECT_THAT(config_error(J{{"rope_type", "dynamic"}}), HasSubstr("'dynamic' needs key 'factor'"));
  EXPECT_THAT(config_error(J{{"rope_type", "yarn"}}), HasSubstr("'yarn' needs key 'factor'"));
  EXPECT_THAT(config_error(J{{"rope_type", "linear"}, {"factor", -2}}), HasSubstr("'factor' must be a positive"));
  EXPECT_THAT(config_error(J{{"rope_type", "llama3"}, {"factor", 8}, {"high_freq_factor", 4}}),
              HasSubstr("needs key 'low_freq_factor'"));
  EXPECT_THAT(config_error(J{{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 1}}),
              HasSubstr("high_freq_factor (1) must exceed low_freq_factor (4)"));
  EXPECT_THAT(config_error(J{{"rope_type", "proportional"}, {"factor", 2}}),
              HasSubstr("unsupported rope_scaling type 'proportional'"));
  EXPECT_THAT(config_error(J{{"rope_type", "su"}}), HasSubstr("unsupported rope_scaling type 'su'"));
  const J eight = J(std::vector<double>(8, 1.0)), seven = J(std::vector<double>(7, 1.0));
  EXPECT_THAT(config_error(J{{"rope_type", "longrope"}, {"short_factor", eight}, {"long_factor", seven}}),
              HasSubstr("key 'long_factor' must be a list of rotary_dim / 2 = 8 numbers"));
  EXPECT_THAT(config_error(J{{"rope_type", "longrope"}, {"long_factor", eight}}),
              HasSubstr("needs key 'short_factor'"));
  J zero = eight;
  zero[3] = 0;
  EXPECT_THAT(config_error(J{{"rope_type", "longrope"}, {"short_factor", zero}, {"long_factor", eight}}),
              HasSubstr("'short_factor' holds 0"));
  // With partial rotary the lists are rotary_dim / 2 long.
  EXPECT_THAT(config_error(J{{"rope_type", "longrope"}, {"short_factor", eight}, {"long_factor", eight}},
                           "partial_rotary_factor", 0.5),
              HasSubstr("rotary_dim / 2 = 4 numbers"));
  EXPECT_THAT(config_error(J{{"rope_type", "yarn"}, {"factor", 2}, {"beta_fast", 1}, {"beta_slow", 4}}),
              HasSubstr("beta_fast (1) and beta_slow (4)"));
  EXPECT_THAT(config_error(J{{"rope_type", "yarn"}, {"factor", 2}, {"attention_factor", 0}}),
              HasSubstr("'attention_factor' must be a positive"));
  EXPECT_THAT(config_error(nullptr, "partial_rotary_factor", 0.3125),
              HasSubstr("key 'partial_rotary_factor' (0.3125) gives a rotary dimension of int(16 * 0.3125) = 5"));
  EXPECT_THAT(config_error(nullptr, "rotary_pct", 0), HasSubstr("key 'rotary_pct' must be in (0, 1]"));
}

TEST(RopeScalingConfig, DefaultsAreTransformersAndToJsonReadsBack) {
  nlohmann::json j = base_config();
  // transformers 5 layout: rope_parameters with partial_rotary_factor inside; original context absent
  // from it but at the top level (Phi-3's layout), which wins.
  j["rope_parameters"] = {{"rope_type", "longrope"},
                          {"rope_theta", 5000.0},
                          {"partial_rotary_factor", 0.5},
                          {"short_factor", std::vector<double>(4, 1.0)},
                          {"long_factor", std::vector<double>(4, 2.0)}};
  j["original_max_position_embeddings"] = 16;
  const ModelConfig c = ModelConfig::from_json(j, "phi/config.json");
  EXPECT_EQ(c.rope_theta, 5000.0);
  EXPECT_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.rotary_dim(), 8);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);  // absent: max_position_embeddings / original
  EXPECT_EQ(c.rope_length_threshold().value_or(0), 16);
  const ModelConfig back = ModelConfig::from_json(c.to_json(), "round trip");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.rope_scaling.long_factor, c.rope_scaling.long_factor);
  EXPECT_EQ(back.rotary_dim(), 8);

  nlohmann::json y = base_config();
  y["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  const ModelConfig yarn = ModelConfig::from_json(y, "yarn/config.json");
  EXPECT_EQ(yarn.rope_scaling.original_max_position_embeddings, 64);  // absent: max_position_embeddings
  EXPECT_EQ(yarn.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(yarn.rope_scaling.beta_slow, 1.0);
  EXPECT_TRUE(yarn.rope_scaling.truncate);
  EXPECT_FALSE(yarn.rope_scaling.attention_factor.has_value());
  EXPECT_FALSE(yarn.rope_length_threshold().has_value());
  EXPECT_EQ(ModelConfig::from_json(yarn.to_json(), "rt").to_json(), yarn.to_json());

  nlohmann::json d = base_config();
  d["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2}};
  EXPECT_EQ(ModelConfig::from_json(d, "d").rope_length_threshold().value_or(0), 64);
  nlohmann::json n = base_config();
  n["rotary_pct"] = 0.25;
  EXPECT_EQ(ModelConfig::from_json(n, "neox").rotary_dim(), 4);
}

// The kernel dispatch never hands the kernel (or the CPU loop) tables narrower than its x: partial
// rotary runs them on a view of the first rotary_dim dimensions, the same values as the reference,
// on every device this build has and in every dtype.
TEST(PartialRotary, DispatchEqualsReferenceOnEveryDevice) {
  std::vector<at::Device> devices = {at::kCPU};
  if (at::hasCUDA()) devices.emplace_back(at::kCUDA);
  const RotaryEmbedding rope(16, 6, 10000.0, RopeScaling{}, 64);
  for (const at::Device device : devices)
    for (const at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
      const at::Tensor positions = at::arange(12, at::kLong).view({2, 6}).to(device);
      const RopeTables tables = RotaryEmbedding(16, 6, 10000.0, RopeScaling{}, 64, device).tables(positions, dtype);
      const at::Tensor x = at::randn({2, 3, 6, 16}, at::TensorOptions().dtype(dtype).device(device));
      const at::Tensor got = rotary_embedding(x, tables);
      EXPECT_TRUE(at::equal(got, apply_rope(x, tables))) << device << " " << dtype;
      EXPECT_TRUE(at::equal(got.narrow(-1, 6, 10), x.narrow(-1, 6, 10))) << device << " " << dtype;
      EXPECT_FALSE(at::equal(got.narrow(-1, 0, 6), x.narrow(-1, 0, 6))) << device << " " << dtype;
    }
  EXPECT_EQ(rope.rotary_dim(), 6);
  EXPECT_THAT(testing::error_of([] { RotaryEmbedding(16, 7, 10000.0, RopeScaling{}, 64); }),
              HasSubstr("rotary_dim 7 must be even"));
}

}  // namespace
}  // namespace gpueval
