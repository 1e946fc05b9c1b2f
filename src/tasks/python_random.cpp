#include "tasks/python_random.h"

#include <cmath>
#include <stdexcept>
#include <unordered_set>
#include <vector>

namespace gpueval {
namespace {

constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpperMask = 0x80000000U;
constexpr uint32_t kLowerMask = 0x7fffffffU;

}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  // random.seed(n) feeds abs(n) to init_by_array as little-endian 32-bit words (at least one).
  std::vector<uint32_t> key = {static_cast<uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<uint32_t>(seed >> 32));

  state_[0] = 19650218U;
  for (int i = 1; i < kN; ++i) {
    state_[i] = 1812433253U * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  }
  int i = 1;
  size_t j = 0;
  for (int k = kN > static_cast<int>(key.size()) ? kN : static_cast<int>(key.size()); k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
  }
  state_[0] = 0x80000000U;  // the most significant bit is non-zero: the state is never all zero
  next_ = kN;
}

uint32_t PythonRandom::next_uint32() {
  if (next_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y = (state_[k] & kUpperMask) | (state_[(k + 1) % kN] & kLowerMask);
      state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    next_ = 0;
  }
  uint32_t y = state_[next_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

double PythonRandom::random() {
  const uint32_t a = next_uint32() >> 5;  // 27 bits
  const uint32_t b = next_uint32() >> 6;  // 26 bits
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

size_t PythonRandom::choice_index(size_t n) {
  return static_cast<size_t>(std::floor(random() * static_cast<double>(n)));
}

uint64_t PythonRandom::getrandbits(int k) {
  if (k < 0 || k > 64) throw std::invalid_argument("getrandbits: k must be in 0..64");
  if (k <= 32) return k == 0 ? 0 : next_uint32() >> (32 - k);
  const uint64_t low = next_uint32();  // the first word is the least significant
  const uint64_t high = next_uint32() >> (64 - k);  // the last keeps its top k - 32 bits
  return low | (high << 32);
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  if (n == 0) throw std::invalid_argument("randbelow: n must be positive");
  int bits = 0;
  for (uint64_t v = n; v != 0; v >>= 1) ++bits;  // n.bit_length(), not that of n - 1
  uint64_t r = getrandbits(bits);
  while (r >= n) r = getrandbits(bits);
  return r;
}

std::vector<size_t> PythonRandom::sample_indices(size_t n, size_t k) {
  if (k > n) throw std::invalid_argument("sample: sample larger than population");
  std::vector<size_t> result;
  result.reserve(k);
  size_t setsize = 21;  // CPython: the size of a small set minus that of an empty list
  if (k > 5) {
    // 4 ** ceil(log(k * 3, 4)), with math.log's float arithmetic (log(x) / log(4)).
    const double e = std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0));
    setsize += static_cast<size_t>(std::llround(std::pow(4.0, e)));
  }
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = static_cast<size_t>(randbelow(n - i));
      result.push_back(pool[j]);
      pool[j] = pool[n - i - 1];
    }
    return result;
  }
  std::unordered_set<size_t> selected;
  for (size_t i = 0; i < k; ++i) {
    size_t j = static_cast<size_t>(randbelow(n));
    while (selected.count(j)) j = static_cast<size_t>(randbelow(n));
    selected.insert(j);
    result.push_back(j);
  }
  return result;
}

}  // namespace gpueval
