#include "gpueval/template.h"

#include <cctype>

#include "common/python_format.h"
#include "common/strict_json.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void skip_spaces(const std::string& s, size_t& pos) {
  while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
}

}  // namespace

// Reads the inside of one {{ ... }}: a field name, then .key, .0, ["key"], [0] steps, and at the
// end optionally .strip() or .index(<field>). Anything else is refused as unsupported.
struct Template::ExpressionParser {
  const std::string& inner;  // the text between {{ and }}
  const std::string& text;   // the whole template, for messages
  const std::string& name;
  const std::string& where;
  size_t p = 0;
  Expression e;

  [[noreturn]] void unsupported(const std::string& what) const {
    fail(where, "{} {}: {} is not supported (only {{{{ field }}}} substitution is)", name, quote_untrusted(text),
         what);
  }
  [[noreturn]] void bad_expression(const std::string& why = "") const {
    unsupported("the expression '" + inner + "'" + why);
  }
  std::string read_while(bool (*keep)(char)) {
    std::string out;
    while (p < inner.size() && keep(inner[p])) out += inner[p++];
    return out;
  }
  static bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
  static bool name_char(char c) { return is_name_char(c); }

  Expression parse() {
    e.source = inner;
    skip_spaces(inner, p);
    if (p < inner.size() && inner[p] == '-') unsupported("whitespace control '{{-'");
    if (p >= inner.size() || !is_name_start(inner[p])) bad_expression();
    e.path.push_back(Step{read_while(name_char), std::nullopt});
    while (true) {
      skip_spaces(inner, p);
      if (p >= inner.size()) break;
      if (inner[p] == '.') {
        ++p;
        if (attribute()) break;
      } else if (inner[p] == '[') {
        ++p;
        subscript();
      } else if (inner[p] == '-' && p + 1 == inner.size()) {
        unsupported("whitespace control '-}}'");
      } else if (inner[p] == '|') {
        unsupported("the filter in '" + inner + "'");
      } else {
        bad_expression();
      }
    }
    return std::move(e);
  }

  // After a '.': a list position, a key, or a final .strip() / .index(field). True when final.
  bool attribute() {
    if (p < inner.size() && digit(inner[p])) {
      e.path.push_back(Step{"", std::stoll(read_while(digit))});
      return false;
    }
    if (p >= inner.size() || !is_name_start(inner[p])) bad_expression();
    const std::string key = read_while(name_char);
    if (key == "strip" && inner.compare(p, 2, "()") == 0) {
      p += 2;
      skip_spaces(inner, p);
      if (p != inner.size()) bad_expression(" (.strip() must come last)");
      e.strip = true;
      return true;
    }
    if (key == "index" && p < inner.size() && inner[p] == '(') {
      index_of();
      return true;
    }
    e.path.push_back(Step{key, std::nullopt});
    return false;
  }

  // .index(<field>): the position of that field's value in the list the path reads.
  void index_of() {
    const size_t end = inner.find(')', p);
    if (end == std::string::npos) bad_expression();
    const std::string argument = inner.substr(p + 1, end - p - 1);
    const Template arg = Template::parse("{{" + argument + "}}", name, where);
    const Expression& a = *arg.segments_[0].expression;
    if (!arg.is_single_expression() || a.strip || a.index_of) bad_expression(" (.index() takes a field)");
    p = end + 1;
    skip_spaces(inner, p);
    if (p != inner.size()) bad_expression(" (.index() must come last)");
    e.index_of = a.path;
  }

  // After a '[': a quoted key or a (possibly negative) list position, then ']'.
  void subscript() {
    skip_spaces(inner, p);
    if (p < inner.size() && (inner[p] == '"' || inner[p] == '\'')) {
      const char quote = inner[p++];
      const size_t end = inner.find(quote, p);
      if (end == std::string::npos) bad_expression();
      e.path.push_back(Step{inner.substr(p, end - p), std::nullopt});
      p = end + 1;
    } else {
      std::string digits;
      if (p < inner.size() && inner[p] == '-') digits += inner[p++];
      digits += read_while(digit);
      if (digits.empty() || digits == "-") bad_expression();
      e.path.push_back(Step{"", std::stoll(digits)});
    }
    skip_spaces(inner, p);
    if (p >= inner.size() || inner[p] != ']') bad_expression();
    ++p;
  }
};

Template Template::parse(const std::string& text, const std::string& name, const std::string& where) {
  Template t;
  t.text_ = text;
  t.name_ = name;
  std::string literal;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] != '{' || pos + 1 >= text.size()) {
      literal += text[pos++];
      continue;
    }
    const char next = text[pos + 1];
    const std::string empty;
    if (next == '%') ExpressionParser{empty, text, name, where}.unsupported("a '{%' statement");
    if (next == '#') ExpressionParser{empty, text, name, where}.unsupported("a '{#' comment");
    if (next != '{') {
      literal += text[pos++];
      continue;
    }
    const size_t close = text.find("}}", pos + 2);
    if (close == std::string::npos) fail(where, "{} {}: '{{{{' without a closing '}}}}'", name, quote_untrusted(text));
    const std::string inner = text.substr(pos + 2, close - pos - 2);
    t.segments_.push_back(Segment{std::move(literal), ExpressionParser{inner, text, name, where}.parse()});
    literal.clear();
    pos = close + 2;
  }
  if (!literal.empty() || t.segments_.empty()) t.segments_.push_back(Segment{std::move(literal), std::nullopt});
  return t;
}

bool Template::is_single_expression() const {
  return segments_.size() == 1 && segments_[0].literal.empty() && segments_[0].expression.has_value();
}

const nlohmann::json& Template::lookup(const std::vector<Step>& steps, const nlohmann::json& doc,
                                      const std::string& where) const {
  const nlohmann::json* node = &doc;
  std::string path;
  for (const Step& step : steps) {
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

nlohmann::json Template::evaluate(const Expression& e, const nlohmann::json& doc, const std::string& where) const {
  const nlohmann::json& value = lookup(e.path, doc, where);
  if (e.strip) return py::strip(py::str(value));
  if (!e.index_of) return value;
  // Python's list.index(x): the first position equal to x, a ValueError when there is none.
  const nlohmann::json& needle = lookup(*e.index_of, doc, where);
  if (!value.is_array()) {
    fail(where, "{} {}: .index() of {}, which is not a list", name_, quote_untrusted(text_), py::repr(value));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == needle) return static_cast<int64_t>(i);
  }
  fail(where, "{} {}: {} is not in list {}", name_, quote_untrusted(text_), py::repr(needle), py::repr(value));
}

std::string Template::render(const nlohmann::json& doc, const std::string& where) const {
  std::string out;
  for (const Segment& segment : segments_) {
    out += segment.literal;
    if (segment.expression) out += py::str(evaluate(*segment.expression, doc, where));
  }
  return out;
}

nlohmann::json Template::value(const nlohmann::json& doc, const std::string& where) const {
  if (is_single_expression()) return evaluate(*segments_[0].expression, doc, where);
  return render(doc, where);
}

}  // namespace gpueval
