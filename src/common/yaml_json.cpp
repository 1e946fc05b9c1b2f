#include "common/yaml_json.h"

#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "common/strict_json.h"
#include "common/utf8.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

nlohmann::ordered_json plain_scalar(const std::string& s) {
  static const std::set<std::string> kTrue = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const std::set<std::string> kFalse = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  static const std::set<std::string> kNull = {"", "~", "null", "Null", "NULL"};
  static const std::regex kDecimal("[-+]?(0|[1-9][0-9_]*)");
  static const std::regex kOctal("[-+]?0[0-7_]+");
  static const std::regex kHex("[-+]?0x[0-9a-fA-F_]+");
  static const std::regex kFloat("[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?");
  static const std::regex kInf("[-+]?\\.(inf|Inf|INF)");
  static const std::regex kNan("\\.(nan|NaN|NAN)");
  if (kNull.count(s)) return nullptr;
  if (kTrue.count(s)) return true;
  if (kFalse.count(s)) return false;
  std::string digits;
  for (const char c : s) {
    if (c != '_') digits += c;
  }
  try {
    if (std::regex_match(s, kDecimal)) return std::stoll(digits);
    if (std::regex_match(s, kHex)) return std::stoll(digits, nullptr, 16);
    if (std::regex_match(s, kOctal)) return std::stoll(digits, nullptr, 8);
    if (std::regex_match(s, kFloat) && s != "." && s.find_first_of("0123456789") != std::string::npos) {
      return std::stod(digits);
    }
  } catch (const std::out_of_range&) {
    return s;  // beyond int64: kept as text rather than silently rounded
  }
  if (std::regex_match(s, kInf))
    return s[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (std::regex_match(s, kNan)) return std::numeric_limits<double>::quiet_NaN();
  return s;
}

}  // namespace

std::string yaml_where(const std::string& file, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return file;
  return file + ":" + std::to_string(mark.line + 1);
}

nlohmann::ordered_json yaml_to_json(const YAML::Node& node, const std::string& file) {
  const std::string& tag = node.Tag();
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar:
      if (tag == "?") return plain_scalar(node.Scalar());
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return node.Scalar();
      fail(yaml_where(file, node), "tag '{}' is not supported", tag);
    case YAML::NodeType::Sequence: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const YAML::Node& item : node) out.push_back(yaml_to_json(item, file));
      return out;
    }
    case YAML::NodeType::Map: {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) fail(yaml_where(file, entry.first), "mapping keys must be plain text");
        const std::string key = entry.first.Scalar();
        if (out.contains(key)) fail(yaml_where(file, entry.first), "duplicate key {}", quote_untrusted(key));
        out[key] = yaml_to_json(entry.second, file);
      }
      return out;
    }
  }
  return nullptr;
}

YAML::Node parse_yaml(std::string_view text, const std::string& file) {
  // yaml-cpp passes invalid UTF-8 through into strings, which every JSON writer then refuses.
  if (const size_t bad = utf8_invalid_offset(text); bad != text.size()) fail(file, "not valid UTF-8 (byte {})", bad);
  // YAML allows only printable characters, and PyYAML (lm-eval's loader) refuses the others;
  // yaml-cpp lets them through and can turn them into invalid UTF-8 (found by fuzz_run_config).
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c == '\n') ++line;
    const bool control = (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f;
    const bool c1 = c == 0xc2 && next >= 0x80 && next <= 0x9f && next != 0x85;  // U+0080..U+009F but NEL
    if (control || c1)
      fail(fmt::format("{}:{}", file, line), "character U+{:04X} is not allowed in YAML", c1 ? next : c);
  }
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    const std::string message = quote_untrusted(e.msg);  // one line, quoted: it may echo the input
    if (e.mark.is_null()) fail(file, "invalid YAML: {}", message);
    fail(fmt::format("{}:{}", file, e.mark.line + 1), "invalid YAML at column {}: {}", e.mark.column + 1, message);
  }
}

size_t yaml_second_document_line(std::string_view text) {
  bool content = false;
  size_t line = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    ++line;
    const bool marker = l.substr(0, 3) == "---" && (l.size() == 3 || l[3] == ' ' || l[3] == '\t');
    if (marker && content) return line;
    const size_t first = l.find_first_not_of(" \t");
    if (!marker && first != std::string_view::npos && l[first] != '#') content = true;
    if (marker && l.find_first_not_of(" \t", 3) != std::string_view::npos && l[l.find_first_not_of(" \t", 3)] != '#')
      content = true;  // "--- value": the document's content starts on the marker's line
    pos = end + 1;
  }
  return 0;
}

}  // namespace gpueval
