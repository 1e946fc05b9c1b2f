// PythonRandom reproduces the number stream of Python's `random.Random(seed)` for a
// non-negative integer seed: the Mersenne Twister MT19937 seeded through init_by_array with
// the seed's 32-bit words, random() built from two draws with 53 bits, and choices()'s
// index rule floor(random() * n). lm-evaluation-harness draws its bootstrap resamples this
// way, so with it our bootstrap standard errors equal theirs. Private to src/. An instance
// is not thread-safe; make one per thread.
#pragma once

#include <array>
#include <cstdint>

namespace gpueval {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);

  uint32_t next_uint32();  // genrand_uint32
  double random();         // random.random(): uniform on [0, 1) with 53 random bits
  // The index random.choices(population, k=...) picks next from a population of size n.
  size_t choice_index(size_t n);

 private:
  static constexpr int kN = 624;
  std::array<uint32_t, kN> state_;
  int next_ = kN;
};

}  // namespace gpueval
