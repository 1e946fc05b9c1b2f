// Attention on the CPU in tiles of query rows: the float32 path of AttentionImpl::attend.
// The plain path computes a [B, KV, G, T, P + S'] score tensor, adds the mask, takes the softmax
// and multiplies, each step a pass over a tensor far larger than the cache; and it scores every
// query against every key, the masked ones included. Here the queries of one row are cut into
// tiles (attention_tiles): up to kAttentionTile consecutive queries of one part of a packed
// sequence (or of a causal row), which score only the own keys some query of theirs may see (the
// columns from the first to the last the mask allows in its rows). Tiles are grouped into spans of
// up to 4 tiles whose scores ([rows, P + n], at most about 512 KiB) stay in cache from the products
// through the mask and the softmax to the product with the values. For one query head, a span
// scores and weighs the prefix's keys in one product each (they are shared by every tile, and a
// larger product runs faster), and each tile's own keys in products of its own. The scale rides in
// the first product, and the outputs are written in place into [B, T, H, hd].
// Keys the mask leaves out contribute exp(lowest - max) = 0 in either path, so the two compute
// the same function; a query that sees no key at all (padding) gets a finite average either way.
//
// The softmax is fused with the mask and left unnormalised where the CPU has AVX2 (tile_softmax.h:
// one vector pass for the maximum, one for the exponentials, and each output row divided by its
// sum); a tile whose queries all see the whole prefix skips adding its mask of zeros there. Else
// the mask is added and ATen's softmax taken.
//
// A decode step after a prefix (one query per row, P > 0) is the exception: there a span would be one
// row, and its oneDNN calls (four per row and head, each with a fixed cost that dominated at one
// query) read the prefix once per row. Instead the rows of a block (up to 32) score the prefix's keys
// of one head in one row-invariant product and weigh its values in one row-invariant weighted sum
// (row_invariant.h), and each row's own keys in products of its own, its weighted sum continuing the
// prefix's chain: a row's bits do not depend on which rows share the step. (On a CPU without AVX2,
// where those products would run scalar code, the step keeps its spans of one row.)
//
// Same bits whatever the thread count: tiles and spans are cut by the mask alone, each span and
// head computed on one thread by single-threaded oneDNN products (cpu_matmul.h) or the row-invariant
// ones, and the softmax above. Stateless; callable from any thread. May call cpu_matmul.h,
// row_invariant.h, tile_softmax.h and cpu_parallel.h. Only in builds with oneDNN;
// tiled_attention_applies says when it is used.
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
// softmax(q kᵀ / sqrt(hd) + mask) v over the prefix's keys and the own ones: [B, T, H * hd]. With a
// softcap > 0 (Gemma 2) the scores are softcap * tanh(scores / softcap) before the mask.
at::Tensor tiled_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                           const at::Tensor& prefix_keys, const at::Tensor& prefix_values,
                           TileSoftmax softmax = TileSoftmax::kBest, double softcap = 0.0);

// One tile of a mask row: queries [first, first + rows), the own keys [key_begin, key_end) they
// score (visible_key_range), and whether they all see the whole prefix (sees_whole_prefix).
struct AttentionTile {
  int64_t first = 0, rows = 0, key_begin = 0, key_end = 0;
  bool whole_prefix = false;
};

// The tiles of mask row `batch`, in order, covering its T queries: each run of consecutive queries
// whose first visible own key is the same (one part of a packed sequence; all of a causal row), or
// slides forward to a key the query before also sees (a sliding window), is cut into
// ceil(run / kAttentionTile) tiles of near-equal size, so that a tile scores only its own part's keys
// (and, under a window, the keys some query of the tile still reaches). mask: [B, T, P + own]
// float32, last stride 1.
std::vector<AttentionTile> attention_tiles(const at::Tensor& mask, int64_t batch, int64_t prefix);

// The own keys [begin, end) that the queries [first, first + rows) of mask row `batch` may see: from
// the first to the last column past `prefix` whose mask is above lowest() / 2. When none is, every own
// key: [0, own). mask: [B, T, P + own] float32, last stride 1.
std::pair<int64_t, int64_t> visible_key_range(const at::Tensor& mask, int64_t batch, int64_t first, int64_t rows,
                                              int64_t prefix);

// Whether the queries [first, first + rows) of mask row `batch` see every one of the `prefix` keys
// before the own ones with weight unchanged: the mask is 0 (or -0) there. mask as above.
bool sees_whole_prefix(const at::Tensor& mask, int64_t batch, int64_t first, int64_t rows, int64_t prefix);

}  // namespace gpueval
