#include "jinja/value.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/python_format.h"
#include "common/python_str.h"
#include "common/utf8.h"

namespace gpueval::jinja {

Value Value::undefined(std::string message, bool security) {
  Value v;
  v.kind_ = Kind::kUndefined;
  v.int_ = security ? kUnsafe : 0;
  v.string_ = std::move(message);
  return v;
}

Value Value::missing_field(std::string source) {
  Value v = undefined(std::move(source));
  v.int_ = kMissingField;
  return v;
}

Value Value::list(std::vector<Value> items, Kind kind) {
  Value v;
  v.kind_ = kind;
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d, Kind kind) {
  Value v;
  v.kind_ = kind;
  v.dict_ = std::move(d);
  return v;
}

Value Value::dict() { return dict(std::make_shared<Dict>()); }

Value Value::callable(std::string name, Function f) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(f)});
  return v;
}

template <typename Json>
Value Value::from_any_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return Value();
    case Json::value_t::boolean: return Value(j.template get<bool>());
    case Json::value_t::number_integer: return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      // Past int64: Python's int would hold it; a float keeps its magnitude, never a wrapped sign.
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value(j.template get<double>());
    case Json::value_t::string: return Value(j.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_any_json(e));
      return list(std::move(items));
    }
    case Json::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d->entries.emplace_back(Value(it.key()), from_any_json(it.value()));
      return dict(std::move(d));
    }
    default: return Value();
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_any_json(j); }
Value Value::from_json(const nlohmann::json& j) { return from_any_json(j); }

nlohmann::json to_json(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: fail_undefined(v);
    case Value::Kind::kNone: return nullptr;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int();
    case Value::Kind::kFloat: return v.as_double();
    case Value::Kind::kString: return v.as_string();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kIterator: {
      nlohmann::json out = nlohmann::json::array();
      for (const Value& item : v.items()) out.push_back(to_json(item));
      return out;
    }
    case Value::Kind::kDict: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& [k, item] : v.as_dict().entries) out[str(k)] = to_json(item);
      return out;
    }
    default: fail_type(fmt::format("a value of type '{}' has no JSON form", type_name(v)));
  }
}

bool Value::same_object(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kIterator: return list_ == o.list_;
    case Kind::kDict:
    case Kind::kNamespace:
    case Kind::kLoop: return dict_ == o.dict_;
    case Kind::kCallable: return callable_ == o.callable_;
    default: return equal(*this, o);
  }
}

std::vector<Value> Value::iterate() const {
  switch (kind_) {
    case Kind::kUndefined: return {};
    case Kind::kString: {
      std::vector<Value> out;
      for (const char32_t c : py::code_points(string_)) out.emplace_back(py::utf8(std::u32string(1, c)));
      return out;
    }
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kIterator: return *list_;
    case Kind::kDict: {
      std::vector<Value> out;
      for (const auto& [k, v] : dict_->entries) out.push_back(k);
      return out;
    }
    default: fail_type(fmt::format("'{}' object is not iterable", type_name(*this)));
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& e : entries)
    if (equal(e.first, key)) return &e.second;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& e : entries)
    if (e.first.is_string() && e.first.as_string() == key) return &e.second;
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  for (auto& e : entries) {
    if (equal(e.first, key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

std::optional<Value> CallArgs::take(size_t index, const std::string& name) {
  for (auto it = keyword.begin(); it != keyword.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      keyword.erase(it);
      return v;
    }
  }
  if (index < positional.size()) {
    taken_positional = std::max(taken_positional, index + 1);
    return positional[index];
  }
  return std::nullopt;
}

void CallArgs::done(const std::string& function) const {
  if (!keyword.empty())
    fail_type(fmt::format("{}() got an unexpected keyword argument '{}'", function, keyword.front().first));
  if (positional.size() > taken_positional)
    fail_type(fmt::format("{}() takes at most {} positional argument{} ({} given)", function, taken_positional,
                          taken_positional == 1 ? "" : "s", positional.size()));
}

void fail_undefined(const Value& v) {
  if (v.is_missing_field())
    throw RenderError("UndefinedError", fmt::format("'{}' is undefined", v.as_string()), v.as_string());
  throw RenderError(v.is_unsafe_undefined() ? "SecurityError" : "UndefinedError", v.as_string());
}
void fail_type(const std::string& message) { throw RenderError("TypeError", message); }

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return "list";
    case Value::Kind::kTuple: return "tuple";
    case Value::Kind::kIterator: return "generator";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "TemplateNamespace";
    case Value::Kind::kLoop: return "LoopContext";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  switch (v.kind()) {
    case Value::Kind::kNamespace: return "transformers.utils.chat_template_utils.TemplateNamespace object";
    case Value::Kind::kLoop: return "jinja2.runtime.LoopContext object";
    case Value::Kind::kUndefined: return "jinja2.runtime.Undefined object";
    default: return type_name(v) + " object";
  }
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple: return !v.items().empty();
    case Value::Kind::kDict: return !v.as_dict().entries.empty();
    default: return true;
  }
}

namespace {

std::string string_repr(const std::string& s) { return py::repr(nlohmann::json(s)); }

std::string container_repr(const Value& v) {
  std::string out;
  switch (v.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const bool tuple = v.kind() == Value::Kind::kTuple;
      out += tuple ? '(' : '[';
      for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + repr(v.items()[i]);
      if (tuple && v.items().size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return out;
    }
    case Value::Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [k, val] : v.as_dict().entries) {
        out += (first ? "" : ", ") + repr(k) + ": " + repr(val);
        first = false;
      }
      return out + '}';
    }
    case Value::Kind::kNamespace: {
      Value plain = Value::dict(std::make_shared<Dict>(v.as_dict()));
      return "<Namespace " + container_repr(plain) + ">";
    }
    default: return "";
  }
}

}  // namespace

std::string str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kString: return v.as_string();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return py::float_repr(v.as_double());
    case Value::Kind::kString: return string_repr(v.as_string());
    case Value::Kind::kIterator: return "<generator object>";
    case Value::Kind::kLoop: return "<LoopContext>";
    case Value::Kind::kCallable: return "<function " + v.as_callable().name + ">";
    default: return container_repr(v);
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.as_dict().entries.size() != b.as_dict().entries.size()) return false;
      for (const auto& [k, v] : a.as_dict().entries) {
        const Value* other = b.as_dict().find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

bool less(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 bytes order as code points
  if (a.kind() == b.kind() && (a.kind() == Value::Kind::kList || a.kind() == Value::Kind::kTuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  fail_type(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

bool compare(const Value& a, const Value& b, const std::string& op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto order = [&](int c) {
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  };
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) return false;
      return order(x < y ? -1 : x > y ? 1 : 0);
    }
    return order(a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return order(a.as_string().compare(b.as_string()));
  if (a.kind() == b.kind() && (a.kind() == Value::Kind::kList || a.kind() == Value::Kind::kTuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return compare(x[i], y[i], op);
    }
    return order(x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0);
  }
  fail_type(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

namespace {

void dump(const Value& v, const DumpOptions& o, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += py::float_repr(d);
      return;
    }
    case Value::Kind::kString: py::append_json_string(out, v.as_string(), o.ensure_ascii); return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(level + 1);
        dump(v.items()[i], o, level + 1, out);
      }
      if (o.indent) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.as_dict().entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : v.as_dict().entries) {
        std::string key;
        if (k.is_string())
          key = k.as_string();
        else if (k.is_bool())
          key = k.as_bool() ? "true" : "false";
        else if (k.is_none())
          key = "null";
        else if (k.is_number())
          key = repr(k);
        else
          fail_type(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
        entries.emplace_back(std::move(key), &val);
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.indent) newline(level + 1);
        py::append_json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_separator;
        dump(*entries[i].second, o, level + 1, out);
      }
      if (o.indent) newline(level);
      out += '}';
      return;
    }
    default: fail_type(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

}  // namespace

std::string json_dumps(const Value& v, const DumpOptions& options) {
  std::string out;
  dump(v, options, 0, out);
  return out;
}

}  // namespace gpueval::jinja
