// The kernel dispatch of include/gpueval/kernels.h. On CPU tensors (and in builds without the
// kernels) every function must return exactly its reference. On CUDA tensors, in a build with
// GPUEVAL_WITH_CUDA_KERNELS, each kernel is compared with its reference run on the same CUDA
// tensors, over float32 / bfloat16 / float16 and odd sizes; those tests skip where there is no GPU.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "model/kernels.h"
#include "model/logprob_gather.h"
#include "model/rope.h"

#ifdef GPUEVAL_WITH_CUDA_KERNELS
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gpueval {
namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf};

std::string name_of(at::ScalarType t) { return c10::toString(t); }

#define GPUEVAL_REQUIRE_CUDA_KERNELS()                                                                  \
  do {                                                                                                  \
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: the CUDA kernels are not exercised here";     \
    if (!::gpueval::cuda_kernels_built())                                                               \
      GTEST_SKIP() << "CUDA device present but this build has no kernels (GPUEVAL_WITH_CUDA_KERNELS off)"; \
  } while (0)

// Tables as the model builds them: inv_freq 1 / 10000^(2j / hd), positions [B, T] with a per-row offset.
RopeTables tables_for(int64_t b, int64_t t, int64_t hd, at::ScalarType dtype, at::Device device) {
  at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, hd, 2, at::kLong).to(at::kFloat) / float(hd));
  at::Tensor positions = at::arange(t, at::kLong).unsqueeze(0) + 7 * at::arange(b, at::kLong).unsqueeze(1);
  return rope_tables(inv_freq.to(device), positions.to(device), dtype);
}

// q/k as the attention builds them: [B, T, H, hd] memory seen as [B, H, T, hd].
at::Tensor heads_transposed(int64_t b, int64_t h, int64_t t, int64_t hd, at::ScalarType dtype) {
  return at::randn({b, t, h, hd}).to(dtype).transpose(1, 2);
}

// ---- CPU: the dispatch is the reference, bit for bit ----

TEST(KernelsCpu, RmsNormIsTheReference) {
  at::manual_seed(1);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    at::Tensor x = at::randn({3, 5, 67}).to(dtype);  // [3, 5, 67]
    at::Tensor w = (at::randn({67}) * 0.1 + 1).to(dtype);
    EXPECT_FALSE(rms_norm_uses_kernel(x, w)) << name_of(dtype);
    at::Tensor got = rms_norm(x, w, 1e-5);
    EXPECT_TRUE(at::equal(got, rms_norm_reference(x, w, 1e-5))) << name_of(dtype);
    EXPECT_EQ(got.scalar_type(), dtype);
  }
  // By hand: rms([3, 4]) = sqrt(12.5).
  at::Tensor x = at::tensor({3.0, 4.0}, at::kDouble), w = at::tensor({1.0, 2.0}, at::kDouble);
  at::Tensor y = rms_norm(x, w, 0.0);
  EXPECT_NEAR(y[0].item<double>(), 3.0 / std::sqrt(12.5), 1e-12);
  EXPECT_NEAR(y[1].item<double>(), 8.0 / std::sqrt(12.5), 1e-12);
}

TEST(KernelsCpu, LogprobGatherIsTheReference) {
  at::manual_seed(2);
  for (at::ScalarType dtype : kDtypes) {
    at::Tensor logits = (at::randn({6, 1001}) * 4).to(dtype);  // [6, 1001]
    at::Tensor targets = at::randint(0, 1001, {6}, at::kLong);
    targets[2] = logits[2].argmax().item<int64_t>();
    EXPECT_FALSE(logprob_gather_uses_kernel(logits, targets));
    TargetScores got = logprob_gather(logits, targets), want = logprob_gather_reference(logits, targets);
    EXPECT_TRUE(at::equal(got.logprobs, want.logprobs)) << name_of(dtype);
    EXPECT_TRUE(at::equal(got.is_greedy, want.is_greedy)) << name_of(dtype);
    EXPECT_TRUE(got.is_greedy[2].item<bool>());
    // log p(target) from its definition, in float64.
    at::Tensor ld = logits.to(at::kDouble);
    for (int64_t r = 0; r < 6; ++r) {
      const double lse = ld[r].exp().sum().log().item<double>();
      EXPECT_NEAR(got.logprobs[r].item<float>(), ld[r][targets[r].item<int64_t>()].item<double>() - lse, 1e-4);
    }
  }
}

TEST(KernelsCpu, RotaryEmbeddingIsTheReference) {
  at::manual_seed(3);
  for (at::ScalarType dtype : kDtypes) {
    at::Tensor x = heads_transposed(2, 3, 5, 64, dtype);  // [2, 3, 5, 64]
    RopeTables t = tables_for(2, 5, 64, dtype, at::kCPU);
    EXPECT_FALSE(rotary_embedding_uses_kernel(x, t));
    EXPECT_TRUE(at::equal(rotary_embedding(x, t), apply_rope(x, t))) << name_of(dtype);
  }
}

TEST(KernelsCpu, KvAppendWritesTheSlotsOnly) {
  at::manual_seed(4);
  at::Tensor kc = at::randn({2, 3, 10, 8}), vc = at::randn({2, 3, 10, 8});  // [B, KV, cap, hd]
  at::Tensor k0 = kc.clone(), v0 = vc.clone();
  at::Tensor k = heads_transposed(2, 3, 4, 8, at::kFloat), v = heads_transposed(2, 3, 4, 8, at::kFloat);
  EXPECT_FALSE(kv_append_uses_kernel(kc, vc, k, v));
  kv_append(kc, vc, k, v, 5);
  EXPECT_TRUE(at::equal(kc.narrow(2, 5, 4), k));
  EXPECT_TRUE(at::equal(vc.narrow(2, 5, 4), v));
  EXPECT_TRUE(at::equal(kc.narrow(2, 0, 5), k0.narrow(2, 0, 5)));
  EXPECT_TRUE(at::equal(kc.narrow(2, 9, 1), k0.narrow(2, 9, 1)));
  EXPECT_TRUE(at::equal(vc.narrow(2, 0, 5), v0.narrow(2, 0, 5)));
  EXPECT_THROW(kv_append(kc, vc, k, v, 7), Error);
}

// ---- CUDA: each kernel against its reference on the same device tensors ----

TEST(KernelsCuda, LogprobGatherMatchesReference) {
  GPUEVAL_REQUIRE_CUDA_KERNELS();
  at::manual_seed(5);
  struct Shape {
    int64_t n, v, pad;  // pad > 0: rows are a narrowed view with row stride v + pad (unaligned rows)
  };
  for (at::ScalarType dtype : kDtypes) {
    for (Shape s : {Shape{1, 1, 0}, Shape{1, 50257, 0}, Shape{7, 1000, 0}, Shape{3, 32003, 3}, Shape{65, 4099, 1},
                    Shape{4, 128256, 0}}) {
      const std::string where = name_of(dtype) + " N=" + std::to_string(s.n) + " V=" + std::to_string(s.v);
      at::Tensor full = (at::randn({s.n, s.v + s.pad}) * 5).to(dtype).cuda();
      at::Tensor logits = full.narrow(1, 0, s.v);  // [N, V]
      at::Tensor targets = at::randint(0, s.v, {s.n}, at::kLong).cuda();
      // Row 0 targets its argmax; if V > 2, a tie placed before it must make the first one win.
      targets[0] = logits[0].argmax();
      if (s.n > 1 && s.v > 2) {
        logits[1][s.v - 1] = 1000;
        logits[1][1] = 1000;
        targets[1] = s.v - 1;  // not the first argmax
      }
      ASSERT_TRUE(logprob_gather_uses_kernel(logits, targets)) << where;
      TargetScores got = logprob_gather(logits, targets), want = logprob_gather_reference(logits, targets);
      EXPECT_TRUE(at::allclose(got.logprobs, want.logprobs, /*rtol=*/1e-5, /*atol=*/1e-4))
          << where << " max |diff| " << (got.logprobs - want.logprobs).abs().max().item<float>();
      EXPECT_TRUE(at::equal(got.is_greedy, want.is_greedy)) << where;
      EXPECT_TRUE(got.is_greedy[0].item<bool>()) << where;
      if (s.n > 1 && s.v > 2) {
        EXPECT_FALSE(got.is_greedy[1].item<bool>()) << where;
      }
    }
  }
}

TEST(KernelsCuda, LogprobGatherNonFiniteRowsAsReference) {
  GPUEVAL_REQUIRE_CUDA_KERNELS();
  const float inf = std::numeric_limits<float>::infinity();
  at::Tensor logits = at::randn({4, 300}).cuda();  // [4, 300]
  logits[0].narrow(0, 0, 200).fill_(-inf);         // masked entries: finite result
  logits[1].fill_(-inf);                           // all masked: NaN, argmax 0
  logits[2][17] = std::nanf("");                   // NaN row: NaN, argmax at the NaN
  logits[3][5] = inf;                              // +inf: NaN, argmax at the inf
  at::Tensor targets = at::tensor({250, 0, 17, 5}, at::kLong).cuda();
  TargetScores got = logprob_gather(logits, targets), want = logprob_gather_reference(logits, targets);
  EXPECT_TRUE(at::allclose(got.logprobs, want.logprobs, 1e-5, 1e-4, /*equal_nan=*/true))
      << got.logprobs.cpu() << want.logprobs.cpu();
  EXPECT_TRUE(at::equal(got.is_greedy, want.is_greedy)) << got.is_greedy.cpu() << want.is_greedy.cpu();
}

#ifdef GPUEVAL_WITH_CUDA_KERNELS
TEST(KernelsCuda, LogprobGatherAllocatesNoFloatLogits) {
  GPUEVAL_REQUIRE_CUDA_KERNELS();
  const int64_t n = 64, v = 128256;
  at::Tensor logits = at::randn({n, v}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
  at::Tensor targets = at::randint(0, v, {n}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  const c10::DeviceIndex device = c10::cuda::current_device();
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
  const auto before = c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].current;
  TargetScores got = logprob_gather(logits, targets);
  c10::cuda::device_synchronize();
  const auto peak = c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak;  // [0]: all pools
  EXPECT_LT(peak - before, n * v * 4 / 16) << "a float32 [N, V] would be " << n * v * 4 << " bytes";
}
#endif

TEST(KernelsCuda, RmsNormMatchesReference) {
  GPUEVAL_REQUIRE_CUDA_KERNELS();
  at::manual_seed(6);
  for (at::ScalarType dtype : kDtypes) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 64}, {5, 4096}, {3, 7, 1000}, {2, 2049}, {1, 1, 8192}}) {
      const std::string where = name_of(dtype) + " dim=" + std::to_string(shape.back());
      at::Tensor x = (at::randn(shape) * 3).to(dtype).cuda();
      at::Tensor w = (at::randn({shape.back()}) * 0.2 + 1).to(dtype).cuda();
      ASSERT_TRUE(rms_norm_uses_kernel(x, w)) << where;
      at::Tensor got = rms_norm(x, w, 1e-5), want = rms_norm_reference(x, w, 1e-5);
      ASSERT_EQ(got.sizes(), want.sizes());
      ASSERT_EQ(got.scalar_type(), dtype);
      // Only the order of the float32 sum of squares differs: float32 agrees to rounding, and in
      // bf16/fp16 all but the rare element whose rounding flips are identical.
      const double tol = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 2e-3 : 1.6e-2;
      EXPECT_TRUE(at::allclose(got.to(at::kFloat), want.to(at::kFloat), tol, tol)) << where;
      if (dtype != at::kFloat) {
        const double same = got.eq(want).to(at::kDouble).mean().item<double>();
        EXPECT_GE(same, 0.99) << where << ": the weight product must round like the reference";
      }
    }
  }
}

TEST(KernelsCuda, RotaryEmbeddingEqualsReference) {
  GPUEVAL_REQUIRE_CUDA_KERNELS();
  at::manual_seed(7);
  struct Shape {
    int64_t b, h, t, hd;
  };
  for (at::ScalarType dtype : kDtypes) {
    for (Shape s : {Shape{1, 1, 1, 64}, Shape{2, 3, 17, 128}, Shape{3, 8, 5, 64}, Shape{1, 32, 129, 128}}) {
      const std::string where = name_of(dtype) + " hd=" + std::to_string(s.hd) + " T=" + std::to_string(s.t);
      RopeTables tables = tables_for(s.b, s.t, s.hd, dtype, at::kCUDA);
      for (bool transposed : {true, false}) {
        at::Tensor x = transposed ? heads_transposed(s.b, s.h, s.t, s.hd, dtype).cuda()
                                  : at::randn({s.b, s.h, s.t, s.hd}).to(dtype).cuda();
        ASSERT_TRUE(rotary_embedding_uses_kernel(x, tables)) << where;
        // Each product and the sum are rounded to the dtype as the reference's elementwise ops do: exact.
        EXPECT_TRUE(at::equal(rotary_embedding(x, tables), apply_rope(x, tables)))
            << where << (transposed ? " transposed" : "");
      }
      // A batch-1 table broadcast over the rows.
      RopeTables one = tables_for(1, s.t, s.hd, dtype, at::kCUDA);
      at::Tensor x = at::randn({2, s.h, s.t, s.hd}).to(dtype).cuda();
      ASSERT_TRUE(rotary_embedding_uses_kernel(x, one));
      EXPECT_TRUE(at::equal(rotary_embedding(x, one), apply_rope(x, one))) << where << " broadcast table";
    }
  }
}

TEST(KernelsCuda, KvAppendEqualsReference) {
  GPUEVAL_REQUIRE_CUDA_KERNELS();
  at::manual_seed(8);
  struct Shape {
    int64_t b, kv, t, hd, capacity, offset;
  };
  for (at::ScalarType dtype : kDtypes) {
    for (Shape s : {Shape{1, 1, 1, 64, 1, 0}, Shape{2, 8, 5, 128, 40, 11}, Shape{3, 2, 7, 63, 9, 2},
                    Shape{1, 4, 33, 128, 33, 0}}) {
      const std::string where = name_of(dtype) + " hd=" + std::to_string(s.hd) + " T=" + std::to_string(s.t);
      at::Tensor kc = at::randn({s.b, s.kv, s.capacity, s.hd}).to(dtype).cuda();  // [B, KV, cap, hd]
      at::Tensor vc = at::randn({s.b, s.kv, s.capacity, s.hd}).to(dtype).cuda();
      at::Tensor k = heads_transposed(s.b, s.kv, s.t, s.hd, dtype).cuda();          // [B, KV, T, hd]
      at::Tensor v = at::randn({s.b, s.kv, s.t, s.hd}).to(dtype).cuda();
      at::Tensor kc_want = kc.clone(), vc_want = vc.clone();
      kc_want.narrow(2, s.offset, s.t).copy_(k);
      vc_want.narrow(2, s.offset, s.t).copy_(v);
      ASSERT_TRUE(kv_append_uses_kernel(kc, vc, k, v)) << where;
      kv_append(kc, vc, k, v, s.offset);
      EXPECT_TRUE(at::equal(kc, kc_want)) << where;
      EXPECT_TRUE(at::equal(vc, vc_want)) << where;
      EXPECT_THROW(kv_append(kc, vc, k, v, s.capacity - s.t + 1), Error) << where;
    }
  }
}

}  // namespace
}  // namespace gpueval
