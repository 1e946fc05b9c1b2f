// PythonRandom reproduces the number stream of Python's `random.Random(seed)` for a
// non-negative integer seed: the Mersenne Twister MT19937 seeded through init_by_array with
// the seed's 32-bit words, random() built from two draws with 53 bits, and choices()'s
// index rule floor(random() * n), and getrandbits / _randbelow / sample() as CPython 3.11
// computes them. lm-evaluation-harness draws its bootstrap resamples (choices) and its
// default sampler's few-shot examples (sample) this way, so with it our bootstrap standard
// errors and few-shot prompts equal theirs. Private to src/. An instance is not thread-safe;
// make one per thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace gpueval {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);

  uint32_t next_uint32();  // genrand_uint32
  double random();  // random.random(): uniform on [0, 1) with 53 random bits
  // The index random.choices(population, k=...) picks next from a population of size n.
  size_t choice_index(size_t n);
  // random.getrandbits(k), 0 <= k <= 64: 32-bit words least significant first, the last
  // one keeping its top bits (k <= 32: genrand_uint32() >> (32 - k)).
  uint64_t getrandbits(int k);
  // random._randbelow(n) for n > 0: getrandbits(n.bit_length()) until it is below n.
  uint64_t randbelow(uint64_t n);
  // The indices random.sample(range(n), k) returns, in selection order (0 <= k <= n): the
  // pool method (swap the last unselected into the vacancy) when n is at most CPython's
  // setsize (21, plus 4 ** ceil(log(3k, 4)) when k > 5), else redraw until unselected.
  std::vector<size_t> sample_indices(size_t n, size_t k);

 private:
  static constexpr int kN = 624;
  std::array<uint32_t, kN> state_;
  int next_ = kN;
};

}  // namespace gpueval
