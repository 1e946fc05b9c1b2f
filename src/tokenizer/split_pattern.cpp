#include "tokenizer/split_pattern.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"

namespace gpueval {

SplitBehavior parse_split_behavior(const nlohmann::json& value, const std::string& where) {
  const std::string name = value.is_string() ? value.get<std::string>() : value.dump();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail(where, "unsupported split behavior '{}'", name);
}

SplitPattern SplitPattern::literal(std::string text) {
  SplitPattern pattern;
  pattern.literal_ = std::move(text);
  return pattern;
}

SplitPattern SplitPattern::regex(std::string_view pattern, const std::string& where) {
  SplitPattern result;
  result.regex_.emplace(pattern, where);
  return result;
}

SplitPattern SplitPattern::from_json(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_object() && spec.contains("String")) return literal(spec.at("String").get<std::string>());
  if (spec.is_object() && spec.contains("Regex")) return regex(spec.at("Regex").get<std::string>(), where);
  fail(where, "pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", spec.dump());
}

std::vector<MatchSpan> SplitPattern::find_matches(std::string_view text) const {
  if (text.empty()) return {{0, 0, false}};
  std::vector<std::pair<size_t, size_t>> matches;
  if (regex_) {
    matches = regex_->find_all(text);
  } else if (!literal_.empty()) {
    for (size_t pos = text.find(literal_); pos != std::string_view::npos; pos = text.find(literal_, pos)) {
      matches.emplace_back(pos, pos + literal_.size());
      pos += literal_.size();
    }
  }
  std::vector<MatchSpan> spans;
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (previous != begin) spans.push_back({previous, begin, false});
    spans.push_back({begin, end, true});
    previous = end;
  }
  if (previous != text.size()) spans.push_back({previous, text.size(), false});
  return spans;
}

std::string SplitPattern::replace_all(std::string_view text, std::string_view replacement) const {
  std::string out;
  for (const MatchSpan& span : find_matches(text)) {
    if (span.is_match) {
      out.append(replacement);
    } else {
      out.append(text.substr(span.begin, span.end - span.begin));
    }
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> split_spans(std::vector<MatchSpan> spans, SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const MatchSpan& s : spans) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const MatchSpan& s : spans) {
        if (!s.is_match) pieces.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const MatchSpan& s : spans) {
        if (s.is_match == previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const MatchSpan& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walk right to left so a delimiter joins the piece after it.
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().first = it->begin;
        } else {
          pieces.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  return pieces;
}

}  // namespace gpueval
