// The tokenizer.json of each model family gpueval runs, checked against the
// `tokenizers` library: tests/fixtures/tokenizers/<family>/ holds a small
// tokenizer.json that the library trained in the family's real configuration
// and the ids and decoded text the library gives for a corpus of hard texts
// (scripts/make_tokenizer_fixtures.py wrote both). normalizers.json pins what
// Python's unicodedata and str methods and the library's normalizers give on
// the same corpus, which the Unicode layer (ICU) must reproduce.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/python_str.h"
#include "common/unicode_text.h"
#include "gpueval/error.h"
#include "gpueval/tokenizer.h"
#include "test_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer_test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using testing::quoted;

std::string fixture_path(const std::string& relative) {
  return testing::source_dir() + "/tests/fixtures/tokenizers/" + relative;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) throw std::runtime_error("cannot open " + path);
  return json::parse(in);
}

// Every family the fixture script writes; each must be there.
const char* const kFamilies[] = {"qwen2", "gemma", "phi3", "gpt_neox", "olmo2", "gpt2", "llama3", "granite"};

class TokenizerFamilyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFamilyTest, EncodeAndDecodeAsTheTokenizersLibrary) {
  const std::string family = GetParam();
  const json spec = read_json(fixture_path(family + "/tokenizer.json"));
  const json expected = read_json(fixture_path(family + "/expected.json"));
  const auto tok = load_tokenizer_json(spec, family + "/tokenizer.json");
  const json& cases = expected.at("cases");
  ASSERT_GE(cases.size(), 20u);
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto ids_special = c.at("ids_special").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, false), c.at("ids").get<std::vector<int32_t>>()) << family << " " << quoted(text);
    EXPECT_EQ(tok->encode(text, true), ids_special) << family << " " << quoted(text);
    EXPECT_EQ(tok->decode(ids_special, false), c.at("decoded").get<std::string>()) << family << " " << quoted(text);
    EXPECT_EQ(tok->decode(ids_special, true), c.at("decoded_skip").get<std::string>()) << family << " " << quoted(text);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerFamilyTest, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// The families' files really use the stages this change added (a fixture
// regenerated without them would no longer test them).
TEST(TokenizerFamilyFixtureTest, QwenAndNeoxFilesNormalizeWithNfc) {
  EXPECT_EQ(read_json(fixture_path("qwen2/tokenizer.json")).at("normalizer").at("type"), "NFC");
  EXPECT_EQ(read_json(fixture_path("gpt_neox/tokenizer.json")).at("normalizer").at("type"), "NFC");
  // Precomposed and combining spellings become the same ids.
  const auto tok = load_tokenizer_json(read_json(fixture_path("qwen2/tokenizer.json")), "qwen2");
  EXPECT_EQ(tok->encode("caf\u00e9", false), tok->encode("cafe\u0301", false));
}

json normalizer_cases() { return read_json(fixture_path("normalizers.json")).at("cases"); }

std::string run_normalizer(const json& spec, std::string text) {
  const auto normalizer = make_normalizer(spec, "test.json");
  normalizer->normalize(text);
  return text;
}

TEST(UnicodeNormalizerTest, FormsMatchPythonUnicodedata) {
  const json cases = normalizer_cases();
  ASSERT_GE(cases.size(), 15u);
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(unicode_normalize(text, NormalForm::kNfc), c.at("nfc").get<std::string>()) << quoted(text);
    EXPECT_EQ(unicode_normalize(text, NormalForm::kNfd), c.at("nfd").get<std::string>()) << quoted(text);
    EXPECT_EQ(unicode_normalize(text, NormalForm::kNfkc), c.at("nfkc").get<std::string>()) << quoted(text);
    EXPECT_EQ(unicode_normalize(text, NormalForm::kNfkd), c.at("nfkd").get<std::string>()) << quoted(text);
    // The same through tokenizer.json's normalizer stage.
    EXPECT_EQ(run_normalizer({{"type", "NFC"}}, text), c.at("nfc").get<std::string>()) << quoted(text);
    EXPECT_EQ(run_normalizer({{"type", "NFKD"}}, text), c.at("nfkd").get<std::string>()) << quoted(text);
  }
}

TEST(UnicodeNormalizerTest, LowercaseStripAccentsAndBertMatchTheTokenizersLibrary) {
  for (const json& c : normalizer_cases()) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(run_normalizer({{"type", "Lowercase"}}, text), c.at("lowercase").get<std::string>()) << quoted(text);
    const json strip = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}};
    EXPECT_EQ(run_normalizer(strip, text), c.at("strip_accents_nfd").get<std::string>()) << quoted(text);
    const json bert = {{"type", "BertNormalizer"},
                       {"clean_text", true},
                       {"handle_chinese_chars", true},
                       {"strip_accents", nullptr},
                       {"lowercase", true}};
    EXPECT_EQ(run_normalizer(bert, text), c.at("bert").get<std::string>()) << quoted(text);
  }
}

TEST(UnicodeNormalizerTest, LowercaseIsPerCharacterUnlikePythonLower) {
  // `tokenizers` lowercases one character at a time: no final sigma.
  EXPECT_EQ(run_normalizer({{"type", "Lowercase"}}, "\u0391\u03a3"), "\u03b1\u03c3");
  EXPECT_EQ(py::lower("\u0391\u03a3"), "\u03b1\u03c2");
  EXPECT_EQ(run_normalizer({{"type", "Lowercase"}}, "\u0130"), "i\u0307");
}

TEST(UnicodeNormalizerTest, RegexReplaceAndUnknownKinds) {
  EXPECT_EQ(run_normalizer({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}, "a   b  c d"),
            "a b c d");
  try {
    make_normalizer({{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}}, "x/tokenizer.json");
    ADD_FAILURE() << "Precompiled was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "x/tokenizer.json: unsupported normalizer 'Precompiled'");
  }
}

std::vector<std::string> pre_tokenized(const json& spec, const std::string& text) {
  std::vector<TextSplit> splits = {{text, -1, true}};
  make_pre_tokenizer(spec, "test.json")->pre_tokenize(splits);
  std::vector<std::string> words;
  for (const TextSplit& split : splits) words.push_back(split.text);
  return words;
}

TEST(PunctuationPreTokenizerTest, SplitsAsTheTokenizersLibrary) {
  // Expected values from tokenizers 0.23's pre_tokenize_str.
  using Words = std::vector<std::string>;
  const std::string text = "Hey, you$ ok?! a.b-c \u00abquote\u00bb 1+1=2 don't";
  EXPECT_EQ(pre_tokenized({{"type", "Punctuation"}}, text),
            (Words{"Hey", ",",      " you",  "$",      " ok", "?", "!", " a", ".",     "b", "-",
                   "c ",  "\u00ab", "quote", "\u00bb", " 1",  "+", "1", "=",  "2 don", "'", "t"}));
  EXPECT_EQ(pre_tokenized({{"type", "Punctuation"}, {"behavior", "MergedWithPrevious"}}, text),
            (Words{"Hey,", " you$", " ok?", "!", " a.", "b-", "c \u00ab", "quote\u00bb", " 1+", "1=", "2 don'", "t"}));
  EXPECT_EQ(pre_tokenized({{"type", "BertPreTokenizer"}}, "\u00bfQu\u00e9?\u00a1S\u00ed! \u4f60\u597d\u3002"),
            (Words{"\u00bf", "Qu\u00e9", "?", "\u00a1", "S\u00ed", "!", "\u4f60\u597d", "\u3002"}));
}

TEST(PythonStrTest, LowerAndUpperMatchPythonOnTheCorpus) {
  for (const json& c : normalizer_cases()) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(py::lower(text), c.at("python_lower").get<std::string>()) << quoted(text);
    EXPECT_EQ(py::upper(text), c.at("python_upper").get<std::string>()) << quoted(text);
  }
}

TEST(PythonStrTest, FullCaseMappingsAndFinalSigma) {
  // Values from Python 3.12.
  EXPECT_EQ(py::lower("\u0130"), "i\u0307");
  EXPECT_EQ(py::upper("\u00df"), "SS");
  EXPECT_EQ(py::upper("\ufb01"), "FI");
  EXPECT_EQ(py::upper("\u0149"), "\u02bcN");
  EXPECT_EQ(py::lower("\u01c5"), "\u01c6");
  EXPECT_EQ(py::upper("\u01c5"), "\u01c4");
  EXPECT_EQ(py::lower("\u0391\u03a3 \u03a3"), "\u03b1\u03c2 \u03c3");
  EXPECT_EQ(py::lower("\u03a3\u0391"), "\u03c3\u03b1");
  EXPECT_EQ(py::lower("A\u03a3\u0308b"), "a\u03c3\u0308b");
  EXPECT_EQ(py::lower("\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3."),
            "\u03bf\u03b4\u03c5\u03c3\u03c3\u03b5\u03c5\u03c2.");
  // Cyrillic, Armenian, Georgian Mtavruli, Cherokee, Deseret: scripts the old tables missed.
  EXPECT_EQ(py::lower("\u0416\u0531\u1C90\u13A0\U00010400"), "\u0436\u0561\u10D0\uAB70\U00010428");
}

TEST(PythonStrTest, UndecodableBytesPassThroughCaseMapping) {
  // Python keeps them as surrogate escapes: b"x\x80Y" -> "x\udc80y" / "X\udc80Y".
  EXPECT_EQ(py::lower(std::string("x\x80Y")), std::string("x\x80y"));
  EXPECT_EQ(py::upper(std::string("x\x80Y")), std::string("X\x80Y"));
}

}  // namespace
}  // namespace gpueval
