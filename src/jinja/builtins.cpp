#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "common/python_format.h"
#include "common/python_str.h"
#include "common/strings.h"
#include "common/utf8.h"

namespace gpueval::jinja {
namespace {

constexpr size_t kMaxString = size_t{64} << 20;  // a runaway "x" * 10**12 is an error, not an OOM

[[noreturn]] void fail_value(const std::string& message) { throw RenderError("ValueError", message); }

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}
Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
}
Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)),
                          true);
}

const std::string& need_string(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail_type(fmt::format("{}, not {}", what, type_name(v)));
  return v.as_string();
}
int64_t need_int(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int()) fail_type(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
  return v.as_int();
}
std::optional<std::string> optional_chars(const std::optional<Value>& v, const std::string& what) {
  if (!v || v->is_none()) return std::nullopt;
  return need_string(*v, what);
}

std::string one(char32_t c) { return py::utf8(std::u32string(1, c)); }
bool is_cased(char32_t c) {
  const std::string s = one(c);
  return py::lower(s) != s || py::upper(s) != s;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (const char32_t c : py::code_points(s)) {
    const std::string ch = one(c);
    out += prev_cased ? py::lower(ch) : py::upper(ch);
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  const std::u32string cps = py::code_points(s);
  if (cps.empty()) return s;
  return py::upper(one(cps[0])) + py::lower(py::utf8(cps.substr(1)));
}

// Jinja2's title filter: each piece after a run of '-', whitespace, '(', '{', '[' or '<' has
// its first character upper-cased and the rest lower-cased.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (const char32_t c : py::code_points(s)) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    if (sep) {
      out += one(c);
      word_start = true;
    } else {
      out += word_start ? py::upper(one(c)) : py::lower(one(c));
      word_start = false;
    }
  }
  return out;
}

int64_t count_sub(const std::string& s, const std::string& sub) {
  if (sub.empty()) return py::len(s) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

bool starts_or_ends(const std::string& s, const Value& arg, bool start, const std::string& method) {
  if (arg.kind() == Value::Kind::kTuple) {
    for (const Value& v : arg.items())
      if (starts_or_ends(s, v, start, method)) return true;
    return false;
  }
  if (!arg.is_string())
    fail_type(fmt::format("{} first arg must be str or a tuple of str, not {}", method, type_name(arg)));
  const std::string& x = arg.as_string();
  if (x.size() > s.size()) return false;
  return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// str.format with {} / {0} / {name} fields (no format specs beyond what str() gives).
std::string str_format(const std::string& f, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (f[i] == '{') {
      const size_t close = f.find('}', i);
      if (close == std::string::npos) fail_value("Single '{' encountered in format string");
      const std::string field = f.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        fail_value("format fields with conversions or specs are outside gpueval's Jinja subset");
      const Value* v = nullptr;
      if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
        const size_t index = field.empty() ? auto_index++ : std::strtoul(field.substr(0, 9).c_str(), nullptr, 10);
        if (index >= args.positional.size()) throw RenderError("IndexError", "tuple index out of range");
        v = &args.positional[index];
      } else {
        for (const auto& [k, val] : args.keyword)
          if (k == field) v = &val;
        if (!v) throw RenderError("KeyError", py::repr(nlohmann::json(field)));
      }
      out += str(*v);
      i = close;
    } else {
      out += f[i];
    }
  }
  return out;
}

Value bound(const std::string& name, Function f) { return Value::callable(name, std::move(f)); }

// A method of a str, dict or list: the object it was read from, the name it was called by (names
// that share a function, strip/lstrip/rstrip, tell it which it is) and the call's arguments.
using StrMethod = Value (*)(const std::string& s, const std::string& m, CallArgs& a);
using ValueMethod = Value (*)(const Value& obj, const std::string& m, CallArgs& a);

Value str_strip(const std::string& s, const std::string& m, CallArgs& a) {
  const auto chars = optional_chars(a.take(0, "chars"), m + " arg must be None or str");
  a.done(m);
  return Value(py::strip(s, chars, m != "rstrip", m != "lstrip"));
}

Value str_split(const std::string& s, const std::string& m, CallArgs& a) {
  const auto sep = optional_chars(a.take(0, "sep"), "must be str or None");
  const auto maxsplit_v = a.take(1, "maxsplit");
  a.done(m);
  if (sep && sep->empty()) fail_value("empty separator");
  const int64_t maxsplit = maxsplit_v ? need_int(*maxsplit_v) : -1;
  std::vector<std::string> parts;
  if (m == "split" || maxsplit < 0) {
    parts = py::split(s, sep, maxsplit);
  } else {
    // rsplit with a limit: split the reversed text by the reversed separator.
    std::u32string r = py::code_points(s);
    std::reverse(r.begin(), r.end());
    std::optional<std::string> rsep;
    if (sep) {
      std::u32string x = py::code_points(*sep);
      std::reverse(x.begin(), x.end());
      rsep = py::utf8(x);
    }
    parts = py::split(py::utf8(r), rsep, maxsplit);
    std::reverse(parts.begin(), parts.end());
    for (std::string& p : parts) {
      std::u32string x = py::code_points(p);
      std::reverse(x.begin(), x.end());
      p = py::utf8(x);
    }
  }
  std::vector<Value> out(parts.begin(), parts.end());
  return Value::list(std::move(out));
}

Value str_splitlines(const std::string& s, const std::string&, CallArgs& a) {
  const bool keepends = truthy(a.take(0, "keepends").value_or(Value(false)));
  a.done("splitlines");
  // Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
  std::vector<Value> out;
  std::u32string cur;
  const std::u32string cps = py::code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                          c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      cur += c;
      continue;
    }
    std::u32string end(1, c);
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') {
      end += U'\n';
      ++i;
    }
    out.emplace_back(py::utf8(keepends ? cur + end : cur));
    cur.clear();
  }
  if (!cur.empty()) out.emplace_back(py::utf8(cur));
  return Value::list(std::move(out));
}

Value str_pad(const std::string& s, const std::string& m, CallArgs& a) {
  const auto width_v = a.take(0, "width");
  const auto fill_v = m == "zfill" ? std::nullopt : a.take(1, "fillchar");
  a.done(m);
  if (!width_v) fail_type(m + "() takes at least 1 argument (0 given)");
  const int64_t width = need_int(*width_v);
  if (width > static_cast<int64_t>(kMaxString)) fail_value("a string past 64 MiB");
  const std::string fill = fill_v ? need_string(*fill_v, m + "() argument 2 must be str") : std::string(" ");
  if (py::len(fill) != 1) fail_type("The fill character must be exactly one character long");
  const int64_t n = py::len(s);
  if (n >= width) return Value(s);
  const int64_t total = width - n;
  auto pad = [&](int64_t k) {
    std::string out;
    for (int64_t i = 0; i < k; ++i) out += fill;
    return out;
  };
  if (m == "ljust") return Value(s + pad(total));
  if (m == "rjust") return Value(pad(total) + s);
  if (m == "zfill") {
    std::string digits = s, sign;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      sign = s.substr(0, 1);
      digits = s.substr(1);
    }
    return Value(sign + std::string(static_cast<size_t>(total), '0') + digits);
  }
  const int64_t left = total / 2 + (total & width & 1);
  return Value(pad(left) + s + pad(total - left));
}

Value str_partition(const std::string& s, const std::string& m, CallArgs& a) {
  const auto sep_v = a.take(0, "sep");
  a.done(m);
  if (!sep_v) fail_type(m + "() takes exactly one argument (0 given)");
  const std::string& sep = need_string(*sep_v, "must be str");
  if (sep.empty()) fail_value("empty separator");
  const size_t at = m == "partition" ? s.find(sep) : s.rfind(sep);
  if (at == std::string::npos) {
    return m == "partition" ? Value::list({Value(s), Value(""), Value("")}, Value::Kind::kTuple)
                            : Value::list({Value(""), Value(""), Value(s)}, Value::Kind::kTuple);
  }
  return Value::list({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))}, Value::Kind::kTuple);
}

Value str_casefold(const std::string& s, const std::string&, CallArgs& a) {
  a.done("casefold");
  return Value(py::lower(s));
}

Value str_case(const std::string& s, const std::string& m, CallArgs& a) {
  a.done(m);
  if (m == "lower") return Value(py::lower(s));
  if (m == "upper") return Value(py::upper(s));
  if (m == "title") return Value(py_title(s));
  if (m == "capitalize") return Value(py_capitalize(s));
  std::string out;
  for (const char32_t c : py::code_points(s)) {
    const std::string ch = one(c);
    const std::string lo = py::lower(ch);
    out += lo != ch ? lo : py::upper(ch);
  }
  return Value(out);
}

Value str_replace(const std::string& s, const std::string&, CallArgs& a) {
  const auto from = a.take(0, "old");
  const auto to = a.take(1, "new");
  const auto count = a.take(2, "count");
  a.done("replace");
  if (!from || !to) fail_type("replace expected at least 2 arguments");
  const std::string& f = need_string(*from, "replace() argument 1 must be str");
  const std::string& t = need_string(*to, "replace() argument 2 must be str");
  const int64_t n = count ? need_int(*count) : -1;
  if (n < 0) return Value(py::replace(s, f, t));
  std::string out = s;
  size_t p = 0;
  for (int64_t i = 0; i < n && !f.empty(); ++i) {
    p = out.find(f, p);
    if (p == std::string::npos) break;
    out.replace(p, f.size(), t);
    p += t.size();
  }
  return Value(out);
}

Value str_startswith(const std::string& s, const std::string& m, CallArgs& a) {
  const auto x = a.take(0, "prefix");
  a.done(m);
  if (!x) fail_type(m + "() takes at least 1 argument (0 given)");
  return Value(starts_or_ends(s, *x, m == "startswith", m));
}

Value str_find(const std::string& s, const std::string& m, CallArgs& a) {
  const auto x = a.take(0, "sub");
  a.done(m);
  if (!x) fail_type(m + "() takes at least 1 argument (0 given)");
  const std::string& sub = need_string(*x, "must be str");
  if (m == "count") return Value(count_sub(s, sub));
  int64_t at = -1;
  if (m == "rfind") {
    const size_t p = s.rfind(sub);
    at = p == std::string::npos ? -1 : py::len(s.substr(0, p));
  } else {
    at = py::find(s, sub);
  }
  if (at < 0 && m == "index") fail_value("substring not found");
  return Value(at);
}

Value str_join(const std::string& s, const std::string&, CallArgs& a) {
  const auto x = a.take(0, "iterable");
  a.done("join");
  if (!x) fail_type("str.join() takes exactly one argument (0 given)");
  std::string out;
  const std::vector<Value> items = x->iterate();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      fail_type(fmt::format("sequence item {}: expected str instance, {} found", i, type_name(items[i])));
    out += (i ? s : "") + items[i].as_string();
  }
  return Value(out);
}

Value str_format_method(const std::string& s, const std::string&, CallArgs& a) { return Value(str_format(s, a)); }

Value str_is_kind(const std::string& s, const std::string& m, CallArgs& a) {
  a.done(m);
  const std::u32string cps = py::code_points(s);
  if (cps.empty()) return Value(false);
  if (m == "islower" || m == "isupper") {
    bool any = false;
    for (const char32_t c : cps) {
      if (!is_cased(c)) continue;
      any = true;
      const std::string ch = one(c);
      if (m == "islower" ? py::lower(ch) != ch : py::upper(ch) != ch) return Value(false);
    }
    return Value(any);
  }
  for (const char32_t c : cps) {
    const bool digit = c >= '0' && c <= '9';
    const bool alpha = c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0 : is_cased(c);
    const bool ok = m == "isdigit" ? digit : m == "isspace" ? py::is_space(c) : m == "isalpha" ? alpha : alpha || digit;
    if (!ok) return Value(false);
  }
  return Value(true);
}

Value str_remove_affix(const std::string& s, const std::string& m, CallArgs& a) {
  const auto x = a.take(0, "prefix");
  a.done(m);
  if (!x) fail_type(m + "() takes exactly one argument (0 given)");
  const std::string& p = need_string(*x, m + "() argument must be str");
  if (m == "removeprefix" && s.compare(0, p.size(), p) == 0) return Value(s.substr(p.size()));
  if (m == "removesuffix" && p.size() <= s.size() && !p.empty() && s.compare(s.size() - p.size(), p.size(), p) == 0)
    return Value(s.substr(0, s.size() - p.size()));
  return Value(s);
}

// One row per str method a template may call; a row's function gets the string and the name called.
const std::unordered_map<std::string, StrMethod>& str_methods() {
  static const std::unordered_map<std::string, StrMethod> k = {
      {"capitalize", str_case},
      {"casefold", str_casefold},
      {"center", str_pad},
      {"count", str_find},
      {"endswith", str_startswith},
      {"find", str_find},
      {"format", str_format_method},
      {"index", str_find},
      {"isalnum", str_is_kind},
      {"isalpha", str_is_kind},
      {"isdigit", str_is_kind},
      {"islower", str_is_kind},
      {"isspace", str_is_kind},
      {"isupper", str_is_kind},
      {"join", str_join},
      {"ljust", str_pad},
      {"lower", str_case},
      {"lstrip", str_strip},
      {"partition", str_partition},
      {"removeprefix", str_remove_affix},
      {"removesuffix", str_remove_affix},
      {"replace", str_replace},
      {"rfind", str_find},
      {"rjust", str_pad},
      {"rpartition", str_partition},
      {"rsplit", str_split},
      {"rstrip", str_strip},
      {"split", str_split},
      {"splitlines", str_splitlines},
      {"startswith", str_startswith},
      {"strip", str_strip},
      {"swapcase", str_case},
      {"title", str_case},
      {"upper", str_case},
      {"zfill", str_pad},
  };
  return k;
}

Value str_method(const Value& obj, const std::string& m) {
  const auto it = str_methods().find(m);
  if (it == str_methods().end()) return missing_attr(obj, m);
  return bound(m, [s = obj.as_string(), m, f = it->second](CallArgs& a) { return f(s, m, a); });
}

Value dict_view(const Value& obj, const std::string& m, CallArgs& a) {
  a.done(m);
  std::vector<Value> out;
  for (const auto& [k, v] : obj.as_dict().entries) {
    if (m == "items")
      out.push_back(Value::list({k, v}, Value::Kind::kTuple));
    else
      out.push_back(m == "keys" ? k : v);
  }
  return Value::list(std::move(out));
}

Value dict_get(const Value& obj, const std::string&, CallArgs& a) {
  const auto key = a.take(0, "key");
  const auto def = a.take(1, "default");
  a.done("get");
  if (!key) fail_type("get expected at least 1 argument, got 0");
  const Value* v = obj.as_dict().find(*key);
  return v ? *v : def.value_or(Value());
}

Value dict_copy(const Value& obj, const std::string&, CallArgs& a) {
  a.done("copy");
  return Value::dict(std::make_shared<Dict>(obj.as_dict()));
}

// One row per dict method that leaves the dict as it is.
const std::unordered_map<std::string, ValueMethod>& dict_methods() {
  static const std::unordered_map<std::string, ValueMethod> k = {
      {"copy", dict_copy}, {"get", dict_get}, {"items", dict_view}, {"keys", dict_view}, {"values", dict_view},
  };
  return k;
}

Value dict_method(const Value& obj, const std::string& m) {
  if (const auto it = dict_methods().find(m); it != dict_methods().end())
    return bound(m, [obj, m, f = it->second](CallArgs& a) { return f(obj, m, a); });
  static const std::set<std::string> kModifying = {"clear", "pop", "popitem", "setdefault", "update"};
  if (kModifying.count(m)) return unsafe(obj, m);
  return Value::undefined("");  // not a method: the caller looks the key up
}

Value list_index(const Value& obj, const std::string& m, CallArgs& a) {
  const auto x = a.take(0, "value");
  a.done(m);
  if (!x) fail_type(m + "() takes exactly one argument (0 given)");
  int64_t n = 0;
  for (size_t i = 0; i < obj.items().size(); ++i) {
    if (equal(obj.items()[i], *x)) {
      if (m == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
  }
  if (m == "index") throw RenderError("ValueError", fmt::format("{} is not in list", repr(*x)), "", " " + repr(obj));
  return Value(n);
}

// One row per list method that leaves the list as it is.
const std::unordered_map<std::string, ValueMethod>& list_methods() {
  static const std::unordered_map<std::string, ValueMethod> k = {
      {"count", list_index},
      {"index", list_index},
  };
  return k;
}

Value list_method(const Value& obj, const std::string& m) {
  if (const auto it = list_methods().find(m); it != list_methods().end())
    return bound(m, [obj, m, f = it->second](CallArgs& a) { return f(obj, m, a); });
  static const std::set<std::string> kModifying = {"append", "extend",  "insert", "pop",
                                                   "remove", "reverse", "sort",   "clear"};
  if (kModifying.count(m)) return unsafe(obj, m);
  return missing_attr(obj, m);
}

int64_t py_floor_div(int64_t x, int64_t y) {
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return q;
}

// Jinja2's make_attrgetter: "a.b.0" looks up each part, an integer part as an index.
Value attr_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  for (const std::string& part : py::split(attribute.as_string(), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    v = digits && part.size() < 18 ? get_item(v, Value(static_cast<int64_t>(std::stoll(part))))
                                   : get_item(v, Value(part));
  }
  return v;
}

std::vector<Value> sequence_of(const Value& v) { return v.iterate(); }

Value to_int(const Value& v, const Value& def, int64_t base) {
  if (v.is_int()) return Value(v.as_int());
  if (v.kind() == Value::Kind::kFloat) {
    const double d = v.as_double();
    if (!std::isfinite(d)) return def;
    if (std::fabs(d) >= 9.2e18) throw RenderError("OverflowError", "int too large (gpueval's integers are 64-bit)");
    return Value(static_cast<int64_t>(std::trunc(d)));
  }
  if (v.is_string()) {
    std::string s = py::strip(v.as_string(), std::nullopt, true, true);
    std::string digits;
    for (const char c : s)
      if (c != '_') digits += c;
    try {
      size_t used = 0;
      const long long x = std::stoll(digits, &used, static_cast<int>(base));
      if (used == digits.size() && !digits.empty()) return Value(static_cast<int64_t>(x));
    } catch (const std::exception&) {}
    if (!s.empty()) {
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return def;
}

Value to_float(const Value& v, const Value& def) {
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = py::strip(v.as_string(), std::nullopt, true, true);
    const std::string l = py::lower(s);
    if (l == "inf" || l == "+inf" || l == "infinity") return Value(std::numeric_limits<double>::infinity());
    if (l == "-inf" || l == "-infinity") return Value(-std::numeric_limits<double>::infinity());
    if (l == "nan") return Value(std::nan(""));
    if (!s.empty() && !std::isspace(static_cast<unsigned char>(s[0]))) {
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);  // past the range: inf, as Python's float()
      if (end == s.c_str() + s.size()) return Value(d);
    }
  }
  return def;
}

// Python's round(x, n) of a float: the exact binary value rounded half to even, as printf does.
double py_round(double x, int64_t n) {
  if (!std::isfinite(x)) return x;
  if (n > 300) return x;
  if (n < 0) {
    const double p = std::pow(10.0, static_cast<double>(-n));
    return std::nearbyint(x / p) * p;
  }
  return std::stod(fmt::format("{:.{}f}", x, n));
}

std::string indent_text(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool pad_it = i == 0 ? first : (blank || !py::strip(lines[i], std::nullopt, true, true).empty());
    if (pad_it && !(i == 0 && lines[i].empty() && !blank && false)) out += pad;
    out += lines[i];
  }
  return out;
}

std::vector<Value> select(const Value& v, CallArgs& args, bool by_attr, bool keep) {
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) fail_type("selectattr needs an attribute name");
    attribute = args.positional[next++];
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) test = need_string(args.positional[next++], "the test name must be str");
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<long>(next), args.positional.end());
  test_args.keyword = args.keyword;
  if (test && !has_test(*test)) throw RenderError("TemplateRuntimeError", fmt::format("No test named '{}'.", *test));
  std::vector<Value> out;
  if (!truthy(v)) return out;  // Jinja2 skips a false value without iterating it
  for (const Value& item : sequence_of(v)) {
    const Value x = by_attr ? attr_path(item, attribute) : item;
    bool hit;
    if (test) {
      CallArgs a = test_args;
      hit = apply_test(*test, x, a);
    } else {
      hit = truthy(x);
    }
    if (hit == keep) out.push_back(item);
  }
  return out;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.as_string()));
  return v;
}

void sort_values(std::vector<Value>& items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(key(b), key(a)) : less(key(a), key(b));
  });
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') return unsafe(obj, name);
  switch (obj.kind()) {
    case Value::Kind::kString: return str_method(obj, name);
    case Value::Kind::kDict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined() || !m.as_string().empty()) return m;
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attr(obj, name);
    }
    case Value::Kind::kList: return list_method(obj, name);
    case Value::Kind::kTuple: {
      if (name == "index" || name == "count") return list_method(obj, name);
      return missing_attr(obj, name);
    }
    case Value::Kind::kNamespace:
    case Value::Kind::kLoop: {
      if (const Value* v = obj.as_dict().find(name)) return *v;
      if (obj.kind() == Value::Kind::kLoop && name == "previtem") return Value::undefined("there is no previous item");
      if (obj.kind() == Value::Kind::kLoop && name == "nextitem") return Value::undefined("there is no next item");
      return missing_attr(obj, name);
    }
    default: return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kString: {
      if (key.is_int()) {
        int64_t i = key.as_int();
        if (obj.is_string()) {
          const auto c = py::char_at(obj.as_string(), i);
          if (c) return Value(*c);
          return missing_element(obj, key);
        }
        const int64_t n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
        return missing_element(obj, key);
      }
      break;
    }
    default: break;
  }
  if (key.is_string()) {
    // obj[key] failed: Jinja2 then tries the attribute.
    if (obj.is_dict()) {
      Value m = dict_method(obj, key.as_string());
      if (!m.is_undefined() || !m.as_string().empty()) return m;
      return missing_attr(obj, key.as_string());
    }
    return get_attr(obj, key.as_string());
  }
  return missing_element(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto bound_of = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int()) fail_type("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  const auto a = bound_of(start), b = bound_of(stop), c = bound_of(step);
  const int64_t k = c.value_or(1);
  if (k == 0) fail_value("slice step cannot be zero");
  if (obj.is_string()) return Value(py::slice(obj.as_string(), a, b, k));
  if (obj.kind() == Value::Kind::kList || obj.kind() == Value::Kind::kTuple) {
    std::vector<Value> out;
    for (const int64_t i : py::slice_positions(static_cast<int64_t>(obj.items().size()), a, b, k))
      out.push_back(obj.items()[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.kind());
  }
  // Jinja2 compiles a slice to Python's own subscript, so it fails as Python does.
  if (obj.is_dict()) fail_type("unhashable type: 'slice'");
  fail_type(fmt::format("'{}' object is not subscriptable", type_name(obj)));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string())
        fail_type(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kIterator:
      for (const Value& v : container.items())
        if (equal(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (item.kind() == Value::Kind::kList || item.is_dict())
        fail_type(fmt::format("unhashable type: '{}'", type_name(item)));
      return container.as_dict().find(item) != nullptr;
    default: fail_type(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = str(a) + str(b);
    if (s.size() > kMaxString) fail_value("a string past 64 MiB");
    return Value(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto unsupported = [&]() -> Value {
    if (op == "+" && a.is_string())
      fail_type(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    if (op == "+" && (a.kind() == Value::Kind::kList || a.kind() == Value::Kind::kTuple))
      fail_type(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a)));
    const auto is_seq = [](const Value& v) {
      return v.is_string() || v.kind() == Value::Kind::kList || v.kind() == Value::Kind::kTuple;
    };
    if (op == "*" && (is_seq(a) || is_seq(b)))
      fail_type(fmt::format("can't multiply sequence by non-int of type '{}'", type_name(is_seq(a) ? b : a)));
    if (op == "**")
      fail_type(fmt::format("unsupported operand type(s) for ** or pow(): '{}' and '{}'", type_name(a), type_name(b)));
    fail_type(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = a.is_int() && b.is_int();
    if (op == "/") {
      if (b.as_double() == 0)
        throw RenderError("ZeroDivisionError", ints ? "division by zero" : "float division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t r = 0;
      if (op == "+" || op == "-" || op == "*") {
        const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                              : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                          : __builtin_mul_overflow(x, y, &r);
        if (overflow) throw RenderError("OverflowError", "integer past 64 bits (gpueval's Jinja subset)");
        return Value(r);
      }
      if (op == "//" || op == "%") {
        if (y == 0)
          throw RenderError("ZeroDivisionError",
                            op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
        if (y == -1 && x == std::numeric_limits<int64_t>::min())
          throw RenderError("OverflowError", "integer past 64 bits (gpueval's Jinja subset)");
        const int64_t q = py_floor_div(x, y);
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      if (op == "**") {
        if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t result = 1;
        for (int64_t i = 0; i < y; ++i)
          if (__builtin_mul_overflow(result, x, &result)) throw RenderError("OverflowError", "integer past 64 bits");
        return Value(result);
      }
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) throw RenderError("ZeroDivisionError", op == "//" ? "float floor division by zero" : "float modulo");
    const double q = std::floor(x / y);
    if (op == "//") return Value(q);
    if (op == "%") {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value(r);
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.kind() == b.kind() && (a.kind() == Value::Kind::kList || a.kind() == Value::Kind::kTuple)) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.kind());
    }
    return unsupported();
  }
  if (op == "*") {
    const Value& seq = a.is_int() ? b : a;
    const Value& times_v = a.is_int() ? a : b;
    if (times_v.is_int() &&
        (seq.is_string() || seq.kind() == Value::Kind::kList || seq.kind() == Value::Kind::kTuple)) {
      // An empty sequence repeated stays empty: no loop of `times` steps ('' * 10**12 took hours).
      const bool empty = seq.is_string() ? seq.as_string().empty() : seq.items().empty();
      const int64_t times = empty ? 0 : std::max<int64_t>(0, times_v.as_int());
      if (seq.is_string()) {
        if (!seq.as_string().empty() && static_cast<uint64_t>(times) > kMaxString / seq.as_string().size())
          fail_value("a string past 64 MiB");
        std::string out;
        for (int64_t i = 0; i < times; ++i) out += seq.as_string();
        return Value(out);
      }
      if (!seq.items().empty() && static_cast<uint64_t>(times) > (size_t{1} << 24) / seq.items().size())
        fail_value("a list past 16M items");
      std::vector<Value> out;
      for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
      return Value::list(std::move(out), seq.kind());
    }
    return unsupported();
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  return unsupported();
}

std::string percent_format(const std::string& f, const Value& args) {
  std::vector<Value> values;
  const Value* mapping = nullptr;
  if (args.kind() == Value::Kind::kTuple)
    values = args.items();
  else if (args.is_dict())
    mapping = &args;
  else
    values.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) fail_value("incomplete format");
    if (f[i] == '%') {
      out += '%';
      continue;
    }
    const Value* v = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos || !mapping) fail_type("format requires a mapping");
      const Value* found = mapping->as_dict().find(f.substr(i + 1, close - i - 1));
      if (!found) throw RenderError("KeyError", py::repr(nlohmann::json(f.substr(i + 1, close - i - 1))));
      v = found;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < f.size() && f[i] != '\0' && std::strchr("-+ #0123456789.", f[i])) spec += f[i++];
    if (i >= f.size()) fail_value("incomplete format");
    const char conv = f[i];
    if (!v) {
      if (next >= values.size()) fail_type("not enough arguments for format string");
      v = &values[next++];
    }
    std::string body;
    switch (conv) {
      case 's': body = str(*v); break;
      case 'r': body = repr(*v); break;
      case 'd':
      case 'i':
      case 'f':
      case 'F':
      case 'x':
      case 'X':
      case 'e':
      case 'g': {
        if (!v->is_number())
          fail_type(fmt::format("%{} format: a real number is required, not {}", conv, type_name(*v)));
        char buf[512];
        size_t field = 0;  // each number of the spec, bounded so the result fits buf
        for (const char c : spec) {
          field = std::isdigit(static_cast<unsigned char>(c)) ? field * 10 + static_cast<size_t>(c - '0') : 0;
          if (field > 400) fail_value("a number format's width or precision past 400 (gpueval's Jinja subset)");
        }
        if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X') {
          const double d = v->is_int() ? 0.0 : v->as_double();
          if (!v->is_int() && !(std::fabs(d) < 9.2e18)) throw RenderError("OverflowError", "int too large to format");
          const long long n = v->is_int() ? v->as_int() : static_cast<long long>(std::trunc(d));
          std::string s = spec + "ll" + (conv == 'i' ? 'd' : conv);
          std::snprintf(buf, sizeof buf, s.c_str(), n);
        } else {
          std::string s = spec + conv;
          std::snprintf(buf, sizeof buf, s.c_str(), v->as_double());
        }
        out += buf;
        continue;
      }
      default: fail_value(fmt::format("unsupported format character '{}'", conv));
    }
    // Width, '-' and precision (a cut) for %s / %r.
    const size_t dot = spec.find('.');
    auto number = [&](size_t from, size_t to) {
      size_t v = 0;
      for (size_t i = from; i < to && i < spec.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(spec[i]))) continue;
        v = v * 10 + static_cast<size_t>(spec[i] - '0');
        if (v > kMaxString) fail_value("a format width past 64 MiB");
      }
      return v;
    };
    const size_t width = number(0, dot == std::string::npos ? spec.size() : dot);
    const bool left = spec.find('-') != std::string::npos;
    if (dot != std::string::npos) {
      const size_t cut = number(dot + 1, spec.size());
      if (static_cast<int64_t>(cut) < py::len(body)) body = py::slice(body, 0, static_cast<int64_t>(cut));
    }
    const size_t n = static_cast<size_t>(py::len(body));
    if (n < width) body = left ? body + std::string(width - n, ' ') : std::string(width - n, ' ') + body;
    out += body;
  }
  // Python lets a list or dict argument go unused (they have __getitem__); a lone scalar may not.
  if (!mapping && args.kind() != Value::Kind::kList && next < values.size())
    fail_type("not all arguments converted during string formatting");
  return out;
}

namespace {

Value filter_safe(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  return v;
}

Value filter_default(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const Value def = args.take(0, "default_value").value_or(Value(""));
  const bool boolean = truthy(args.take(1, "boolean").value_or(Value(false)));
  done();
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

Value filter_tojson(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  DumpOptions o;
  o.ensure_ascii = truthy(args.take(0, "ensure_ascii").value_or(Value(false)));
  const Value indent = args.take(1, "indent").value_or(Value());
  const Value separators = args.take(2, "separators").value_or(Value());
  o.sort_keys = truthy(args.take(3, "sort_keys").value_or(Value(false)));
  done();
  if (indent.is_int() && indent.as_int() > 4096) fail_value("tojson indent past 4096");
  if (indent.is_int())
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  else if (indent.is_string())
    o.indent = indent.as_string();
  else if (!indent.is_none())
    fail_type("tojson indent must be an int, a str or None");
  if (o.indent) o.item_separator = ",";
  if (!separators.is_none()) {
    const std::vector<Value> seps = separators.iterate();
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      fail_value("tojson separators must be an (item_separator, key_separator) pair of strings");
    o.item_separator = seps[0].as_string();
    o.key_separator = seps[1].as_string();
  }
  return Value(json_dumps(v, o));
}

Value filter_length(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value(0);
    case Value::Kind::kString: return Value(py::len(v.as_string()));
    case Value::Kind::kList:
    case Value::Kind::kTuple: return Value(static_cast<int64_t>(v.items().size()));
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return Value(static_cast<int64_t>(v.as_dict().entries.size()));
    default: fail_type(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value filter_string(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  return Value(str(v));
}

Value filter_case(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  const std::string s = str(v);
  if (f == "upper") return Value(py::upper(s));
  if (f == "lower") return Value(py::lower(s));
  if (f == "capitalize") return Value(py_capitalize(s));
  return Value(jinja_title(s));
}

Value filter_trim(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const auto chars = optional_chars(args.take(0, "chars"), "strip arg must be None or str");
  done();
  return Value(py::strip(str(v), chars, true, true));
}

Value filter_replace(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  Value s(str(v));
  CallArgs inner;
  if (auto x = args.take(0, "old")) inner.positional.push_back(*x);
  if (auto x = args.take(1, "new")) inner.positional.push_back(*x);
  if (auto x = args.take(2, "count"))
    if (!x->is_none()) inner.positional.push_back(*x);
  done();
  return str_method(s, "replace").as_callable().call(inner);
}

Value filter_escape(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  return Value(html_escape(str(v), "&#34;"));  // markupsafe's entities
}

Value filter_first_last(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  const bool reversible = v.is_undefined() || v.is_string() || v.kind() == Value::Kind::kList ||
                          v.kind() == Value::Kind::kTuple || v.is_dict();
  if (f == "last" && !reversible) fail_type(fmt::format("'{}' object is not reversible", type_name(v)));
  const std::vector<Value> items = v.iterate();
  if (items.empty())
    return Value::undefined(f == "first" ? "No first item, sequence was empty." : "No last item, sequence was empty.");
  return f == "first" ? items.front() : items.back();
}

Value filter_list(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  return Value::list(v.iterate());
}

Value filter_join(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const Value sep = args.take(0, "d").value_or(Value(""));
  const auto attribute = args.take(1, "attribute");
  done();
  std::string out;
  bool first = true;
  const std::string s = str(sep);
  for (const Value& item : v.iterate()) {
    out += (first ? "" : s) + str(attribute && !attribute->is_none() ? attr_path(item, *attribute) : item);
    first = false;
    if (out.size() > kMaxString) fail_value("a string past 64 MiB");
  }
  return Value(out);
}

Value filter_map(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  std::vector<Value> out;
  const bool any = truthy(v);  // Jinja2's map and select skip a false value without iterating it
  std::optional<Value> attribute = args.take(static_cast<size_t>(-1), "attribute");
  if (attribute) {
    const std::optional<Value> def = args.take(static_cast<size_t>(-1), "default");
    done();
    for (const Value& item : any ? v.iterate() : std::vector<Value>()) {
      Value x = attr_path(item, *attribute);
      if (x.is_undefined() && def) x = *def;
      out.push_back(x);
    }
  } else {
    if (args.positional.empty()) fail_type("map requires a filter argument");
    const std::string name = need_string(args.positional[0], "the filter name must be str");
    if (!has_filter(name)) throw RenderError("TemplateRuntimeError", fmt::format("No filter named '{}'.", name));
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : any ? v.iterate() : std::vector<Value>()) {
      CallArgs a = rest;
      out.push_back(apply_filter(name, item, a));
    }
  }
  return Value::list(std::move(out), Value::Kind::kIterator);
}

Value filter_select_reject(const std::string& f, const Value& v, CallArgs& args) {
  return Value::list(select(v, args, f.size() > 6, f[0] == 's'), Value::Kind::kIterator);
}

Value filter_items(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  if (v.is_undefined()) return Value::list({}, Value::Kind::kIterator);
  if (!v.is_dict()) fail_type("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::list({k, val}, Value::Kind::kTuple));
  return Value::list(std::move(out), Value::Kind::kIterator);
}

Value filter_dictsort(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const bool case_sensitive = truthy(args.take(0, "case_sensitive").value_or(Value(false)));
  const Value by = args.take(1, "by").value_or(Value("key"));
  const bool reverse = truthy(args.take(2, "reverse").value_or(Value(false)));
  done();
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict())
    throw RenderError("AttributeError", fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  const size_t pos = str(by) == "value" ? 1 : 0;
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::list({k, val}, Value::Kind::kTuple));
  sort_values(
      out, [&](const Value& x) { return sort_key(x.items()[pos], case_sensitive); }, reverse);
  return Value::list(std::move(out));
}

Value filter_sort(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const bool reverse = truthy(args.take(0, "reverse").value_or(Value(false)));
  const bool case_sensitive = truthy(args.take(1, "case_sensitive").value_or(Value(false)));
  const auto attribute = args.take(2, "attribute");
  done();
  std::vector<Value> out = v.iterate();
  sort_values(
      out,
      [&](const Value& x) {
        return sort_key(attribute && !attribute->is_none() ? attr_path(x, *attribute) : x, case_sensitive);
      },
      reverse);
  return Value::list(std::move(out));
}

Value filter_unique(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const bool case_sensitive = truthy(args.take(0, "case_sensitive").value_or(Value(false)));
  const auto attribute = args.take(1, "attribute");
  done();
  std::vector<Value> out, seen;
  for (const Value& item : v.iterate()) {
    const Value key = sort_key(attribute && !attribute->is_none() ? attr_path(item, *attribute) : item, case_sensitive);
    if (key.kind() == Value::Kind::kList || key.is_dict())  // Jinja2 keeps the seen ones in a set
      fail_type(fmt::format("unhashable type: '{}'", type_name(key)));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out), Value::Kind::kIterator);
}

Value filter_reverse(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  if (v.is_string()) {
    std::u32string cps = py::code_points(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(py::utf8(cps));
  }
  if (!v.is_undefined() && !v.is_sequence() && !v.is_dict())
    throw RenderError("FilterArgumentError", "argument must be iterable");
  std::vector<Value> out = v.iterate();
  std::reverse(out.begin(), out.end());
  return Value::list(std::move(out), Value::Kind::kIterator);
}

Value filter_sum(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const auto attribute = args.take(0, "attribute");
  Value total = args.take(1, "start").value_or(Value(0));
  done();
  for (const Value& item : v.iterate())
    total = binary_op("+", total, attribute && !attribute->is_none() ? attr_path(item, *attribute) : item);
  return total;
}

Value filter_min_max(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const bool case_sensitive = truthy(args.take(0, "case_sensitive").value_or(Value(false)));
  const auto attribute = args.take(1, "attribute");
  done();
  const std::vector<Value> items = v.iterate();
  if (items.empty()) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    auto key = [&](const Value& x) {
      return sort_key(attribute && !attribute->is_none() ? attr_path(x, *attribute) : x, case_sensitive);
    };
    if (compare(key(items[i]), key(items[best]), f == "min" ? "<" : ">")) best = i;
  }
  return items[best];
}

Value filter_int(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const Value def = args.take(0, "default").value_or(Value(0));
  const int64_t base = need_int(args.take(1, "base").value_or(Value(10)));
  done();
  if (v.is_undefined()) fail_undefined(v);
  return to_int(v, def, base);
}

Value filter_float(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const Value def = args.take(0, "default").value_or(Value(0.0));
  done();
  if (v.is_undefined()) fail_undefined(v);
  return to_float(v, def);
}

Value filter_abs(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  if (v.is_int() && v.as_int() == std::numeric_limits<int64_t>::min())
    throw RenderError("OverflowError", "integer past 64 bits (gpueval's Jinja subset)");
  if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.as_double()));
  fail_type(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

Value filter_round(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const int64_t precision = need_int(args.take(0, "precision").value_or(Value(0)));
  const std::string method = str(args.take(1, "method").value_or(Value("common")));
  done();
  if (!v.is_number()) fail_type(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  if (method == "common") {
    if (v.is_int()) return Value(v.as_int());
    return Value(py_round(v.as_double(), precision));
  }
  if (method != "ceil" && method != "floor")
    throw RenderError("FilterArgumentError", "method must be common, ceil or floor");
  const double p = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value filter_indent(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const Value width = args.take(0, "width").value_or(Value(4));
  const bool first = truthy(args.take(1, "first").value_or(Value(false)));
  const bool blank = truthy(args.take(2, "blank").value_or(Value(false)));
  done();
  if (v.is_undefined()) fail_undefined(v);
  // Jinja2's indent does `s += "\n"` then `s.splitlines()`: what each type does with that.
  if (v.kind() == Value::Kind::kList)
    throw RenderError("AttributeError", "'list' object has no attribute 'splitlines'");
  if (v.kind() == Value::Kind::kTuple) fail_type("can only concatenate tuple (not \"str\") to tuple");
  if (!v.is_string()) fail_type(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
  const int64_t n = width.is_string() ? 0 : std::max<int64_t>(0, need_int(width));
  if (n > 4096) fail_value("indent width past 4096");
  const std::string pad = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(n), ' ');
  return Value(indent_text(str(v), pad, first, blank));
}

Value filter_format(const std::string&, const Value& v, CallArgs& args) {
  Value tuple = Value::list(args.positional, Value::Kind::kTuple);
  if (!args.keyword.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, val] : args.keyword) d->set(Value(k), val);
    tuple = Value::dict(d);
  }
  return Value(percent_format(str(v), tuple));
}

Value filter_attr(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const auto name = args.take(0, "name");
  done();
  if (!name) fail_type("attr needs a name");
  // Jinja2's attr filter reads attributes only, never a dict's keys.
  if (v.is_dict()) {
    const Value m = dict_method(v, str(*name));
    return !m.is_undefined() || !m.as_string().empty() ? m : missing_attr(v, str(*name));
  }
  return get_attr(v, str(*name));
}

Value filter_wordcount(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  done();
  // Jinja2 counts the matches of \w+ (letters, digits and '_').
  int64_t words = 0;
  bool in_word = false;
  for (const char32_t c : py::code_points(str(v))) {
    const bool word =
        c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : is_cased(c) || (c >= 0x660 && c <= 0x669));
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value(words);
}

Value filter_center(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const int64_t width = need_int(args.take(0, "width").value_or(Value(80)));
  done();
  if (width > static_cast<int64_t>(kMaxString)) fail_value("a string past 64 MiB");
  const std::string s = str(v);
  const int64_t n = py::len(s);
  if (n >= width) return Value(s);
  const int64_t total = width - n;
  const int64_t left = total / 2 + (total & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value filter_batch(const std::string& f, const Value& v, CallArgs& args) {
  auto done = [&] { args.done(f); };
  const int64_t size = need_int(args.take(0, "linecount").value_or(Value(1)));
  const auto fill = args.take(1, "fill_with");
  done();
  if (size <= 0) fail_value("batch size must be positive");
  std::vector<Value> out, cur;
  for (const Value& item : v.iterate()) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == size) {
      out.push_back(Value::list(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < size) cur.push_back(*fill);
    out.push_back(Value::list(cur));
  }
  return Value::list(std::move(out), Value::Kind::kIterator);
}

// One row per filter name; aliases (d, e, count) share their function, which gets the name called.
const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> k = {
      {"abs", filter_abs},
      {"attr", filter_attr},
      {"batch", filter_batch},
      {"capitalize", filter_case},
      {"center", filter_center},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"first", filter_first_last},
      {"float", filter_float},
      {"format", filter_format},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_first_last},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", filter_case},
      {"map", filter_map},
      {"max", filter_min_max},
      {"min", filter_min_max},
      {"reject", filter_select_reject},
      {"rejectattr", filter_select_reject},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"round", filter_round},
      {"safe", filter_safe},
      {"select", filter_select_reject},
      {"selectattr", filter_select_reject},
      {"sort", filter_sort},
      {"string", filter_string},
      {"sum", filter_sum},
      {"title", filter_case},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", filter_case},
      {"wordcount", filter_wordcount},
  };
  return k;
}

// A test's one argument (`x is divisibleby 3`), or a TypeError naming the test.
Value test_arg(const std::string& t, CallArgs& args, const char* name) {
  const auto x = args.take(0, name);
  args.done(t);
  if (!x) fail_type(fmt::format("test '{}' needs an argument", t));
  return *x;
}

bool test_case(const std::string& t, const Value& v, CallArgs& args) {
  args.done(t);
  bool any = false;
  for (const char32_t c : py::code_points(str(v))) {
    if (!is_cased(c)) continue;
    any = true;
    if (t == "lower" ? py::lower(one(c)) != one(c) : py::upper(one(c)) != one(c)) return false;
  }
  return any;
}

bool test_odd_even(const std::string& t, const Value& v, CallArgs& args) {
  args.done(t);
  const Value r = binary_op("%", v, Value(2));
  return t == "odd" ? equal(r, Value(1)) : equal(r, Value(0));
}

// A test of the value alone, taking no arguments.
template <bool (*kIs)(const Value&)>
bool test_of_value(const std::string& t, const Value& v, CallArgs& args) {
  args.done(t);
  return kIs(v);
}

// A comparison test (`x is gt 3`): Python's `x <op> other`.
template <const char* kOp>
bool test_compare(const std::string& t, const Value& v, CallArgs& args) {
  return compare(v, test_arg(t, args, "other"), kOp);
}
constexpr char kLt[] = "<", kGt[] = ">", kLe[] = "<=", kGe[] = ">=";

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.is_bool(); }
bool is_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool is_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool is_integer(const Value& v) { return v.kind() == Value::Kind::kInt; }
bool is_float(const Value& v) { return v.kind() == Value::Kind::kFloat; }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.is_dict(); }
bool is_iterable(const Value& v) { return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict(); }
bool is_sequence(const Value& v) {
  return v.is_undefined() || v.is_string() || v.kind() == Value::Kind::kList || v.kind() == Value::Kind::kTuple ||
         v.is_dict();
}
bool is_callable(const Value& v) { return v.is_callable() || v.is_undefined(); }  // Undefined has __call__
bool is_escaped(const Value&) { return false; }

bool test_divisibleby(const std::string& t, const Value& v, CallArgs& args) {
  return equal(binary_op("%", v, test_arg(t, args, "num")), Value(0));
}
bool test_eq(const std::string& t, const Value& v, CallArgs& args) { return equal(v, test_arg(t, args, "other")); }
bool test_ne(const std::string& t, const Value& v, CallArgs& args) { return !equal(v, test_arg(t, args, "other")); }
bool test_in(const std::string& t, const Value& v, CallArgs& args) { return contains(test_arg(t, args, "seq"), v); }
bool test_sameas(const std::string& t, const Value& v, CallArgs& args) {
  return v.same_object(test_arg(t, args, "other"));
}
bool test_filter(const std::string& t, const Value& v, CallArgs& args) {
  return has_filter(str(test_arg(t, args, "name")));
}
bool test_test(const std::string& t, const Value& v, CallArgs& args) {
  return has_test(str(test_arg(t, args, "name")));
}

// One row per test name; aliases (equalto, ==, lessthan, ...) share their function.
const std::unordered_map<std::string, TestFn>& test_table() {
  static const std::unordered_map<std::string, TestFn> k = {
      {"!=", test_ne},
      {"<", test_compare<kLt>},
      {"<=", test_compare<kLe>},
      {"==", test_eq},
      {">", test_compare<kGt>},
      {">=", test_compare<kGe>},
      {"boolean", test_of_value<is_boolean>},
      {"callable", test_of_value<is_callable>},
      {"defined", test_of_value<is_defined>},
      {"divisibleby", test_divisibleby},
      {"eq", test_eq},
      {"equalto", test_eq},
      {"escaped", test_of_value<is_escaped>},
      {"even", test_odd_even},
      {"false", test_of_value<is_false>},
      {"filter", test_filter},
      {"float", test_of_value<is_float>},
      {"ge", test_compare<kGe>},
      {"greaterthan", test_compare<kGt>},
      {"gt", test_compare<kGt>},
      {"in", test_in},
      {"integer", test_of_value<is_integer>},
      {"iterable", test_of_value<is_iterable>},
      {"le", test_compare<kLe>},
      {"lessthan", test_compare<kLt>},
      {"lower", test_case},
      {"lt", test_compare<kLt>},
      {"mapping", test_of_value<is_mapping>},
      {"ne", test_ne},
      {"none", test_of_value<is_none>},
      {"number", test_of_value<is_number>},
      {"odd", test_odd_even},
      {"sameas", test_sameas},
      {"sequence", test_of_value<is_sequence>},
      {"string", test_of_value<is_string>},
      {"test", test_test},
      {"true", test_of_value<is_true>},
      {"undefined", test_of_value<is_undefined>},
      {"upper", test_case},
  };
  return k;
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  const auto it = filter_table().find(name);
  return it == filter_table().end() ? nullptr : it->second;
}
TestFn find_test(const std::string& name) {
  const auto it = test_table().find(name);
  return it == test_table().end() ? nullptr : it->second;
}
bool has_filter(const std::string& name) { return find_filter(name) != nullptr; }
bool has_test(const std::string& name) { return find_test(name) != nullptr; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  const FilterFn f = find_filter(name);
  if (!f) throw RenderError("TemplateRuntimeError", fmt::format("No filter named '{}'.", name));
  return f(name, v, args);
}
bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  const TestFn t = find_test(name);
  if (!t) throw RenderError("TemplateRuntimeError", fmt::format("No test named '{}'.", name));
  return t(name, v, args);
}

}  // namespace gpueval::jinja
