#include "gpueval/template.h"

#include <cctype>

#include "common/python_format.h"
#include "common/strict_json.h"
#include "gpueval/error.h"
#include "jinja/expression.h"

namespace gpueval {
namespace {

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// The end of the {{ ... }} or {% ... %} whose inside starts at `pos`: the first "}}" (or "%}")
// outside a string literal.
size_t closing_tag(const std::string& text, size_t pos, char close) {
  char quote = 0;
  for (size_t i = pos; i + 1 < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == close && text[i + 1] == '}') {
      return i;
    }
  }
  return std::string::npos;
}

std::string trimmed(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

constexpr size_t kMaxIfNesting = 32;

}  // namespace

Template Template::parse(const std::string& text, const std::string& name, const std::string& where) {
  Template t;
  t.text_ = text;
  t.name_ = name;
  auto refuse = [&](const std::string& what) { fail(where, "{} {}: {}", name, quote_untrusted(text), what); };
  // The open conditionals, innermost last, and the body text goes to now.
  struct Open {
    std::shared_ptr<IfBlock> block;
    bool in_else = false;
  };
  std::vector<Open> open;
  std::vector<Segment>* body = &t.segments_;
  std::string literal;
  bool strip_next = false;  // the previous tag ended in '-}}' or '-%}'
  auto flush = [&] {
    if (!literal.empty()) body->push_back(Segment{std::move(literal), nullptr, nullptr});
    literal.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    if (strip_next) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
      strip_next = false;
      continue;
    }
    if (text[pos] != '{' || pos + 1 >= text.size() ||
        (text[pos + 1] != '{' && text[pos + 1] != '%' && text[pos + 1] != '#')) {
      literal += text[pos++];
      continue;
    }
    const char kind = text[pos + 1];
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
    const size_t close = closing_tag(text, begin, kind == '%' ? '%' : '}');
    if (close == std::string::npos) refuse(kind == '%' ? "'{%' without a closing '%}'" : "'{{' without a closing '}}'");
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
    pos = close + 2;
    if (kind == '{') {
      auto expression = std::make_shared<const jinja::Expression>(jinja::Expression::parse(inner, refuse));
      body->push_back(Segment{std::move(literal), std::move(expression), nullptr});
      literal.clear();
      continue;
    }
    // A statement: its keyword, then what follows it.
    const std::string statement = trimmed(inner);
    size_t k = 0;
    while (k < statement.size() && (std::isalnum(static_cast<unsigned char>(statement[k])) || statement[k] == '_')) ++k;
    const std::string keyword = statement.substr(0, k), rest = trimmed(statement.substr(k));
    auto no_argument = [&] {
      if (!rest.empty())
        refuse(fmt::format("'{{% {} %}}' takes nothing after it, not {}", keyword, quote_untrusted(rest)));
    };
    if (keyword == "if") {
      if (rest.empty()) refuse("'{% if %}' without a condition");
      if (open.size() >= kMaxIfNesting) refuse(fmt::format("'{{% if %}}' nested more than {} deep", kMaxIfNesting));
      auto block = std::make_shared<IfBlock>();
      block->branches.emplace_back(std::make_shared<const jinja::Expression>(jinja::Expression::parse(rest, refuse)),
                                   std::vector<Segment>());
      body->push_back(Segment{std::move(literal), nullptr, block});
      literal.clear();
      open.push_back(Open{block});
      body = &block->branches.back().second;
    } else if (keyword == "elif" || keyword == "else" || keyword == "endif") {
      if (open.empty()) refuse(fmt::format("'{{% {} %}}' without an open '{{% if %}}'", keyword));
      flush();
      Open& o = open.back();
      if (keyword != "endif" && o.in_else) refuse(fmt::format("'{{% {} %}}' after '{{% else %}}'", keyword));
      if (keyword == "elif") {
        if (rest.empty()) refuse("'{% elif %}' without a condition");
        o.block->branches.emplace_back(
            std::make_shared<const jinja::Expression>(jinja::Expression::parse(rest, refuse)), std::vector<Segment>());
        body = &o.block->branches.back().second;
      } else if (keyword == "else") {
        no_argument();
        o.in_else = true;
        body = &o.block->otherwise;
      } else {
        no_argument();
        open.pop_back();
        if (open.empty()) {
          body = &t.segments_;
        } else {
          Open& outer = open.back();
          body = outer.in_else ? &outer.block->otherwise : &outer.block->branches.back().second;
        }
      }
    } else {
      refuse(fmt::format("a '{{% {} %}}' statement is not supported (gpueval's templates have if/elif/else/endif only)",
                         keyword.empty() ? statement.substr(0, 20) : keyword));
    }
  }
  if (!open.empty()) refuse("'{% if %}' without '{% endif %}'");
  flush();
  if (t.segments_.empty()) t.segments_.push_back(Segment{std::string(), nullptr, nullptr});
  return t;
}

bool Template::is_single_expression() const {
  return segments_.size() == 1 && segments_[0].literal.empty() && segments_[0].expression != nullptr &&
         segments_[0].conditional == nullptr;
}

nlohmann::json Template::evaluate(const jinja::Expression& e, const nlohmann::json& doc,
                                  const std::string& where) const {
  return e.evaluate(
      doc, [&](const std::string& message) { fail(where, "{} {}{}", name_, quote_untrusted(text_), message); });
}

void Template::render(const std::vector<Segment>& body, const nlohmann::json& doc, const std::string& where,
                      std::string& out) const {
  for (const Segment& segment : body) {
    out += segment.literal;
    if (segment.expression) out += py::str(evaluate(*segment.expression, doc, where));
    if (!segment.conditional) continue;
    const IfBlock& block = *segment.conditional;
    const std::vector<Segment>* taken = &block.otherwise;
    for (const auto& [condition, branch] : block.branches) {
      if (jinja::truthy(evaluate(*condition, doc, where))) {
        taken = &branch;
        break;
      }
    }
    render(*taken, doc, where, out);
  }
}

std::string Template::render(const nlohmann::json& doc, const std::string& where) const {
  std::string out;
  render(segments_, doc, where, out);
  return out;
}

nlohmann::json Template::value(const nlohmann::json& doc, const std::string& where) const {
  if (is_single_expression()) return evaluate(*segments_[0].expression, doc, where);
  return render(doc, where);
}

}  // namespace gpueval
