// The llama2.c tokenizer conversion: tok512.bin converted to tokenizer.json
// and run through our tokenizer.json implementation must give llama2.c's
// encode() ids (shared/refs/tokenizer_vectors_tok512_llama2c.jsonl).
#include <memory>
#include <set>

#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "gpueval/tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer_test_util.h"

namespace gpueval {
namespace {

using testing::have_shared_data;
using testing::quoted;
using testing::read_vectors;
using testing::ReferenceVector;

std::string tok512_path() { return testing::shared_dir() + "/data/stories260K/tok512.bin"; }

class Llama2cTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_shared_data()) return;
    json_ = std::make_unique<nlohmann::json>(llama2c_tokenizer_to_json(tok512_path()));
    const nlohmann::json config = llama2c_tokenizer_config();
    tokenizer_ = load_tokenizer_json(*json_, "tok512.bin (converted)", &config);
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    json_.reset();
  }
  void SetUp() override {
    if (!have_shared_data()) GTEST_SKIP() << "shared data dir " << testing::shared_dir() << " is missing";
  }

  static inline std::unique_ptr<nlohmann::json> json_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
};

// Where the converted tokenizer knowingly parts from llama2.c:
// a literal U+2581 '▁' in the input is a space to a vocabulary that spells
// spaces as '▁', while llama2.c byte-encodes it (the README of the reference
// vectors documents this). Special-token text such as "<s>" is spelled out,
// as llama2.c does.
const std::set<std::string> kKnownDifferences = {"\u2581hello"};

TEST_F(Llama2cTokenizerTest, MatchesLlama2cEncodeExceptKnownDifferences) {
  const std::vector<ReferenceVector> vectors = read_vectors("tok512_llama2c");
  ASSERT_EQ(vectors.size(), 182u);
  std::set<std::string> differing;
  int matched = 0;
  for (const ReferenceVector& v : vectors) {
    const std::vector<int32_t> plain = tokenizer_->encode(v.text, false);
    const std::vector<int32_t> special = tokenizer_->encode(v.text, true);
    if (plain != v.ids || special != v.ids_add_special) {
      differing.insert(v.text);
      EXPECT_EQ(kKnownDifferences.count(v.text), 1u)
          << "unexpected difference, i=" << v.index << " text=" << quoted(v.text);
    } else {
      ++matched;
    }
    // With or without BOS the rest is the same.
    ASSERT_FALSE(special.empty());
    EXPECT_EQ(special.front(), 1);
    EXPECT_EQ(std::vector<int32_t>(special.begin() + 1, special.end()), plain);
  }
  EXPECT_EQ(differing, kKnownDifferences);
  EXPECT_EQ(matched, 181);
}

TEST_F(Llama2cTokenizerTest, KnownDifferencesAreTheDocumentedOnes) {
  // llama2.c byte-encodes '▁' (E2 96 81 -> 229 153 132); here it is a space.
  EXPECT_EQ(tokenizer_->encode("\u2581hello", false), tokenizer_->encode(" hello", false));
  // Special-token text is spelled out, never turned into BOS/EOS.
  const std::vector<int32_t> ids = tokenizer_->encode("<s>Hello</s>", false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0);
}

TEST_F(Llama2cTokenizerTest, JsonHasTheExpectedShape) {
  const nlohmann::json& j = *json_;
  const nlohmann::json& model = j.at("model");
  EXPECT_EQ(model.at("type"), "BPE");
  EXPECT_EQ(model.at("byte_fallback"), true);
  EXPECT_EQ(model.at("fuse_unk"), true);
  EXPECT_EQ(model.at("unk_token"), "<unk>");
  EXPECT_EQ(model.at("vocab").size(), 512u);
  EXPECT_EQ(model.at("vocab").at("<s>"), 1);
  EXPECT_EQ(model.at("vocab").at("<0x0A>"), 13);
  EXPECT_EQ(model.at("vocab").at("\u2581t"), 259);
  EXPECT_FALSE(model.at("merges").empty());
  // The first merge makes the best-scoring piece, " t" (score 0, id 259).
  EXPECT_EQ(model.at("merges").at(0), nlohmann::json({"\u2581", "t"}));
  EXPECT_TRUE(j.at("added_tokens").empty());
  EXPECT_EQ(j.at("normalizer").at("normalizers").size(), 2u);
  EXPECT_TRUE(j.at("pre_tokenizer").is_null());
  EXPECT_EQ(j.at("post_processor").at("special_tokens").at("<s>").at("ids"), nlohmann::json({1}));
  EXPECT_EQ(j.at("decoder").at("decoders").size(), 4u);
}

TEST_F(Llama2cTokenizerTest, SpecialIdsAndDecoding) {
  EXPECT_EQ(tokenizer_->vocab_size(), 512);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_TRUE(tokenizer_->encode("", false).empty());
  EXPECT_EQ(tokenizer_->encode("", true), std::vector<int32_t>{1});
  for (const std::string text : {"Once upon a time, there was a little girl named Lily.", "  two  spaces ",
                                 "caf\u00e9 \u65e5\u672c \U0001F600", "line\nbreak\ttab"}) {
    const std::vector<int32_t> ids = tokenizer_->encode(text, true);
    EXPECT_EQ(tokenizer_->decode(ids, true), text);
  }
}

// The Llama-2 tokenizer.bin is the same vocabulary as tokenizer.model in
// llama2.c's format. Converted, it agrees with SentencePiece everywhere: on
// special-token text both spell it out, and on '▁' it sides with SentencePiece,
// not llama2.c.
TEST_F(Llama2cTokenizerTest, ConvertedLlama2AgreesWithSentencePiece) {
  const nlohmann::json converted =
      llama2c_tokenizer_to_json(testing::tokenizer_data("llama2_sentencepiece/tokenizer.bin"));
  const auto tok = load_tokenizer_json(converted, "llama2 tokenizer.bin (converted)");
  std::set<std::string> differing;
  for (const ReferenceVector& v : read_vectors("llama2_sentencepiece")) {
    if (tok->encode(v.text, false) != v.ids || tok->encode(v.text, true) != v.ids_add_special) {
      differing.insert(v.text);
    }
  }
  EXPECT_TRUE(differing.empty()) << "first difference: " << quoted(*differing.begin());
}

TEST(Llama2cTokenizerErrors, MissingAndTruncatedFiles) {
  try {
    llama2c_tokenizer_to_json("/nonexistent/tok.bin");
    FAIL() << "expected gpueval::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/tok.bin: cannot open", 0), 0u) << e.what();
  }
  testing::TempDir dir;
  const std::string header_only = dir.write("short.bin", std::string("\x07\x00\x00\x00\x00\x00", 6));
  try {
    llama2c_tokenizer_to_json(header_only);
    FAIL() << "expected gpueval::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file ends inside the score of token 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(header_only), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpueval
