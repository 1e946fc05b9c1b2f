// Template (src/jinja/, which calls common only) is the prompt language of task files (doc_to_text,
// doc_to_target, doc_to_choice, description): the subset of Jinja2, which lm-evaluation-harness renders those keys
// with, that lm-eval's own task files use. Literal text passes through unchanged (trailing newline included, as
// lm-eval's keep_trailing_newline=True); `{{ expression }}` is replaced by the expression's value, rendered as Jinja
// renders it, i.e. Python's str(): strings raw, numbers as Python prints them, true/false/none as True/False/None,
// lists and dicts as Python literals (['a', 'b']). Expressions (src/jinja/expression.h) are document fields with
// `.name`, `.0`, `[i]`, `["key"]` and slice `[i:j]` steps, string/number/list literals
// (`{{[sol1, sol2]}}`), the str/list methods strip, lstrip, rstrip, split, lower, upper,
// replace, index, startswith, endswith, count, the filters int, join, lower, upper, trim,
// length, string, first, last, and + - * / // % ~ with parentheses (`{{(label|int) - 1}}`,
// `{{text.split(' ')[:-1]|join(' ')}}`). The one statement is the conditional,
// `{% if cond %}...{% elif cond %}...{% else %}...{% endif %}` (nested at most 32 deep; a
// condition is any expression, tested by Python's truth value: lm-eval's mbpp target reads
// `{% if is_fewshot is defined %}`); as in lm-eval's Jinja environment there is no trim_blocks
// or lstrip_blocks, so the text around a tag stays as written. `{{-`, `-}}`, `{%-` and `-%}`
// strip the whitespace before or after, `{# ... #}` is a comment. A field the document lacks is an error, as under
// lm-eval's StrictUndefined, and so is anything Python would reject (list.index of an absent value, a str + int); the
// error names the document.
//
// Every other statement ({% for %}, {% set %}, ...) and every expression outside the subset
// (comparisons, function calls, dict literals, unknown filters) is rejected when the template
// is parsed, with the file and line it came from and the construct.
// A Template is immutable after parse() and safe to share between threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval {

namespace jinja {
class Expression;
}

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
  struct IfBlock;
  // Literal text, then at most one of an expression or a conditional (neither: trailing text).
  struct Segment {
    std::string literal;
    std::shared_ptr<const jinja::Expression> expression;
    std::shared_ptr<const IfBlock> conditional;
  };
  struct IfBlock {
    std::vector<std::pair<std::shared_ptr<const jinja::Expression>, std::vector<Segment>>> branches;  // if, elifs
    std::vector<Segment> otherwise;  // else
  };

  nlohmann::json evaluate(const jinja::Expression& e, const nlohmann::json& doc, const std::string& where) const;
  void render(const std::vector<Segment>& body, const nlohmann::json& doc, const std::string& where,
              std::string& out) const;

  std::string text_;
  std::string name_;
  std::vector<Segment> segments_;
};

}  // namespace gpueval
