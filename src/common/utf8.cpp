#include "common/utf8.h"

namespace gpueval {

namespace {

bool in_range(unsigned char byte, unsigned char low, unsigned char high) { return byte >= low && byte <= high; }

// Returns how many bytes at text[pos] form a valid prefix of a sequence, and in
// *complete whether that prefix is a whole code point. The second-byte ranges
// exclude overlong forms, surrogates and code points above U+10FFFF.
size_t valid_prefix(std::string_view text, size_t pos, bool* complete) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  *complete = false;
  if (lead < 0x80) {
    *complete = true;
    return 1;
  }
  size_t need = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (in_range(lead, 0xC2, 0xDF)) {
    need = 1;
  } else if (lead == 0xE0) {
    need = 2, low = 0xA0;
  } else if (in_range(lead, 0xE1, 0xEC) || in_range(lead, 0xEE, 0xEF)) {
    need = 2;
  } else if (lead == 0xED) {
    need = 2, high = 0x9F;
  } else if (lead == 0xF0) {
    need = 3, low = 0x90;
  } else if (in_range(lead, 0xF1, 0xF3)) {
    need = 3;
  } else if (lead == 0xF4) {
    need = 3, high = 0x8F;
  } else {
    return 0;
  }
  size_t got = 1;
  for (size_t k = 0; k < need; ++k) {
    if (pos + got >= text.size()) return got;
    const unsigned char b = byte(pos + got);
    const bool ok = k == 0 ? in_range(b, low, high) : in_range(b, 0x80, 0xBF);
    if (!ok) return got;
    ++got;
  }
  *complete = true;
  return got;
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  bool complete = false;
  const size_t n = valid_prefix(text, pos, &complete);
  return complete ? n : 0;
}

size_t utf8_invalid_offset(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = utf8_sequence_length(text, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return text.size();
}

char32_t utf8_decode(std::string_view text, size_t pos, size_t* length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) {
    *length = 1;
    return lead;
  }
  if (lead < 0xE0) {
    *length = 2;
    return (char32_t(lead & 0x1F) << 6) | (byte(1) & 0x3F);
  }
  if (lead < 0xF0) {
    *length = 3;
    return (char32_t(lead & 0x0F) << 12) | (char32_t(byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
  }
  *length = 4;
  return (char32_t(lead & 0x07) << 18) | (char32_t(byte(1) & 0x3F) << 12) | (char32_t(byte(2) & 0x3F) << 6) |
         (byte(3) & 0x3F);
}

size_t utf8_previous(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_from_bytes_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    const size_t n = valid_prefix(bytes, pos, &complete);
    if (complete) {
      out.append(bytes.substr(pos, n));
      pos += n;
    } else {
      out += "\xEF\xBF\xBD";
      pos += n == 0 ? 1 : n;
    }
  }
  return out;
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace gpueval
