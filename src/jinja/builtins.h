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

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// Python's str % args, for the conversions %s %r %d %i %f %x %% (with width and precision).
std::string percent_format(const std::string& format, const Value& args);

}  // namespace gpueval::jinja
