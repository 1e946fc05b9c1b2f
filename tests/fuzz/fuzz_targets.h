// The fuzz targets: one per parser of outside input (checkpoints, tokenizers, task and run files,
// datasets, the wire between processes, templates). Each takes arbitrary bytes, hands them to the
// parser the way gpueval reads such a file, and checks the parser's contract: it returns a value or
// throws gpueval::Error with a non-empty one-line message, and nothing else. Crashes, hangs, memory
// errors and allocations past the fuzzer's bound are caught by libFuzzer and the sanitizers around
// it (tests/fuzz/fuzz_main.cpp, scripts/fuzz.sh); the regression test
// (tests/fuzz/fuzz_regression_test.cpp) runs every saved input of tests/fuzz/regressions/ through the
// same targets in the ordinary test suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpueval::fuzz {

struct Target {
  const char* name;  // "safetensors"; the fuzzer binary is fuzz_<name>
  const char* description;  // what the input is
  // Runs one input; the contract violation, if any ("threw std::out_of_range: ..."), else nullopt.
  std::optional<std::string> (*run)(const uint8_t* data, size_t size);
};

const std::vector<Target>& targets();
const Target* find_target(const std::string& name);

}  // namespace gpueval::fuzz
