// UnicodeRegex compiles a pattern written for Hugging Face tokenizers (which
// run it through oniguruma) with PCRE2 in UTF + UCP mode, so \p{L}, \p{N} and
// \s are Unicode-aware. The few classes whose meaning differs between the two
// engines (\s, \w, \h) are rewritten to oniguruma's sets before compiling.
//
// A compiled regex is immutable and shared; find_all() allocates its own match
// data, so one instance may be used from many threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpueval {

class UnicodeRegex {
 public:
  // where names the file in the error thrown for a pattern PCRE2 rejects.
  UnicodeRegex(std::string_view pattern, const std::string& where);

  // Non-overlapping matches as [begin, end) byte offsets, left to right, with
  // oniguruma's iteration rule: an empty match right where the previous match
  // ended is skipped. text must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  // Whether the pattern matches at exactly text[pos] (anchored there).
  bool matches_at(std::string_view text, size_t pos) const;

  // One match of python_find_all(): the whole match and each capture group as [begin, end)
  // byte offsets; a group that took no part is nullopt (Python's findall gives "" for it).
  struct Match {
    std::pair<size_t, size_t> span;
    std::vector<std::optional<std::pair<size_t, size_t>>> groups;
  };
  // Non-overlapping matches with Python re's iteration rule (3.7+): an empty match is
  // allowed right after a non-empty one, and after an empty match at p the next match may
  // start at p only if it is not empty. text must be valid UTF-8.
  std::vector<Match> python_find_all(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

// The oniguruma-to-PCRE2 rewrite find_all() relies on; exposed for tests.
std::string onig_pattern_to_pcre2(std::string_view pattern);

}  // namespace gpueval
