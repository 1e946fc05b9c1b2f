// A reader for HellaSwag's six-line text layout (klosax/hellaswag_text_data, the file llama.cpp's
// `perplexity --hellaswag` reads): each record is six lines,
//   context (activity_label + ": " + ctx, markers already removed), gold ending (0-3),
//   ending 0, ending 1, ending 2, ending 3,
// with nothing between records. Lines end with LF or CRLF; the text is taken as given.
//
// Errors are one line naming the file and the line: a gold line that is not 0-3, a final record
// with fewer than six lines. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpueval {

struct HellaswagRecord {
  int64_t line = 0;  // 1-based line of the context
  std::string context;
  int gold = 0;
  std::vector<std::string> endings;  // four
};

// Parses `text`; `where` names its source in messages ("x.txt" -> "x.txt:14: ...").
std::vector<HellaswagRecord> parse_hellaswag_text(std::string_view text, const std::string& where);

// Reads and parses a file.
std::vector<HellaswagRecord> read_hellaswag_text(const std::string& path);

}  // namespace gpueval
