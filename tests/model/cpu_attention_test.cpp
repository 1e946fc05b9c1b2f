// CPU attention in tiles (model/kernels/cpu_attention.h): equal to a float64 softmax(q kᵀ / sqrt(hd) + mask) v
// over the prefix's keys and the own ones for the masks the model builds (causal, packed parts with
// branches, padding, a cache's left padding), with and without a prefix, grouped heads, lengths
// that are not a multiple of the tile and strided inputs; the visible key range of a tile; and the
// same bits at one thread and two. Both softmax paths (the fused vector one of tile_softmax.h where the
// CPU has AVX2, and ATen's), and the fused row kernel itself for every tail length, in both its
// bodies (AVX2 and AVX-512), which must give the same bits.
#include "model/kernels/cpu_attention.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/kernels/tile_softmax.h"

namespace gpueval {
namespace {

bool have_kernel() {
  const at::Tensor q = torch::zeros({1, 1, 1, 2}), k = torch::zeros({1, 1, 1, 2});
  return tiled_attention_applies(q, k, k, torch::zeros({1, 1, 1, 1, 1}), {}, {});
}

// allowed: [B, T, P + S'] bool -> the additive mask [B, 1, 1, T, P + S'] the model builds.
at::Tensor additive(const at::Tensor& allowed) {
  return torch::zeros(allowed.sizes())
      .masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest())
      .unsqueeze(1)
      .unsqueeze(1);
}

// The definition in float64, keys of the prefix first: [B, T, H * hd].
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                     const at::Tensor& pk, const at::Tensor& pv, double softcap = 0.0) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3), groups = h / k.size(1);
  at::Tensor keys = k.to(at::kDouble), values = v.to(at::kDouble);
  if (pk.defined()) {
    keys = at::cat({pk.to(at::kDouble).expand({b, -1, -1, -1}), keys}, 2);
    values = at::cat({pv.to(at::kDouble).expand({b, -1, -1, -1}), values}, 2);
  }
  keys = keys.repeat_interleave(groups, 1);
  values = values.repeat_interleave(groups, 1);
  at::Tensor scores = at::matmul(q.to(at::kDouble), keys.transpose(2, 3)) / std::sqrt(double(hd));
  if (softcap > 0) scores = at::tanh(scores / softcap) * softcap;
  scores = scores + mask.squeeze(1).to(at::kDouble);  // [B or 1, 1, T, S] over [B, H, T, S]
  return at::matmul(at::softmax(scores, -1), values).transpose(1, 2).reshape({b, t, h * hd});
}

void expect_matches(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                    const at::Tensor& pk, const at::Tensor& pv, const std::string& what, double softcap = 0.0) {
  ASSERT_TRUE(tiled_attention_applies(q, k, v, mask, pk, pv)) << what;
  const at::Tensor want = reference(q, k, v, mask, pk, pv, softcap);
  // Rows whose queries see some key; a row that sees none (padding) is only required to be finite.
  const at::Tensor sees = (mask.squeeze(1).squeeze(1) > std::numeric_limits<float>::lowest() / 2)
                              .any(-1)
                              .expand({q.size(0), q.size(2)});  // [B, T]
  for (const TileSoftmax softmax : {TileSoftmax::kBest, TileSoftmax::kAten}) {
    const std::string path = what + (softmax == TileSoftmax::kAten ? ", ATen's softmax"
                                     : tile_softmax_available()    ? ", fused softmax"
                                                                   : ", best softmax (ATen's here)");
    const at::Tensor got = tiled_attention(q, k, v, mask, pk, pv, softmax, softcap);
    ASSERT_EQ(got.sizes(), want.sizes()) << path;
    EXPECT_TRUE(torch::isfinite(got).all().item<bool>()) << path;
    const double err = (got.to(at::kDouble) - want).abs().amax(-1).masked_select(sees).max().item<double>();
    EXPECT_LE(err, 2e-6) << path << ": max |error| " << err;
  }
}

// A packed sequence of parts (lengths), each a trunk of `trunk` tokens then branches of `branch`
// tokens that see the trunk and themselves: the own-key rules of forward_packed. [T, T] bool.
at::Tensor packed_allowed(const std::vector<int64_t>& lengths, int64_t trunk, int64_t branch, int64_t t) {
  at::Tensor part = torch::full({t}, -1, at::kLong), seg = torch::full({t}, -1, at::kLong);
  int64_t at = 0;
  for (size_t i = 0; i < lengths.size(); ++i)
    for (int64_t j = 0; j < lengths[i]; ++j, ++at) {
      part[at] = static_cast<int64_t>(i);
      seg[at] = j < trunk ? 0 : 1 + (j - trunk) / branch;
    }
  const at::Tensor idx = torch::arange(t);
  const at::Tensor causal = idx.unsqueeze(0).le(idx.unsqueeze(1));
  const at::Tensor same_part = part.unsqueeze(0).eq(part.unsqueeze(1)).logical_and(part.ge(0).unsqueeze(0));
  const at::Tensor visible_branch = seg.unsqueeze(0).eq(seg.unsqueeze(1)).logical_or(seg.eq(0).unsqueeze(0));
  return causal.logical_and(same_part).logical_and(visible_branch);
}

TEST(CpuAttention, MatchesTheDefinitionForTheMasksTheModelBuilds) {
  if (!have_kernel()) GTEST_SKIP() << "this build has no oneDNN: attention takes the plain path";
  torch::manual_seed(3);
  for (const int64_t kv : {1, 2, 4}) {
    const int64_t h = 4, hd = 16, groups = h / kv;
    const std::string heads = " (" + std::to_string(kv) + " kv heads, " + std::to_string(groups) + " per group)";
    // Causal rows without a prefix, longer than two tiles and not a multiple of one.
    {
      const int64_t b = 2, t = kAttentionTile * 2 + 7;
      at::Tensor q = torch::randn({b, h, t, hd}), k = torch::randn({b, kv, t, hd}), v = torch::randn({b, kv, t, hd});
      at::Tensor allowed = torch::ones({t, t}, at::kBool).tril().expand({b, t, t}).clone();
      allowed[1].narrow(-1, 0, 5).fill_(false);  // row 1 left-padded by 5: its first queries see no key
      expect_matches(q, k, v, additive(allowed), {}, {}, "causal" + heads);
    }
    // Packed sequences after a prefix: parts of several lengths, trunks and branches, padding at the end.
    {
      const int64_t b = 2, t = 150, p = 37;
      at::Tensor q = torch::randn({b, h, t, hd}), k = torch::randn({b, kv, t, hd}), v = torch::randn({b, kv, t, hd});
      at::Tensor pk = torch::randn({1, kv, p, hd}), pv = torch::randn({1, kv, p, hd});
      at::Tensor own = torch::stack({packed_allowed({40, 23, 61, 19}, 10, 4, t), packed_allowed({90, 50}, 30, 7, t)});
      at::Tensor allowed = at::cat({torch::ones({b, t, p}, at::kBool), own}, -1);
      expect_matches(q, k, v, additive(allowed), pk, pv, "packed after a prefix" + heads);
      // The last layer's picked columns: a few query rows of the same sequences, strided q.
      at::Tensor columns = torch::tensor({39, 62, 123, 141}, at::kLong);
      at::Tensor picked_q = q.index_select(2, columns);
      at::Tensor picked = allowed.index_select(1, columns);
      expect_matches(picked_q, k, v, additive(picked), pk, pv, "picked columns" + heads);
      // Keys and values read through strides (a transposed view of [B, T, KV, hd]), a mask shared by the rows.
      at::Tensor ks = torch::randn({b, t, kv, hd}).transpose(1, 2), vs = torch::randn({b, t, kv, hd}).transpose(1, 2);
      expect_matches(q, ks, vs, additive(allowed.narrow(0, 0, 1)), pk, pv, "strided keys, one mask" + heads);
    }
    // A prefix long enough that a row's queries are cut into spans of two tiles, packed parts after it.
    {
      const int64_t b = 1, t = 300, p = 600;
      at::Tensor q = torch::randn({b, h, t, hd}), k = torch::randn({b, kv, t, hd}), v = torch::randn({b, kv, t, hd});
      at::Tensor pk = torch::randn({1, kv, p, hd}), pv = torch::randn({1, kv, p, hd});
      at::Tensor own = packed_allowed({70, 100, 90, 40}, 20, 9, t).unsqueeze(0);
      expect_matches(q, k, v, additive(at::cat({torch::ones({b, t, p}, at::kBool), own}, -1)), pk, pv,
                     "spans after a long prefix" + heads);
    }
    // One query against a cache of keys (a decoding step), and a prefix with no own key visible.
    {
      const int64_t b = 3, s = 45, p = 12;
      at::Tensor q = torch::randn({b, h, 1, hd}), k = torch::randn({b, kv, s, hd}), v = torch::randn({b, kv, s, hd});
      at::Tensor allowed = torch::ones({b, 1, s}, at::kBool);
      allowed[2].narrow(-1, 0, 20).fill_(false);
      expect_matches(q, k, v, additive(allowed), {}, {}, "one decoding step" + heads);
      at::Tensor pk = torch::randn({1, kv, p, hd}), pv = torch::randn({1, kv, p, hd});
      at::Tensor prefix_only = at::cat({torch::ones({b, 1, p}, at::kBool), torch::zeros({b, 1, s}, at::kBool)}, -1);
      expect_matches(q, k, v, additive(prefix_only), pk, pv, "the prefix alone" + heads);
    }
  }
}

std::vector<TileSoftmaxIsa> softmax_bodies_here() {
  std::vector<TileSoftmaxIsa> isas;
  for (const TileSoftmaxIsa isa : {TileSoftmaxIsa::kAvx2, TileSoftmaxIsa::kAvx512})
    if (tile_softmax_available(isa)) isas.push_back(isa);
  return isas;
}

const char* isa_name(TileSoftmaxIsa isa) { return isa == TileSoftmaxIsa::kAvx512 ? "AVX-512" : "AVX2"; }

// masked_exp_row against exp(x + mask - max) in float64, in each body this CPU runs, for prefix and
// own segments of every length up to three AVX-512 vectors (so every tail of both bodies, and rows
// of one element), with hidden keys; and with the prefix's mask left out (null: all visible).
TEST(TileSoftmax, MatchesTheDefinitionForEveryTailLength) {
  if (!tile_softmax_available()) GTEST_SKIP() << "no fused softmax in this build or on this CPU";
  const float hidden = std::numeric_limits<float>::lowest();
  torch::manual_seed(5);
  for (const TileSoftmaxIsa isa : softmax_bodies_here())
    for (const bool whole_prefix : {false, true})
      for (int64_t p = 0; p <= 48; ++p)
        for (int64_t n = 0; n <= 48; ++n) {
          if (p + n == 0) continue;
          const std::string what = std::string(isa_name(isa)) + ", p " + std::to_string(p) + ", n " +
                                   std::to_string(n) + (whole_prefix ? ", prefix mask null" : "");
          const at::Tensor scores = torch::randn({p + n}) * 4;
          at::Tensor mask =
              torch::where(torch::rand({p + n}) < 0.25, torch::full({p + n}, hidden), torch::zeros({p + n}));
          if (whole_prefix) mask.narrow(0, 0, p).zero_();
          mask[(p + n) / 2] = 0;  // at least one key visible
          // The mask's own segment sits after a gap in its row, as a tile's own keys start at key_begin.
          std::vector<float> mask_row(static_cast<size_t>(p + 5 + n), hidden);
          for (int64_t c = 0; c < p; ++c) mask_row[static_cast<size_t>(c)] = mask[c].item<float>();
          for (int64_t c = 0; c < n; ++c) mask_row[static_cast<size_t>(p + 5 + c)] = mask[p + c].item<float>();
          std::vector<float> x(scores.data_ptr<float>(), scores.data_ptr<float>() + p + n);
          const float sum =
              masked_exp_row(isa, x.data(), whole_prefix ? nullptr : mask_row.data(), p, mask_row.data() + p + 5, n);
          const at::Tensor z = scores.to(at::kDouble) + mask.to(at::kDouble);
          const at::Tensor want = (z - z.max()).exp();
          double err = 0;
          for (int64_t c = 0; c < p + n; ++c)
            err = std::max(err, std::abs(double(x[static_cast<size_t>(c)]) - want[c].item<double>()));
          ASSERT_LE(err, 1e-6) << what;
          ASSERT_NEAR(sum, want.sum().item<double>(), 1e-5 * want.sum().item<double>()) << what;
        }
  // A row the mask hides entirely (a padding query): equal, finite weights.
  for (const TileSoftmaxIsa isa : softmax_bodies_here()) {
    std::vector<float> x = {3.0f, -2.0f, 0.5f, 7.0f, 1.0f, -4.0f, 2.0f, 0.0f, 9.0f, -1.0f, 4.0f};
    const std::vector<float> none(x.size(), hidden);
    const float sum = masked_exp_row(isa, x.data(), none.data(), 4, none.data() + 4, 7);
    EXPECT_FLOAT_EQ(sum, 11.0f) << isa_name(isa);
    for (const float e : x) EXPECT_FLOAT_EQ(e, 1.0f) << isa_name(isa);
  }
}

// The AVX-512 body gives the AVX2 body's bits (weights and sums) for rows of every width up to a
// few hundred keys, hidden keys and rows scattered over a wide range included; and leaving out a
// prefix mask of zeros gives the bits of adding it. So a worker's results do not depend on which
// body its CPU runs.
TEST(TileSoftmax, BothBodiesAndANullPrefixMaskGiveTheSameBits) {
  if (!tile_softmax_available(TileSoftmaxIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 softmax on this CPU";
  const float hidden = std::numeric_limits<float>::lowest();
  torch::manual_seed(6);
  int64_t rows = 0;
  for (int64_t width = 1; width <= 300; width += (width < 70 ? 1 : 13))
    for (const double spread : {1.0, 30.0}) {
      const int64_t p = width * 2 / 3, n = width - p;
      const at::Tensor scores = torch::randn({width}) * spread;
      at::Tensor mask = torch::where(torch::rand({width}) < 0.2, torch::full({width}, hidden), torch::zeros({width}));
      mask.narrow(0, 0, p).zero_();
      const std::vector<float> m(mask.data_ptr<float>(), mask.data_ptr<float>() + width);
      const std::vector<float> x0(scores.data_ptr<float>(), scores.data_ptr<float>() + width);
      std::vector<float> a = x0, b = x0, c = x0;
      const float sa = masked_exp_row(TileSoftmaxIsa::kAvx2, a.data(), m.data(), p, m.data() + p, n);
      const float sb = masked_exp_row(TileSoftmaxIsa::kAvx512, b.data(), m.data(), p, m.data() + p, n);
      const float sc = masked_exp_row(TileSoftmaxIsa::kAvx512, c.data(), nullptr, p, m.data() + p, n);
      ASSERT_EQ(std::memcmp(&sa, &sb, sizeof sa), 0) << "width " << width << ": sums " << sa << " and " << sb;
      ASSERT_EQ(std::memcmp(&sa, &sc, sizeof sa), 0) << "width " << width << ", prefix mask null";
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "width " << width;
      ASSERT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0) << "width " << width;
      ++rows;
    }
  EXPECT_GT(rows, 100);
}

TEST(CpuAttention, ATileScoresTheOwnKeysFromTheFirstToTheLastItsRowsSee) {
  const int64_t p = 3, own = 10;
  at::Tensor allowed = torch::zeros({1, 4, p + own}, at::kBool);
  allowed.narrow(-1, 0, p).fill_(true);
  allowed[0][0].narrow(0, p + 2, 3).fill_(true);  // row 0: own keys 2..4
  allowed[0][1].narrow(0, p + 6, 1).fill_(true);  // row 1: own key 6
  const at::Tensor mask = additive(allowed).view({1, 4, p + own});
  EXPECT_EQ(visible_key_range(mask, 0, 0, 1, p), std::make_pair(int64_t{2}, int64_t{5}));
  EXPECT_EQ(visible_key_range(mask, 0, 0, 2, p), std::make_pair(int64_t{2}, int64_t{7}));
  EXPECT_EQ(visible_key_range(mask, 0, 1, 1, p), std::make_pair(int64_t{6}, int64_t{7}));
  // Rows that see no own key: every own key (their outputs are padding's).
  EXPECT_EQ(visible_key_range(mask, 0, 2, 2, p), std::make_pair(int64_t{0}, own));
  // Every row sees the whole prefix; hide one of its keys from row 3 and only rows 0-2 still do.
  EXPECT_TRUE(sees_whole_prefix(mask, 0, 0, 4, p));
  allowed[0][3][1] = false;
  const at::Tensor hidden_key = additive(allowed).view({1, 4, p + own});
  EXPECT_TRUE(sees_whole_prefix(hidden_key, 0, 0, 3, p));
  EXPECT_FALSE(sees_whole_prefix(hidden_key, 0, 2, 2, p));
  EXPECT_TRUE(sees_whole_prefix(hidden_key, 0, 3, 1, 1));  // only the keys before the hidden one
}

// Tiles follow the parts of a packed sequence: a part gets tiles of its own (a part longer than a
// tile gets near-equal ones), each scoring its part's own keys only; a causal row is cut evenly.
TEST(CpuAttention, TilesFollowThePartsOfAPackedSequence) {
  const int64_t p = 5, t = 200;
  // Parts of 40, 23, 70 and 19 queries (no branches), then 48 queries of padding.
  const at::Tensor allowed =
      at::cat({torch::ones({1, t, p}, at::kBool), packed_allowed({40, 23, 70, 19}, 40, 1, t).unsqueeze(0)}, -1);
  const at::Tensor mask = additive(allowed).view({1, t, p + t});
  std::vector<std::vector<int64_t>> got;
  for (const AttentionTile& tile : attention_tiles(mask, 0, p))
    got.push_back({tile.first, tile.rows, tile.key_begin, tile.key_end, tile.whole_prefix ? 1 : 0});
  const std::vector<std::vector<int64_t>> want = {
      {0, 40, 0, 40, 1},    {40, 23, 40, 63, 1},    {63, 35, 63, 98, 1},
      {98, 35, 63, 133, 1}, {133, 19, 133, 152, 1}, {152, 48, 0, t, 1}};  // padding sees no own key: it scores them all
  EXPECT_EQ(got, want);
  // One causal row of 135 queries: three tiles of 45, the first keys of the row to each tile's last.
  const at::Tensor causal = additive(torch::ones({135, 135}, at::kBool).tril().unsqueeze(0)).view({1, 135, 135});
  got.clear();
  for (const AttentionTile& tile : attention_tiles(causal, 0, 0))
    got.push_back({tile.first, tile.rows, tile.key_begin, tile.key_end, tile.whole_prefix ? 1 : 0});
  EXPECT_EQ(got, (std::vector<std::vector<int64_t>>{{0, 45, 0, 45, 1}, {45, 45, 0, 90, 1}, {90, 45, 0, 135, 1}}));
}

// A sliding window (query i sees keys i - w < j <= i): the first visible key slides forward with the
// queries, and a run of them still makes tiles of kAttentionTile queries (not one per query), each
// scoring only the keys from its first query's window start to its last query; a packed part after
// it starts a run of its own, and a prefix is seen only where the window still reaches it.
TEST(CpuAttention, TilesUnderASlidingWindowSpanTheWindowAndTheirQueries) {
  const int64_t w = 30, t = 200, first_part = 150, p = 10;
  // A prefix at positions 0..9; a first part of 150 queries continuing it (positions 10..159); a
  // second part of 50 at positions 0..49 of its own, which the prefix is no part of.
  at::Tensor allowed = torch::zeros({1, t, p + t}, at::kBool);
  for (int64_t i = 0; i < t; ++i) {
    const bool first = i < first_part;
    const int64_t pos = first ? p + i : i - first_part, start = first ? 0 : first_part;
    for (int64_t j = 0; j < p; ++j) allowed[0][i][j] = first && pos - j < w;
    for (int64_t j = start; j <= i; ++j) allowed[0][i][p + j] = (pos - (first ? p + j : j - first_part)) < w;
  }
  const at::Tensor mask = additive(allowed).view({1, t, p + t});
  std::vector<std::vector<int64_t>> got;
  for (const AttentionTile& tile : attention_tiles(mask, 0, p))
    got.push_back({tile.first, tile.rows, tile.key_begin, tile.key_end, tile.whole_prefix ? 1 : 0});
  // The first part: 150 queries in three tiles of 50, each from its first query's window start; the
  // window reaches the prefix's first key only up to query 19, so no tile sees all of the prefix. The
  // second part: one tile of 50, its own keys alone.
  const std::vector<std::vector<int64_t>> want = {
      {0, 50, 0, 50, 0}, {50, 50, 21, 100, 0}, {100, 50, 71, 150, 0}, {150, 50, 150, 200, 0}};
  EXPECT_EQ(got, want);
  if (!have_kernel()) GTEST_SKIP() << "this build has no oneDNN: attention takes the plain path";
  torch::manual_seed(11);
  const int64_t h = 4, kv = 2, hd = 16;
  at::Tensor q = torch::randn({1, h, t, hd}), k = torch::randn({1, kv, t, hd}), v = torch::randn({1, kv, t, hd});
  at::Tensor pk = torch::randn({1, kv, p, hd}), pv = torch::randn({1, kv, p, hd});
  expect_matches(q, k, v, additive(allowed), pk, pv, "a sliding window over a prefix and two parts");
  // Gemma 2's soft-capped scores: a cap small enough that tanh bends them (scores of 3 q·k of N(0, 1)).
  expect_matches(q * 3, k, v, additive(allowed), pk, pv, "soft-capped scores", 2.0);
}

TEST(CpuAttention, ResultsAreTheSameBitsOnOneThreadOrTwo) {
  if (!have_kernel()) GTEST_SKIP() << "this build has no oneDNN: attention takes the plain path";
  torch::manual_seed(4);
  const int64_t b = 3, h = 6, kv = 2, t = 2 * kAttentionTile + 30, hd = 32, p = 50;
  at::Tensor q = torch::randn({b, h, t, hd}), k = torch::randn({b, kv, t, hd}), v = torch::randn({b, kv, t, hd});
  at::Tensor pk = torch::randn({1, kv, p, hd}), pv = torch::randn({1, kv, p, hd});
  at::Tensor own = packed_allowed({60, 50, 30, 10}, 12, 5, t).expand({b, t, t});
  at::Tensor mask = additive(at::cat({torch::ones({b, t, p}, at::kBool), own}, -1));
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = tiled_attention(q, k, v, mask, pk, pv);
  at::set_num_threads(2);
  const at::Tensor two = tiled_attention(q, k, v, mask, pk, pv);
  at::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(one, two));
}

// A decode step after a prefix (one query per row: the rows' prefix products shared, row_invariant.h):
// equal to the definition with rows whose caches are left-padded by different amounts, a padding row
// that sees nothing, more rows than one block of kDecodeRows (32) and grouped heads, in both softmax
// paths; and a row's output is the same bits alone, beside other rows, and on one thread or two.
TEST(CpuAttention, ADecodeStepAfterAPrefixMatchesAndKeepsEachRowsBits) {
  if (!have_kernel()) GTEST_SKIP() << "this build has no oneDNN: attention takes the plain path";
  torch::manual_seed(6);
  const int64_t b = 37, h = 4, kv = 2, hd = 64, s = 70, p = 739;
  at::Tensor q = torch::randn({b, h, 1, hd}), k = torch::randn({b, kv, s, hd}), v = torch::randn({b, kv, s, hd});
  at::Tensor pk = torch::randn({1, kv, p, hd}), pv = torch::randn({1, kv, p, hd});
  at::Tensor allowed = torch::ones({b, 1, p + s}, at::kBool);
  for (int64_t r = 0; r < b; ++r) allowed[r].narrow(-1, p, (r * 7) % s).fill_(false);  // left padding
  allowed[5].fill_(false);  // a free row of the running set: sees no key
  const at::Tensor mask = additive(allowed);
  expect_matches(q, k, v, mask, pk, pv, "a decode step after a prefix");
  expect_matches(q * 3, k, v, mask, pk, pv, "a soft-capped decode step after a prefix", 2.0);
  const at::Tensor all = tiled_attention(q, k, v, mask, pk, pv);
  for (const int64_t row : {0, 9, 36}) {
    const auto one = [&](const at::Tensor& t) { return t.narrow(0, row, 1); };
    const at::Tensor alone = tiled_attention(one(q), one(k), one(v), one(mask), pk, pv);
    EXPECT_TRUE(torch::equal(alone, one(all))) << "row " << row << " alone";
    const at::Tensor three = tiled_attention(q.narrow(0, row / 2, 3), k.narrow(0, row / 2, 3), v.narrow(0, row / 2, 3),
                                             mask.narrow(0, row / 2, 3), pk, pv);
    EXPECT_TRUE(torch::equal(three, all.narrow(0, row / 2, 3))) << "rows from " << row / 2;
  }
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor single = tiled_attention(q, k, v, mask, pk, pv);
  at::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(single, all));
}

TEST(CpuAttention, TakesOnlyCpuFloat32InputsOfMatchingShapes) {
  const at::Tensor q = torch::randn({1, 4, 3, 8}), k = torch::randn({1, 2, 3, 8});
  const at::Tensor mask = torch::zeros({1, 1, 1, 3, 3});
  EXPECT_FALSE(tiled_attention_applies(q.to(at::kDouble), k.to(at::kDouble), k.to(at::kDouble), mask, {}, {}));
  EXPECT_FALSE(tiled_attention_applies(q, torch::randn({1, 3, 3, 8}), torch::randn({1, 3, 3, 8}), mask, {}, {}));
  EXPECT_FALSE(tiled_attention_applies(q, k, k, torch::zeros({1, 1, 1, 3, 4}), {}, {}));
  if (have_kernel()) EXPECT_TRUE(tiled_attention_applies(q, k, k, mask, {}, {}));
  EXPECT_THROW(tiled_attention(q, k, k, torch::zeros({1, 1, 1, 3, 4}), {}, {}), std::exception);
}

}  // namespace
}  // namespace gpueval
