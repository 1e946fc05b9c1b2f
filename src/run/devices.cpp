#include "run/devices.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "gpueval/error.h"

namespace gpueval {
namespace {

constexpr const char* kExpected = "expected GPU indices (e.g. 0-3 or 0,2,5), all, cpu or cpu:N";
// Indices longer than this are saturated: they are out of range whatever the machine.
constexpr int64_t kHugeIndex = int64_t{1} << 40;

// A spec after its form has been checked and before it meets the machine.
struct ParsedSpec {
  enum class Form { kIndices, kAll, kCpu };
  Form form = Form::kIndices;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // kIndices: inclusive [first, last], in order
  int64_t cpu_workers = 1;  // kCpu
};

std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

// A non-negative decimal number, saturated at kHugeIndex; nullopt if `s` is not all digits.
std::optional<int64_t> parse_count(const std::string& s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t value = 0;
  for (char c : s) {
    value = value * 10 + (c - '0');
    if (value >= kHugeIndex) return kHugeIndex;
  }
  return value;
}

ParsedSpec parse_form(const std::string& raw, const std::string& where) {
  std::string spec = trim(raw);
  if (spec.empty()) fail(where, "is empty; {}", kExpected);
  ParsedSpec parsed;
  if (spec == "all") {
    parsed.form = ParsedSpec::Form::kAll;
    return parsed;
  }
  if (spec == "cpu") {
    parsed.form = ParsedSpec::Form::kCpu;
    return parsed;
  }
  if (spec.compare(0, 4, "cpu:") == 0) {
    std::string count = trim(spec.substr(4));
    std::optional<int64_t> n = parse_count(count);
    if (!n) fail(where, "'{}' is not a number of CPU workers; {}", count, kExpected);
    if (*n == 0) fail(where, "needs at least one CPU worker (cpu:N with N >= 1)");
    if (*n > kMaxWorkers) fail(where, "asks for more than {} workers", kMaxWorkers);
    parsed.form = ParsedSpec::Form::kCpu;
    parsed.cpu_workers = *n;
    return parsed;
  }
  size_t start = 0;
  for (;;) {
    size_t comma = spec.find(',', start);
    std::string item = trim(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) fail(where, "has an empty entry between commas; {}", kExpected);
    if (item == "all") fail(where, "'all' cannot be combined with other devices");
    if (item.compare(0, 3, "cpu") == 0) fail(where, "'{}' cannot be combined with GPU indices", item);
    size_t dash = item.find('-');
    std::optional<int64_t> first = parse_count(trim(item.substr(0, dash)));
    std::optional<int64_t> last = dash == std::string::npos ? first : parse_count(trim(item.substr(dash + 1)));
    if (!first || !last) fail(where, "'{}' is not a GPU index or range; {}", item, kExpected);
    if (*last < *first) fail(where, "range end is below its start");
    parsed.ranges.emplace_back(*first, *last);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parsed;
}

std::string where_of(const std::string& spec) { return "--gpus " + (trim(spec).empty() ? "''" : spec); }

// A repeat-heavy or huge spec is refused before any slot is built.
void check_worker_count(const ParsedSpec& parsed, const std::string& where) {
  int64_t workers = 0;
  for (const auto& [first, last] : parsed.ranges) {
    workers += last - first + 1;
    if (workers > kMaxWorkers) fail(where, "asks for more than {} workers", kMaxWorkers);
  }
}

}  // namespace

std::string DeviceSlot::name() const { return fmt::format("{}:{}", kind == Kind::kCuda ? "cuda" : "cpu", index); }

void check_device_spec_syntax(const std::string& spec, const std::string& where) {
  check_worker_count(parse_form(spec, where), where);
}

std::vector<DeviceSlot> parse_device_spec(const std::string& spec, int cuda_devices, int cpu_cores) {
  const std::string where = where_of(spec);
  ParsedSpec parsed = parse_form(spec, where);
  std::vector<DeviceSlot> slots;

  if (parsed.form == ParsedSpec::Form::kCpu) {
    const int workers = static_cast<int>(parsed.cpu_workers);
    const int cores = std::max(1, cpu_cores);
    const int base = std::max(1, cores / workers);
    int extra = std::max(0, cores - base * workers);
    for (int i = 0; i < workers; ++i) {
      DeviceSlot slot;
      slot.kind = DeviceSlot::Kind::kCpu;
      slot.index = i;
      slot.threads = base + (extra > 0 ? 1 : 0);
      if (extra > 0) --extra;
      slots.push_back(slot);
    }
    return slots;
  }

  if (cuda_devices <= 0)
    fail(where,
         "no CUDA device is visible (this build of LibTorch has no CUDA support or no GPU is present); "
         "use --gpus cpu or cpu:N");
  if (parsed.form == ParsedSpec::Form::kAll) parsed.ranges = {{0, cuda_devices - 1}};
  for (const auto& [first, last] : parsed.ranges) {
    if (last >= cuda_devices) {
      if (cuda_devices == 1) fail(where, "only 1 CUDA device (0) is visible");
      fail(where, "only {} CUDA devices (0-{}) are visible", cuda_devices, cuda_devices - 1);
    }
  }
  check_worker_count(parsed, where);
  const int threads = std::max(1, std::min(kCudaWorkerThreads, cpu_cores));
  for (const auto& [first, last] : parsed.ranges) {
    for (int64_t i = first; i <= last; ++i) {
      DeviceSlot slot;
      slot.kind = DeviceSlot::Kind::kCuda;
      slot.index = static_cast<int>(i);
      slot.threads = threads;
      slots.push_back(slot);
    }
  }
  return slots;
}

}  // namespace gpueval
