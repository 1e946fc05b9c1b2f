// Template (src/jinja/template.cpp, which calls common and the rest of jinja/ only) is the prompt
// language of task files (doc_to_text, doc_to_target, doc_to_choice, description): Jinja2 as
// lm-evaluation-harness renders those keys, run on gpueval's one template engine
// (jinja/engine.h) with lm-eval's environment: StrictUndefined, keep_trailing_newline=True, no
// trim_blocks or lstrip_blocks. Literal text passes through unchanged; `{{ expression }}` is
// replaced by Python's str() of its value (strings raw, True/False/None, lists and dicts as
// Python literals: ['a', 'b']).
//
// Task files may use the subset of Jinja2 that lm-eval's own task files use, checked when the
// template is parsed:
//   expressions   document fields with `.name`, `.0`, `[i]`, `["key"]` and slices `[i:j:k]`;
//                 string, number, True/False/None and [list] literals; the str, list and dict
//                 methods of jinja/builtins.h (`text.split(' ')`, `choices.label.index(x)`);
//                 + - * / // % ** ~, unary - and +, not / and / or, `a if c else b` (its else
//                 part required), parentheses
//   filters       int, join, lower, upper, trim, length, string, first, last
//   tests         defined, undefined, none, string, number (without arguments)
//   statements    {% if %}...{% elif %}...{% else %}...{% endif %}, {% raw %}, {# comments #}
//                 and the whitespace control `-` and `+`
// Anything else (comparisons, `in`, calls of functions, dict and tuple literals, keyword
// arguments, other filters and tests, for/set/macro and the other statements) is refused at
// parse time as "<where>: <name> '<text>': <the construct> is not supported (...)"; a syntax
// error as "<where>: <name> '<text>': [line N: ]<what Jinja2's parser would say>".
//
// A field the document lacks is an error when it is used, as under StrictUndefined (`x is
// defined` tests it freely): "<doc>: <name> '<text>' references missing field 'choices.text[5]'",
// the field named as the template wrote it; so is anything Python would reject, with Python's
// message ("<doc>: <name> '<text>': unsupported operand type(s) for +: 'str' and 'int'").
// A Template is immutable after parse() and safe to share between threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval {

namespace jinja {
class Program;
class Value;
}  // namespace jinja

class Template {
 public:
  // `name` says what the template is for in messages ("doc_to_text"); `where` is where its
  // text was defined ("tasks/x.yaml:4"), for syntax errors.
  static Template parse(const std::string& text, const std::string& name, const std::string& where);

  const std::string& text() const { return text_; }
  const std::string& name() const { return name_; }
  // True when the template is one placeholder and nothing else ("{{choices}}").
  bool is_single_expression() const;

  // Renders the template for `doc`; `where` names the document ("data.jsonl:12") in the
  // Error thrown for a missing field.
  std::string render(const nlohmann::json& doc, const std::string& where) const;
  // The value a single-expression template reads, with its JSON type (a list stays a list);
  // for any other template the rendered string.
  nlohmann::json value(const nlohmann::json& doc, const std::string& where) const;

 private:
  [[noreturn]] void fail_rendering(const std::string& where) const;
  // The fields it reads, as the engine's values.
  std::vector<std::pair<std::string, jinja::Value>> variables(const nlohmann::json& doc) const;

  std::string text_;
  std::string name_;
  std::shared_ptr<const jinja::Program> program_;
  std::vector<std::string> fields_;  // the document's fields it reads (only these are handed to the engine)
};

// Python's ast.literal_eval of a rendered value, as lm-eval reads a doc_to_choice or
// doc_to_target that renders to a list ("['a', 'b']"): strings, numbers, True/False/None and
// lists of them; nullopt when `text` is not such a literal.
std::optional<nlohmann::json> python_literal(const std::string& text);

}  // namespace gpueval
