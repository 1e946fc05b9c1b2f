// SplitPattern is the `pattern` of tokenizer.json's Split pre-tokenizer and
// Replace normalizer/decoder: either {"String": "..."} (a literal) or
// {"Regex": "..."}. It cuts a string into match and non-match spans, and
// split_spans() applies a SplitDelimiterBehavior to those spans the way Hugging
// Face's NormalizedString::split does. Immutable; safe from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/unicode_regex.h"

namespace gpueval {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses "Removed", "Isolated", ... ; throws naming where on anything else.
SplitBehavior parse_split_behavior(const nlohmann::json& value, const std::string& where);

// One piece of a string; consecutive spans cover it exactly.
struct MatchSpan {
  size_t begin;
  size_t end;
  bool is_match;
};

class SplitPattern {
 public:
  static SplitPattern literal(std::string text);
  static SplitPattern regex(std::string_view pattern, const std::string& where);
  // {"String": ...} or {"Regex": ...}.
  static SplitPattern from_json(const nlohmann::json& spec, const std::string& where);

  // Covers all of text; an empty text gives one empty non-match span.
  std::vector<MatchSpan> find_matches(std::string_view text) const;

  // Every occurrence replaced by replacement, left to right, non-overlapping.
  std::string replace_all(std::string_view text, std::string_view replacement) const;

 private:
  std::string literal_;
  std::optional<UnicodeRegex> regex_;
};

// The [begin, end) pieces a Split with this behavior keeps, in order. Empty
// pieces may appear; callers drop them as Hugging Face does.
std::vector<std::pair<size_t, size_t>> split_spans(std::vector<MatchSpan> spans, SplitBehavior behavior);

}  // namespace gpueval
