#include "common/unicode_regex.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/utf8.h"
#include "gpueval/error.h"

namespace gpueval {

namespace {

// Oniguruma's \s is Unicode White_Space, which PCRE2's UCP \s lacks U+0085 of.
constexpr std::string_view kSpaceSet = "\\x{09}-\\x{0D}\\x{85}\\p{Z}";
// Oniguruma's \w: letters, marks, decimal digits and connector punctuation;
// PCRE2 10.42 leaves out the marks and connectors.
constexpr std::string_view kWordSet = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
// In oniguruma's Ruby syntax \h is a hexadecimal digit, not horizontal space.
constexpr std::string_view kHexSet = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct UnicodeRegex::Code {
  pcre2_code* code = nullptr;
  std::string where;
  ~Code() { pcre2_code_free(code); }
};

std::string onig_pattern_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const bool in_class = class_depth > 0;
      const auto set = [&](std::string_view members, bool negated) {
        if (in_class) {
          out.append(members);
        } else {
          out += negated ? "[^" : "[";
          out.append(members);
          out += ']';
        }
      };
      if (e == 's') {
        set(kSpaceSet, false);
      } else if (e == 'w') {
        set(kWordSet, false);
      } else if (e == 'h') {
        set(kHexSet, false);
      } else if (!in_class && e == 'S') {
        set(kSpaceSet, true);
      } else if (!in_class && e == 'W') {
        set(kWordSet, true);
      } else if (!in_class && e == 'H') {
        set(kHexSet, true);
      } else {
        // A negated class inside a class has no flat spelling; PCRE2's own
        // \S/\W there differ from oniguruma's only on rare code points.
        out += '\\';
        out += e;
      }
      continue;
    }
    out += c;
    if (c == '[') {
      ++class_depth;
      if (class_depth == 1) {
        // A ']' right after '[' or '[^' is a literal member, not the end.
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
        if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      }
    } else if (c == ']' && class_depth > 0) {
      --class_depth;
    }
  }
  return out;
}

UnicodeRegex::UnicodeRegex(std::string_view pattern, const std::string& where) {
  const std::string translated = onig_pattern_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    fail(where, "bad regex '{}': {} at offset {}", pattern, pcre2_message(error), error_offset);
  }
  // JIT is only a speed-up; the interpreter gives the same matches if it fails.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->where = where;
  code_ = std::move(owned);
}

std::vector<std::pair<size_t, size_t>> UnicodeRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      fail(code_->where, "regex match failed: {}", pcre2_message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end) {
      // Step past the empty match by one code point so the loop advances.
      search_from = end < text.size() ? end + std::max<size_t>(1, utf8_sequence_length(text, end)) : end + 1;
      if (have_last && last_match_end == end) continue;
    } else {
      search_from = end;
    }
    have_last = true;
    last_match_end = end;
    matches.emplace_back(begin, end);
  }
  pcre2_match_data_free(data);
  return matches;
}

std::vector<UnicodeRegex::Match> UnicodeRegex::python_find_all(std::string_view text) const {
  std::vector<Match> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t search_from = 0;
  bool after_empty = false;
  while (search_from <= text.size()) {
    const uint32_t flags = PCRE2_NO_UTF_CHECK | (after_empty ? PCRE2_NOTEMPTY_ATSTART : 0);
    const int rc = pcre2_match(code_->code, subject, text.size(), search_from, flags, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      fail(code_->where, "regex match failed: {}", pcre2_message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const uint32_t pairs = pcre2_get_ovector_count(data);
    Match m;
    m.span = {ovector[0], ovector[1]};
    for (uint32_t g = 1; g < pairs; ++g) {
      if (ovector[2 * g] == PCRE2_UNSET) {
        m.groups.emplace_back(std::nullopt);
      } else {
        m.groups.emplace_back(std::make_pair(size_t{ovector[2 * g]}, size_t{ovector[2 * g + 1]}));
      }
    }
    after_empty = m.span.first == m.span.second;
    search_from = m.span.second;
    matches.push_back(std::move(m));
  }
  pcre2_match_data_free(data);
  return matches;
}

bool UnicodeRegex::matches_at(std::string_view text, size_t pos) const {
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                             PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, data, nullptr);
  pcre2_match_data_free(data);
  return rc >= 0;
}

}  // namespace gpueval
