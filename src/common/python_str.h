// Python's str methods that lm-evaluation-harness's prompt templates call (Jinja hands them
// Python strings): len, indexing and slicing by code point, split, strip/lstrip/rstrip with or
// without a set of characters, find, replace, lower and upper. Strings are UTF-8; positions
// count code points, as Python's do. Private to src/. Stateless and thread-safe.
//
// lower()/upper() are Python's for every script: ICU's full case mappings (common/unicode_text.h),
// so 'ß'.upper() is "SS", 'İ'.lower() is "i̇" and a word-final 'Σ' lowers to 'ς'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpueval::py {

// str.isspace() of one code point.
bool is_space(char32_t c);

// The code points of a UTF-8 string (an invalid byte stands for itself, as U+DC80 + byte).
std::u32string code_points(const std::string& s);
std::string utf8(const std::u32string& s);

int64_t len(const std::string& s);

// s[i] (negative counts from the end); nullopt when out of range (Python's IndexError).
std::optional<std::string> char_at(const std::string& s, int64_t i);

// A slice's positions as Python's slice.indices(n) resolves them: start, stop, step.
struct SliceBounds {
  int64_t start = 0, stop = 0, step = 1;
};
SliceBounds slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);
// The positions a slice selects, in order.
std::vector<int64_t> slice_positions(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                     int64_t step);
std::string slice(const std::string& s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step = 1);

// str.split(sep, maxsplit): without sep, runs of whitespace separate and empty strings are
// dropped; with sep (non-empty), every occurrence separates. maxsplit < 0: no limit.
std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit = -1);

// str.strip/lstrip/rstrip(chars): chars absent = whitespace.
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);

// str.find(sub): the code point position of the first occurrence, or -1.
int64_t find(const std::string& s, const std::string& sub);

// str.replace(old, new): every occurrence, left to right (old empty: between every code point).
std::string replace(const std::string& s, const std::string& from, const std::string& to);

std::string lower(const std::string& s);
std::string upper(const std::string& s);

}  // namespace gpueval::py
