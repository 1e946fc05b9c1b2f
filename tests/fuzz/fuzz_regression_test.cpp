// Every saved input of the fuzz targets (tests/fuzz/fuzz_targets.h) in the ordinary suite: the
// hand-made seeds (tests/fuzz/seeds/<target>/) and each input a fuzzing campaign found to break a
// parser (tests/fuzz/regressions/<target>/, named after what it broke). Each must keep the
// contract: a value, or one gpueval::Error line. Under the sanitizer build (scripts/sanitize.sh) a
// memory error or undefined behaviour in any of them aborts the test.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/fuzz_targets.h"

namespace gpueval::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const std::string& kind, const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(GPUEVAL_SOURCE_DIR) / "tests/fuzz" / kind / target;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void expect_contract_kept(const Target& t, const fs::path& input) {
  const std::string bytes = bytes_of(input);
  const auto violation = t.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_FALSE(violation.has_value()) << input << ": " << violation.value_or("");
}

TEST(FuzzRegressions, EveryTargetHasSeeds) {
  for (const Target& t : targets()) EXPECT_FALSE(inputs_of("seeds", t.name).empty()) << t.name;
}

TEST(FuzzRegressions, SeedsKeepTheContract) {
  for (const Target& t : targets())
    for (const fs::path& p : inputs_of("seeds", t.name)) expect_contract_kept(t, p);
}

TEST(FuzzRegressions, FoundInputsKeepTheContract) {
  size_t n = 0;
  for (const Target& t : targets())
    for (const fs::path& p : inputs_of("regressions", t.name)) {
      expect_contract_kept(t, p);
      ++n;
    }
  RecordProperty("inputs", static_cast<int>(n));
}

TEST(FuzzRegressions, TargetsAreFoundByName) {
  for (const Target& t : targets()) EXPECT_EQ(find_target(t.name), &t);
  EXPECT_EQ(find_target("no such target"), nullptr);
}

}  // namespace
}  // namespace gpueval::fuzz
