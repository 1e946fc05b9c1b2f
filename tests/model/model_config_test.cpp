// config.json as both transformers generations write it: rope_theta/rope_scaling/torch_dtype
// (<= 4.x) and rope_parameters/dtype (>= 5), so a checkpoint saved by either loads alike.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpueval/model_config.h"
#include "test_util.h"

namespace gpueval {
namespace {

nlohmann::json base() {
  return {{"model_type", "llama"},    {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 1},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 100},        {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5}};
}

TEST(ModelConfigKeys, TransformersFiveRopeParametersAndDtypeReadAsTheOlderKeys) {
  nlohmann::json v5 = base();
  v5["rope_parameters"] = {{"rope_type", "llama3"},
                           {"factor", 32.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192},
                           {"rope_theta", 500000.0}};
  v5["dtype"] = "bfloat16";
  v5["rope_theta"] = nullptr;  // transformers 5 leaves the old keys null
  v5["rope_scaling"] = nullptr;
  nlohmann::json v4 = base();
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"rope_type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  v4["torch_dtype"] = "bfloat16";
  const ModelConfig a = ModelConfig::from_json(v5, "v5/config.json");
  const ModelConfig b = ModelConfig::from_json(v4, "v4/config.json");
  EXPECT_EQ(a.rope_theta, 500000.0);
  EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(a.rope_scaling.factor, 32.0);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(a.torch_dtype, "bfloat16");
  EXPECT_EQ(a.to_json(), b.to_json());
}

TEST(ModelConfigKeys, DefaultRopeParametersMeanNoScalingAndOlderKeysWin) {
  nlohmann::json j = base();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const ModelConfig c = ModelConfig::from_json(j, "c/config.json");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  j["rope_theta"] = 20000.0;  // both present: the explicit older key wins
  EXPECT_EQ(ModelConfig::from_json(j, "c/config.json").rope_theta, 20000.0);
  j["rope_parameters"] = "llama3";
  EXPECT_THAT(testing::error_of([&] { ModelConfig::from_json(j, "c/config.json"); }),
              ::testing::HasSubstr("c/config.json: key 'rope_parameters' must be an object or null"));
}

// Values that size allocations have bounds, each named with the key when passed (issue 16: an
// absurd max_position_embeddings of 2^40 used to be accepted without a word).
TEST(ModelConfigKeys, ValuesPastTheirBoundsAreRefusedNamingKeyAndBound) {
  const std::vector<std::pair<const char*, int64_t>> bounds = {{"max_position_embeddings", int64_t{1} << 24},
                                                               {"vocab_size", int64_t{1} << 24},
                                                               {"hidden_size", int64_t{1} << 17},
                                                               {"intermediate_size", int64_t{1} << 20},
                                                               {"num_hidden_layers", 1024}};
  for (const auto& [key, bound] : bounds) {
    nlohmann::json j = base();
    j[key] = bound;
    if (std::string(key) == "hidden_size") j["head_dim"] = 16;
    EXPECT_NO_THROW(ModelConfig::from_json(j, "m/config.json")) << key << " at its bound";
    j[key] = bound + 1;
    EXPECT_EQ(
        testing::error_of([&] { ModelConfig::from_json(j, "m/config.json"); }),
        fmt::format("m/config.json: key '{}' is {}, past the bound of {} that gpueval accepts", key, bound + 1, bound));
  }
  nlohmann::json j = base();
  j["max_position_embeddings"] = int64_t{1} << 40;
  EXPECT_EQ(testing::error_of([&] { ModelConfig::from_json(j, "m/config.json"); }),
            "m/config.json: key 'max_position_embeddings' is 1099511627776, past the bound of 16777216 that gpueval "
            "accepts");
  j["max_position_embeddings"] = uint64_t{18446744073709551615u};
  EXPECT_THAT(testing::error_of([&] { ModelConfig::from_json(j, "m/config.json"); }),
              ::testing::HasSubstr("is 18446744073709551615, past the bound"));
}

// A rope type that is not a string threw nlohmann's type_error, naming no file (seen in review).
TEST(ModelConfigKeys, RopeTypeThatIsNotAStringIsOneError) {
  nlohmann::json j = base();
  j["rope_parameters"] = {{"rope_type", 7}, {"factor", 2.0}};
  EXPECT_THAT(testing::error_of([&] { ModelConfig::from_json(j, "m/config.json"); }),
              ::testing::HasSubstr("m/config.json: rope_scaling needs a string 'rope_type'"));
}

}  // namespace
}  // namespace gpueval
