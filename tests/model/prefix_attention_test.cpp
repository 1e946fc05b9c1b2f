// Shared-prefix KV (prefill) and packed trunk + branch rows (forward_packed)
// against the plain forward() on each full sequence alone: attending to the
// prefix once, and packing several continuations into one row, must not change
// a sequence's numbers.
#include <chrono>
#include <cstdio>

#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"
#include "gpueval/model.h"
#include "test_util.h"
#include "tiny_model.h"

namespace gpueval {
namespace {

using testing::TinyModelSpec;
using Ids = std::vector<int64_t>;

Ids random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor t = at::randint(0, vocab, {n}, at::kLong);
  return Ids(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

Ids concat(std::initializer_list<const Ids*> parts) {
  Ids out;
  for (const Ids* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// forward() on one unpadded sequence at positions 0..T-1: hidden [T, D].
at::Tensor hidden_alone(const DecoderModelImpl& model, const Ids& ids) {
  c10::InferenceMode guard;
  const int64_t t = static_cast<int64_t>(ids.size());
  return model.forward(at::tensor(ids, at::kLong).view({1, t}), at::arange(t, at::kLong).view({1, t}),
                       at::ones({1, t}, at::kBool))[0];
}

PrefixKV prefill(const DecoderModelImpl& model, const Ids& ids) {
  return model.prefill(std::vector<int32_t>(ids.begin(), ids.end()));
}

// A row: a trunk and its branches, packed as trunk, branch 1, branch 2, ...
struct Row {
  Ids trunk;
  std::vector<Ids> branches;
  int64_t length() const {
    int64_t n = static_cast<int64_t>(trunk.size());
    for (const Ids& b : branches) n += static_cast<int64_t>(b.size());
    return n;
  }
};

// The [B, T] inputs of forward_packed for `rows` after a prefix of `p` tokens, right-padded to T.
struct Packed {
  at::Tensor tokens, positions, valid, segments;
  at::Tensor run(const DecoderModelImpl& model, const PrefixKV* prefix) const {
    c10::InferenceMode guard;
    return model.forward_packed(tokens, positions, valid, segments, prefix);
  }
};

Packed pack(const std::vector<Row>& rows, int64_t p, int64_t t) {
  const int64_t b = static_cast<int64_t>(rows.size());
  Packed x{at::zeros({b, t}, at::kLong), at::zeros({b, t}, at::kLong), at::zeros({b, t}, at::kBool),
           at::zeros({b, t}, at::kLong)};
  auto tok = x.tokens.accessor<int64_t, 2>();
  auto pos = x.positions.accessor<int64_t, 2>();
  auto val = x.valid.accessor<bool, 2>();
  auto seg = x.segments.accessor<int64_t, 2>();
  for (int64_t r = 0; r < b; ++r) {
    int64_t col = 0;
    auto put = [&](const Ids& ids, int64_t first_position, int64_t segment) {
      for (size_t i = 0; i < ids.size(); ++i, ++col) {
        tok[r][col] = ids[i];
        pos[r][col] = first_position + static_cast<int64_t>(i);
        val[r][col] = true;
        seg[r][col] = segment;
      }
    };
    const int64_t trunk_end = p + static_cast<int64_t>(rows[r].trunk.size());
    put(rows[r].trunk, p, 0);
    for (size_t k = 0; k < rows[r].branches.size(); ++k) put(rows[r].branches[k], trunk_end, int64_t(k) + 1);
  }
  return x;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Checks every segment of every row of `got` ([B, T, D]) against forward() on prefix + trunk (+ branch) alone.
void expect_rows_match_alone(const DecoderModelImpl& model, const Ids& prefix, const std::vector<Row>& rows,
                             const at::Tensor& got, double tol) {
  const int64_t p = static_cast<int64_t>(prefix.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const int64_t lt = static_cast<int64_t>(row.trunk.size());
    if (lt > 0) {
      at::Tensor want = hidden_alone(model, concat({&prefix, &row.trunk})).narrow(0, p, lt).to(got.scalar_type());
      EXPECT_LT(max_diff(got[r].narrow(0, 0, lt), want), tol) << "row " << r << " trunk";
    }
    int64_t col = lt;
    for (size_t k = 0; k < row.branches.size(); ++k) {
      const int64_t lb = static_cast<int64_t>(row.branches[k].size());
      at::Tensor full = hidden_alone(model, concat({&prefix, &row.trunk, &row.branches[k]})).to(got.scalar_type());
      EXPECT_LT(max_diff(got[r].narrow(0, col, lb), full.narrow(0, p + lt, lb)), tol)
          << "row " << r << " branch " << k + 1;
      col += lb;
    }
  }
}

// GQA (kv_heads < heads), q/k/v bias, llama3 rope; parameterised over the number of kv heads.
class PrefixAttention : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    spec.kv_heads = GetParam();
    config = testing::tiny_config(spec);
    weights = testing::tiny_weights(config, spec.seed);
    model = build_model(config, weights);
  }
  Ids ids(int64_t n, uint64_t seed) const { return random_ids(n, config.vocab_size, seed); }

  TinyModelSpec spec;
  ModelConfig config;
  std::map<std::string, at::Tensor> weights;
  DecoderModel model{nullptr};
};

TEST_P(PrefixAttention, PrefillHasOneCopyOfThePrefix) {
  const Ids prefix = ids(21, 1);
  PrefixKV kv = prefill(*model, prefix);
  EXPECT_EQ(kv.length(), 21);
  ASSERT_EQ(static_cast<int64_t>(kv.keys.size()), config.num_hidden_layers);
  ASSERT_EQ(kv.values.size(), kv.keys.size());
  const std::vector<int64_t> shape{1, config.num_key_value_heads, 21, config.head_dim};
  for (size_t l = 0; l < kv.keys.size(); ++l) {
    EXPECT_EQ(kv.keys[l].sizes().vec(), shape);
    EXPECT_EQ(kv.values[l].sizes().vec(), shape);
  }
  EXPECT_EQ(kv.bytes(), 2 * config.num_hidden_layers * config.num_key_value_heads * 21 * config.head_dim * 4);
  EXPECT_EQ(PrefixKV{}.length(), 0);
  EXPECT_EQ(PrefixKV{}.bytes(), 0);
}

TEST_P(PrefixAttention, TrunksAfterPrefixEqualFullSequences) {
  const Ids prefix = ids(20, 2);
  // Different lengths, right-padded to the longest.
  std::vector<Row> rows = {{ids(7, 3), {}}, {ids(3, 4), {}}, {ids(12, 5), {}}, {ids(1, 6), {}}};
  PrefixKV kv = prefill(*model, prefix);
  at::Tensor got = pack(rows, 20, 12).run(*model, &kv);
  ASSERT_EQ(got.sizes().vec(), (std::vector<int64_t>{4, 12, config.hidden_size}));
  EXPECT_TRUE(got.isfinite().all().item<bool>());
  expect_rows_match_alone(*model, prefix, rows, got, 1e-5);
}

TEST_P(PrefixAttention, BranchesSeeTheTrunkButNotEachOther) {
  const Ids prefix = ids(16, 7);
  std::vector<Row> rows = {
      {ids(5, 8), {ids(1, 9), ids(1, 10), ids(1, 11), ids(1, 12)}},  // single-token branches, as " A".." D"
      {ids(3, 13), {ids(4, 14), ids(2, 15), ids(3, 16)}},  // multi-token branches
      {{}, {}},  // a padding row
      {ids(2, 17), {ids(3, 18)}},  // one branch, then padding
  };
  const int64_t t = 14;
  ASSERT_EQ(rows[1].length(), 12);
  PrefixKV kv = prefill(*model, prefix);
  at::Tensor got = pack(rows, 16, t).run(*model, &kv);
  EXPECT_TRUE(got.isfinite().all().item<bool>());
  expect_rows_match_alone(*model, prefix, rows, got, 1e-5);
  // Branches differ from the same tokens run as one sequence: the mask really separates them.
  const Ids joined = concat({&prefix, &rows[1].trunk, &rows[1].branches[0], &rows[1].branches[1]});
  at::Tensor as_sequence = hidden_alone(*model, joined).narrow(0, 16 + 3 + 4, 2);
  EXPECT_GT(max_diff(got[1].narrow(0, 3 + 4, 2), as_sequence), 1e-3);
}

TEST_P(PrefixAttention, EmptyPrefixEqualsForward) {
  std::vector<Row> rows = {{ids(9, 19), {}}, {ids(4, 20), {}}, {ids(6, 21), {}}};
  Packed x = pack(rows, 0, 9);
  at::Tensor want;
  {
    c10::InferenceMode guard;
    want = model->forward(x.tokens, x.positions, x.valid);
  }
  const PrefixKV empty;
  for (const PrefixKV* prefix : {static_cast<const PrefixKV*>(nullptr), &empty}) {
    at::Tensor got = x.run(*model, prefix);
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t n = static_cast<int64_t>(rows[r].trunk.size());
      EXPECT_LT(max_diff(got[r].narrow(0, 0, n), want[r].narrow(0, 0, n)), 1e-5) << "row " << r;
    }
  }
  // And with branches but no prefix.
  std::vector<Row> branched = {{ids(4, 22), {ids(2, 23), ids(1, 24)}}, {ids(6, 25), {ids(3, 26)}}};
  expect_rows_match_alone(*model, {}, branched, pack(branched, 0, 9).run(*model, nullptr), 1e-5);
}

// forward_packed's columns: the last layer at the picked positions alone gives the states the full
// forward gives there, for rows that pick different numbers of columns (the short ones repeat one),
// with and without a prefix, with branches.
TEST_P(PrefixAttention, TheLastLayerAtPickedColumnsGivesTheFullForwardsStatesThere) {
  const Ids prefix = ids(12, 30);
  std::vector<Row> rows = {{ids(5, 31), {ids(1, 32), ids(1, 33)}},
                           {ids(9, 34), {ids(3, 35)}},
                           {ids(2, 36), {}},
                           {{}, {}}};  // a padding row: it picks column 0
  const int64_t t = 12;
  const std::vector<std::vector<int64_t>> picks = {{4, 5, 6}, {0, 8, 11}, {1, 1, 1}, {0, 0, 0}};
  at::Tensor columns = at::zeros({4, 3}, at::kLong);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 3; ++j) columns[r][j] = picks[static_cast<size_t>(r)][static_cast<size_t>(j)];
  PrefixKV kv = prefill(*model, prefix);
  for (const PrefixKV* pre : {static_cast<const PrefixKV*>(&kv), static_cast<const PrefixKV*>(nullptr)}) {
    const Packed x = pack(rows, pre ? 12 : 0, t);
    const at::Tensor full = x.run(*model, pre);
    at::Tensor got;
    {
      c10::InferenceMode guard;
      got = model->forward_packed(x.tokens, x.positions, x.valid, x.segments, pre, columns);
    }
    ASSERT_EQ(got.sizes().vec(), (std::vector<int64_t>{4, 3, config.hidden_size}));
    for (int64_t r = 0; r < 3; ++r)  // the padding row's states are never read
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_LT(max_diff(got[r][j], full[r][columns[r][j].item<int64_t>()]), 1e-5)
            << "row " << r << " pick " << j << (pre ? " after the prefix" : "");
  }
  const std::string err = testing::error_of([&] {
    const Packed x = pack(rows, 12, t);
    c10::InferenceMode guard;
    model->forward_packed(x.tokens, x.positions, x.valid, x.segments, &kv, at::zeros({3, 2}, at::kLong));
  });
  EXPECT_NE(err.find("forward_packed: columns are [3, 2]"), std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(KvHeads, PrefixAttention, ::testing::Values(2, 1, 4),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "kv" + std::to_string(info.param);
                         });

TEST(PrefixAttentionBf16, RunsAndStaysCloseToFp32) {
  TinyModelSpec spec;
  ModelConfig config = testing::tiny_config(spec);
  auto weights = testing::tiny_weights(config, spec.seed);
  DecoderModel fp32 = build_model(config, weights);
  DecoderModel bf16 = build_model(config, weights, LoadOptions{at::kCPU, at::kBFloat16});
  const Ids prefix = random_ids(18, config.vocab_size, 30);
  std::vector<Row> rows = {{random_ids(4, config.vocab_size, 31),
                            {random_ids(1, config.vocab_size, 32), random_ids(3, config.vocab_size, 33)}},
                           {random_ids(6, config.vocab_size, 34), {}}};
  Packed x = pack(rows, 18, 8);
  PrefixKV kv32 = prefill(*fp32, prefix);
  PrefixKV kv16 = prefill(*bf16, prefix);
  EXPECT_EQ(kv16.keys[0].scalar_type(), at::kBFloat16);
  EXPECT_EQ(kv16.bytes() * 2, kv32.bytes());
  at::Tensor want = x.run(*fp32, &kv32);
  at::Tensor got = x.run(*bf16, &kv16);
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  // Random weights make bf16's own rounding large (forward() alone is ~4% off fp32 here), so: the packed bf16
  // rows agree with bf16 forward() on each full sequence, and loosely with fp32.
  at::Tensor valid = x.valid.unsqueeze(-1);
  const double scale = want.abs().max().item<double>();
  EXPECT_LT(max_diff(got.to(at::kFloat).masked_fill(~valid, 0), want.masked_fill(~valid, 0)) / scale, 0.1);
  expect_rows_match_alone(*bf16, prefix, rows, got.to(at::kFloat), 5e-2 * scale);
}

TEST(PrefixAttentionErrors, PrefillRejectsBadPrefixes) {
  TinyModelSpec spec;
  ModelConfig config = testing::tiny_config(spec);
  DecoderModel model = build_model(config, testing::tiny_weights(config, spec.seed));
  EXPECT_NE(testing::error_of([&] { model->prefill({}); }).find("no tokens"), std::string::npos);
  std::vector<int32_t> too_long(config.max_position_embeddings + 1, 3);
  EXPECT_NE(testing::error_of([&] { model->prefill(too_long); }).find("max_position_embeddings"), std::string::npos);
  const int32_t vocab = static_cast<int32_t>(config.vocab_size);
  EXPECT_NE(testing::error_of([&] { model->prefill({3, vocab}); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { model->prefill({-1, 3}); }).find("outside the vocabulary"), std::string::npos);
  // The longest allowed prefix is fine.
  EXPECT_EQ(model->prefill(std::vector<int32_t>(config.max_position_embeddings, 3)).length(),
            config.max_position_embeddings);
}

TEST(PrefixAttentionErrors, ForwardPackedRejectsMismatchedShapes) {
  TinyModelSpec spec;
  ModelConfig config = testing::tiny_config(spec);
  DecoderModel model = build_model(config, testing::tiny_weights(config, spec.seed));
  c10::InferenceMode guard;
  at::Tensor tokens = at::zeros({2, 5}, at::kLong);
  EXPECT_NE(testing::error_of([&] {
              model->forward_packed(tokens, at::zeros({2, 4}, at::kLong), at::ones({2, 5}, at::kBool),
                                    at::zeros({2, 5}, at::kLong), nullptr);
            }).find("forward_packed"),
            std::string::npos);
}

// Timing, not a check: run with
//   build/gpueval_tests --gtest_also_run_disabled_tests --gtest_filter='PrefixAttentionTiming.*'
TEST(PrefixAttentionTiming, DISABLED_SharedPrefixVersusFullSequences) {
  TinyModelSpec spec;
  spec.hidden = 256;
  spec.intermediate = 688;
  spec.layers = 4;
  spec.heads = 8;
  spec.kv_heads = 2;
  spec.max_positions = 1024;
  ModelConfig config = testing::tiny_config(spec);
  DecoderModel model = build_model(config, testing::tiny_weights(config, spec.seed));
  const int64_t p = 512, b = 16, t = 64;
  const Ids prefix = random_ids(p, config.vocab_size, 40);
  std::vector<Row> rows;
  for (int64_t r = 0; r < b; ++r) rows.push_back({random_ids(t, config.vocab_size, 41 + r), {}});
  Packed x = pack(rows, p, t);
  at::Tensor full_tokens = at::cat({at::tensor(prefix, at::kLong).view({1, p}).expand({b, p}), x.tokens}, 1);
  at::Tensor full_positions = at::arange(p + t, at::kLong).view({1, p + t}).expand({b, p + t}).contiguous();
  at::Tensor full_valid = at::ones({b, p + t}, at::kBool);
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point z) {
    return std::chrono::duration<double, std::milli>(z - a).count();
  };
  c10::InferenceMode guard;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    PrefixKV kv = prefill(*model, prefix);
    auto t1 = Clock::now();
    at::Tensor packed = x.run(*model, &kv);
    auto t2 = Clock::now();
    at::Tensor full = model->forward(full_tokens, full_positions, full_valid);
    auto t3 = Clock::now();
    std::printf(
        "rep %d: prefill %.1f ms + forward_packed %.1f ms = %.1f ms; forward on %lldx%lld: %.1f ms; "
        "max diff %.2e\n",
        rep, ms(t0, t1), ms(t1, t2), ms(t0, t2), static_cast<long long>(b), static_cast<long long>(p + t), ms(t2, t3),
        max_diff(packed, full.narrow(1, p, t)));
  }
}

}  // namespace
}  // namespace gpueval
