// generate()'s RowCheck: a caller-ended row stops there, keeps the token that
// ended it, and leaves the other rows of its batch exactly as they were.
#include "gpueval/model.h"
#include "model/generate.h"
#include "test_util.h"
#include "tiny_model.h"

namespace gpueval {
namespace {

TEST(GenerateRowCheck, EndsOnlyTheRowItSaysAndKeepsItsToken) {
  testing::TinyModelSpec spec;
  ModelConfig config = testing::tiny_config(spec);
  LlamaModel model = build_model(config, testing::tiny_weights(config, spec.seed));
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {1, 7, 3, 8, 2}, {4}};
  SamplingOptions o;
  o.max_new_tokens = 10;
  const auto plain = generate(*model, prompts, o);
  std::vector<size_t> calls(prompts.size());
  const auto checked = generate(*model, prompts, o, nullptr, [&](size_t row, const std::vector<int32_t>& tokens) {
    EXPECT_EQ(tokens.size(), ++calls[row]);  // once per token, with the row's tokens so far
    return row == 1 && tokens.size() == 3;
  });
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(plain[i].tokens.size(), 10u) << i;
    EXPECT_FALSE(plain[i].ended_by_check);
  }
  EXPECT_EQ(checked[0].tokens, plain[0].tokens);
  EXPECT_EQ(checked[2].tokens, plain[2].tokens);
  EXPECT_EQ(checked[1].tokens, std::vector<int32_t>(plain[1].tokens.begin(), plain[1].tokens.begin() + 3));
  EXPECT_TRUE(checked[1].ended_by_check);
  EXPECT_FALSE(checked[1].stopped);
  EXPECT_FALSE(checked[0].ended_by_check);
  EXPECT_EQ(calls[1], 3u);
}

}  // namespace
}  // namespace gpueval
