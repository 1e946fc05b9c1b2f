#include "common/byte_amount.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "gpueval/error.h"

namespace gpueval {

std::optional<int64_t> parse_byte_amount(const std::string& text, int64_t min_bytes, const std::string& where,
                                         const std::string& other_forms) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  if (text.empty() || end == begin || errno != 0 || !std::isfinite(value) || !(value > 0) || text[0] == '+')
    return std::nullopt;
  const std::string unit(end);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},     {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},     {"TB", 1e12}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = value * scale;
    if (bytes < static_cast<double>(min_bytes) || bytes > 9e18)
      fail(where, "'{}' is out of range (at least {})", text, byte_amount_str(min_bytes));
    return static_cast<int64_t>(bytes);
  }
  fail(where, "unknown unit '{}' in '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB{})", unit, text, other_forms);
}

std::string byte_amount_str(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (u + 1 < std::size(kUnits) && v >= 1024.0 && std::fmod(v, 1024.0) == 0) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{}{}", static_cast<int64_t>(v), kUnits[u]);
}

}  // namespace gpueval
