// Reference agreement for the real tokenizers in shared/data: every string of
// shared/refs/tokenizer_vectors_*.jsonl must give exactly the ids Hugging Face
// `tokenizers` (or SentencePiece) gave, with and without special tokens, and
// decode back to the recorded text.
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "gpueval/tokenizer.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer_test_util.h"

namespace gpueval {
namespace {

using testing::have_shared_data;
using testing::quoted;
using testing::read_vectors;
using testing::ReferenceVector;
using testing::tokenizer_data;

// The shared Llama-3 tokenizer is stored gzipped; unpack it once per process,
// with its tokenizer_config.json beside it.
std::string llama3_dir() {
  static const testing::TempDir dir;
  static const std::string path = [] {
    const std::string command =
        "gzip -dc '" + tokenizer_data("llama3/tokenizer.json.gz") + "' > '" + dir.file("tokenizer.json") + "'";
    if (std::system(command.c_str()) != 0) throw std::runtime_error("cannot gunzip the Llama-3 tokenizer");
    std::filesystem::copy_file(tokenizer_data("llama3/tokenizer_config.json"), dir.file("tokenizer_config.json"));
    return dir.path();
  }();
  return path;
}

// Loading the larger files takes a while, so each is loaded once per process.
const Tokenizer& shared_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[name];
  if (!slot) {
    if (name == "gpt2") {
      slot = load_tokenizer(tokenizer_data("gpt2"));
    } else if (name == "mistral7b_v0.1") {
      slot = load_tokenizer(tokenizer_data("mistral7b_v0.1/tokenizer.json"));
    } else if (name == "llama3") {
      slot = load_tokenizer(llama3_dir());
    } else if (name == "llama2_sentencepiece") {
      slot = load_tokenizer(tokenizer_data("llama2_sentencepiece/tokenizer.model"));
    } else {
      throw std::invalid_argument("no shared tokenizer named " + name);
    }
  }
  return *slot;
}

class ReferenceTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_shared_data()) GTEST_SKIP() << "shared data dir " << testing::shared_dir() << " is missing";
    if (GetParam() == "llama2_sentencepiece") GPUEVAL_REQUIRE_SENTENCEPIECE();
  }
  const Tokenizer& tokenizer() const { return shared_tokenizer(GetParam()); }
};

TEST_P(ReferenceTokenizerTest, EncodeGivesReferenceIds) {
  const Tokenizer& tok = tokenizer();
  const std::vector<ReferenceVector> vectors = read_vectors(GetParam());
  ASSERT_EQ(vectors.size(), 182u);
  int mismatches = 0;
  for (const ReferenceVector& v : vectors) {
    const std::vector<int32_t> plain = tok.encode(v.text, false);
    const std::vector<int32_t> special = tok.encode(v.text, true);
    mismatches += plain != v.ids || special != v.ids_add_special;
    EXPECT_EQ(plain, v.ids) << "i=" << v.index << " text=" << quoted(v.text);
    EXPECT_EQ(special, v.ids_add_special) << "i=" << v.index << " text=" << quoted(v.text);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(ReferenceTokenizerTest, DecodeGivesReferenceText) {
  const Tokenizer& tok = tokenizer();
  int checked = 0, round_trips = 0;
  for (const ReferenceVector& v : read_vectors(GetParam())) {
    ASSERT_TRUE(v.decoded.has_value()) << "i=" << v.index;
    EXPECT_EQ(tok.decode(v.ids), *v.decoded) << "i=" << v.index << " text=" << quoted(v.text);
    ++checked;
    if (v.roundtrip.value_or(false)) {
      EXPECT_EQ(tok.decode(tok.encode(v.text, false)), v.text) << "i=" << v.index;
      ++round_trips;
    }
  }
  EXPECT_EQ(checked, 182);
  EXPECT_GT(round_trips, 170);
}

TEST_P(ReferenceTokenizerTest, PiecesAndIdsAreInverse) {
  const Tokenizer& tok = tokenizer();
  for (int32_t id = 0; id < tok.vocab_size(); id += 97) {
    const std::string piece = tok.id_to_piece(id);
    const auto back = tok.piece_to_id(piece);
    ASSERT_TRUE(back.has_value()) << "id " << id << " piece " << quoted(piece);
    EXPECT_EQ(*back, id) << quoted(piece);
  }
  EXPECT_FALSE(tok.piece_to_id("no such piece \x01\x02").has_value());
  EXPECT_THROW(tok.id_to_piece(tok.vocab_size()), Error);
  EXPECT_THROW(tok.id_to_piece(-1), Error);
}

INSTANTIATE_TEST_SUITE_P(SharedData, ReferenceTokenizerTest,
                         ::testing::Values("gpt2", "mistral7b_v0.1", "llama3", "llama2_sentencepiece"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

class SharedTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_shared_data()) GTEST_SKIP() << "shared data dir " << testing::shared_dir() << " is missing";
  }
};

TEST_F(SharedTokenizerTest, SpecialTokenIdsAndSizes) {
  GPUEVAL_REQUIRE_SENTENCEPIECE();  // it also checks llama2_sentencepiece
  const Tokenizer& gpt2 = shared_tokenizer("gpt2");
  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.bos_id(), 50256);
  EXPECT_EQ(gpt2.eos_id(), 50256);
  EXPECT_EQ(gpt2.id_to_piece(995), "\u0120world");

  const Tokenizer& mistral = shared_tokenizer("mistral7b_v0.1");
  EXPECT_EQ(mistral.vocab_size(), 32000);
  EXPECT_EQ(mistral.bos_id(), 1);
  EXPECT_EQ(mistral.eos_id(), 2);
  EXPECT_EQ(mistral.piece_to_id("<0x0A>"), 13);

  const Tokenizer& llama3 = shared_tokenizer("llama3");
  EXPECT_EQ(llama3.vocab_size(), 128256);
  EXPECT_EQ(llama3.bos_id(), 128000);
  EXPECT_EQ(llama3.eos_id(), 128001);
  EXPECT_EQ(llama3.piece_to_id("<|eot_id|>"), 128009);

  const Tokenizer& llama2 = shared_tokenizer("llama2_sentencepiece");
  EXPECT_EQ(llama2.vocab_size(), 32000);
  EXPECT_EQ(llama2.bos_id(), 1);
  EXPECT_EQ(llama2.eos_id(), 2);
  EXPECT_EQ(llama2.id_to_piece(15043), "\u2581Hello");
}

TEST_F(SharedTokenizerTest, SpecialTokensInTextAndSkippedOnDecode) {
  GPUEVAL_REQUIRE_SENTENCEPIECE();  // it also checks llama2_sentencepiece
  const Tokenizer& llama3 = shared_tokenizer("llama3");
  const std::vector<int32_t> ids = llama3.encode("<|begin_of_text|>Hi<|eot_id|>", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 128000);
  EXPECT_EQ(ids.back(), 128009);
  EXPECT_EQ(llama3.decode(ids, false), "<|begin_of_text|>Hi<|eot_id|>");
  EXPECT_EQ(llama3.decode(ids, true), "Hi");

  const Tokenizer& mistral = shared_tokenizer("mistral7b_v0.1");
  const std::vector<int32_t> with_bos = mistral.encode("Hello", true);
  ASSERT_EQ(with_bos.front(), 1);
  EXPECT_EQ(mistral.decode(with_bos, true), "Hello");
  EXPECT_EQ(mistral.decode({1, 22557, 2}, true), "Hello");

  const Tokenizer& llama2 = shared_tokenizer("llama2_sentencepiece");
  EXPECT_EQ(llama2.decode({1, 15043, 2}, true), "Hello");
  EXPECT_EQ(llama2.decode({1, 15043, 2}, false), "<s>Hello</s>");
  // Ids outside the vocabulary are skipped, not an error.
  EXPECT_EQ(llama2.decode({15043, 99999, -4}), "Hello");
  EXPECT_EQ(mistral.decode({22557, 99999, -4}), "Hello");
}

TEST_F(SharedTokenizerTest, EmptyTextGivesOnlySpecialTokens) {
  GPUEVAL_REQUIRE_SENTENCEPIECE();  // it also checks llama2_sentencepiece
  EXPECT_TRUE(shared_tokenizer("gpt2").encode("", true).empty());
  EXPECT_EQ(shared_tokenizer("mistral7b_v0.1").encode("", true), std::vector<int32_t>{1});
  EXPECT_TRUE(shared_tokenizer("mistral7b_v0.1").encode("", false).empty());
  EXPECT_EQ(shared_tokenizer("llama2_sentencepiece").encode("", true), std::vector<int32_t>{1});
}

TEST_F(SharedTokenizerTest, InvalidUtf8IsAnError) {
  try {
    shared_tokenizer("gpt2").encode("ab\xC3(", false);
    FAIL() << "expected gpueval::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (byte 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos) << e.what();
  }
}

// Mistral has no pre-tokenizer, so a whole document is one BPE word; Llama-3
// splits on long digit and space runs. Both must stay far from quadratic.
TEST_F(SharedTokenizerTest, LongInputsEncodeQuickly) {
  std::string text;
  for (int i = 0; i < 4000; ++i) text += "The quick brown fox jumps over the lazy dog " + std::to_string(i) + ".\n";
  text += std::string(20000, ' ') + std::string(20000, '7');
  for (const char* name : {"mistral7b_v0.1", "llama3", "gpt2"}) {
    const Tokenizer& tok = shared_tokenizer(name);
    // CPU time, not wall time: a loaded machine stretches the second, not the first.
    const double start = testing::cpu_seconds();
    const std::vector<int32_t> ids = tok.encode(text, false);
    const double seconds = testing::cpu_seconds() - start;
    EXPECT_LT(seconds, 3.0) << name;
    EXPECT_GT(ids.size(), 40000u) << name;
    EXPECT_EQ(tok.decode(ids), text) << name;
  }
}

// Mistral's whole-text words are merged piece by piece between word marks (bpe_model.h). The same
// vocabulary with one more merge that joins a byte token to a following mark keeps words whole;
// that merge never applies to these texts (no NUL byte), so both must give the same ids on real
// MMLU questions, long and short.
TEST_F(SharedTokenizerTest, MistralWordsMergedPieceByPieceGiveTheWholeWordsIds) {
  std::ifstream in(tokenizer_data("mistral7b_v0.1/tokenizer.json"));
  const nlohmann::json spec = nlohmann::json::parse(in);
  nlohmann::json whole_spec = spec.at("model");
  const std::string mark = "\u2581";
  whole_spec["vocab"]["<0x00>" + mark] = 32000;
  whole_spec["merges"].push_back("<0x00> " + mark);
  const BpeModel pieces(spec.at("model"), "mistral");
  const BpeModel whole(whole_spec, "mistral, one more merge");
  ASSERT_TRUE(pieces.splits_at_word_marks());
  ASSERT_FALSE(whole.splits_at_word_marks());

  std::vector<std::string> texts = {"a   b  c", "  leading and trailing  ", "x" + mark + mark + "y"};
  for (const char* subject : {"anatomy", "high_school_european_history", "college_chemistry"}) {
    std::ifstream csv(testing::shared_dir() + "/data/mmlu/test/" + subject + "_test.csv");
    std::string line, prompt;
    for (int n = 0; std::getline(csv, line) && n < 60; ++n) {
      texts.push_back(line);
      prompt += line + "\n\n";
    }
    texts.push_back(prompt);
  }
  ASSERT_GT(texts.size(), 150u);
  for (const std::string& text : texts) {
    // Mistral's normalizer: a mark first, every space a mark.
    std::string word = mark;
    for (char c : text) word += c == ' ' ? mark : std::string(1, c);
    std::vector<int32_t> by_pieces, merged_whole;
    pieces.tokenize(word, by_pieces);
    whole.tokenize(word, merged_whole);
    EXPECT_EQ(by_pieces, merged_whole) << text.substr(0, 80);
    EXPECT_FALSE(by_pieces.empty());
  }
}

TEST_F(SharedTokenizerTest, ConcurrentEncodesAgree) {
  const Tokenizer& tok = shared_tokenizer("llama3");
  const std::vector<ReferenceVector> vectors = read_vectors("llama3");
  std::vector<std::vector<std::vector<int32_t>>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (const ReferenceVector& v : vectors) results[t].push_back(tok.encode(v.text, false));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& result : results) {
    ASSERT_EQ(result.size(), vectors.size());
    for (size_t i = 0; i < vectors.size(); ++i) EXPECT_EQ(result[i], vectors[i].ids) << "i=" << vectors[i].index;
  }
}

}  // namespace
}  // namespace gpueval
