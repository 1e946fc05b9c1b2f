// Attention on the CPU in tiles of query rows: the float32 path of AttentionImpl::attend.
// The plain path computes a [B, KV, G, T, P + S'] score tensor, adds the mask, takes the softmax
// and multiplies, each step a pass over a tensor far larger than the cache; and it scores every
// query against every key, the masked ones included. Here one tile is one query head of one row
// and up to kAttentionTile consecutive queries: its scores ([tile, P + n], a few hundred KiB) stay
// in cache from the products through the mask and the softmax to the product with the values,
// the scale rides in the first product, and the outputs are written in place into [B, T, H, hd].
// A tile scores only the own keys some query of it may see (the columns from the first to the
// last the mask allows in its rows): a causal row's later keys, a packed sequence's other parts.
// Keys the mask leaves out contribute exp(lowest - max) = 0 in either path, so the two compute
// the same function; a query that sees no key at all (padding) gets a finite average either way.
//
// The softmax is fused with the mask and left unnormalised where the CPU has AVX2 (tile_softmax.h:
// one vector pass for the maximum, one for the exponentials, and each output row divided by its
// sum), else the mask is added and ATen's softmax taken.
//
// Same bits whatever the thread count: tiles are cut by shape alone, each computed on one thread
// by single-threaded oneDNN products (cpu_matmul.h) and the softmax above. Stateless; callable from
// any thread. Only in builds with oneDNN; tiled_attention_applies says when it is used.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace gpueval {

constexpr int64_t kAttentionTile = 64;

// kBest: the fused vector softmax where tile_softmax_available(), else ATen's; kAten: ATen's
// always (the tests compare the two).
enum class TileSoftmax { kBest, kAten };

// Whether tiled_attention takes these: CPU float32 (prefix included when defined), oneDNN built,
// mask [B or 1, 1, 1, T, P + S'] float32, grouped heads (H a multiple of KV).
bool tiled_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                             const at::Tensor& prefix_keys, const at::Tensor& prefix_values);

// q: [B, H, T, hd] (not scaled); k, v: [B, KV, S', hd], this call's own keys after the prefix's;
// prefix_keys, prefix_values: [1, KV, P, hd] shared by every row, or undefined (P = 0); mask:
// [B or 1, 1, 1, T, P + S'] additive float32 (0 where allowed, lowest() where not). Returns
// softmax(q kᵀ / sqrt(hd) + mask) v over the prefix's keys and the own ones: [B, T, H * hd].
at::Tensor tiled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                           const at::Tensor& prefix_keys, const at::Tensor& prefix_values,
                           TileSoftmax softmax = TileSoftmax::kBest);

// The own keys [begin, end) that the queries [first, first + rows) of mask row `batch` may see: from
// the first to the last column past `prefix` whose mask is above lowest() / 2. When none is, every own
// key: [0, own). mask: [B, T, P + own] float32, last stride 1.
std::pair<int64_t, int64_t> visible_key_range(const at::Tensor& mask, int64_t batch, int64_t first, int64_t rows,
                                              int64_t prefix);

// Whether the queries [first, first + rows) of mask row `batch` see every one of the `prefix` keys
// before the own ones with weight unchanged: the mask is 0 (or -0) there. mask as above.
bool sees_whole_prefix(const at::Tensor& mask, int64_t batch, int64_t first, int64_t rows, int64_t prefix);

}  // namespace gpueval
