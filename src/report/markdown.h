// Markdown helpers shared by the report writers (report.md of a run, the trend report.md).
#pragma once

#include <string>

namespace gpueval {

// Text safe inside one cell of a Markdown table: '|' escaped, line breaks turned into spaces.
inline std::string markdown_cell(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace gpueval
