// The tokenizer.json stages one by one, on tiny hand-written tokenizers whose
// expected output can be worked out by hand: split behaviours, Metaspace,
// Digits, added-token matching, BPE options, decoders and post-processors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "gpueval/tokenizer.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer_test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;

// A BPE tokenizer.json over vocab (ids in order) with the given merges and no
// other stages; tests fill in the stage under test.
json bpe_json(const std::vector<std::string>& vocab, json merges = json::array()) {
  json ids = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) ids[vocab[i]] = i;
  return {{"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model", {{"type", "BPE"}, {"vocab", ids}, {"merges", merges}}}};
}

json added_token(int id, const std::string& content, json options = json::object()) {
  json token = {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  if (options.is_object()) token.update(options);
  return token;
}

std::vector<std::string> pieces(const Tokenizer& tok, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : tok.encode(text, false)) out.push_back(tok.id_to_piece(id));
  return out;
}

std::unique_ptr<Tokenizer> load(const json& spec) { return load_tokenizer_json(spec, "test.json"); }

using Pieces = std::vector<std::string>;

// "ab-cd--ef" cut on "-"; the merges join whatever lands in one word.
class SplitBehaviorTest : public ::testing::Test {
 protected:
  json with_split(const std::string& behavior, bool invert = false, json pattern = {{"String", "-"}}) {
    json spec = bpe_json({"a", "b", "c", "d", "e", "f", "-", "ab", "cd", "ef", "ab-", "cd-", "-cd", "-ef", "--"},
                         {"a b", "c d", "e f", "ab -", "cd -", "- cd", "- ef", "- -"});
    spec["pre_tokenizer"] = {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
    return spec;
  }
};

TEST_F(SplitBehaviorTest, EachBehavior) {
  EXPECT_EQ(pieces(*load(with_split("Removed")), "ab-cd--ef"), (Pieces{"ab", "cd", "ef"}));
  EXPECT_EQ(pieces(*load(with_split("Isolated")), "ab-cd--ef"), (Pieces{"ab", "-", "cd", "-", "-", "ef"}));
  EXPECT_EQ(pieces(*load(with_split("MergedWithPrevious")), "ab-cd--ef"), (Pieces{"ab-", "cd-", "-", "ef"}));
  EXPECT_EQ(pieces(*load(with_split("MergedWithNext")), "ab-cd--ef"), (Pieces{"ab", "-cd", "-", "-ef"}));
  EXPECT_EQ(pieces(*load(with_split("Contiguous")), "ab-cd--ef"), (Pieces{"ab", "-", "cd", "--", "ef"}));
}

TEST_F(SplitBehaviorTest, InvertedRegex) {
  // The regex finds the letter runs; "Removed" drops what it finds, or,
  // inverted, everything else.
  EXPECT_EQ(pieces(*load(with_split("Removed", false, {{"Regex", "[a-f]+"}})), "ab-cd--ef"), (Pieces{"-", "--"}));
  EXPECT_EQ(pieces(*load(with_split("Removed", true, {{"Regex", "[a-f]+"}})), "ab-cd--ef"), (Pieces{"ab", "cd", "ef"}));
  EXPECT_EQ(pieces(*load(with_split("Isolated", false, {{"Regex", "-+"}})), "ab-cd--ef"),
            (Pieces{"ab", "-", "cd", "--", "ef"}));
}

TEST_F(SplitBehaviorTest, UnknownBehaviorIsAnError) { EXPECT_THROW(load(with_split("Sideways")), Error); }

TEST(RegexTest, WhitespaceAndLettersAreUnicode) {
  json spec = bpe_json({"a", "b", "\u00e9", "x"});
  // U+0085 and U+3000 are White_Space for oniguruma's \s.
  spec["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}};
  EXPECT_EQ(pieces(*load(spec), "a\u0085b\u3000a"), (Pieces{"a", "b", "a"}));
  spec["pre_tokenizer"]["pattern"] = {{"Regex", "\\p{L}+"}};
  spec["pre_tokenizer"]["behavior"] = "Removed";
  // Everything is a letter, so everything is removed.
  EXPECT_TRUE(pieces(*load(spec), "a\u00e9b").empty());
  spec["pre_tokenizer"]["pattern"] = {{"Regex", "(?i:X)"}};
  EXPECT_EQ(pieces(*load(spec), "axbX"), (Pieces{"a", "b"}));
}

TEST(RegexTest, BadPatternNamesTheFile) {
  json spec = bpe_json({"a"});
  spec["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Removed"}, {"invert", false}};
  try {
    load(spec);
    FAIL() << "expected gpueval::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("test.json: bad regex '(unclosed'", 0), 0u) << e.what();
  }
}

class MetaspaceTest : public ::testing::Test {
 protected:
  json spec(const std::string& scheme, bool split = true) {
    json s = bpe_json({"\u2581", "a", "b", "\u2581a", "\u2581b", "\u2581a\u2581b", "<x>"},
                      {"\u2581 a", "\u2581 b", "\u2581a \u2581b"});
    s["added_tokens"] = json::array({added_token(6, "<x>")});
    s["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
    s["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
    return s;
  }
};

TEST_F(MetaspaceTest, PrependSchemes) {
  EXPECT_EQ(pieces(*load(spec("always")), "a b"), (Pieces{"\u2581a", "\u2581b"}));
  EXPECT_EQ(pieces(*load(spec("never")), "a b"), (Pieces{"a", "\u2581b"}));
  EXPECT_EQ(pieces(*load(spec("first")), "a b"), (Pieces{"\u2581a", "\u2581b"}));
  // After an added token the text no longer starts the input: "first" leaves it.
  EXPECT_EQ(pieces(*load(spec("first")), "<x>a b"), (Pieces{"<x>", "a", "\u2581b"}));
  EXPECT_EQ(pieces(*load(spec("always")), "<x>a b"), (Pieces{"<x>", "\u2581a", "\u2581b"}));
}

TEST_F(MetaspaceTest, WithoutSplitMergesAcrossSpaces) {
  EXPECT_EQ(pieces(*load(spec("always", false)), "a b"), (Pieces{"\u2581a\u2581b"}));
}

TEST_F(MetaspaceTest, DecoderDropsTheFirstPrefix) {
  const auto tok = load(spec("always"));
  EXPECT_EQ(tok->decode(tok->encode("a b", false)), "a b");
  const auto never = load(spec("never"));
  EXPECT_EQ(never->decode(never->encode("a b", false)), "a b");
}

TEST(DigitsTest, ContiguousOrIndividual) {
  json spec = bpe_json({"a", "1", "2", "3", "a1", "12", "123"}, {"a 1", "1 2", "12 3"});
  spec["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pieces(*load(spec), "a123"), (Pieces{"a", "123"}));
  spec["pre_tokenizer"]["individual_digits"] = true;
  EXPECT_EQ(pieces(*load(spec), "a123"), (Pieces{"a", "1", "2", "3"}));
  spec["pre_tokenizer"] = nullptr;
  EXPECT_EQ(pieces(*load(spec), "a123"), (Pieces{"a1", "2", "3"}));
}

TEST(PreTokenizerSequenceTest, AppliesInOrder) {
  json spec = bpe_json({"a", "b", " ", "1", "2", "12", "ab"}, {"1 2", "a b"});
  spec["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(pieces(*load(spec), "ab 12  a"), (Pieces{"ab", "1", "2", "a"}));
}

class AddedTokenTest : public ::testing::Test {
 protected:
  static json spec(json token_options) {
    json s = bpe_json({"a", "b", "c", " "});
    s["added_tokens"] = json::array({added_token(4, "<x>", std::move(token_options))});
    return s;
  }
};

TEST_F(AddedTokenTest, SplitBeforeTheModel) {
  EXPECT_EQ(pieces(*load(spec({})), "a <x> b"), (Pieces{"a", " ", "<x>", " ", "b"}));
  EXPECT_EQ(pieces(*load(spec({})), "<x><x>"), (Pieces{"<x>", "<x>"}));
}

TEST_F(AddedTokenTest, LstripAndRstripEatSpaces) {
  EXPECT_EQ(pieces(*load(spec({{"lstrip", true}})), "a  <x> b"), (Pieces{"a", "<x>", " ", "b"}));
  EXPECT_EQ(pieces(*load(spec({{"rstrip", true}})), "a <x>  b"), (Pieces{"a", " ", "<x>", "b"}));
  EXPECT_EQ(pieces(*load(spec({{"lstrip", true}, {"rstrip", true}})), "a\t<x>\n b"), (Pieces{"a", "<x>", "b"}));
}

TEST(AddedTokenMatchTest, SingleWordOnlyMatchesWholeWords) {
  json s = bpe_json({"a", "b", "c", " "});
  s["added_tokens"] = json::array({added_token(4, "ab", {{"single_word", true}})});
  const auto tok = load(s);
  const std::vector<int32_t> ids = tok->encode("ab cab ab", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 3, 2, 0, 1, 3, 4}));
}

TEST(AddedTokenMatchTest, LongestMatchWinsAndSpecialsSkipOnDecode) {
  json s = bpe_json({"a", "b", "c"});
  s["added_tokens"] = {added_token(3, "<a>", {{"special", false}}), added_token(4, "<a>b")};
  s["decoder"] = {{"type", "Fuse"}};
  const auto tok = load(s);
  EXPECT_EQ(tok->encode("<a>bc<a>c", false), (std::vector<int32_t>{4, 2, 3, 2}));
  EXPECT_EQ(tok->decode({4, 2, 3, 2}, false), "<a>bc<a>c");
  EXPECT_EQ(tok->decode({4, 2, 3, 2}, true), "c<a>c");
  EXPECT_EQ(tok->vocab_size(), 5);
}

TEST(AddedTokenMatchTest, NormalizedTokensMatchTheNormalizedText) {
  json s = bpe_json({"a", "b", "x", "!"});
  s["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "X"}}}, {"content", "x"}};
  s["added_tokens"] = {added_token(4, "X!", {{"normalized", true}, {"special", false}}),
                       added_token(5, "X?", {{"normalized", false}})};
  const auto tok = load(s);
  // "X!" is looked for as "x!" after normalization, "X?" in the raw text.
  EXPECT_EQ(tok->encode("aX!bx!X?", false), (std::vector<int32_t>{0, 4, 1, 4, 5}));
}

TEST(BpeModelTest, MergeOrderIsByRankThenLeftmost) {
  const auto tok = load(bpe_json({"a", "aa", "b", "ab"}, {"a a", "a b"}));
  EXPECT_EQ(pieces(*tok, "aaa"), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces(*tok, "aab"), (Pieces{"aa", "b"}));
  const auto reversed = load(bpe_json({"a", "aa", "b", "ab"}, json::array({{"a", "b"}, {"a", "a"}})));
  EXPECT_EQ(pieces(*reversed, "aab"), (Pieces{"a", "ab"}));
}

TEST(BpeModelTest, ByteFallbackAndUnknowns) {
  json spec = bpe_json({"<unk>", "a", "<0xC3>", "<0xA9>"});
  spec["model"]["byte_fallback"] = true;
  spec["model"]["unk_token"] = "<unk>";
  spec["model"]["fuse_unk"] = true;
  spec["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  auto tok = load(spec);
  // é has both its bytes; 日 and 本 have none and fuse into one <unk>.
  EXPECT_EQ(pieces(*tok, "a\u00e9\u65e5\u672ca"), (Pieces{"a", "<0xC3>", "<0xA9>", "<unk>", "a"}));
  EXPECT_EQ(tok->decode(tok->encode("a\u00e9a", false)), "a\u00e9a");
  // A lone continuation byte decodes as one U+FFFD per byte.
  EXPECT_EQ(tok->decode({3, 1}), "\uFFFDa");
  spec["model"]["fuse_unk"] = false;
  tok = load(spec);
  EXPECT_EQ(pieces(*tok, "\u65e5\u672c"), (Pieces{"<unk>", "<unk>"}));
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWords) {
  json spec = bpe_json({"a", "b", "c", "bc", "abc"}, {"b c"});
  EXPECT_EQ(pieces(*load(spec), "abc"), (Pieces{"a", "bc"}));
  spec["model"]["ignore_merges"] = true;
  EXPECT_EQ(pieces(*load(spec), "abc"), (Pieces{"abc"}));
}

TEST(BpeModelTest, SubwordPrefixAndSuffix) {
  json spec = bpe_json({"a", "##b", "##c", "ab", "##bc", "abc"}, {"a ##b", "ab ##c"});
  spec["model"]["continuing_subword_prefix"] = "##";
  EXPECT_EQ(pieces(*load(spec), "abc"), (Pieces{"abc"}));
  json suffix = bpe_json({"a", "b", "b</w>", "ab</w>"}, {"a b</w>"});
  suffix["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(pieces(*load(suffix), "ab"), (Pieces{"ab</w>"}));
}

// "▁" is U+2581, SentencePiece's word mark. Words split before a mark that follows another
// character only while no merge could join across that point; the ids are those of the whole word.
TEST(BpeModelTest, WordsSplitAtWordMarksOnlyWhereNoMergeCrossesThem) {
  const std::string mark = "\u2581";
  const json pieces_only = bpe_json({mark, "a", "b", mark + "a", mark + mark, mark + mark + "b"},
                                    json::array({{mark, "a"}, {mark, mark}, {mark + mark, "b"}}));
  const BpeModel split(pieces_only["model"], "test.json");
  EXPECT_TRUE(split.splits_at_word_marks());
  std::vector<int32_t> ids;
  split.tokenize(mark + "a" + mark + mark + "b" + "a" + mark + "a", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5, 1, 3}));  // ▁a ▁▁b a ▁a

  // "a ▁" joins an "a" to the mark after it: the word stays whole, and that merge (rank 0) wins.
  json crossing = bpe_json({mark, "a", "a" + mark, mark + "a"}, json::array({{"a", mark}, {mark, "a"}}));
  const BpeModel whole(crossing["model"], "test.json");
  EXPECT_FALSE(whole.splits_at_word_marks());
  ids.clear();
  whole.tokenize(mark + "a" + mark + "a", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 2, 1}));  // ▁ a▁ a

  // Without the mark as a token of its own, or with a continuing-subword prefix, words stay whole.
  EXPECT_FALSE(BpeModel(bpe_json({"a", mark + "a"})["model"], "test.json").splits_at_word_marks());
  json prefixed = bpe_json({mark, "a", mark + "a"});
  prefixed["model"]["continuing_subword_prefix"] = "##";
  EXPECT_FALSE(BpeModel(prefixed["model"], "test.json").splits_at_word_marks());
}

TEST(BpeModelTest, BadMergesNameTheProblem) {
  try {
    load(bpe_json({"a", "b"}, {"a b"}));
    FAIL() << "expected gpueval::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "test.json: merge 0 makes 'ab', which is not in the vocabulary");
  }
  EXPECT_THROW(load(bpe_json({"a", "b"}, {"a b c"})), Error);
  EXPECT_THROW(load(bpe_json({"a", "b"}, {"a z"})), Error);
}

TEST(DecoderTest, ReplaceByteFallbackFuseStrip) {
  json spec = bpe_json({"\u2581", "a", "\u2581a", "<0x41>"}, {"\u2581 a"});
  spec["normalizer"] = {{"type", "Sequence"},
                        {"normalizers",
                         {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  spec["decoder"] = {{"type", "Sequence"},
                     {"decoders",
                      {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                       {{"type", "ByteFallback"}},
                       {{"type", "Fuse"}},
                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const auto tok = load(spec);
  EXPECT_EQ(pieces(*tok, "a  a"), (Pieces{"\u2581a", "\u2581", "\u2581a"}));
  EXPECT_EQ(tok->decode(tok->encode("a  a", false)), "a  a");
  EXPECT_EQ(tok->decode({2, 3}), "aA");
  EXPECT_EQ(tok->decode({0, 0, 1}), " a");
}

TEST(DecoderTest, NoDecoderJoinsWithSpaces) {
  const auto tok = load(bpe_json({"a", "b"}));
  EXPECT_EQ(tok->decode({0, 1, 0}), "a b a");
}

TEST(PostProcessorTest, TemplatesAndFriends) {
  json spec = bpe_json({"<s>", "</s>", "a"});
  spec["added_tokens"] = {added_token(0, "<s>"), added_token(1, "</s>")};
  spec["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", "<s> $A </s>"},
                            {"pair", "<s> $A </s> $B:1 </s>:1"},
                            {"special_tokens",
                             {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
                              {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}};
  auto tok = load(spec);
  EXPECT_EQ(tok->encode("a", true), (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(tok->encode("a", false), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 1);

  spec["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 1}}, {"cls", {"<s>", 0}}};
  EXPECT_EQ(load(spec)->encode("a", true), (std::vector<int32_t>{0, 2, 1}));

  spec["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}}}}}}}};
  EXPECT_EQ(load(spec)->encode("a", true), (std::vector<int32_t>{0, 2}));
}

TEST(TokenizerConfigTest, NamesBosAndEos) {
  json spec = bpe_json({"a", "[B]", "[E]"});
  const json config = {{"bos_token", {{"content", "[B]"}, {"__type", "AddedToken"}}}, {"eos_token", "[E]"}};
  const auto tok = load_tokenizer_json(spec, "test.json", &config);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_FALSE(load(spec)->bos_id().has_value());
}

TEST(UnsupportedTest, StagesNameTheFileAndTheType) {
  const auto message = [](json spec) -> std::string {
    try {
      load(spec);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  json spec = bpe_json({"a"});
  spec["normalizer"] = {{"type", "Precompiled"}};
  EXPECT_EQ(message(spec), "test.json: unsupported normalizer 'Precompiled'");
  spec = bpe_json({"a"});
  spec["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  EXPECT_EQ(message(spec), "test.json: unsupported pre_tokenizer 'UnicodeScripts'");
  spec = bpe_json({"a"});
  spec["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(message(spec), "test.json: unsupported decoder 'WordPiece'");
  spec = bpe_json({"a"});
  spec["post_processor"] = {{"type", "Fancy"}};
  EXPECT_EQ(message(spec), "test.json: unsupported post_processor 'Fancy'");
  spec = bpe_json({"a"});
  spec["model"]["type"] = "Unigram";
  EXPECT_EQ(message(spec), "test.json: unsupported tokenizer model type 'Unigram'");
  spec = bpe_json({"a"});
  spec["model"]["dropout"] = 0.1;
  EXPECT_EQ(message(spec), "test.json: BPE dropout is not supported (it makes encoding random)");
  spec = bpe_json({"a"});
  spec["model"].erase("vocab");
  EXPECT_EQ(message(spec).rfind("test.json: malformed tokenizer.json: ", 0), 0u) << message(spec);
}

// Token ids are checked before they size the vocabulary table (issue 16): a float id was converted
// to int with undefined behaviour (found by fuzz_tokenizer_json), and an id near 2^31 asked for a
// table of two billion strings.
TEST(UnsupportedTest, TokenIdsMustBeIntegersBelowTheVocabularyBound) {
  const auto message = [](const json& spec) -> std::string {
    try {
      load(spec);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  json spec = bpe_json({"a", "b"});
  spec["model"]["vocab"]["b"] = 8.9e55;
  EXPECT_EQ(message(spec), "test.json: token 'b' has id 8.9e+55, which is not an integer");
  spec["model"]["vocab"]["b"] = 2147483647;
  EXPECT_EQ(message(spec),
            "test.json: token 'b' has id 2147483647, outside [0, 16777216) (the bound on vocabulary size)");
  spec["model"]["vocab"]["b"] = -1;
  EXPECT_EQ(message(spec), "test.json: token 'b' has id -1, outside [0, 16777216) (the bound on vocabulary size)");
  spec = bpe_json({"a"});
  spec["added_tokens"] = json::array({added_token(0, "<x>")});
  spec["added_tokens"][0]["id"] = 1 << 24;
  EXPECT_EQ(message(spec),
            "test.json: added token '<x>' has id 16777216, outside [0, 16777216) (the bound on vocabulary size)");
}

}  // namespace
}  // namespace gpueval
