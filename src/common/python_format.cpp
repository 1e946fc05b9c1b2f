#include "common/python_format.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "common/utf8.h"

namespace gpueval::py {
namespace {

// Python's str.isprintable() is false for categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other
// than the space; these are the ranges of those that text in task files plausibly holds.
bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD || c == 0x061C || c == 0x1680 || c == 0x180E) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000 || (c >= 0xE0000 && c <= 0xE007F)) return false;
  return true;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    size_t length = utf8_sequence_length(s, pos);
    if (length == 0) {  // not UTF-8: Python strings cannot hold this, show the byte
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[pos]));
      ++pos;
      continue;
    }
    const char32_t c = utf8_decode(s, pos, &length);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      out.append(s.substr(pos, length));
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
    pos += length;
  }
  out += quote;
  return out;
}

template <typename Json>
std::string value_repr(const Json& value, bool top_level_str);

template <typename Json>
std::string container_repr(const Json& value) {
  std::string out;
  if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ", ";
      first = false;
      out += value_repr(item, false);
    }
    out += ']';
  } else {
    out += '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += string_repr(it.key());
      out += ": ";
      out += value_repr(it.value(), false);
    }
    out += '}';
  }
  return out;
}

template <typename Json>
std::string value_repr(const Json& value, bool top_level_str) {
  switch (value.type()) {
    case Json::value_t::string: {
      const auto& s = value.template get_ref<const std::string&>();
      return top_level_str ? s : string_repr(s);
    }
    case Json::value_t::boolean: return value.template get<bool>() ? "True" : "False";
    case Json::value_t::null: return "None";
    case Json::value_t::number_integer: return std::to_string(value.template get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(value.template get<uint64_t>());
    case Json::value_t::number_float: return float_repr(value.template get<double>());
    case Json::value_t::array:
    case Json::value_t::object: return container_repr(value);
    default: return "None";  // binary and discarded values do not occur in parsed documents
  }
}

void append_json_float(std::string& out, double x) {
  if (std::isnan(x)) {
    out += "NaN";
  } else if (std::isinf(x)) {
    out += x > 0 ? "Infinity" : "-Infinity";
  } else {
    out += float_repr(x);
  }
}

template <typename Json>
void dump(std::string& out, const Json& value, int indent, int level) {
  switch (value.type()) {
    case Json::value_t::string: append_json_string(out, value.template get_ref<const std::string&>()); return;
    case Json::value_t::boolean: out += value.template get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer: out += std::to_string(value.template get<int64_t>()); return;
    case Json::value_t::number_unsigned: out += std::to_string(value.template get<uint64_t>()); return;
    case Json::value_t::number_float: append_json_float(out, value.template get<double>()); return;
    case Json::value_t::array:
    case Json::value_t::object: break;
    default: out += "null"; return;
  }
  const bool is_array = value.is_array();
  if (value.empty()) {
    out += is_array ? "[]" : "{}";
    return;
  }
  out += is_array ? '[' : '{';
  const std::string inner = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (level + 1)), ' ') : "";
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!first) out += indent >= 0 ? "," : ", ";
    first = false;
    out += inner;
    if (!is_array) {
      append_json_string(out, it.key());
      out += ": ";
    }
    dump(out, it.value(), indent, level + 1);
  }
  if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * level), ' ');
  out += is_array ? ']' : '}';
}

}  // namespace

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip, as Python's repr picks them; then Python's layout:
  // positional when the decimal exponent is in [-4, 16), scientific otherwise.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));  // "-d.ddde+XX"
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const int decpt = exponent + 1;  // digits are 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt < n) {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    } else {
      out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return out;
}

std::string str(const nlohmann::json& value) { return value_repr(value, true); }
std::string str(const nlohmann::ordered_json& value) { return value_repr(value, true); }
std::string repr(const nlohmann::json& value) { return value_repr(value, false); }
std::string repr(const nlohmann::ordered_json& value) { return value_repr(value, false); }

std::string json_dumps(const nlohmann::json& value, int indent) {
  std::string out;
  dump(out, value, indent, 0);
  return out;
}

std::string json_dumps(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  dump(out, value, indent, 0);
  return out;
}

namespace {

// The length of the Unicode whitespace code point (as Python's str.isspace() defines it) that
// starts s[pos] or ends just before s[end] (backward), or 0.
size_t space_at(const std::string& s, size_t pos) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  static const char* const kWide[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003",
                                      "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
                                      "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  for (const char* w : kWide) {
    const size_t n = std::char_traits<char>::length(w);
    if (s.compare(pos, n, w) == 0) return n;
  }
  return 0;
}

}  // namespace

std::string strip(const std::string& s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t n = space_at(s, begin);
    if (n == 0) break;
    begin += n;
  }
  size_t end = s.size();
  while (end > begin) {
    // Whitespace code points are 1 to 3 bytes long in UTF-8.
    size_t n = 0;
    for (size_t len = 1; len <= 3 && len <= end - begin; ++len) {
      if (space_at(s, end - len) == len) {
        n = len;
        break;
      }
    }
    if (n == 0) break;
    end -= n;
  }
  return s.substr(begin, end - begin);
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < s.size();) {
    // Only ensure_ascii needs the code point; otherwise a byte at a time (UTF-8's multi-byte
    // sequences never hold a byte below 0x80).
    size_t length = 1;
    char32_t c = static_cast<unsigned char>(s[pos]);
    if (ensure_ascii && c >= 0x80) {
      length = utf8_sequence_length(s, pos);
      if (length == 0) {
        out += s[pos++];  // not UTF-8: the byte as is
        continue;
      }
      c = utf8_decode(s, pos, &length);
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c > 0xFFFF) {
            const char32_t u = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          out.append(s, pos, length);
        }
    }
    pos += length;
  }
  out += '"';
}

}  // namespace gpueval::py
