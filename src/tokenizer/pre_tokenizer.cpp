#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/split_pattern.h"

namespace gpueval {

namespace {

// The word regex of GPT-2's encoder, which ByteLevel applies when use_regex is set.
constexpr std::string_view kGpt2WordRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// One punctuation character, as Hugging Face's is_punc has it: ASCII
// punctuation (which counts $+<=>^`|~ too) or Unicode category P.
constexpr std::string_view kPunctuationRegex = R"([\p{P}\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7E])";

// Replaces every text split by the pieces cut returns, dropping empty ones.
template <typename Cut>
void split_each(std::vector<TextSplit>& splits, Cut cut) {
  std::vector<TextSplit> result;
  result.reserve(splits.size());
  for (TextSplit& split : splits) {
    if (split.token_id >= 0) {
      result.push_back(std::move(split));
      continue;
    }
    for (TextSplit& piece : cut(std::move(split))) {
      if (!piece.text.empty()) result.push_back(std::move(piece));
    }
  }
  splits = std::move(result);
}

std::vector<TextSplit> cut_by(const TextSplit& whole, const SplitPattern& pattern, SplitBehavior behavior,
                              bool invert) {
  std::vector<MatchSpan> spans = pattern.find_matches(whole.text);
  if (invert) {
    for (MatchSpan& span : spans) span.is_match = !span.is_match;
  }
  std::vector<TextSplit> pieces;
  for (const auto& [begin, end] : split_spans(std::move(spans), behavior)) {
    pieces.push_back({whole.text.substr(begin, end - begin), -1, whole.at_input_start && begin == 0});
  }
  return pieces;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space),
        use_regex_(use_regex),
        word_regex_(SplitPattern::regex(kGpt2WordRegex, where)) {}

  void pre_tokenize(std::vector<TextSplit>& splits) const override {
    split_each(splits, [&](TextSplit split) -> std::vector<TextSplit> {
      if (add_prefix_space_ && (split.text.empty() || split.text[0] != ' ')) split.text.insert(0, " ");
      if (!use_regex_) return {std::move(split)};
      return cut_by(split, word_regex_, SplitBehavior::kIsolated, false);
    });
    for (TextSplit& split : splits) {
      if (split.token_id < 0) split.text = byte_level_encode(split.text);
    }
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
  SplitPattern word_regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(SplitPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(std::vector<TextSplit>& splits) const override {
    split_each(splits, [&](TextSplit split) { return cut_by(split, pattern_, behavior_, invert_); });
  }

 private:
  SplitPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(replacement),
        scheme_(scheme),
        split_(split),
        space_(SplitPattern::literal(" ")),
        delimiter_(SplitPattern::literal(std::move(replacement))) {}

  void pre_tokenize(std::vector<TextSplit>& splits) const override {
    split_each(splits, [&](TextSplit split) -> std::vector<TextSplit> {
      split.text = space_.replace_all(split.text, replacement_);
      const bool starts_with_replacement = split.text.compare(0, replacement_.size(), replacement_) == 0;
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && split.at_input_start);
      if (prepend && !starts_with_replacement) split.text.insert(0, replacement_);
      if (!split_) return {std::move(split)};
      return cut_by(split, delimiter_, SplitBehavior::kMergedWithNext, false);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  SplitPattern space_;
  SplitPattern delimiter_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<TextSplit>& splits) const override {
    for (const auto& step : steps_) step->pre_tokenize(splits);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

PrependScheme parse_prepend_scheme(const nlohmann::json& spec, const std::string& where) {
  PrependScheme scheme = PrependScheme::kAlways;
  if (spec.contains("prepend_scheme")) {
    const std::string name = spec.at("prepend_scheme").get<std::string>();
    if (name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      fail(where, "unsupported Metaspace prepend_scheme '{}'", name);
    }
  }
  // Files written before prepend_scheme existed say add_prefix_space instead.
  if (spec.contains("add_prefix_space") && spec.at("add_prefix_space").is_boolean() &&
      !spec.at("add_prefix_space").get<bool>()) {
    scheme = PrependScheme::kNever;
  }
  return scheme;
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(spec.value("add_prefix_space", true), spec.value("use_regex", true),
                                                   where);
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(SplitPattern::from_json(spec.at("pattern"), where),
                                               parse_split_behavior(spec.at("behavior"), where),
                                               spec.value("invert", false));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(spec.value("replacement", std::string("\u2581")),
                                                   parse_prepend_scheme(spec, where), spec.value("split", true));
  }
  if (type == "Digits") {
    const bool individual = spec.value("individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(SplitPattern::regex("\\p{N}", where),
                                               individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                                               false);
  }
  if (type == "Whitespace") {
    // Keeps runs of word characters and runs of other non-space characters.
    return std::make_unique<SplitPreTokenizer>(SplitPattern::regex("\\w+|[^\\w\\s]+", where), SplitBehavior::kRemoved,
                                               true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<SplitPreTokenizer>(SplitPattern::regex("\\s", where), SplitBehavior::kRemoved, false);
  }
  if (type == "Punctuation") {
    const SplitBehavior behavior =
        spec.contains("behavior") ? parse_split_behavior(spec.at("behavior"), where) : SplitBehavior::kIsolated;
    return std::make_unique<SplitPreTokenizer>(SplitPattern::regex(kPunctuationRegex, where), behavior, false);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(
        std::make_unique<SplitPreTokenizer>(SplitPattern::regex("\\s", where), SplitBehavior::kRemoved, false));
    steps.push_back(std::make_unique<SplitPreTokenizer>(SplitPattern::regex(kPunctuationRegex, where),
                                                        SplitBehavior::kIsolated, false));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "CharDelimiterSplit") {
    return std::make_unique<SplitPreTokenizer>(SplitPattern::literal(spec.at("delimiter").get<std::string>()),
                                               SplitBehavior::kRemoved, false);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : spec.at("pretokenizers")) {
      if (auto pre_tokenizer = make_pre_tokenizer(step, where)) steps.push_back(std::move(pre_tokenizer));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  fail(where, "unsupported pre_tokenizer '{}'", type);
}

}  // namespace gpueval
