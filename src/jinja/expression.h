// The expressions of gpueval's Jinja subset: what may stand between {{ and }}, or in a statement's
// condition, of a task file's template (gpueval/template.h; chat templates use the general
// engine of jinja/engine.h instead), parsed once and evaluated per document the way Jinja2 (with Python
// values, as lm-evaluation-harness renders its templates) evaluates them. Calls common only.
//
//   literals      'text', "text" (escapes \n \t \r \\ \' \"), 12, 1.5, true/false/none
//                 (also True/False/None), list literals [a, b, ...]
//   names         a document field; `a.b`, `a.0`, `a["b"]`, `a[i]` (i any expression,
//                 negative from the end), slices `a[i:j]`, `a[i:j:k]` of strings and lists
//   methods       on strings: strip/lstrip/rstrip([chars]), split([sep[, maxsplit]]),
//                 lower(), upper(), replace(old, new), index(sub), startswith(x),
//                 endswith(x); on lists: index(x), count(x)
//   filters       x|int, x|join(sep), x|lower, x|upper, x|trim, x|length, x|string, x|first,
//                 x|last (Jinja's own: int("2.5") is 2, an unparsable one 0)
//   tests         x is [not] defined / undefined / none / string / number (a missing field,
//                 key or index is not defined, and testing it is no error)
//   operators     unary -, + (numbers, strings, lists), - * / // % (numbers), ~ (string
//                 concatenation), parentheses, not / and / or (Python's truth values; and/or
//                 give an operand), `a if cond else b` (the else part required); precedence
//                 as Jinja's: filters and tests bind tightest, then * / // %, then ~, then
//                 + -, then not, and, or, and the conditional loosest.
//
// Anything else (comparisons, `in`, calls of other functions, dict literals)
// is refused at parse time, naming the construct. Evaluation errors (a missing field, a type
// Python would reject, an index out of range, list.index of an absent value) name the
// document. Values are JSON, standing for the Python values (strings, int, float, bool,
// None, lists, dicts). Parsed expressions are immutable and shared freely between threads.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gpueval::jinja {

struct Node;

class Expression {
 public:
  // Parses `source` (the text between {{ and }}, whitespace control already removed);
  // `refuse(what)` is called with a description of an unsupported construct or a syntax error
  // and must throw.
  static Expression parse(const std::string& source, const std::function<void(const std::string&)>& refuse);

  // The value for `doc`; `fail_at(message)` must throw (it names the document).
  nlohmann::json evaluate(const nlohmann::json& doc, const std::function<void(const std::string&)>& fail_at) const;

  // The field path when the expression is a plain field reference (`a.b[0]`), for messages.
  const std::string& source() const { return source_; }

 private:
  std::shared_ptr<const Node> root_;
  std::string source_;
};

// Python's truth value of a JSON-held value (what `if`, `not`, `and` and `or` test).
bool truthy(const nlohmann::json& v);

// Python's ast.literal_eval for the literals above (strings, numbers, booleans, None and
// lists of them): nullopt when `text` is not one.
std::optional<nlohmann::json> literal_eval(const std::string& text);

}  // namespace gpueval::jinja
