// Template is the prompt language of task files (doc_to_text, doc_to_target, doc_to_choice,
// description): the subset of Jinja2, which lm-evaluation-harness renders those keys with,
// that field substitution needs. Literal text passes through unchanged (trailing newline
// included, as lm-eval's keep_trailing_newline=True); `{{ path }}` is replaced by a document
// field, where a path is a name followed by `.name`, `.0`, `[0]`, `[-1]` or `["key"]` steps.
// A path may end in `.strip()`, Python's str.strip() of the rendered value (leading and
// trailing whitespace removed, Unicode whitespace included), which lm-eval's MMLU template uses
// on its question. A path may instead end in `.index(<path>)`, Python's list.index(): the
// position of the first list entry equal to the other field's value (lm-eval's ARC target is
// `{{choices.label.index(answerKey)}}`); a value absent from the list is an error naming the
// document, as Python's ValueError fails lm-eval. A value renders as Jinja renders it, i.e. Python's str(): strings raw, numbers as Python
// prints them, true/false/null as True/False/None, lists and objects as Python literals
// (['a', 'b']). A path the document lacks is an error, as under lm-eval's StrictUndefined.
//
// Statements ({% %}), comments ({# #}), whitespace control ({{- -}}), filters (|) and other
// expressions are rejected when the template is parsed, with the file and line it came from;
// richer templates extend parse() and the Expression type without changing callers.
// A Template is immutable after parse() and safe to share between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval {

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
  struct Step {
    std::string key;              // object member; used when index is empty
    std::optional<int64_t> index; // list position (negative counts from the end)
  };
  struct Expression {
    std::string source;  // as written, for messages
    std::vector<Step> path;
    bool strip = false;  // ends in .strip()
    std::optional<std::vector<Step>> index_of;  // ends in .index(<field>): that field's position in the list
  };
  struct Segment {
    std::string literal;                   // text before the expression
    std::optional<Expression> expression;  // absent for trailing text
  };
  struct ExpressionParser;  // the inside of one {{ ... }} (template.cpp)

  const nlohmann::json& lookup(const std::vector<Step>& steps, const nlohmann::json& doc, const std::string& where) const;
  // The value of one placeholder: the field, its .strip()ped text or its .index() position.
  nlohmann::json evaluate(const Expression& e, const nlohmann::json& doc, const std::string& where) const;

  std::string text_;
  std::string name_;
  std::vector<Segment> segments_;
};

}  // namespace gpueval
