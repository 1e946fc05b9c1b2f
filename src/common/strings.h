// Small string helpers the whole project shares, so each is written once.
#pragma once

#include <string>
#include <string_view>

namespace gpueval {

inline bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HTML-escapes &, <, >, " and ' so the text is safe both as element content and in an attribute.
// A double quote becomes `quote`: "&quot;" in gpueval's own pages, "&#34;" where output must equal
// markupsafe.escape's (Jinja2's `escape` filter, whose entities are &#34; and &#39;).
inline std::string html_escape(std::string_view text, const char* quote = "&quot;") {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += quote; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace gpueval
