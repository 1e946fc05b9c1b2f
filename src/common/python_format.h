// How Python prints values, byte for byte, for the files that users compare with
// lm-evaluation-harness's: repr() of a float (shortest round trip, "1.0", "1e-05"),
// str()/repr() of JSON-shaped values (what a Jinja template or `str(target)` produces), and
// json.dumps(..., ensure_ascii=False) with or without `indent`. Private to src/. Stateless
// and thread-safe.
//
// Known gap: repr() of a string escapes the non-printable code points Python escapes for
// ASCII and Latin-1 and the common Unicode spaces and format characters; exotic unassigned
// or private-use code points are printed raw where Python would escape them.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpueval::py {

// repr(float): "0.1", "1.0", "1e-05", "1.5e+16", "-0.0", "inf", "nan".
std::string float_repr(double x);

// str(value) of the Python value the JSON stands for: strings raw, integers in decimal,
// floats as float_repr, true/false/null as True/False/None, lists and dicts as repr().
std::string str(const nlohmann::json& value);
std::string str(const nlohmann::ordered_json& value);

// str.strip(): leading and trailing whitespace removed, Unicode whitespace (str.isspace())
// included.
std::string strip(const std::string& s);

// repr(value): strings quoted the way Python quotes them ('a', "it's", '\n').
std::string repr(const nlohmann::json& value);
std::string repr(const nlohmann::ordered_json& value);

// json.dumps(value, ensure_ascii=False) when indent < 0 (separators ", " and ": "), or with
// indent=N (separators "," and ": ", one item per line). Non-finite floats are written as
// NaN / Infinity / -Infinity, as Python does.
std::string json_dumps(const nlohmann::json& value, int indent = -1);
std::string json_dumps(const nlohmann::ordered_json& value, int indent = -1);

// json.dumps of one string, appended to `out` quoted: '"', '\\' and control characters escaped;
// with ensure_ascii also every code point past '~' (\uXXXX, a surrogate pair past U+FFFF),
// without it everything else as is. Bytes that are not UTF-8 are written as they are.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii = false);

}  // namespace gpueval::py
