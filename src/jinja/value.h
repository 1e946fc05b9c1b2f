// Value is what the template engine (jinja/engine.h) computes with: the Python values a
// Jinja2 template sees (None, bool, int, float, str, list, tuple, dict in insertion order),
// plus Jinja2's own objects: Undefined (carrying the message UndefinedError would give when
// it is used), a namespace (shared and assignable), a loop object, a callable (a macro, a
// global function or a bound method) and a one-pass iterator (what map/select/selectattr/
// items return: always truthy and without len(), as a Python generator). Also how Python
// prints them (str, repr), json.dumps of them, and Python's ==, < and truth value. Calls
// common only. A Value is immutable once built except a namespace's attributes; the
// containers are shared by pointer, so copies are cheap. Not shared between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval::jinja {

class Value;
struct Dict;
struct CallArgs;

// An error Python would raise while rendering: its type name ("UndefinedError", "TypeError",
// "TemplateError" for raise_exception, ...) and its message, as `<type>: <message>` prints.
// `field`: for an UndefinedError of a missing field (Value::missing_field), that field as written.
// `hint`: what gpueval adds after Python's message where it helps a task file's author (the list
// list.index searched: " ['A', 'B']"); never part of what(), so a chat template's error stays Python's.
class RenderError : public std::runtime_error {
 public:
  RenderError(std::string type, std::string message, std::string field = "", std::string hint = "")
      : std::runtime_error(type + ": " + message),
        type_(std::move(type)),
        message_(std::move(message)),
        field_(std::move(field)),
        hint_(std::move(hint)) {}
  const std::string& type() const { return type_; }
  const std::string& message() const { return message_; }
  const std::string& field() const { return field_; }
  const std::string& hint() const { return hint_; }

 private:
  std::string type_;
  std::string message_;
  std::string field_;
  std::string hint_;
};

using Function = std::function<Value(CallArgs&)>;

struct Callable {
  std::string name;  // for repr and messages
  Function call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kIterator,
    kDict,
    kNamespace,
    kLoop,
    kCallable
  };

  Value() : kind_(Kind::kNone) {}
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int v) : kind_(Kind::kInt), int_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}
  Value(double v) : kind_(Kind::kFloat), float_(v) {}
  Value(std::string s) : kind_(Kind::kString), string_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), string_(s) {}

  // `error_type`: what using it raises (Jinja2's sandbox gives SecurityError for unsafe ones).
  static Value undefined(std::string message, bool security = false);
  // An Undefined standing for a field the context lacks, named as the template wrote it
  // ("choices.text[5]"): using it raises an UndefinedError whose field() is `source`.
  static Value missing_field(std::string source);
  static Value from_json(const nlohmann::json& j);
  static Value list(std::vector<Value> items, Kind kind = Kind::kList);
  static Value dict(std::shared_ptr<Dict> d, Kind kind = Kind::kDict);
  static Value dict();
  static Value callable(std::string name, Function f);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple || kind_ == Kind::kIterator; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_attrs() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace || kind_ == Kind::kLoop; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return string_; }  // also an Undefined's message
  bool is_unsafe_undefined() const { return kind_ == Kind::kUndefined && int_ == kUnsafe; }
  bool is_missing_field() const { return kind_ == Kind::kUndefined && int_ == kMissingField; }
  const std::vector<Value>& items() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_dict() const { return *dict_; }
  const Callable& as_callable() const { return *callable_; }
  bool same_object(const Value& other) const;

  // The elements a `for` (or list()) visits: chars of a string, keys of a dict; Undefined
  // gives none; anything else is a TypeError.
  std::vector<Value> iterate() const;

 private:
  static constexpr int64_t kUnsafe = 1, kMissingField = 2;  // what an Undefined's int_ says it is
  template <typename Json>
  static Value from_any_json(const Json& j);

  Kind kind_;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> callable_;
};

struct Dict {
  std::vector<std::pair<Value, Value>> entries;  // insertion order, as Python's dict
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
};

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name` (either one), removing it; nullopt when absent.
  std::optional<Value> take(size_t index, const std::string& name);
  // Fails with a TypeError naming `function` when arguments remain that were not taken.
  void done(const std::string& function) const;
  size_t taken_positional = 0;
};

// Raises the UndefinedError an Undefined stands for when it is used for more than printing,
// testing or iterating.
[[noreturn]] void fail_undefined(const Value& v);
[[noreturn]] void fail_type(const std::string& message);

// Python's type(x).__name__ ("str", "dict", "NoneType", ...).
std::string type_name(const Value& v);
// Jinja2's object_type_repr: "dict object", "None", ... (for "has no attribute" messages).
std::string object_type_repr(const Value& v);

// The JSON form of a value made of None, bools, numbers, strings, lists, tuples and dicts (keys
// as str() gives them); an Undefined raises its UndefinedError, anything else a TypeError.
nlohmann::json to_json(const Value& v);

bool truthy(const Value& v);
std::string str(const Value& v);  // Python's str(): '' for Undefined
std::string repr(const Value& v);  // Python's repr()
bool equal(const Value& a, const Value& b);
// Python's a < b; a TypeError for types without an order.
bool less(const Value& a, const Value& b, const char* op = "<");
// Python's a <op> b for op in < > <= >=, its TypeError naming the operands in the order written.
bool compare(const Value& a, const Value& b, const std::string& op);

struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // the indent unit; absent: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as Python writes it; a TypeError for values JSON has no form for.
std::string json_dumps(const Value& v, const DumpOptions& options);

}  // namespace gpueval::jinja
