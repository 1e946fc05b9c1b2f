// The row-invariant product (model/kernels/row_invariant.h): its AVX2 body computes the documented order
// (equal bits to the scalar body, which spells it out) for every tile edge, a row's bits do not depend
// on the rows beside it, the threads or the output chunk; RowInvariantProducts switches a model's
// projections to it (and only where it is on), and the prefix cache keeps prefixes computed under it
// apart from scoring ones. Where the CPU or build has no AVX2 body the vector tests skip, saying so.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <utility>
#include <vector>

#include "gpueval/error.h"
#include "gpueval/model.h"
#include "model/kernels/cpu_matmul.h"
#include "model/kernels/row_invariant.h"
#include "run/prefix_cache.h"
#include "tiny_model.h"

namespace gpueval {
namespace {

std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  return v;
}

// The documented order written out once more: eight lane sums by FMA, then
// (s0+s4 + s2+s6) + (s1+s5 + s3+s7).
float documented_dot(const float* a, const float* b, int64_t k) {
  float s[8] = {};
  for (int64_t c = 0; c < (k + 7) / 8 * 8; ++c) s[c % 8] = std::fma(c < k ? a[c] : 0.f, c < k ? b[c] : 0.f, s[c % 8]);
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

TEST(RowInvariantMultiply, ScalarBodyIsTheDocumentedOrder) {
  for (int64_t k : {1, 7, 8, 9, 64, 203}) {
    const std::vector<float> x = values(5 * k, 1), w = values(4 * k, 2);
    std::vector<float> y(20);
    row_invariant_multiply(5, 4, k, x.data(), k, w.data(), k, y.data(), 4, RowInvariantCode::kScalar);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 4; ++j)
        EXPECT_EQ(y[static_cast<size_t>(i * 4 + j)],
                  documented_dot(&x[static_cast<size_t>(i * k)], &w[static_cast<size_t>(j * k)], k))
            << "k " << k;
  }
}

// Every vector body this CPU has (AVX2; AVX-512 where it has AVX-512F, forced at every row count and
// as kBest picks it) against the scalar body, at every tile edge of each.
void expect_scalar_bits(RowInvariantCode code) {
  for (int64_t k : {1, 5, 8, 13, 64, 203, 517, 768}) {
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 16, 17, 47, 48, 49, 97, 127, 128, 133}) {
      for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 11, 16, 50}) {
        // Strided rows (ldx, ldw, ldy wider than the data) catch an edge tile reading past its rows.
        const int64_t ldx = k + 3, ldw = k + 1, ldy = n + 2;
        const std::vector<float> x = values(m * ldx, static_cast<uint32_t>(k + m)),
                                 w = values(n * ldw, static_cast<uint32_t>(k * 7 + n));
        std::vector<float> vec(static_cast<size_t>(m * ldy), -1.f), ref(static_cast<size_t>(m * ldy), -1.f);
        row_invariant_multiply(m, n, k, x.data(), ldx, w.data(), ldw, vec.data(), ldy, code);
        row_invariant_multiply(m, n, k, x.data(), ldx, w.data(), ldw, ref.data(), ldy, RowInvariantCode::kScalar);
        ASSERT_EQ(0, std::memcmp(vec.data(), ref.data(), vec.size() * sizeof(float)))
            << "code " << static_cast<int>(code) << " m " << m << " n " << n << " k " << k;
      }
    }
  }
}

TEST(RowInvariantMultiply, VectorBodyGivesTheScalarBitsAtEveryTileEdge) {
  if (!row_invariant_vector_code()) GTEST_SKIP() << "no AVX2+FMA body on this CPU or build";
  expect_scalar_bits(RowInvariantCode::kAvx2);
  expect_scalar_bits(RowInvariantCode::kBest);
}

TEST(RowInvariantMultiply, Avx512BodyGivesTheScalarBitsAtEveryTileEdge) {
  if (!row_invariant_avx512_code()) GTEST_SKIP() << "no AVX-512 body on this CPU or build (AVX-512F)";
  expect_scalar_bits(RowInvariantCode::kAvx512);
}

// row_invariant_weighted_sum: each output one FMA chain over c in order (from +0, or from y when
// accumulating), written out here; every body this CPU has gives those bits at every tile edge
// (rows 1..13, columns across the 16- and 64-column tiles), strided, and a row alone equals itself
// beside others.
TEST(RowInvariantWeightedSum, EveryBodyIsOneFmaChainPerOutputAtEveryTileEdge) {
  std::vector<RowInvariantCode> codes = {RowInvariantCode::kScalar, RowInvariantCode::kBest};
  if (row_invariant_vector_code()) codes.push_back(RowInvariantCode::kAvx2);
  if (row_invariant_avx512_code()) codes.push_back(RowInvariantCode::kAvx512);
  if (!row_invariant_avx512_code()) std::cout << "[ SKIPPED  ] the AVX-512 body: not on this CPU or build\n";
  if (!row_invariant_vector_code()) std::cout << "[ SKIPPED  ] the AVX2 body: not on this CPU or build\n";
  for (const bool accumulate : {false, true})
    for (int64_t k : {0, 1, 7, 64, 739})
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 12, 13})
        for (int64_t n : {1, 8, 15, 16, 17, 63, 64, 65, 128, 130}) {
          const int64_t ldx = k + 3, ldw = n + 5, ldy = n + 2;
          const std::vector<float> x = values(m * ldx, static_cast<uint32_t>(k + m)),
                                   w = values(std::max<int64_t>(k, 1) * ldw, static_cast<uint32_t>(k * 7 + n)),
                                   start = values(m * ldy, static_cast<uint32_t>(n + 11));
          std::vector<float> want = start;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              float sum = accumulate ? start[static_cast<size_t>(i * ldy + j)] : 0.0f;
              for (int64_t c = 0; c < k; ++c)
                sum = std::fma(x[static_cast<size_t>(i * ldx + c)], w[static_cast<size_t>(c * ldw + j)], sum);
              want[static_cast<size_t>(i * ldy + j)] = sum;
            }
          for (const RowInvariantCode code : codes) {
            std::vector<float> got = start;
            row_invariant_weighted_sum(m, n, k, x.data(), ldx, w.data(), ldw, got.data(), ldy, accumulate, code);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                << "code " << static_cast<int>(code) << " m " << m << " n " << n << " k " << k << " accumulate "
                << accumulate;
            if (m < 3) continue;
            std::vector<float> alone = start;  // row 2 by itself: its bits beside the others
            row_invariant_weighted_sum(1, n, k, x.data() + 2 * ldx, ldx, w.data(), ldw, alone.data() + 2 * ldy, ldy,
                                       accumulate, code);
            ASSERT_EQ(0, std::memcmp(alone.data() + 2 * ldy, want.data() + 2 * ldy, static_cast<size_t>(n) * 4));
          }
        }
}

TEST(RowInvariantProject, ARowsBitsDoNotDependOnItsBatchOrThreads) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({61, 96}), w = at::randn({131, 96}), b = at::randn({131});
  const at::Tensor all = row_invariant_project(x, w, b);
  EXPECT_TRUE(at::allclose(all, at::linear(x, w, b), 1e-4, 1e-4));
  for (int64_t first : {0, 3, 48})
    for (int64_t rows : {1, 2, 5, 13}) {
      const at::Tensor part = row_invariant_project(x.narrow(0, first, rows), w, b);
      EXPECT_TRUE(part.equal(all.narrow(0, first, rows))) << first << "+" << rows;
    }
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = row_invariant_project(x.view({1, 61, 96}), w, b);
  at::set_num_threads(threads);
  EXPECT_TRUE(one.view({61, 131}).equal(all));
  EXPECT_FALSE(row_invariant_project_applies(x.to(at::kDouble), w));
  EXPECT_FALSE(row_invariant_project_applies(x, w, at::randn({5})));
  EXPECT_THROW(row_invariant_project(x, at::randn({4, 95})), Error);
}

// Under the switch a model's forward multiplies with the row-invariant product: a token's hidden state
// is the same bits alone (one row per product, a decode step's shape) and beside 15 other rows; the
// switch ends with its scope. Without it, what oneDNN gives here is printed, not asserted (its one-row
// kernel sums in another order than its many-row ones).
TEST(RowInvariantProducts, AModelsRowsKeepTheirBitsBesideOthers) {
  if (!row_invariant_vector_code()) GTEST_SKIP() << "no AVX2+FMA body on this CPU or build";
  testing::TinyModelSpec spec;
  spec.hidden = 256;  // products wide enough that a BLAS splits their sums differently by row count
  spec.intermediate = 512;
  const ModelConfig config = testing::tiny_config(spec);
  DecoderModel model = build_model(config, testing::tiny_weights(config, spec.seed));
  c10::InferenceMode guard;
  at::Tensor tokens = (at::arange(16).view({16, 1}) * 7 + 3).remainder(spec.vocab);
  const at::Tensor positions = at::zeros({16, 1}, at::kLong);
  auto run = [&] {
    const at::Tensor alone =
        model->forward(tokens.narrow(0, 9, 1), positions.narrow(0, 9, 1), at::ones({1, 1}, at::kBool));
    const at::Tensor together = model->forward(tokens, positions, at::ones({16, 1}, at::kBool));
    return std::make_pair(alone, together.narrow(0, 9, 1));
  };
  EXPECT_FALSE(row_invariant_products_on());
  const auto [plain_alone, plain_together] = run();
  std::cout << "[   INFO   ] without the switch the row's bits "
            << (plain_alone.equal(plain_together) ? "happen to agree" : "differ") << " here (max difference "
            << (plain_alone - plain_together).abs().max().item<float>() << ")\n";
  std::pair<at::Tensor, at::Tensor> invariant_run;
  {
    const RowInvariantProducts invariant;
    EXPECT_TRUE(row_invariant_products_on());
    invariant_run = run();
  }
  EXPECT_FALSE(row_invariant_products_on());
  const auto& [alone, together] = invariant_run;
  EXPECT_TRUE(together.equal(alone)) << "max difference " << (together - alone).abs().max().item<float>();
  EXPECT_TRUE(at::allclose(alone, plain_alone, 1e-4, 1e-5));
}

// A prefix computed for generation (under the switch) and the same tokens computed for scoring are two
// entries: neither is served for the other.
TEST(RowInvariantProducts, ThePrefixCacheKeepsGenerationAndScoringPrefixesApart) {
  testing::TinyModelSpec spec;
  const ModelConfig config = testing::tiny_config(spec);
  DecoderModel model = build_model(config, testing::tiny_weights(config, spec.seed));
  c10::InferenceMode guard;
  PrefixCache cache;
  const std::vector<int32_t> tokens = {1, 5, 9, 2};
  const auto scoring = cache.get(*model, tokens);
  EXPECT_EQ(cache.get(*model, tokens), scoring);
  std::shared_ptr<const PrefixKV> generation;
  {
    const RowInvariantProducts invariant;
    generation = cache.get(*model, tokens);
    EXPECT_EQ(cache.get(*model, tokens), generation);
  }
  EXPECT_EQ(cache.get(*model, tokens), scoring);
  if (row_invariant_vector_code()) {
    EXPECT_NE(generation, scoring);
    EXPECT_EQ(cache.size(), 2u);
  } else {
    EXPECT_EQ(generation, scoring);  // no vector body: the switch changes nothing, one entry serves both
  }
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

// Not run by CI: the row-invariant product against oneDNN's sgemm, one thread, at the projection
// shapes of the generation bench's 134M Llama (hidden 768, MLP 2048, vocab 32000), at decode row
// counts (1, 8, 16) and prefill ones (64, 512). Prints GFLOPS per shape:
//   build/gpueval_tests --gtest_also_run_disabled_tests --gtest_filter='RowInvariantTiming.*'
TEST(RowInvariantTiming, DISABLED_AgainstOneDnnAtDecodeAndPrefillShapes) {
  if (!row_invariant_vector_code()) GTEST_SKIP() << "no AVX2+FMA body on this CPU or build";
  if (cpu_matmul_description().empty()) GTEST_SKIP() << "no oneDNN in this build";
  struct Shape {
    int64_t in, out;
  };
  for (const Shape s : {Shape{768, 2048}, Shape{2048, 768}, Shape{768, 768}, Shape{768, 32000}}) {
    const std::vector<float> w = values(s.in * s.out, 11);
    for (int64_t m : {1, 8, 16, 64, 512}) {
      const std::vector<float> x = values(m * s.in, 12);
      std::vector<float> y(static_cast<size_t>(m * s.out));
      auto seconds = [&](const auto& f) {
        f();
        const auto start = std::chrono::steady_clock::now();
        int reps = 0;
        double elapsed = 0;
        do {
          f();
          ++reps;
          elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        } while (elapsed < 0.3);
        return elapsed / reps;
      };
      const double onednn = seconds([&] {
        sgemm_on_this_thread('N', 'T', m, s.out, s.in, 1.0f, x.data(), s.in, w.data(), s.in, 0.0f, y.data(), s.out);
      });
      const double invariant =
          seconds([&] { row_invariant_multiply(m, s.out, s.in, x.data(), s.in, w.data(), s.in, y.data(), s.out); });
      const double flops = 2.0 * static_cast<double>(m * s.in * s.out);
      std::cout << "[   INFO   ] " << s.in << "x" << s.out << " rows " << m << ": oneDNN " << flops / onednn / 1e9
                << " GFLOPS, row-invariant " << flops / invariant / 1e9 << " GFLOPS (" << onednn / invariant << "x)\n";
    }
  }
}

}  // namespace
}  // namespace gpueval
