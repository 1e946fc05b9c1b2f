// PythonRandom against CPython 3.11: every expected number below was printed by python3
// (random.Random(seed).getrandbits / _randbelow / sample), not computed by the code under test.
#include <gtest/gtest.h>

#include <vector>

#include "tasks/python_random.h"

namespace gpueval {
namespace {

using Indices = std::vector<size_t>;

// random.Random(seed) drawing `calls` samples of range(n), k each.
std::vector<Indices> samples(uint64_t seed, size_t n, size_t k, int calls) {
  PythonRandom rng(seed);
  std::vector<Indices> out;
  for (int i = 0; i < calls; ++i) out.push_back(rng.sample_indices(n, k));
  return out;
}

TEST(PythonRandomTest, GetrandbitsMatchesCPython) {
  // r = random.Random(1234); [r.getrandbits(k) for k in (1, 5, 31, 32, 33, 48, 64, 0, 7)]
  PythonRandom rng(1234);
  const std::vector<uint64_t> expected = {
      1, 24, 946466063, 501869158, 32175636, 265299747518576ull, 14886566920684039889ull, 0, 74};
  std::vector<uint64_t> got;
  for (const int k : {1, 5, 31, 32, 33, 48, 64, 0, 7}) got.push_back(rng.getrandbits(k));
  EXPECT_EQ(got, expected);
}

TEST(PythonRandomTest, RandbelowMatchesCPython) {
  // r = random.Random(1234); [r._randbelow(n) for n in (1, 2, 3, 7473, 30, 1000, 2**32, 2**32+1, 10)]
  PythonRandom rng(1234);
  const std::vector<uint64_t> expected = {0, 0, 0, 742, 29, 965, 2500648409ull, 360511942, 5};
  std::vector<uint64_t> got;
  for (const uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7473}, uint64_t{30}, uint64_t{1000},
                           uint64_t{1} << 32, (uint64_t{1} << 32) + 1, uint64_t{10}}) {
    got.push_back(rng.randbelow(n));
  }
  EXPECT_EQ(got, expected);
}

TEST(PythonRandomTest, SampleFromALargePopulationRedrawsSelectedIndices) {
  // random.Random(1234).sample(range(7473), 6) and (..., 5): gsm8k's train split.
  EXPECT_EQ(PythonRandom(1234).sample_indices(7473, 6), (Indices{6374, 3610, 957, 61, 742, 7462}));
  EXPECT_EQ(PythonRandom(1234).sample_indices(7473, 5), (Indices{6374, 3610, 957, 61, 742}));
  // r = random.Random(1234); [r.sample(range(30), 5) for _ in range(8)]: redraws (set method).
  EXPECT_EQ(samples(1234, 30, 5, 8), (std::vector<Indices>{{24, 14, 3, 0, 2},
                                                           {29, 25, 18, 1, 21},
                                                           {22, 2, 3, 24, 11},
                                                           {7, 0, 25, 11, 20},
                                                           {19, 15, 14, 4, 2},
                                                           {5, 22, 3, 27, 0},
                                                           {16, 15, 28, 7, 2},
                                                           {21, 17, 29, 14, 2}}));
  // random.Random(2**40 + 5).sample(range(1319), 6): a seed of two 32-bit words.
  EXPECT_EQ(PythonRandom((uint64_t{1} << 40) + 5).sample_indices(1319, 6), (Indices{1032, 1058, 550, 56, 1087, 95}));
}

TEST(PythonRandomTest, SampleFromASmallPopulationSwapsIntoAPool) {
  EXPECT_EQ(PythonRandom(1234).sample_indices(10, 4), (Indices{7, 1, 0, 9}));
  // r = random.Random(7); [r.sample(range(3), 3) for _ in range(3)]
  EXPECT_EQ(samples(7, 3, 3, 3), (std::vector<Indices>{{1, 0, 2}, {2, 0, 1}, {2, 0, 1}}));
  EXPECT_TRUE(PythonRandom(1).sample_indices(5, 0).empty());
}

TEST(PythonRandomTest, SampleChoosesItsMethodByCPythonsSetsize) {
  // k = 5: setsize 21, so range(21) takes the pool method and range(22) the set method; each
  // expectation differs from what the other method gives with the same seed.
  EXPECT_EQ(samples(1234, 21, 5, 6), (std::vector<Indices>{{14, 3, 0, 2, 1},
                                                           {2, 3, 11, 7, 0},
                                                           {0, 20, 11, 15, 14},
                                                           {4, 2, 5, 3, 0},
                                                           {16, 15, 7, 2, 14},
                                                           {2, 19, 20, 16, 1}}));
  EXPECT_EQ(samples(1234, 22, 5, 6), (std::vector<Indices>{{14, 3, 0, 2, 18},
                                                           {1, 21, 2, 3, 11},
                                                           {7, 0, 11, 20, 19},
                                                           {15, 19, 14, 4, 2},
                                                           {5, 3, 0, 16, 15},
                                                           {7, 2, 21, 17, 14}}));
  // k = 6: setsize 21 + 4 ** ceil(log(18, 4)) = 85.
  EXPECT_EQ(samples(1234, 85, 6, 12).back(), (Indices{3, 44, 14, 67, 18, 39}));
  EXPECT_EQ(samples(1234, 86, 6, 12).back(), (Indices{20, 9, 71, 27, 18, 3}));
  // k = 22: setsize 21 + 4 ** 4 = 277.
  EXPECT_EQ(samples(1234, 277, 22, 2)[1], (Indices{33,  238, 35,  45,  263, 23,  138, 32, 154, 246, 181,
                                                   136, 127, 102, 232, 9,   260, 36,  2,  170, 73,  242}));
  EXPECT_EQ(samples(1234, 278, 22, 2)[1], (Indices{277, 238, 35,  45,  263, 23, 138, 32, 154, 246, 181,
                                                   136, 127, 102, 232, 271, 9,  260, 36, 2,   170, 73}));
  // k = 100 of 1000: setsize 21 + 4 ** 5 = 1045, the pool method over a large pool.
  const Indices hundred = PythonRandom(1234).sample_indices(1000, 100);
  ASSERT_EQ(hundred.size(), 100u);
  EXPECT_EQ(Indices(hundred.begin(), hundred.begin() + 10), (Indices{989, 796, 451, 119, 7, 92, 932, 965, 961, 826}));
  EXPECT_EQ(Indices(hundred.end() - 10, hundred.end()), (Indices{976, 789, 113, 993, 144, 686, 312, 465, 40, 426}));
}

}  // namespace
}  // namespace gpueval
