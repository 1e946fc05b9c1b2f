#include "model/kernels/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "model/kernels/cpu_parallel.h"
#include <fmt/format.h>

#include "gpueval/error.h"
#include "model/kernels/cpu_matmul.h"
#include "model/kernels/row_invariant.h"
#include "model/kernels/tile_softmax.h"

namespace gpueval {
namespace {

bool cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

// The tensor as given when dnnl_sgemm reads its last two dimensions in place as rows (unit stride
// along a row, rows apart by at least a row), else a copy.
at::Tensor unit_last_stride(const at::Tensor& t) {
  const bool rows = (t.size(-1) <= 1 || t.stride(-1) == 1) && (t.size(-2) <= 1 || t.stride(-2) >= t.size(-1));
  return rows ? t : t.contiguous();
}

// The row stride dnnl_sgemm is given for the last two dimensions of t: any value of at least a row
// serves a single row.
int64_t row_stride(const at::Tensor& t) { return std::max<int64_t>(t.stride(-2), std::max<int64_t>(t.size(-1), 1)); }

}  // namespace

bool tiled_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                             const at::Tensor& prefix_keys, const at::Tensor& prefix_values) {
  static const bool have_onednn = !cpu_matmul_description().empty();
  if (!have_onednn) return false;
  if (!cpu_float(q) || !cpu_float(k) || !cpu_float(v) || !cpu_float(mask)) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || mask.dim() != 5) return false;
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3), kv = k.size(1);
  if (kv < 1 || h % kv != 0 || !k.sizes().equals(v.sizes()) || k.size(0) != b || k.size(3) != hd) return false;
  int64_t p = 0;
  if (prefix_keys.defined() || prefix_values.defined()) {
    if (!prefix_keys.defined() || !prefix_values.defined() || !cpu_float(prefix_keys) || !cpu_float(prefix_values))
      return false;
    if (prefix_keys.dim() != 4 || !prefix_keys.sizes().equals(prefix_values.sizes()) || prefix_keys.size(0) != 1 ||
        prefix_keys.size(1) != kv || prefix_keys.size(3) != hd)
      return false;
    p = prefix_keys.size(2);
  }
  if ((mask.size(0) != b && mask.size(0) != 1) || mask.size(1) != 1 || mask.size(2) != 1 || mask.size(3) != t ||
      mask.size(4) != p + k.size(2))
    return false;
  return b > 0 && t > 0 && hd > 0 && p + k.size(2) > 0;
}

std::pair<int64_t, int64_t> visible_key_range(const at::Tensor& mask, int64_t batch, int64_t first, int64_t rows,
                                              int64_t prefix) {
  const int64_t own = mask.size(2) - prefix;
  const float hidden = std::numeric_limits<float>::lowest() / 2;
  int64_t begin = own, end = 0;
  const float* base = mask.data_ptr<float>() + batch * mask.stride(0) + prefix;
  for (int64_t r = first; r < first + rows; ++r) {
    const float* m = base + r * mask.stride(1);
    int64_t c = 0;
    while (c < begin && !(m[c] > hidden)) ++c;
    if (c < begin) begin = c;
    int64_t e = own;
    while (e > end && !(m[e - 1] > hidden)) --e;
    if (e > end) end = e;
  }
  return begin < end ? std::make_pair(begin, end) : std::make_pair(int64_t{0}, own);
}

bool sees_whole_prefix(const at::Tensor& mask, int64_t batch, int64_t first, int64_t rows, int64_t prefix) {
  const float* base = mask.data_ptr<float>() + batch * mask.stride(0);
  for (int64_t r = first; r < first + rows; ++r) {
    const float* m = base + r * mask.stride(1);
    for (int64_t c = 0; c < prefix; ++c)
      if (m[c] != 0.0f) return false;
  }
  return true;
}

std::vector<AttentionTile> attention_tiles(const at::Tensor& mask, int64_t batch, int64_t prefix) {
  const int64_t t = mask.size(1), own = mask.size(2) - prefix;
  const float hidden = std::numeric_limits<float>::lowest() / 2;
  // Each query's first visible own key (own when it sees none). A run of queries shares it (one part
  // of a packed sequence, all of a causal row) or slides it forward to a key the query before also
  // sees (a sliding window); a new part starts at a key the query before does not see.
  std::vector<int64_t> first_key(static_cast<size_t>(t));
  const float* base = mask.data_ptr<float>() + batch * mask.stride(0) + prefix;
  for (int64_t r = 0; r < t; ++r) {
    const float* m = base + r * mask.stride(1);
    int64_t c = 0;
    while (c < own && !(m[c] > hidden)) ++c;
    first_key[static_cast<size_t>(r)] = c;
  }
  const auto continues = [&](int64_t r) {
    const int64_t f = first_key[static_cast<size_t>(r)], before = first_key[static_cast<size_t>(r - 1)];
    return f == before || (f > before && f < own && base[(r - 1) * mask.stride(1) + f] > hidden);
  };
  std::vector<AttentionTile> tiles;
  for (int64_t run = 0; run < t;) {
    int64_t run_end = run + 1;
    while (run_end < t && continues(run_end)) ++run_end;
    // A run of L queries: ceil(L / kAttentionTile) tiles of near-equal size.
    const int64_t length = run_end - run, count = (length + kAttentionTile - 1) / kAttentionTile;
    for (int64_t i = 0, first = run; i < count; ++i) {
      const int64_t rows = length / count + (i < length % count ? 1 : 0);
      AttentionTile tile;
      tile.first = first;
      tile.rows = rows;
      std::tie(tile.key_begin, tile.key_end) = visible_key_range(mask, batch, first, rows, prefix);
      tile.whole_prefix = sees_whole_prefix(mask, batch, first, rows, prefix);
      tiles.push_back(tile);
      first += rows;
    }
    run = run_end;
  }
  return tiles;
}

namespace {

// Consecutive tiles of one batch row, attended together: their scores ([rows, width]) share a buffer.
struct Span {
  int64_t row = 0;  // of the batch
  size_t first_tile = 0, tiles = 0;  // in the row's tiles
  int64_t first = 0, rows = 0, width = 0;  // queries [first, first + rows); scores P + the widest tile's keys
};

// The tiles of every batch row grouped into spans whose scores stay within about 512 KiB: a span's
// rows are cut to fit, but never fewer than a tile's. `tiles` holds one list per mask row (one for all
// rows when the mask is shared).
std::vector<Span> attention_spans(const std::vector<std::vector<AttentionTile>>& tiles, int64_t batch, int64_t p,
                                  int64_t own) {
  const int64_t span_rows =
      std::clamp<int64_t>((int64_t{1} << 17) / std::max<int64_t>(p + own, 1), kAttentionTile, 4 * kAttentionTile);
  std::vector<Span> spans;
  for (int64_t row = 0; row < batch; ++row) {
    const std::vector<AttentionTile>& row_tiles = tiles[static_cast<size_t>(tiles.size() == 1 ? 0 : row)];
    for (size_t i = 0; i < row_tiles.size();) {
      Span span;
      span.row = row;
      span.first_tile = i;
      span.first = row_tiles[i].first;
      while (i < row_tiles.size() && (span.tiles == 0 || span.rows + row_tiles[i].rows <= span_rows)) {
        span.rows += row_tiles[i].rows;
        span.width = std::max(span.width, p + row_tiles[i].key_end - row_tiles[i].key_begin);
        ++span.tiles;
        ++i;
      }
      spans.push_back(span);
    }
  }
  return spans;
}

// One call's inputs, made contiguous in their last dimension, and its output, as the spans read them.
struct TiledInputs {
  at::Tensor q, k, v, pk, pv, mask;  // pk, pv undefined without a prefix
  int64_t t = 0, heads = 0, hd = 0, groups = 0, p = 0;
  int64_t mask_batch_stride = 0;
  float scale = 1;
  double softcap = 0;
  bool fused = false;
  float* out = nullptr;  // [B, T, H, hd]
  int64_t out_ld = 0;  // H * hd
  const std::vector<std::vector<AttentionTile>>* tiles = nullptr;
};

// Scores of one span and one head: against the prefix for the whole span in one product, against the own
// keys tile by tile; capped where the model soft-caps them.
void span_scores(const TiledInputs& in, const Span& span, int64_t head, float* s) {
  const std::vector<AttentionTile>& row_tiles = (*in.tiles)[in.tiles->size() == 1 ? 0 : static_cast<size_t>(span.row)];
  const int64_t row = span.row, kv = head / in.groups, width = span.width, p = in.p;
  const at::Tensor& q = in.q;
  const float* qd = q.data_ptr<float>() + row * q.stride(0) + head * q.stride(1);
  if (p > 0)
    sgemm_on_this_thread('N', 'T', span.rows, p, in.hd, in.scale, qd + span.first * q.stride(2), row_stride(q),
                         in.pk.data_ptr<float>() + kv * in.pk.stride(1), row_stride(in.pk), 0.0f, s, width);
  for (size_t j = span.first_tile; j < span.first_tile + span.tiles; ++j) {
    const AttentionTile& tile = row_tiles[j];
    const int64_t n = tile.key_end - tile.key_begin;
    if (n == 0) continue;
    const float* kt = in.k.data_ptr<float>() + row * in.k.stride(0) + kv * in.k.stride(1) +
                      tile.key_begin * in.k.stride(2);  // [n, hd]
    sgemm_on_this_thread('N', 'T', tile.rows, n, in.hd, in.scale, qd + tile.first * q.stride(2), row_stride(q), kt,
                         row_stride(in.k), 0.0f, s + (tile.first - span.first) * width + p, width);
  }
}

// The span's scores become probabilities in place. Fused: unnormalised, each row's sum in `sums` (the
// output rows are divided by it after the products). Plain: mask add, then ATen's softmax, copied back.
void span_probabilities(const TiledInputs& in, const Span& span, float* s, float* sums) {
  const std::vector<AttentionTile>& row_tiles = (*in.tiles)[in.tiles->size() == 1 ? 0 : static_cast<size_t>(span.row)];
  const int64_t width = span.width, p = in.p, mask_ld = in.mask.stride(1);
  for (size_t j = span.first_tile; j < span.first_tile + span.tiles; ++j) {
    const AttentionTile& tile = row_tiles[j];
    const int64_t n = tile.key_end - tile.key_begin, offset = tile.first - span.first;
    const float* tile_mask = in.mask.data_ptr<float>() + span.row * in.mask_batch_stride + tile.first * mask_ld;
    if (in.softcap > 0)  // cap * tanh(score / cap) on the prefix's scores and the tile's own, ATen's vector tanh
      at::from_blob(s + offset * width, {tile.rows, p + n}, {width, 1}, in.q.options())
          .div_(in.softcap)
          .tanh_()
          .mul_(in.softcap);
    if (in.fused) {
      for (int64_t r = 0; r < tile.rows; ++r) {
        const float* m = tile_mask + r * mask_ld;  // [P + S']
        sums[offset + r] =
            masked_exp_row(s + (offset + r) * width, tile.whole_prefix ? nullptr : m, p, m + p + tile.key_begin, n);
      }
    } else {
      for (int64_t r = 0; r < tile.rows; ++r) {
        const float* m = tile_mask + r * mask_ld;  // [P + S']
        float* x = s + (offset + r) * width;
        for (int64_t c = 0; c < p; ++c) x[c] += m[c];
        for (int64_t c = 0; c < n; ++c) x[p + c] += m[p + tile.key_begin + c];
      }
      at::Tensor scores = at::from_blob(s + offset * width, {tile.rows, p + n}, {width, 1}, in.q.options());
      scores.copy_(at::_softmax(scores, -1, false));
    }
  }
}

// The span's outputs for one head: probabilities times the prefix's values, then each tile's own, then
// (fused) each row divided by its sum.
void span_outputs(const TiledInputs& in, const Span& span, int64_t head, const float* s, const float* sums) {
  const std::vector<AttentionTile>& row_tiles = (*in.tiles)[in.tiles->size() == 1 ? 0 : static_cast<size_t>(span.row)];
  const int64_t row = span.row, kv = head / in.groups, width = span.width, p = in.p, hd = in.hd, ld = in.out_ld;
  float* o = in.out + row * in.t * ld + span.first * ld + head * hd;  // [rows, hd], row stride H * hd
  if (p > 0)
    sgemm_on_this_thread('N', 'N', span.rows, hd, p, 1.0f, s, width, in.pv.data_ptr<float>() + kv * in.pv.stride(1),
                         row_stride(in.pv), 0.0f, o, ld);
  for (size_t j = span.first_tile; j < span.first_tile + span.tiles; ++j) {
    const AttentionTile& tile = row_tiles[j];
    const int64_t n = tile.key_end - tile.key_begin, offset = tile.first - span.first;
    const float* vt = in.v.data_ptr<float>() + row * in.v.stride(0) + kv * in.v.stride(1) +
                      tile.key_begin * in.v.stride(2);  // [n, hd]
    if (n > 0)
      sgemm_on_this_thread('N', 'N', tile.rows, hd, n, 1.0f, s + offset * width + p, width, vt, row_stride(in.v),
                           p > 0 ? 1.0f : 0.0f, o + offset * ld, ld);
  }
  if (in.fused) {
    for (int64_t r = 0; r < span.rows; ++r) {
      const float inverse = 1.0f / sums[r];
      float* y = o + r * ld;
      for (int64_t c = 0; c < hd; ++c) y[c] *= inverse;
    }
  }
}

// Rows [first, first + rows) of a decode step after a prefix (T = 1, P > 0), one head, with the
// row-invariant products of row_invariant.h (no oneDNN call per row, whose fixed cost dominated at
// one query): the rows' queries score the prefix's keys in one product and weigh its values in one
// weighted sum, so the prefix is read once for the rows; each row's own keys in products of its own,
// its weighted sum continuing the prefix's chain. A row's bits do not depend on which rows share the
// step. s: [rows, width], sums: [rows].
void decode_rows(const TiledInputs& in, int64_t first, int64_t rows, int64_t head, int64_t width, float* s,
                 float* sums) {
  const int64_t kv = head / in.groups, p = in.p, hd = in.hd, ld = in.out_ld;
  const at::Tensor &q = in.q, &k = in.k, &v = in.v;
  const float* qd = q.data_ptr<float>() + first * q.stride(0) + head * q.stride(1);
  const auto tile_of = [&](int64_t row) -> const AttentionTile& {
    return (*in.tiles)[in.tiles->size() == 1 ? 0 : static_cast<size_t>(row)].at(0);
  };
  const auto own_keys = [&](const at::Tensor& t, int64_t row) {
    return t.data_ptr<float>() + row * t.stride(0) + kv * t.stride(1) + tile_of(row).key_begin * t.stride(2);
  };
  row_invariant_multiply(rows, p, hd, qd, q.stride(0), in.pk.data_ptr<float>() + kv * in.pk.stride(1),
                         row_stride(in.pk), s, width);
  for (int64_t r = 0; r < rows; ++r) {
    const AttentionTile& tile = tile_of(first + r);
    const int64_t n = tile.key_end - tile.key_begin;
    float* sr = s + r * width;
    row_invariant_multiply(1, n, hd, qd + r * q.stride(0), hd, own_keys(k, first + r), row_stride(k), sr + p, width);
    for (int64_t c = 0; c < p + n; ++c) sr[c] *= in.scale;
    span_probabilities(in, Span{first + r, 0, 1, 0, 1, width}, sr, sums + r);
  }
  float* o = in.out + first * ld + head * hd;  // [rows, hd], row stride H * hd
  row_invariant_weighted_sum(rows, hd, p, s, width, in.pv.data_ptr<float>() + kv * in.pv.stride(1), row_stride(in.pv),
                             o, ld);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = tile_of(first + r).key_end - tile_of(first + r).key_begin;
    float* y = o + r * ld;
    row_invariant_weighted_sum(1, hd, n, s + r * width + p, width, own_keys(v, first + r), row_stride(v), y, ld,
                               /*accumulate=*/true);
    if (!in.fused) continue;
    const float inverse = 1.0f / sums[r];
    for (int64_t c = 0; c < hd; ++c) y[c] *= inverse;
  }
}

// A decode step after a prefix: blocks of up to kDecodeRows rows per head, head-major (consecutive
// blocks share one head's prefix keys and values, which stay in cache), one block on one thread.
constexpr int64_t kDecodeRows = 32;

void decode_step(const TiledInputs& in, int64_t b) {
  int64_t own = 0;
  for (const std::vector<AttentionTile>& row_tiles : *in.tiles)
    own = std::max(own, row_tiles.at(0).key_end - row_tiles.at(0).key_begin);
  const int64_t width = in.p + own, blocks = (b + kDecodeRows - 1) / kDecodeRows;
  cpu_parallel_for(0, in.heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(std::min(b, kDecodeRows) * width)),
        sums(static_cast<size_t>(kDecodeRows));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t head = i / blocks, first = (i % blocks) * kDecodeRows;
      decode_rows(in, first, std::min(kDecodeRows, b - first), head, width, scores.data(), sums.data());
    }
  });
}

}  // namespace

at::Tensor tiled_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                           const at::Tensor& mask_in, const at::Tensor& prefix_keys, const at::Tensor& prefix_values,
                           TileSoftmax softmax, double softcap) {
  if (!tiled_attention_applies(q_in, k_in, v_in, mask_in, prefix_keys, prefix_values))
    throw Error("tiled_attention: the tensors are not CPU float32 attention inputs of matching shapes");
  TiledInputs in;
  in.q = unit_last_stride(q_in);
  in.k = unit_last_stride(k_in);
  in.v = unit_last_stride(v_in);
  const int64_t b = in.q.size(0), own = in.k.size(2);
  in.t = in.q.size(2);
  in.heads = in.q.size(1);
  in.hd = in.q.size(3);
  in.groups = in.heads / in.k.size(1);
  const bool has_prefix = prefix_keys.defined() && prefix_keys.size(2) > 0;
  in.p = has_prefix ? prefix_keys.size(2) : 0;
  if (has_prefix) {
    in.pk = unit_last_stride(prefix_keys);
    in.pv = unit_last_stride(prefix_values);
  }
  in.mask = unit_last_stride(mask_in.reshape({mask_in.size(0), in.t, in.p + own}));  // [B or 1, T, P + S']
  in.mask_batch_stride = in.mask.size(0) == 1 ? 0 : in.mask.stride(0);
  in.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.hd)));
  in.softcap = softcap;
  in.fused = softmax == TileSoftmax::kBest && tile_softmax_available();

  // Per mask row (shared by every head): its tiles, and the spans they are grouped into.
  const int64_t mask_rows = in.mask.size(0);
  std::vector<std::vector<AttentionTile>> tiles(static_cast<size_t>(mask_rows));
  cpu_parallel_for(0, mask_rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) tiles[static_cast<size_t>(i)] = attention_tiles(in.mask, i, in.p);
  });
  in.tiles = &tiles;
  at::Tensor out = at::empty({b, in.t, in.heads, in.hd}, in.q.options());  // [B, T, H, hd]
  in.out = out.data_ptr<float>();
  in.out_ld = in.heads * in.hd;
  if (in.t == 1 && in.p > 0 && row_invariant_vector_code()) {  // else spans of one row (oneDNN's products)
    decode_step(in, b);
    return out.view({b, in.t, in.heads * in.hd});
  }
  const std::vector<Span> spans = attention_spans(tiles, b, in.p, own);
  int64_t widest = 0;
  for (const Span& span : spans) widest = std::max(widest, span.rows * span.width);

  const int64_t units = static_cast<int64_t>(spans.size()) * in.heads;
  cpu_parallel_for(0, units, 1, [&](int64_t begin, int64_t end) {
    // One span's scores, then probabilities in place: [rows, width], reused across this thread's spans.
    at::Tensor scores_buffer = at::empty({widest}, in.q.options());
    std::vector<float> sums(static_cast<size_t>(4 * kAttentionTile));
    for (int64_t i = begin; i < end; ++i) {
      // Head-major: consecutive spans share one head's prefix keys and values, which stay in cache.
      const int64_t head = i / static_cast<int64_t>(spans.size());
      const Span& span = spans[static_cast<size_t>(i % static_cast<int64_t>(spans.size()))];
      span_scores(in, span, head, scores_buffer.data_ptr<float>());
      span_probabilities(in, span, scores_buffer.data_ptr<float>(), sums.data());
      span_outputs(in, span, head, scores_buffer.data_ptr<float>(), sums.data());
    }
  });
  return out.view({b, in.t, in.heads * in.hd});
}
}  // namespace gpueval
