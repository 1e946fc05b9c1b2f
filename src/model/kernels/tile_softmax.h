// The softmax of one attention tile's rows on the CPU, fused with the mask and left unnormalised:
// for a row of scores x (the prefix's keys, then the own keys the tile scores) and the mask's two
// matching segments, x[c] = exp(x[c] + mask[c] - max) in one pass for the sum and the maximum and
// one for the exponentials, and the row's sum is returned; the caller divides the row's output
// (hd values, after the product with the values) by it instead of dividing every probability.
// The plain path (cpu_attention.cpp) adds the mask in one pass, and ATen's softmax takes three
// more and writes a second buffer.
//
// Vector code with Sleef's exponential (1 ulp; the library LibTorch's own softmax calls), in two
// bodies chosen at run time: AVX-512 (tile_softmax_avx512.cpp, 16 lanes) where the CPU has
// AVX512F, else AVX2 with FMA (tile_softmax_avx2.cpp, 8 lanes); each file alone is built for its
// instruction set. Both give the same bits: equal exponentials lane for lane, and the same 8
// accumulators added in the same order. tile_softmax_available() says whether either runs here.
// Results do not depend on threads: a row's lanes and their reduction order are fixed by its
// width. Stateless; callable from any thread.
#pragma once

#include <cstdint>

namespace gpueval {

enum class TileSoftmaxIsa { kAvx2, kAvx512 };

// Whether masked_exp_row runs here: built with Sleef (cmake GPUEVAL_SLEEF) on a CPU with AVX2+FMA.
bool tile_softmax_available();
// Whether that body runs here (kAvx512: AVX512F as well); the tests compare the two.
bool tile_softmax_available(TileSoftmaxIsa isa);

// x[0, p + n): x[c] += prefix_mask[c] for c < p, x[p + c] += own_mask[c] for c < n; then
// x[c] = exp(x[c] - max over the row); returns the sum of the row. prefix_mask may be null: every
// prefix key visible (a mask of zeros, whose sums leave x as it is; the pass then only reads it).
// A row the mask hides entirely (every mask value lowest()) gets finite weights, as with ATen's
// softmax. Runs the AVX-512 body where it can, else the AVX2 one. Throws Error where
// !tile_softmax_available().
float masked_exp_row(float* x, const float* prefix_mask, int64_t p, const float* own_mask, int64_t n);
// The same with the body named; throws Error where !tile_softmax_available(isa).
float masked_exp_row(TileSoftmaxIsa isa, float* x, const float* prefix_mask, int64_t p, const float* own_mask,
                     int64_t n);

}  // namespace gpueval
