// Program is a parsed Jinja2 template (jinja/parser.h) that renders with Python's semantics
// as Jinja2 does: statements if/elif/else, for (tuple targets, `if` filter, `else`, the loop
// object: index, index0, revindex, revindex0, first, last, length, previtem, nextitem, depth,
// cycle, changed), set (names, tuples, `ns.attr` on a namespace, `{% set x %}...{% endset %}`), macro
// (positional and keyword arguments with defaults), filter blocks, break/continue and
// transformers' {% generation %}; expressions, filters, tests and methods of
// jinja/builtins.h; the globals range, namespace, dict, joiner, raise_exception and strftime_now.
// Scopes follow Jinja2's: a for body is a new scope every iteration (what it sets is gone
// after), an if is not, a macro call is, and a macro sees the scope it was defined in; a name a
// frame assigns may start Undefined there (jinja/frames.h).
//
// Undefined is lenient by default (Jinja2's Undefined: prints '', is false, iterates empty,
// fails when its attribute is read or it is computed with) or strict (StrictUndefined:
// printing, testing or iterating it fails too). Rendering errors are RenderError
// (jinja/value.h) with Python's exception type and message; raise_exception(msg) is a
// RenderError of type "TemplateError" with exactly msg. A filter or test outside the subset
// follows Jinja2's rule: inside an if statement or inline if-expression of its frame it raises
// TemplateRuntimeError "No filter named 'x' found." when evaluated; anywhere else it is refused at
// parse time, as a gpueval::Error "<where>:<line>: unsupported filter 'x'".
//
// Calls common only. A Program is immutable after parse() and may be rendered from several
// threads at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/frames.h"
#include "jinja/parser.h"
#include "jinja/syntax.h"
#include "jinja/value.h"

namespace gpueval::jinja {

struct RenderOptions {
  bool strict_undefined = false;
  // A name, attribute or item the context lacks is Value::missing_field, named by the
  // expression's text (task files: "references missing field 'choices.text[5]'").
  bool name_missing_fields = false;
  // strftime_now(format)'s clock: absent, the local time now.
  std::function<std::string(const std::string& format)> strftime_now;
};

class Program {
 public:
  static Program parse(const std::string& text, const std::string& where, const SyntaxOptions& options);
  // The program of a body parse_template gave (a caller may check it first, as task files do);
  // `source`: the text it read (its *source), which messages quote expressions from.
  static Program compile(Body body, const std::string& where, std::string source = "");

  // The template's variables, by name.
  using Variables = std::vector<std::pair<std::string, Value>>;

  // Renders with `context` (a dict Value) as the template's variables.
  std::string render(const Value& context, const RenderOptions& options) const;
  std::string render(Variables variables, const RenderOptions& options) const;

  // Whether the template is one {{ expression }} and nothing else; then output_value() is
  // that expression's value for `variables` (a list stays a list).
  bool is_single_output() const;
  Value output_value(Variables variables, const RenderOptions& options) const;

  const Body& body() const { return *body_; }

  const std::string& where() const { return where_; }

 private:
  std::shared_ptr<const Body> body_;
  std::shared_ptr<const FrameUndefined> frames_;  // of body_
  std::shared_ptr<const std::string> source_;  // what the expressions' offsets index
  std::string where_;
};

}  // namespace gpueval::jinja
