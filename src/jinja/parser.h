// The parser of the template engine: Jinja2's lexer rules (tags {{ }} {% %} {# #}, `-` and `+`
// whitespace control, trim_blocks and lstrip_blocks as Jinja2's Lexer applies them, {% raw %},
// the newline normalisation and keep_trailing_newline) and its grammar with its operator
// precedence, into the syntax tree of jinja/syntax.h. A statement outside the subset the
// engine runs (include, import, extends, block, with, ...) and every syntax error are refused
// here, before anything renders, as a SyntaxError (a gpueval::Error "<where>:<line>: <what>").
// Each expression keeps where its text is (Expr::begin, end). Calls
// common only. Stateless; thread-safe.
#pragma once

#include <string>
#include <utility>

#include "gpueval/error.h"
#include "jinja/syntax.h"

namespace gpueval::jinja {

// A template refused when it loads: what() is "<where>:<line>: <reason>"; line() and reason()
// let a caller word it its own way (a task file's template names the key it came from).
class SyntaxError : public Error {
 public:
  SyntaxError(const std::string& where, int line, std::string reason)
      : Error(fmt::format("{}:{}: {}", where, line, reason)), line_(line), reason_(std::move(reason)) {}
  int line() const { return line_; }
  const std::string& reason() const { return reason_; }

 private:
  int line_;
  std::string reason_;
};

struct SyntaxOptions {
  bool trim_blocks = false;  // drop the first newline after a block or comment tag
  bool lstrip_blocks = false;  // drop spaces and tabs from a line's start to a block tag
  bool keep_trailing_newline = false;  // Jinja2's default drops one newline ending the template
};

// Parses `text`; `where` names it in errors ("chat_template.jinja"). `*source`, when given,
// receives the text the expressions' offsets (Expr::begin, end) index: `text` with its line ends
// normalised.
Body parse_template(const std::string& text, const std::string& where, const SyntaxOptions& options,
                    std::string* source = nullptr);

}  // namespace gpueval::jinja
