// The softmax of one attention tile's rows on the CPU, fused with the mask and left unnormalised:
// for a row of scores x (the prefix's keys, then the own keys the tile scores) and the mask's two
// matching segments, x[c] = exp(x[c] + mask[c] - max) in one pass for the sum and the maximum and
// one for the exponentials, and the row's sum is returned; the caller divides the row's output
// (hd values, after the product with the values) by it instead of dividing every probability.
// The plain path (cpu_attention.cpp) adds the mask in one pass, and ATen's softmax takes three
// more and writes a second buffer.
//
// Vector code for AVX2 with FMA (tile_softmax_avx2.cpp, the one file built with -mavx2 -mfma) and
// Sleef's exponential (1 ulp; the library LibTorch's own softmax calls); it runs only where the CPU
// has both, which tile_softmax_available() checks at run time. Results do not depend on threads:
// a row's lanes and their reduction order are fixed by its width. Stateless; callable from any
// thread.
#pragma once

#include <cstdint>

namespace gpueval {

// Whether masked_exp_row runs here: built with Sleef (cmake GPUEVAL_SLEEF) on a CPU with AVX2+FMA.
bool tile_softmax_available();

// x[0, p + n): x[c] += prefix_mask[c] for c < p, x[p + c] += own_mask[c] for c < n; then
// x[c] = exp(x[c] - max over the row); returns the sum of the row. A row the mask hides entirely
// (every mask value lowest()) gets finite weights, as with ATen's softmax. Throws Error where
// !tile_softmax_available().
float masked_exp_row(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n);

}  // namespace gpueval
