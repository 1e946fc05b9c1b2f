#include "tasks/csv.h"

#include "common/file_io.h"
#include "tasks/dataset_bounds.h"
#include "gpueval/error.h"

namespace gpueval {

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& where, size_t columns) {
  std::vector<CsvRecord> out;
  size_t pos = 0;
  int64_t line = 1;
  const size_t n = text.size();
  while (pos < n) {
    // A record with no characters before its line break is a blank line, not a one-field record.
    if (text[pos] == '\n' || (text[pos] == '\r' && pos + 1 < n && text[pos + 1] == '\n')) {
      pos += text[pos] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    CsvRecord record;
    record.line = line;
    const size_t record_start = pos;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (pos < n && text[pos] == '"') {
        const int64_t opened = line;
        ++pos;
        while (true) {
          if (pos >= n) fail(where + ":" + std::to_string(opened), "quoted field is never closed");
          if (pos - record_start > kMaxDocumentBytes) {
            check_document_size(pos - record_start, where + ":" + std::to_string(record.line), "the record");
          }
          const char c = text[pos++];
          if (c == '"') {
            if (pos < n && text[pos] == '"') {
              field += '"';
              ++pos;
              continue;
            }
            break;
          }
          if (c == '\n') ++line;
          field += c;
        }
        if (pos < n && text[pos] != ',' && text[pos] != '\n' &&
            !(text[pos] == '\r' && pos + 1 < n && text[pos + 1] == '\n')) {
          fail(where + ":" + std::to_string(line),
               "unexpected character after a closing quote (field {} of the record)", record.fields.size() + 1);
        }
      } else {
        while (pos < n && text[pos] != ',' && text[pos] != '\n' &&
               !(text[pos] == '\r' && pos + 1 < n && text[pos + 1] == '\n')) {
          // A quote inside an unquoted field is kept as text, as Python's csv module keeps it: the
          // MMLU release has one (val/college_medicine_val.csv, line 6).
          field += text[pos++];
        }
      }
      record.fields.push_back(std::move(field));
      check_document_size(pos - record_start, where + ":" + std::to_string(record.line), "the record");
      if (pos >= n) {
        end_of_record = true;
      } else if (text[pos] == ',') {
        ++pos;
      } else {
        pos += text[pos] == '\r' ? 2 : 1;
        end_of_record = true;
        ++line;
      }
    }
    if (columns > 0 && record.fields.size() != columns) {
      fail(where + ":" + std::to_string(record.line), "{} fields, expected {}", record.fields.size(), columns);
    }
    out.push_back(std::move(record));
  }
  return out;
}

std::vector<CsvRecord> read_csv(const std::string& path, size_t columns) {
  return parse_csv(io::read_file(path), path, columns);
}

}  // namespace gpueval
