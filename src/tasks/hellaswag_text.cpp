#include "tasks/hellaswag_text.h"

#include "common/file_io.h"
#include "common/strict_json.h"
#include "tasks/dataset_bounds.h"
#include "gpueval/error.h"

namespace gpueval {

std::vector<HellaswagRecord> parse_hellaswag_text(std::string_view text, const std::string& where) {
  constexpr size_t kLines = 6;  // context, gold, four endings
  std::vector<HellaswagRecord> out;
  std::vector<std::string> lines;
  int64_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    check_document_size(line.size(), where + ":" + std::to_string(line_number), "the line");
    lines.emplace_back(line);
    if (lines.size() < kLines) continue;
    HellaswagRecord record;
    record.line = line_number - static_cast<int64_t>(kLines) + 1;
    record.context = std::move(lines[0]);
    if (lines[1].size() != 1 || lines[1][0] < '0' || lines[1][0] > '3') {
      fail(where + ":" + std::to_string(record.line + 1), "gold ending {} is not 0, 1, 2 or 3",
           quote_untrusted(lines[1]));
    }
    record.gold = lines[1][0] - '0';
    record.endings.assign(std::make_move_iterator(lines.begin() + 2), std::make_move_iterator(lines.end()));
    out.push_back(std::move(record));
    lines.clear();
  }
  if (!lines.empty()) {
    fail(where + ":" + std::to_string(line_number - static_cast<int64_t>(lines.size()) + 1),
         "the last record has {} of its 6 lines (context, gold ending, 4 endings)", lines.size());
  }
  return out;
}

std::vector<HellaswagRecord> read_hellaswag_text(const std::string& path) {
  return parse_hellaswag_text(io::read_file(path), path);
}

}  // namespace gpueval
