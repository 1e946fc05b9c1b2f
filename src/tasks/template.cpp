#include "gpueval/template.h"

#include <cctype>

#include "common/python_format.h"
#include "common/strict_json.h"
#include "gpueval/error.h"
#include "tasks/jinja_expression.h"

namespace gpueval {
namespace {

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// The end of the {{ ... }} whose inside starts at `pos`: the first "}}" outside a string literal.
size_t closing_braces(const std::string& text, size_t pos) {
  char quote = 0;
  for (size_t i = pos; i + 1 < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '}' && text[i + 1] == '}') {
      return i;
    }
  }
  return std::string::npos;
}

}  // namespace

Template Template::parse(const std::string& text, const std::string& name, const std::string& where) {
  Template t;
  t.text_ = text;
  t.name_ = name;
  auto refuse = [&](const std::string& what) { fail(where, "{} {}: {}", name, quote_untrusted(text), what); };
  std::string literal;
  bool strip_next = false;  // the previous tag ended in '-}}'
  size_t pos = 0;
  while (pos < text.size()) {
    if (strip_next) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
      strip_next = false;
      continue;
    }
    if (text[pos] != '{' || pos + 1 >= text.size() || (text[pos + 1] != '{' && text[pos + 1] != '%' && text[pos + 1] != '#')) {
      literal += text[pos++];
      continue;
    }
    const char kind = text[pos + 1];
    if (kind == '%') refuse("a '{%' statement is not supported (gpueval's templates have no statements)");
    if (kind == '#') {
      const size_t close = text.find("#}", pos + 2);
      if (close == std::string::npos) refuse("'{#' without a closing '#}'");
      if (text[pos + 2] == '-') {
        while (!literal.empty() && is_space(literal.back())) literal.pop_back();
      }
      strip_next = close > pos + 2 && text[close - 1] == '-';
      pos = close + 2;
      continue;
    }
    size_t begin = pos + 2;
    const size_t close = closing_braces(text, begin);
    if (close == std::string::npos) refuse("'{{' without a closing '}}'");
    size_t end = close;
    if (begin < end && text[begin] == '-') {
      while (!literal.empty() && is_space(literal.back())) literal.pop_back();
      ++begin;
    }
    if (end > begin && text[end - 1] == '-') {
      strip_next = true;
      --end;
    }
    const std::string inner = text.substr(begin, end - begin);
    auto expression = std::make_shared<const jinja::Expression>(jinja::Expression::parse(inner, refuse));
    t.segments_.push_back(Segment{std::move(literal), std::move(expression)});
    literal.clear();
    pos = close + 2;
  }
  if (!literal.empty() || t.segments_.empty()) t.segments_.push_back(Segment{std::move(literal), nullptr});
  return t;
}

bool Template::is_single_expression() const {
  return segments_.size() == 1 && segments_[0].literal.empty() && segments_[0].expression != nullptr;
}

nlohmann::json Template::evaluate(const jinja::Expression& e, const nlohmann::json& doc, const std::string& where) const {
  return e.evaluate(doc, [&](const std::string& message) {
    fail(where, "{} {}{}", name_, quote_untrusted(text_), message);
  });
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
