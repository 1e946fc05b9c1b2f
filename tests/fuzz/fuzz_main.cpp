// libFuzzer entry point for one target of fuzz_targets.h, chosen at compile time
// (GPUEVAL_FUZZ_TARGET, one binary per target: fuzz_<name>). A contract violation aborts, which
// libFuzzer reports as a crash and saves the input that caused it.
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const gpueval::fuzz::Target* target = gpueval::fuzz::find_target(GPUEVAL_FUZZ_TARGET);
  if (target == nullptr) {
    std::fprintf(stderr, "no fuzz target named %s\n", GPUEVAL_FUZZ_TARGET);
    std::abort();
  }
  if (const auto violation = target->run(data, size)) {
    std::fprintf(stderr, "fuzz_%s: contract violated: %s\n", target->name, violation->c_str());
    std::abort();
  }
  return 0;
}
