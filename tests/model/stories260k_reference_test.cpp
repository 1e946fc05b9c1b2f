// The converted stories260K against outputs measured with llama2.c itself
// (../shared/refs): logits within 1e-4, greedy text byte for byte.
#include <c10/core/InferenceMode.h>

#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "gpueval/model.h"
#include "gpueval/tokenizer.h"
#include "model/decoder/generate.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using testing::converted_stories260k;
using testing::shared_dir;

json load_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// hidden -> logits [T, V] for one unpadded sequence.
at::Tensor forward_logits(const DecoderModelImpl& model, const std::vector<int64_t>& ids) {
  c10::InferenceMode guard;
  const int64_t t = static_cast<int64_t>(ids.size());
  at::Tensor tokens = at::tensor(ids, at::kLong).view({1, t});
  at::Tensor positions = at::arange(t, at::kLong).view({1, t});
  at::Tensor valid = at::ones({1, t}, at::kBool);
  return model.logits(model.forward(tokens, positions, valid))[0].to(at::kFloat);
}

TEST(Stories260kReference, LogitsMatchLlama2c) {
  GPUEVAL_REQUIRE_SHARED();
  json ref = load_json(shared_dir() + "/refs/stories260K_logits.json");
  DecoderModel model = load_model(converted_stories260k());
  int checked_full = 0, checked_positions = 0;
  for (const auto& seq : ref["sequences"]) {
    std::vector<int64_t> ids = seq["token_ids"].get<std::vector<int64_t>>();
    at::Tensor logits = forward_logits(*model, ids);  // [T, V]
    at::Tensor logprobs = at::log_softmax(logits, -1);
    for (const auto& p : seq["positions"]) {
      const int64_t pos = p["pos"].get<int64_t>();
      SCOPED_TRACE(seq["text"].get<std::string>() + " @ " + std::to_string(pos));
      EXPECT_EQ(logits[pos].argmax().item<int64_t>(), p["argmax"].get<int64_t>());
      EXPECT_NEAR(at::logsumexp(logits[pos], 0).item<float>(), p["logsumexp"].get<double>(), 1e-4);
      if (p.contains("next_id") && !p["next_id"].is_null()) {
        EXPECT_NEAR(logprobs[pos][p["next_id"].get<int64_t>()].item<float>(), p["next_logprob"].get<double>(), 1e-4);
      }
      if (p.contains("logits")) {
        at::Tensor expected = at::tensor(p["logits"].get<std::vector<float>>());
        EXPECT_LE((logits[pos] - expected).abs().max().item<float>(), 1e-4);
        ++checked_full;
      }
      ++checked_positions;
    }
  }
  EXPECT_GE(checked_full, 8);
  EXPECT_GE(checked_positions, 16);
}

struct GreedyCase {
  std::string prompt;
  std::string stdout_text;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  int steps = 0;
};

std::vector<GreedyCase> greedy_cases() {
  std::ifstream in(shared_dir() + "/refs/llama2c_greedy.txt");
  std::vector<GreedyCase> cases;
  std::string line;
  GreedyCase cur;
  while (std::getline(in, line)) {
    if (line.rfind("stdout_json: ", 0) == 0) {
      cur.stdout_text = json::parse(line.substr(13)).get<std::string>();
    } else if (line.rfind("ids: ", 0) == 0) {
      json ids = json::parse(line.substr(5));
      cur.prompt = ids["prompt"].get<std::string>();
      cur.prompt_ids = ids["prompt_ids"].get<std::vector<int32_t>>();
      cur.generated_ids = ids["generated_ids"].get<std::vector<int32_t>>();
      cur.steps = ids["steps"].get<int>();
      cases.push_back(cur);
      cur = GreedyCase();
    }
  }
  return cases;
}

TEST(Stories260kReference, GreedyIdsMatchLlama2c) {
  GPUEVAL_REQUIRE_SHARED();
  auto cases = greedy_cases();
  ASSERT_GE(cases.size(), 2u);
  DecoderModel model = load_model(converted_stories260k());
  auto tok = load_tokenizer(converted_stories260k());
  for (const auto& c : cases) {
    SCOPED_TRACE(c.prompt);
    EXPECT_EQ(tok->encode(c.prompt, true), c.prompt_ids);
    SamplingOptions o;
    // llama2.c's -n counts every position, BOS and prompt included.
    o.max_new_tokens = c.steps - static_cast<int64_t>(c.prompt_ids.size()) + 1;
    auto gen = generate(*model, {c.prompt_ids}, o);
    EXPECT_EQ(gen[0].tokens, c.generated_ids);
  }
}

TEST(Stories260kReference, GenerateCommandPrintsLlama2cTextByteForByte) {
  GPUEVAL_REQUIRE_SHARED();
  for (const auto& c : greedy_cases()) {
    SCOPED_TRACE(c.prompt);
    const int new_tokens = c.steps - static_cast<int>(c.prompt_ids.size()) + 1;
    auto r = testing::run_gpueval({"generate", "--model", converted_stories260k(), "--prompt", c.prompt,
                                   "--max-new-tokens", std::to_string(new_tokens), "--threads", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c.stdout_text);
  }
}

TEST(Stories260kReference, LogitsCommandMatchesReference) {
  GPUEVAL_REQUIRE_SHARED();
  json ref = load_json(shared_dir() + "/refs/stories260K_logits.json");
  const auto& seq = ref["sequences"][0];
  std::vector<int64_t> ids = seq["token_ids"].get<std::vector<int64_t>>();
  std::string ids_arg;
  for (size_t i = 0; i < 4; ++i) ids_arg += (i ? "," : "") + std::to_string(ids[i]);
  auto r = testing::run_gpueval({"logits", "--model", converted_stories260k(), "--ids", ids_arg});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  ASSERT_EQ(out["logits"].size(), 4u);
  for (size_t pos = 0; pos < 4; ++pos) {
    auto got = out["logits"][pos].get<std::vector<double>>();
    auto want = seq["positions"][pos]["logits"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t v = 0; v < got.size(); ++v) ASSERT_NEAR(got[v], want[v], 1e-4) << "pos " << pos << " id " << v;
  }
}

}  // namespace
}  // namespace gpueval
