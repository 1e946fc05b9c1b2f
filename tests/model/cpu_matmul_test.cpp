// The CPU's float32 matrix products (model/kernels/cpu_matmul.h): the projections and attention's batched
// products match float64 references at the shapes a model uses and at small odd ones, they read
// transposed and narrowed views in place, and a row's bits do not depend on the thread count;
// the same for products with a packed weight (PackedWeight), and when a model packs its weights.
#include "model/kernels/cpu_matmul.h"

#include <cstdlib>
#include <optional>
#include <string>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gpueval/error.h"
#include "model/kernels/cpu_parallel.h"

namespace gpueval {
namespace {

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), at::kFloat) << what;
  // float32 rounding of sums of up to 2048 terms stays under 1e-5 of the largest result; one term
  // wrong or missing is an error of order 1.
  const double scale = std::max(1.0, want.abs().max().item<double>());
  const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
  EXPECT_LE(err, 1e-5 * scale) << what << ": max |error| " << err << " at scale " << scale;
}

// Restores LibTorch's thread count when a test changes it.
struct Threads {
  int saved = at::get_num_threads();
  ~Threads() { at::set_num_threads(saved); }
};

TEST(CpuMatmul, ProjectionsMatchAFloat64Reference) {
  torch::manual_seed(1);
  // rows x in x out: one row, fewer rows than a block, odd sizes, and a layer's projections.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},       {1, 768, 64},   {3, 5, 7},     {17, 33, 65},
                                                      {63, 64, 1},     {64, 16, 16},   {65, 96, 130}, {200, 768, 96},
                                                      {257, 64, 2048}, {300, 2048, 64}};
  for (const auto& [m, in, out] : shapes) {
    const std::string what = "rows " + std::to_string(m) + " in " + std::to_string(in) + " out " + std::to_string(out);
    at::Tensor x = torch::randn({m, in}), w = torch::randn({out, in}), bias = torch::randn({out});
    at::Tensor ref = at::linear(x.to(at::kDouble), w.to(at::kDouble));
    expect_close(project(x, w), ref, what);
    expect_close(project(x, w, bias), ref + bias.to(at::kDouble), what + " with bias");
  }
  // [B, T, in] keeps its leading dimensions; a non-contiguous x is read through a copy.
  at::Tensor x = torch::randn({3, 70, 48}), w = torch::randn({40, 48});
  expect_close(project(x, w), at::linear(x.to(at::kDouble), w.to(at::kDouble)), "3-D input");
  at::Tensor xt = torch::randn({48, 90}).t();
  expect_close(project(xt, w), at::linear(xt.to(at::kDouble), w.to(at::kDouble)), "transposed input");
  // Other dtypes are LibTorch's own product, exactly.
  at::Tensor x64 = torch::randn({5, 8}, at::kDouble), w64 = torch::randn({3, 8}, at::kDouble);
  EXPECT_FALSE(project_uses_onednn(x64, w64));
  EXPECT_TRUE(torch::equal(project(x64, w64), at::linear(x64, w64)));
}

TEST(CpuMatmul, BatchedProductsMatchAFloat64Reference) {
  torch::manual_seed(2);
  // [n, m, k] x [n, k, p], with b as attention has it: keys [n, s, hd] viewed as [n, hd, s].
  for (const auto& [n, m, k, p] :
       std::vector<std::array<int64_t, 4>>{{1, 1, 1, 1}, {3, 19, 64, 23}, {12, 300, 64, 450}, {2, 5, 1, 7}}) {
    const std::string what =
        std::to_string(n) + "x" + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(p);
    at::Tensor a = torch::randn({n, m, k}), keys = torch::randn({n, p, k}), b = torch::randn({n, k, p});
    expect_close(batched_product(a, b), at::bmm(a.to(at::kDouble), b.to(at::kDouble)), what);
    expect_close(batched_product(a, keys.transpose(1, 2)),
                 at::bmm(a.to(at::kDouble), keys.transpose(1, 2).to(at::kDouble)), what + " transposed b");
    at::Tensor a_t = torch::randn({n, k, m}).transpose(1, 2);  // [n, m, k], unit stride down the rows
    expect_close(batched_product(a_t, b), at::bmm(a_t.to(at::kDouble), b.to(at::kDouble)), what + " transposed a");
  }
  // A narrowed a (attention's probabilities of the own keys), read with its row stride.
  at::Tensor probs = torch::rand({4, 10, 30}), v = torch::randn({4, 12, 8});
  at::Tensor own = probs.narrow(-1, 18, 12);
  expect_close(batched_product(own, v), at::bmm(own.to(at::kDouble), v.to(at::kDouble)), "narrowed a");
  // A broadcast (stride 0) operand is copied first, not read with a wrong stride.
  at::Tensor one = torch::randn({1, 6, 5}).expand({3, 6, 5}), rhs = torch::randn({3, 5, 4});
  expect_close(batched_product(one, rhs), at::bmm(one.to(at::kDouble), rhs.to(at::kDouble)), "expanded a");
  at::Tensor row = torch::randn({3, 1, 5}).expand({3, 6, 5});
  expect_close(batched_product(row, rhs), at::bmm(row.to(at::kDouble), rhs.to(at::kDouble)), "rows expanded");
}

TEST(CpuMatmul, RowBlocksAreAFunctionOfTheRowCountAlone) {
  for (int64_t m : {0, 1, 5, 63, 64, 65, 127, 128, 200, 256, 257, 511, 775, 1024, 4097}) {
    const auto blocks = project_row_blocks(m);
    int64_t next = 0;
    for (const auto& [first, rows] : blocks) {
      EXPECT_EQ(first, next) << m;
      EXPECT_GT(rows, 0) << m;
      next = first + rows;
    }
    EXPECT_EQ(next, m) << "the blocks cover the rows once";
    EXPECT_EQ(static_cast<int64_t>(blocks.size()), (m + kProjectBlockRows - 1) / kProjectBlockRows) << m;
    if (blocks.empty()) continue;
    EXPECT_LE(blocks.front().second, kProjectBlockRows) << m;
    if (blocks.size() > 1) EXPECT_EQ(blocks.front().second % 16, 0) << m;
  }
  EXPECT_EQ(project_row_blocks(512).size(), 1u) << "a batch of 512 tokens is one call";
  EXPECT_EQ(project_row_blocks(1024), (std::vector<std::pair<int64_t, int64_t>>{{0, 512}, {512, 512}}))
      << "two threads share 1024 rows evenly";
  EXPECT_EQ(project_row_blocks(775), (std::vector<std::pair<int64_t, int64_t>>{{0, 400}, {400, 375}}));
}

TEST(CpuMatmul, ResultsAreTheSameBitsOnOneThreadOrTwo) {
  if (!project_uses_onednn(torch::ones({2, 2}), torch::ones({2, 2})))
    GTEST_SKIP() << "this build multiplies with LibTorch's BLAS (no oneDNN)";
  Threads restore;
  torch::manual_seed(3);
  at::Tensor x = torch::randn({775, 768}), w = torch::randn({2048, 768}), q = torch::randn({12, 300, 64}),
             keys = torch::randn({12, 450, 64});
  at::set_num_threads(1);
  const at::Tensor one = project(x, w), one_b = batched_product(q, keys.transpose(1, 2));
  at::set_num_threads(2);
  EXPECT_TRUE(torch::equal(project(x, w), one));
  EXPECT_TRUE(torch::equal(batched_product(q, keys.transpose(1, 2)), one_b));
  // And inside a parallel region (a caller's own cpu_parallel_for).
  at::Tensor inside;
  cpu_parallel_for(0, 2, 1, [&](int64_t begin, int64_t) {
    if (begin == 0) inside = project(x, w);
  });
  EXPECT_TRUE(torch::equal(inside, one));
}

// Sets (or with nullptr unsets) an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> saved;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* old = std::getenv(n)) saved = old;
    if (value)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~ScopedEnv() {
    if (saved)
      ::setenv(name.c_str(), saved->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

// Packing applies where oneDNN's matmul picks a brgemm kernel (AVX-512 and newer); elsewhere
// pack() is null and the tests below have nothing to check.
bool packing_applies() { return PackedWeight::pack(torch::randn({64, 64})) != nullptr; }

TEST(CpuMatmul, PackedWeightsMatchAFloat64Reference) {
  if (!packing_applies()) GTEST_SKIP() << "no brgemm kernel for float32 here: " << cpu_matmul_description();
  torch::manual_seed(4);
  // Row counts 1 to 775 (each its own kernel), odd sizes, and a layer's projections.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},       {1, 768, 64},    {3, 5, 7},      {17, 33, 65},
                                                      {63, 64, 1},     {64, 16, 16},    {65, 96, 130},  {200, 768, 96},
                                                      {257, 64, 2048}, {300, 2048, 64}, {775, 768, 768}};
  for (const auto& [m, in, out] : shapes) {
    const std::string what = "rows " + std::to_string(m) + " in " + std::to_string(in) + " out " + std::to_string(out);
    at::Tensor x = torch::randn({m, in}), w = torch::randn({out, in}), bias = torch::randn({out});
    const std::shared_ptr<const PackedWeight> packed = PackedWeight::pack(w);
    ASSERT_NE(packed, nullptr) << what;
    EXPECT_EQ(packed->in(), in);
    EXPECT_EQ(packed->out(), out);
    EXPECT_GE(packed->bytes(), in * out * static_cast<int64_t>(sizeof(float))) << what;
    ASSERT_TRUE(project_uses_packed(x, *packed)) << what;
    at::Tensor ref = at::linear(x.to(at::kDouble), w.to(at::kDouble));
    expect_close(project(x, *packed), ref, what);
    expect_close(project(x, *packed, bias), ref + bias.to(at::kDouble), what + " with bias");
  }
  // [B, T, in] keeps its leading dimensions; a non-contiguous x is read through a copy.
  at::Tensor w = torch::randn({40, 48});
  const std::shared_ptr<const PackedWeight> packed = PackedWeight::pack(w);
  at::Tensor x = torch::randn({3, 70, 48}), xt = torch::randn({48, 90}).t();
  expect_close(project(x, *packed), at::linear(x.to(at::kDouble), w.to(at::kDouble)), "3-D input");
  expect_close(project(xt, *packed), at::linear(xt.to(at::kDouble), w.to(at::kDouble)), "transposed input");
  // Inputs it does not take are refused by name, never multiplied wrong.
  EXPECT_FALSE(project_uses_packed(torch::randn({5, 47}), *packed));
  EXPECT_FALSE(project_uses_packed(torch::randn({5, 48}, at::kDouble), *packed));
  EXPECT_THROW(project(torch::randn({5, 47}), *packed), Error);
}

TEST(CpuMatmul, OnlyContiguousFloat32MatricesArePacked) {
  EXPECT_EQ(PackedWeight::pack(torch::randn({8, 8}, at::kDouble)), nullptr);
  EXPECT_EQ(PackedWeight::pack(torch::randn({8, 8}).to(at::kBFloat16)), nullptr);
  EXPECT_EQ(PackedWeight::pack(torch::randn({8, 16}).t()), nullptr);
  EXPECT_EQ(PackedWeight::pack(torch::randn({8})), nullptr);
  EXPECT_EQ(PackedWeight::pack(torch::randn({0, 8})), nullptr);
  EXPECT_EQ(PackedWeight::pack(at::Tensor()), nullptr);
}

TEST(CpuMatmul, PackedResultsAreTheSameBitsOnOneThreadOrTwo) {
  if (!packing_applies()) GTEST_SKIP() << "no brgemm kernel for float32 here: " << cpu_matmul_description();
  Threads restore;
  torch::manual_seed(5);
  at::Tensor x = torch::randn({1100, 768}), w = torch::randn({2048, 768});
  const std::shared_ptr<const PackedWeight> packed = PackedWeight::pack(w);
  at::set_num_threads(1);
  const at::Tensor one = project(x, *packed);
  at::set_num_threads(2);
  EXPECT_TRUE(torch::equal(project(x, *packed), one));
  at::Tensor inside;
  cpu_parallel_for(0, 2, 1, [&](int64_t begin, int64_t) {
    if (begin == 0) inside = project(x, *packed);
  });
  EXPECT_TRUE(torch::equal(inside, one));
  // Packed again, the same weight gives the same bits.
  const std::shared_ptr<const PackedWeight> fresh = PackedWeight::pack(w);
  EXPECT_TRUE(torch::equal(project(x, *fresh), one));
}

// Two threads running packed products at once, each with its own rows: oneDNN's library-managed
// scratchpad is one buffer for every primitive, and shared it mixed the two threads' partial sums
// (`gpueval score` gave another perplexity on each run). Each product passes its own thread's.
TEST(CpuMatmul, PackedProductsRunConcurrentlyGiveTheSerialBits) {
  if (!packing_applies()) GTEST_SKIP() << "no brgemm kernel for float32 here: " << cpu_matmul_description();
  if (!cpu_parallel_forks()) GTEST_SKIP() << "this build's cpu_parallel_for runs on one thread";
  Threads restore;
  torch::manual_seed(6);
  // 8 blocks of 512 rows: each thread runs 4 products one after the other, beside the other's.
  at::Tensor x = torch::randn({4096, 512}), w = torch::randn({1536, 512});
  const std::shared_ptr<const PackedWeight> packed = PackedWeight::pack(w);
  at::set_num_threads(1);
  const at::Tensor one = project(x, *packed);
  at::set_num_threads(2);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(torch::equal(project(x, *packed), one)) << "run " << i;
}

TEST(CpuMatmul, PackingIsForModelsThatLeaveRoom) {
  {
    ScopedEnv automatic("GPUEVAL_CPU_PACKED_WEIGHTS", nullptr);
    EXPECT_TRUE(pack_cpu_weights(1 << 20)) << "a megabyte of weights is packed";
    EXPECT_FALSE(pack_cpu_weights(int64_t{1} << 60)) << "more than an eighth of memory is not";
  }
  {
    ScopedEnv never("GPUEVAL_CPU_PACKED_WEIGHTS", "0");
    EXPECT_FALSE(pack_cpu_weights(1));
  }
  {
    ScopedEnv always("GPUEVAL_CPU_PACKED_WEIGHTS", "1");
    EXPECT_TRUE(pack_cpu_weights(int64_t{1} << 60));
  }
}

TEST(CpuMatmul, SaysWhichLibraryMultiplies) {
  const std::string d = cpu_matmul_description();
  if (project_uses_onednn(torch::ones({2, 2}), torch::ones({2, 2}))) {
    EXPECT_EQ(d.rfind("oneDNN ", 0), 0u) << d;
    EXPECT_NE(d.find('('), std::string::npos) << "names the instruction set: " << d;
  } else {
    EXPECT_EQ(d, "");
  }
}

}  // namespace
}  // namespace gpueval
