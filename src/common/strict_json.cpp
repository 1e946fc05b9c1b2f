#include "common/strict_json.h"

#include <unordered_set>
#include <vector>

#include "gpueval/error.h"

namespace gpueval {

nlohmann::ordered_json parse_strict_json(std::string_view text, const std::string& where, std::string_view what) {
  using Json = nlohmann::ordered_json;
  // One key set per object being parsed, innermost last.
  std::vector<std::unordered_set<std::string>> open_objects;
  Json::parser_callback_t track_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case Json::parse_event_t::object_end: open_objects.pop_back(); break;
      case Json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) {
          fail(where, "{} has duplicate key {}", what, quote_untrusted(key));
        }
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), track_keys);
  } catch (const Json::exception& e) {
    // parse_error, and out_of_range for a number past double ("1E6666": found by fuzz_template).
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest says where and why.
    std::string detail = e.what();
    if (!detail.empty() && detail.front() == '[') {
      const size_t end = detail.find("] ");
      if (end != std::string::npos) detail.erase(0, end + 2);
    }
    fail(where, "{} is not valid JSON: {}", what, detail);
  }
}

std::string quote_untrusted(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  size_t shown = s.size();
  if (shown > kMaxShown) {
    // Back up to a character boundary so the cut does not leave half a UTF-8 sequence.
    shown = kMaxShown;
    while (shown > 0 && (static_cast<unsigned char>(s[shown]) & 0xC0) == 0x80) --shown;
  }
  std::string out = "'";
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < s.size()) out += "...";
  out += '\'';
  return out;
}

}  // namespace gpueval
