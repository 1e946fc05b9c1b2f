#include "model/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "model/cpu_parallel.h"
#include <fmt/format.h>

#include "gpueval/error.h"
#include "model/cpu_matmul.h"
#include "model/tile_softmax.h"

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

at::Tensor tiled_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                           const at::Tensor& mask_in, const at::Tensor& prefix_keys, const at::Tensor& prefix_values,
                           TileSoftmax softmax, double softcap) {
  if (!tiled_attention_applies(q_in, k_in, v_in, mask_in, prefix_keys, prefix_values))
    throw Error("tiled_attention: the tensors are not CPU float32 attention inputs of matching shapes");
  const at::Tensor q = unit_last_stride(q_in), k = unit_last_stride(k_in), v = unit_last_stride(v_in);
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), hd = q.size(3);
  const int64_t kv_heads = k.size(1), groups = heads / kv_heads, own = k.size(2);
  const bool has_prefix = prefix_keys.defined() && prefix_keys.size(2) > 0;
  const int64_t p = has_prefix ? prefix_keys.size(2) : 0;
  const at::Tensor pk = has_prefix ? unit_last_stride(prefix_keys) : at::Tensor();
  const at::Tensor pv = has_prefix ? unit_last_stride(prefix_values) : at::Tensor();
  const at::Tensor mask = unit_last_stride(mask_in.reshape({mask_in.size(0), t, p + own}));  // [B or 1, T, P + S']
  const int64_t mask_batch_stride = mask.size(0) == 1 ? 0 : mask.stride(0);

  // Per mask row (shared by every head): its tiles, and the spans they are grouped into.
  const int64_t mask_rows = mask.size(0);
  std::vector<std::vector<AttentionTile>> tiles(static_cast<size_t>(mask_rows));
  cpu_parallel_for(0, mask_rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) tiles[static_cast<size_t>(i)] = attention_tiles(mask, i, p);
  });
  struct Span {
    int64_t row = 0;                    // of the batch
    size_t first_tile = 0, tiles = 0;   // in tiles[mask row]
    int64_t first = 0, rows = 0, width = 0;  // queries [first, first + rows); scores P + the widest tile's keys
  };
  // A span's scores ([rows, width]) stay within about 512 KiB: its rows are cut to fit, but never
  // fewer than a tile's.
  const int64_t span_rows = std::clamp<int64_t>((int64_t{1} << 17) / std::max<int64_t>(p + own, 1), kAttentionTile,
                                                4 * kAttentionTile);
  std::vector<Span> spans;
  for (int64_t row = 0; row < b; ++row) {
    const std::vector<AttentionTile>& row_tiles = tiles[static_cast<size_t>(mask_rows == 1 ? 0 : row)];
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
  int64_t widest = 0;
  for (const Span& span : spans) widest = std::max(widest, span.rows * span.width);

  at::Tensor out = at::empty({b, t, heads, hd}, q.options());  // [B, T, H, hd]
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const float* qd = q.data_ptr<float>();
  const float* kd = k.data_ptr<float>();
  const float* vd = v.data_ptr<float>();
  const float* pkd = has_prefix ? pk.data_ptr<float>() : nullptr;
  const float* pvd = has_prefix ? pv.data_ptr<float>() : nullptr;
  const float* md = mask.data_ptr<float>();
  float* od = out.data_ptr<float>();
  const int64_t out_ld = heads * hd;
  const bool fused = softmax == TileSoftmax::kBest && tile_softmax_available();
  const int64_t units = static_cast<int64_t>(spans.size()) * heads;
  cpu_parallel_for(0, units, 1, [&](int64_t begin, int64_t end) {
    // One span's scores, then probabilities in place: [rows, width], reused across this thread's spans.
    at::Tensor scores_buffer = at::empty({widest}, q.options());
    std::vector<float> sums(static_cast<size_t>(4 * kAttentionTile));
    for (int64_t i = begin; i < end; ++i) {
      // Head-major: consecutive spans share one head's prefix keys and values, which stay in cache.
      const int64_t head = i / static_cast<int64_t>(spans.size());
      const Span& span = spans[static_cast<size_t>(i % static_cast<int64_t>(spans.size()))];
      const std::vector<AttentionTile>& row_tiles = tiles[static_cast<size_t>(mask_rows == 1 ? 0 : span.row)];
      const int64_t row = span.row, kv = head / groups, width = span.width;
      float* s = scores_buffer.data_ptr<float>();  // row r of the span at s + r * width
      const float* qs = qd + row * q.stride(0) + head * q.stride(1) + span.first * q.stride(2);  // [rows, hd]
      // Scores against the prefix for the whole span in one product; against the own keys tile by tile.
      if (p > 0)
        sgemm_on_this_thread('N', 'T', span.rows, p, hd, scale, qs, row_stride(q), pkd + kv * pk.stride(1),
                             row_stride(pk), 0.0f, s, width);
      for (size_t j = span.first_tile; j < span.first_tile + span.tiles; ++j) {
        const AttentionTile& tile = row_tiles[j];
        const int64_t n = tile.key_end - tile.key_begin;
        if (n == 0) continue;
        const float* kt = kd + row * k.stride(0) + kv * k.stride(1) + tile.key_begin * k.stride(2);  // [n, hd]
        sgemm_on_this_thread('N', 'T', tile.rows, n, hd, scale, qd + row * q.stride(0) + head * q.stride(1) +
                             tile.first * q.stride(2), row_stride(q), kt, row_stride(k), 0.0f,
                             s + (tile.first - span.first) * width + p, width);
      }
      // Fused: the scores become unnormalised probabilities in place and each output row is divided
      // by its sum after the products. Plain: mask add, then ATen's softmax, copied back in place.
      for (size_t j = span.first_tile; j < span.first_tile + span.tiles; ++j) {
        const AttentionTile& tile = row_tiles[j];
        const int64_t n = tile.key_end - tile.key_begin, offset = tile.first - span.first;
        const float* tile_mask = md + row * mask_batch_stride + tile.first * mask.stride(1);  // row r: + r * stride(1)
        if (softcap > 0)  // cap * tanh(score / cap) on the prefix's scores and the tile's own, ATen's vector tanh
          scores_buffer.as_strided({tile.rows, p + n}, {width, 1}, offset * width).div_(softcap).tanh_().mul_(softcap);
        if (fused) {
          for (int64_t r = 0; r < tile.rows; ++r) {
            const float* m = tile_mask + r * mask.stride(1);  // [P + S']
            sums[static_cast<size_t>(offset + r)] = masked_exp_row(s + (offset + r) * width, tile.whole_prefix ? nullptr : m,
                                                              p, m + p + tile.key_begin, n);
          }
        } else {
          for (int64_t r = 0; r < tile.rows; ++r) {
            const float* m = tile_mask + r * mask.stride(1);  // [P + S']
            float* x = s + (offset + r) * width;
            for (int64_t c = 0; c < p; ++c) x[c] += m[c];
            for (int64_t c = 0; c < n; ++c) x[p + c] += m[p + tile.key_begin + c];
          }
          at::Tensor scores = scores_buffer.as_strided({tile.rows, p + n}, {width, 1}, offset * width);
          scores.copy_(at::_softmax(scores, -1, false));
        }
      }
      float* o = od + row * t * out_ld + span.first * out_ld + head * hd;  // [rows, hd], row stride H * hd
      if (p > 0)
        sgemm_on_this_thread('N', 'N', span.rows, hd, p, 1.0f, s, width, pvd + kv * pv.stride(1), row_stride(pv), 0.0f,
                             o, out_ld);
      for (size_t j = span.first_tile; j < span.first_tile + span.tiles; ++j) {
        const AttentionTile& tile = row_tiles[j];
        const int64_t n = tile.key_end - tile.key_begin, offset = tile.first - span.first;
        const float* vt = vd + row * v.stride(0) + kv * v.stride(1) + tile.key_begin * v.stride(2);  // [n, hd]
        if (n > 0)
          sgemm_on_this_thread('N', 'N', tile.rows, hd, n, 1.0f, s + offset * width + p, width, vt, row_stride(v),
                               p > 0 ? 1.0f : 0.0f, o + offset * out_ld, out_ld);
      }
      if (fused) {
        for (int64_t r = 0; r < span.rows; ++r) {
          const float inverse = 1.0f / sums[static_cast<size_t>(r)];
          float* y = o + r * out_ld;
          for (int64_t c = 0; c < hd; ++c) y[c] *= inverse;
        }
      }
    }
  });
  return out.view({b, t, heads * hd});
}

}  // namespace gpueval
