// A reader for comma-separated files as RFC 4180 defines them, which is how the MMLU release
// (and most benchmark CSVs) are written: records end with CRLF or LF, a field that contains a
// comma, a quote or a line break is enclosed in double quotes, and a quote inside such a field
// is written twice (""). A quoted field may therefore span several lines. No header row is
// assumed; the caller names the columns. gpueval carries no CSV library, so this is ours.
//
// Errors are one line naming the file and the line the bad record starts on: a record with a
// different number of fields than expected, a quote that is never closed, or a stray character
// after a closing quote. A quote inside an unquoted field (`a"b`) is not RFC 4180 but is kept
// as text, as Python's csv module reads it, because real files have them. A blank line (no characters at all) between
// records is skipped. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpueval {

struct CsvRecord {
  int64_t line = 0;  // 1-based line the record starts on
  std::vector<std::string> fields;  // unquoted, "" unescaped
};

// Parses `text`; `where` names its source in messages ("data/x.csv" -> "data/x.csv:12: ...").
// When `columns` > 0 every record must have exactly that many fields.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& where, size_t columns = 0);

// Reads and parses a file.
std::vector<CsvRecord> read_csv(const std::string& path, size_t columns = 0);

}  // namespace gpueval
