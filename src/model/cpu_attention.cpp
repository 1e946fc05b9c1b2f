#include "model/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
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

at::Tensor tiled_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                           const at::Tensor& mask_in, const at::Tensor& prefix_keys, const at::Tensor& prefix_values,
                           TileSoftmax softmax) {
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

  at::Tensor out = at::empty({b, t, heads, hd}, q.options());  // [B, T, H, hd]
  const int64_t blocks = (t + kAttentionTile - 1) / kAttentionTile;
  // Per (row, query block), shared by every head: the own keys its queries may see, and whether
  // they all see every key of the prefix (the mask is 0 there, so the softmax need not add it).
  struct BlockKeys {
    int64_t begin = 0, end = 0;
    bool whole_prefix = false;
  };
  std::vector<BlockKeys> ranges(static_cast<size_t>(b * blocks));
  at::parallel_for(0, b * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = mask.size(0) == 1 ? 0 : i / blocks, first = (i % blocks) * kAttentionTile;
      const int64_t rows = std::min(kAttentionTile, t - first);
      const auto [key_begin, key_end] = visible_key_range(mask, row, first, rows, p);
      ranges[static_cast<size_t>(i)] = {key_begin, key_end, sees_whole_prefix(mask, row, first, rows, p)};
    }
  });

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
  at::parallel_for(0, b * blocks * heads, 1, [&](int64_t begin, int64_t end) {
    // Scores and probabilities of one tile: [rows, P + n] each, reused across this thread's tiles.
    at::Tensor scores_buffer = at::empty({kAttentionTile * (p + own)}, q.options());
    at::Tensor probs_buffer = fused ? at::Tensor() : at::empty({kAttentionTile * (p + own)}, q.options());
    for (int64_t i = begin; i < end; ++i) {
      // Head-major: consecutive tiles share one head's prefix keys and values, which stay in cache.
      const int64_t head = i / (b * blocks), row = (i / blocks) % b, block = i % blocks;
      const int64_t kv = head / groups, first = block * kAttentionTile, rows = std::min(kAttentionTile, t - first);
      const BlockKeys& keys = ranges[static_cast<size_t>(row * blocks + block)];
      const int64_t key_begin = keys.begin, key_end = keys.end;
      const int64_t n = key_end - key_begin, width = p + n;
      const float* qt = qd + row * q.stride(0) + head * q.stride(1) + first * q.stride(2);  // [rows, hd]
      const float* kt = kd + row * k.stride(0) + kv * k.stride(1) + key_begin * k.stride(2);  // [n, hd]
      const float* vt = vd + row * v.stride(0) + kv * v.stride(1) + key_begin * v.stride(2);  // [n, hd]
      float* s = scores_buffer.data_ptr<float>();                                            // [rows, width]
      if (p > 0)
        sgemm_on_this_thread('N', 'T', rows, p, hd, scale, qt, row_stride(q), pkd + kv * pk.stride(1), row_stride(pk),
                             0.0f, s, width);
      if (n > 0)
        sgemm_on_this_thread('N', 'T', rows, n, hd, scale, qt, row_stride(q), kt, row_stride(k), 0.0f, s + p, width);
      // Fused: the scores become unnormalised probabilities in place and each output row is divided
      // by its sum after the products. Plain: mask add, then ATen's softmax into the second buffer.
      float sums[kAttentionTile];
      const float* pr = s;
      const float* tile_mask = md + row * mask_batch_stride + first * mask.stride(1);  // row r: + r * stride(1)
      if (fused) {
        for (int64_t r = 0; r < rows; ++r) {
          const float* m = tile_mask + r * mask.stride(1);  // [P + S']
          sums[r] = masked_exp_row(s + r * width, keys.whole_prefix ? nullptr : m, p, m + p + key_begin, n);
        }
      } else {
        for (int64_t r = 0; r < rows; ++r) {
          const float* m = tile_mask + r * mask.stride(1);  // [P + S']
          float* x = s + r * width;
          for (int64_t c = 0; c < p; ++c) x[c] += m[c];
          for (int64_t c = 0; c < n; ++c) x[p + c] += m[p + key_begin + c];
        }
        const at::Tensor scores = scores_buffer.narrow(0, 0, rows * width).view({rows, width});
        at::Tensor probs = probs_buffer.narrow(0, 0, rows * width).view({rows, width});
        at::_softmax_out(probs, scores, -1, false);
        pr = probs.data_ptr<float>();
      }
      float* o = od + row * t * out_ld + first * out_ld + head * hd;  // [rows, hd], row stride H * hd
      if (p > 0)
        sgemm_on_this_thread('N', 'N', rows, hd, p, 1.0f, pr, width, pvd + kv * pv.stride(1), row_stride(pv), 0.0f, o,
                             out_ld);
      if (n > 0)
        sgemm_on_this_thread('N', 'N', rows, hd, n, 1.0f, pr + p, width, vt, row_stride(v), p > 0 ? 1.0f : 0.0f, o,
                             out_ld);
      if (fused) {
        for (int64_t r = 0; r < rows; ++r) {
          const float inverse = 1.0f / sums[r];
          float* y = o + r * out_ld;
          for (int64_t c = 0; c < hd; ++c) y[c] *= inverse;
        }
      }
    }
  });
  return out.view({b, t, heads * hd});
}

}  // namespace gpueval
