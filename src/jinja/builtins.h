// What the template engine (jinja/engine.h) looks up by name rather than parses: Jinja2's
// filters and tests, Python's operators on values, attribute and item access as Jinja2's
// sandboxed environment does it (`a.b` tries the attribute, then the key; `a["b"]` the key,
// then the attribute; neither gives an Undefined saying what was missing), and the str,
// dict and list methods a template may call. Calls common only. Stateless; thread-safe.
#pragma once

#include <string>

#include "jinja/value.h"

namespace gpueval::jinja {

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// a <op> b for + - * / // % ** ~; `in` as Python's `a in b`.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// A filter or test is one row of a table, name -> function; aliases (`d`, `equalto`) share a
// function, which is given the name it was called by. find_* gives nullptr for a name the table
// lacks: Jinja2 raises for that only when the filter or test is evaluated (engine.h).
using FilterFn = Value (*)(const std::string& name, const Value& v, CallArgs& args);
using TestFn = bool (*)(const std::string& name, const Value& v, CallArgs& args);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
// The named filter or test applied; one the table lacks is TemplateRuntimeError "No filter named 'x'."
// (what Jinja2's map, select and their kin raise).
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// Python's str % args, for the conversions %s %r %d %i %f %x %% (with width and precision).
std::string percent_format(const std::string& format, const Value& args);

}  // namespace gpueval::jinja
