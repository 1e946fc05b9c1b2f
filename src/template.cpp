#include "gpueval/template.h"

#include <cctype>

#include "gpueval/error.h"
#include "python_format.h"
#include "strict_json.h"

namespace gpueval {
namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void skip_spaces(const std::string& s, size_t& pos) {
  while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
}

}  // namespace

Template Template::parse(const std::string& text, const std::string& name, const std::string& where) {
  Template t;
  t.text_ = text;
  t.name_ = name;
  auto unsupported = [&](const std::string& what) {
    fail(where, "{} {}: {} is not supported (only {{{{ field }}}} substitution is)", name, quote_untrusted(text),
         what);
  };
  std::string literal;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] != '{' || pos + 1 >= text.size()) {
      literal += text[pos++];
      continue;
    }
    const char next = text[pos + 1];
    if (next == '%') unsupported("a '{%' statement");
    if (next == '#') unsupported("a '{#' comment");
    if (next != '{') {
      literal += text[pos++];
      continue;
    }
    const size_t close = text.find("}}", pos + 2);
    if (close == std::string::npos) fail(where, "{} {}: '{{{{' without a closing '}}}}'", name, quote_untrusted(text));
    const std::string inner = text.substr(pos + 2, close - pos - 2);
    Expression e;
    e.source = inner;
    size_t p = 0;
    skip_spaces(inner, p);
    if (p < inner.size() && inner[p] == '-') unsupported("whitespace control '{{-'");
    if (p >= inner.size() || !is_name_start(inner[p])) unsupported("the expression '" + inner + "'");
    std::string first;
    while (p < inner.size() && is_name_char(inner[p])) first += inner[p++];
    e.path.push_back(Step{first, std::nullopt});
    while (true) {
      skip_spaces(inner, p);
      if (p >= inner.size()) break;
      if (inner[p] == '.') {
        ++p;
        if (p < inner.size() && std::isdigit(static_cast<unsigned char>(inner[p]))) {
          std::string digits;
          while (p < inner.size() && std::isdigit(static_cast<unsigned char>(inner[p]))) digits += inner[p++];
          e.path.push_back(Step{"", std::stoll(digits)});
        } else if (p < inner.size() && is_name_start(inner[p])) {
          std::string key;
          while (p < inner.size() && is_name_char(inner[p])) key += inner[p++];
          if (key == "strip" && inner.compare(p, 2, "()") == 0) {
            p += 2;
            skip_spaces(inner, p);
            if (p != inner.size()) unsupported("the expression '" + inner + "' (.strip() must come last)");
            e.strip = true;
            break;
          }
          e.path.push_back(Step{key, std::nullopt});
        } else {
          unsupported("the expression '" + inner + "'");
        }
      } else if (inner[p] == '[') {
        ++p;
        skip_spaces(inner, p);
        if (p < inner.size() && (inner[p] == '"' || inner[p] == '\'')) {
          const char quote = inner[p++];
          const size_t end = inner.find(quote, p);
          if (end == std::string::npos) unsupported("the expression '" + inner + "'");
          e.path.push_back(Step{inner.substr(p, end - p), std::nullopt});
          p = end + 1;
        } else {
          std::string digits;
          if (p < inner.size() && inner[p] == '-') digits += inner[p++];
          while (p < inner.size() && std::isdigit(static_cast<unsigned char>(inner[p]))) digits += inner[p++];
          if (digits.empty() || digits == "-") unsupported("the expression '" + inner + "'");
          e.path.push_back(Step{"", std::stoll(digits)});
        }
        skip_spaces(inner, p);
        if (p >= inner.size() || inner[p] != ']') unsupported("the expression '" + inner + "'");
        ++p;
      } else if (inner[p] == '-' && p + 1 == inner.size()) {
        unsupported("whitespace control '-}}'");
      } else if (inner[p] == '|') {
        unsupported("the filter in '" + inner + "'");
      } else {
        unsupported("the expression '" + inner + "'");
      }
    }
    t.segments_.push_back(Segment{std::move(literal), std::move(e)});
    literal.clear();
    pos = close + 2;
  }
  if (!literal.empty() || t.segments_.empty()) t.segments_.push_back(Segment{std::move(literal), std::nullopt});
  return t;
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

std::string python_strip(const std::string& s) {
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

}  // namespace

bool Template::is_single_expression() const {
  return segments_.size() == 1 && segments_[0].literal.empty() && segments_[0].expression.has_value();
}

const nlohmann::json& Template::lookup(const Expression& e, const nlohmann::json& doc, const std::string& where) const {
  const nlohmann::json* node = &doc;
  std::string path;
  for (const Step& step : e.path) {
    if (step.index) {
      path += "[" + std::to_string(*step.index) + "]";
      int64_t i = *step.index;
      if (node->is_array() && i < 0) i += static_cast<int64_t>(node->size());
      if (!node->is_array() || i < 0 || i >= static_cast<int64_t>(node->size())) {
        fail(where, "{} {} references missing field '{}'", name_, quote_untrusted(text_), path);
      }
      node = &(*node)[static_cast<size_t>(i)];
    } else {
      path += (path.empty() ? "" : ".") + step.key;
      if (!node->is_object()) fail(where, "{} {} references missing field '{}'", name_, quote_untrusted(text_), path);
      const auto it = node->find(step.key);
      if (it == node->end()) fail(where, "{} {} references missing field '{}'", name_, quote_untrusted(text_), path);
      node = &*it;
    }
  }
  return *node;
}

std::string Template::render(const nlohmann::json& doc, const std::string& where) const {
  std::string out;
  for (const Segment& segment : segments_) {
    out += segment.literal;
    if (!segment.expression) continue;
    const std::string text = py::str(lookup(*segment.expression, doc, where));
    out += segment.expression->strip ? python_strip(text) : text;
  }
  return out;
}

nlohmann::json Template::value(const nlohmann::json& doc, const std::string& where) const {
  if (is_single_expression() && !segments_[0].expression->strip) return lookup(*segments_[0].expression, doc, where);
  return render(doc, where);
}

}  // namespace gpueval
