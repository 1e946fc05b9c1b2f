#include "common/python_str.h"

#include <algorithm>

#include "common/unicode_text.h"
#include "common/utf8.h"

namespace gpueval::py {
namespace {

constexpr char32_t kSurrogateEscape = 0xdc00;  // an invalid byte b is kept as U+DC00 + b

}  // namespace

bool is_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::u32string code_points(const std::string& s) {
  std::u32string out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t length = utf8_sequence_length(s, pos);
    if (length == 0) {
      out += kSurrogateEscape + static_cast<unsigned char>(s[pos++]);
      continue;
    }
    out += utf8_decode(s, pos, &length);
    pos += length;
  }
  return out;
}

std::string utf8(const std::u32string& s) {
  std::string out;
  for (const char32_t c : s) {
    if (c >= kSurrogateEscape + 0x80 && c <= kSurrogateEscape + 0xff) {
      out += static_cast<char>(c - kSurrogateEscape);
    } else {
      utf8_append(out, c);
    }
  }
  return out;
}

int64_t len(const std::string& s) { return static_cast<int64_t>(code_points(s).size()); }

std::optional<std::string> char_at(const std::string& s, int64_t i) {
  const std::u32string cps = code_points(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  return utf8(std::u32string(1, cps[static_cast<size_t>(i)]));
}

SliceBounds slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  SliceBounds b;
  b.step = step;
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback, int64_t low, int64_t high) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) x += n;
    return std::clamp(x, low, high);
  };
  if (step > 0) {
    b.start = clamp(start, 0, 0, n);
    b.stop = clamp(stop, n, 0, n);
  } else {
    b.start = clamp(start, n - 1, -1, n - 1);
    b.stop = clamp(stop, -1, -1, n - 1);
  }
  return b;
}

std::vector<int64_t> slice_positions(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                     int64_t step) {
  const SliceBounds b = slice_indices(n, start, stop, step);
  std::vector<int64_t> out;
  if (b.step > 0) {
    for (int64_t i = b.start; i < b.stop; i += b.step) out.push_back(i);
  } else {
    for (int64_t i = b.start; i > b.stop; i += b.step) out.push_back(i);
  }
  return out;
}

std::string slice(const std::string& s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  const std::u32string cps = code_points(s);
  std::u32string out;
  for (const int64_t i : slice_positions(static_cast<int64_t>(cps.size()), start, stop, step)) {
    out += cps[static_cast<size_t>(i)];
  }
  return utf8(out);
}

std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(*sep, pos);
      if (hit == std::string::npos) break;
      out.push_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = code_points(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest as one last piece, its trailing whitespace kept, as Python does.
      out.push_back(utf8(cps.substr(i)));
      return out;
    }
    const size_t begin = i;
    while (i < cps.size() && !is_space(cps[i])) ++i;
    out.push_back(utf8(cps.substr(begin, i - begin)));
  }
  return out;
}

std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = code_points(s);
  const std::u32string set = chars ? code_points(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return utf8(cps.substr(begin, end - begin));
}

int64_t find(const std::string& s, const std::string& sub) {
  const size_t hit = s.find(sub);
  if (hit == std::string::npos) return -1;
  return len(s.substr(0, hit));
}

std::string replace(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) {
    std::string out = to;
    for (const char32_t c : code_points(s)) out += utf8(std::u32string(1, c)) + to;
    return out;
  }
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string lower(const std::string& s) { return utf8(python_lower(code_points(s))); }

std::string upper(const std::string& s) { return utf8(python_upper(code_points(s))); }

}  // namespace gpueval::py
