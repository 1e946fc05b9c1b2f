#include "common/sha256.h"

#include <array>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace gpueval {
namespace {

constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress(std::array<uint32_t, 8>& h, const unsigned char* block) {
  std::array<uint32_t, 64> w;
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) | (uint32_t{block[4 * i + 2]} << 8) |
           uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRoundConstants[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

void compress_portable(std::array<uint32_t, 8>& h, const unsigned char* blocks, size_t count) {
  for (size_t i = 0; i < count; ++i) compress(h, blocks + 64 * i);
}

#if defined(__x86_64__)
// The same compression with the SHA extensions (Intel since Goldmont and Ice Lake, AMD since Zen):
// the state lives as (A,B,E,F) and (C,D,G,H), each sha256rnds2 does two rounds, and sha256msg1/2
// extend the message schedule four words at a time.
__attribute__((target("sha,sse4.1,ssse3"))) void compress_sha_ni(std::array<uint32_t, 8>& h,
                                                                 const unsigned char* blocks, size_t count) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&h[0]));  // lanes A B C D
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&h[4]));  // lanes E F G H
  const __m128i badc = _mm_shuffle_epi32(dcba, 0xB1);  // lanes B A D C
  const __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);  // lanes H G F E
  __m128i abef = _mm_alignr_epi8(badc, efgh, 8);  // lanes F E B A
  __m128i cdgh = _mm_blend_epi16(efgh, badc, 0xF0);  // lanes H G D C
  for (size_t b = 0; b < count; ++b) {
    const unsigned char* block = blocks + 64 * b;
    const __m128i abef_before = abef, cdgh_before = cdgh;
    __m128i w[4];  // w[g % 4]: the message words 4g..4g+3 of the group of four rounds g
    for (int g = 0; g < 16; ++g) {
      __m128i& words = w[g % 4];
      if (g < 4) {
        words = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * g)), byte_swap);
      } else {
        // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], t = 4g..4g+3.
        const __m128i& minus4 = w[(g + 3) % 4];  // words 4g-4..4g-1
        const __m128i& minus8 = w[(g + 2) % 4];
        __m128i sum = _mm_sha256msg1_epu32(words, w[(g + 1) % 4]);
        sum = _mm_add_epi32(sum, _mm_alignr_epi8(minus4, minus8, 4));
        words = _mm_sha256msg2_epu32(sum, minus4);
      }
      const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kRoundConstants[4 * g]));
      __m128i message = _mm_add_epi32(words, k);
      // Two rounds make the old (A,B,E,F) the new (C,D,G,H): the registers trade roles twice.
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, message);
      message = _mm_shuffle_epi32(message, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, message);
    }
    abef = _mm_add_epi32(abef, abef_before);
    cdgh = _mm_add_epi32(cdgh, cdgh_before);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);  // lanes A B E F
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);  // lanes G H C D
  dcba = _mm_blend_epi16(feba, dchg, 0xF0);  // lanes A B C D
  hgfe = _mm_alignr_epi8(dchg, feba, 8);  // lanes E F G H
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&h[0]), dcba);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&h[4]), hgfe);
}

bool has_sha_extensions() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool sha = (ebx >> 29) & 1;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool ssse3 = (ecx >> 9) & 1, sse41 = (ecx >> 19) & 1;
  return sha && ssse3 && sse41;
}
#endif

using CompressBlocks = void (*)(std::array<uint32_t, 8>&, const unsigned char*, size_t);

CompressBlocks best_compress() {
#if defined(__x86_64__)
  if (has_sha_extensions()) return compress_sha_ni;
#endif
  return compress_portable;
}

std::string digest_hex(std::string_view bytes, CompressBlocks compress_blocks) {
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t full = bytes.size() / 64 * 64;
  compress_blocks(h, data, full / 64);
  // Padding: 0x80, zeros, then the message length in bits as a 64-bit big-endian number.
  unsigned char tail[128] = {};
  const size_t rest = bytes.size() - full;
  for (size_t i = 0; i < rest; ++i) tail[i] = data[full + i];
  tail[rest] = 0x80;
  const size_t tail_size = rest < 56 ? 64 : 128;
  const uint64_t bits = static_cast<uint64_t>(bytes.size()) * 8;
  for (int i = 0; i < 8; ++i) tail[tail_size - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  compress_blocks(h, tail, tail_size / 64);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (const uint32_t word : h) {
    for (int shift = 28; shift >= 0; shift -= 4) out += kHex[(word >> shift) & 0xF];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  static const CompressBlocks compress_blocks = best_compress();
  return digest_hex(bytes, compress_blocks);
}

std::string sha256_hex_portable(std::string_view bytes) { return digest_hex(bytes, compress_portable); }

}  // namespace gpueval
