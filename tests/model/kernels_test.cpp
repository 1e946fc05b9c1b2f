// The kernel dispatch of model/kernels/cuda_kernels.h, on every device the build has (DeviceTest: CPU always,
// CUDA where there is a GPU). Where the dispatch runs the reference (CPU tensors, or a build without
// GPUEVAL_WITH_CUDA_KERNELS), or RoPE's one-pass CPU float32 loop, it must return exactly the reference; where it runs
// a CUDA kernel it is compared with the reference on the same tensors, over float32 / bfloat16 / float16 and odd sizes.
// The references themselves are checked against definitions computed here in float64 (RoPE: tiny_model.h's
// element-by-element rotation, Llama-3 frequency scaling included).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "model/kernels/cuda_kernels.h"
#include "model/decoder/logprob_gather.h"
#include "model/decoder/rope.h"
#include "tiny_model.h"

#ifdef GPUEVAL_WITH_CUDA_KERNELS
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace gpueval {
namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kHalf};

std::string name_of(at::ScalarType t) { return c10::toString(t); }

// Positions [B, T] with a per-row offset, as a left-padded batch has them.
at::Tensor row_positions(int64_t b, int64_t t) {
  return at::arange(t, at::kLong).unsqueeze(0) + 7 * at::arange(b, at::kLong).unsqueeze(1);
}

// A config for RoPE of head size hd: Llama-3 scaling with all three frequency bands present
// (original context 32 against wavelengths up to 10000^(1 - 2/hd) * 2pi), or none.
ModelConfig rope_config(int64_t hd, bool llama3) {
  ModelConfig c = testing::tiny_config(testing::TinyModelSpec{/*tied=*/false, /*qkv_bias=*/false, llama3});
  c.head_dim = hd;
  c.rope_theta = 10000.0;
  return c;
}

// Tables as the model builds them, from rope_inv_freq() of `c`.
RopeTables tables_for(const ModelConfig& c, int64_t b, int64_t t, at::ScalarType dtype, at::Device device) {
  return rope_tables(rope_inv_freq(c, device), row_positions(b, t).to(device), dtype);
}

// q/k as the attention builds them: [B, T, H, hd] memory seen as [B, H, T, hd].
at::Tensor heads_transposed(int64_t b, int64_t h, int64_t t, int64_t hd, at::ScalarType dtype) {
  return at::randn({b, t, h, hd}).to(dtype).transpose(1, 2);
}

class Kernels : public testing::DeviceTest {
 protected:
  // Whether the dispatch runs a CUDA kernel here; otherwise it runs the reference itself.
  bool kernels() const { return device().is_cuda() && cuda_kernels_built(); }
};

TEST_P(Kernels, RmsNormMatchesReference) {
  at::manual_seed(1);
  for (at::ScalarType dtype : kDtypes) {
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{3, 5, 67}, {1, 64}, {5, 4096}, {3, 7, 1000}, {2, 2049}, {1, 1, 8192}}) {
      const std::string where = name_of(dtype) + " dim=" + std::to_string(shape.back());
      at::Tensor x = (at::randn(shape) * 3).to(dtype).to(device());  // [..., dim]
      at::Tensor w = (at::randn({shape.back()}) * 0.2 + 1).to(dtype).to(device());  // [dim]
      ASSERT_EQ(rms_norm_uses_kernel(x, w), kernels()) << where;
      at::Tensor got = rms_norm(x, w, 1e-5), want = rms_norm_reference(x, w, 1e-5);
      ASSERT_EQ(got.sizes(), want.sizes());
      ASSERT_EQ(got.scalar_type(), dtype);
      if (!kernels()) {
        EXPECT_TRUE(at::equal(got, want)) << where;
        continue;
      }
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
  // By hand: rms([3, 4]) = sqrt(12.5).
  at::Tensor x = at::tensor({3.0, 4.0}, at::kDouble).to(device()), w = at::tensor({1.0, 2.0}, at::kDouble).to(device());
  at::Tensor y = rms_norm(x, w, 0.0).cpu();
  EXPECT_NEAR(y[0].item<double>(), 3.0 / std::sqrt(12.5), 1e-12);
  EXPECT_NEAR(y[1].item<double>(), 8.0 / std::sqrt(12.5), 1e-12);
}

TEST_P(Kernels, LogprobGatherMatchesReferenceAndDefinition) {
  at::manual_seed(5);
  struct Shape {
    int64_t n, v, pad;  // pad > 0: rows are a narrowed view with row stride v + pad (unaligned rows)
  };
  for (at::ScalarType dtype : kDtypes) {
    for (Shape s : {Shape{6, 1001, 0}, Shape{1, 1, 0}, Shape{1, 50257, 0}, Shape{7, 1000, 0}, Shape{3, 32003, 3},
                    Shape{65, 4099, 1}, Shape{4, 128256, 0}}) {
      const std::string where = name_of(dtype) + " N=" + std::to_string(s.n) + " V=" + std::to_string(s.v);
      at::Tensor full = (at::randn({s.n, s.v + s.pad}) * 5).to(dtype).to(device());
      at::Tensor logits = full.narrow(1, 0, s.v);  // [N, V]
      at::Tensor targets = at::randint(0, s.v, {s.n}, at::kLong).to(device());  // [N]
      // Row 0 targets its argmax; if V > 2, a tie placed before it must make the first one win.
      targets[0] = logits[0].argmax();
      if (s.n > 1 && s.v > 2) {
        logits[1][s.v - 1] = 1000;
        logits[1][1] = 1000;
        targets[1] = s.v - 1;  // not the first argmax
      }
      ASSERT_EQ(logprob_gather_uses_kernel(logits, targets), kernels()) << where;
      TargetScores got = logprob_gather(logits, targets), want = logprob_gather_reference(logits, targets);
      if (kernels()) {
        EXPECT_TRUE(at::allclose(got.logprobs, want.logprobs, /*rtol=*/1e-5, /*atol=*/1e-4))
            << where << " max |diff| " << (got.logprobs - want.logprobs).abs().max().item<float>();
      } else {
        EXPECT_TRUE(at::equal(got.logprobs, want.logprobs)) << where;
      }
      EXPECT_TRUE(at::equal(got.is_greedy, want.is_greedy)) << where;
      EXPECT_TRUE(got.is_greedy[0].item<bool>()) << where;
      if (s.n > 1 && s.v > 2) EXPECT_FALSE(got.is_greedy[1].item<bool>()) << where;
      // log p(target) from its definition, in float64: logit - log(sum(exp(logits))).
      at::Tensor ld = logits.to(at::kCPU, at::kDouble);
      at::Tensor def = ld.gather(1, targets.cpu().unsqueeze(1)).squeeze(1) - ld.logsumexp(1);  // [N]
      EXPECT_TRUE(at::allclose(got.logprobs.to(at::kCPU, at::kDouble), def, 1e-5, 1e-4)) << where;
    }
  }
}

TEST_P(Kernels, LogprobGatherNonFiniteRowsAsReference) {
  const float inf = std::numeric_limits<float>::infinity();
  at::Tensor logits = at::randn({4, 300});  // [4, 300]
  logits[0].narrow(0, 0, 200).fill_(-inf);  // masked entries: finite result
  logits[1].fill_(-inf);  // all masked: NaN, argmax 0
  logits[2][17] = std::nanf("");  // NaN row: NaN, argmax at the NaN
  logits[3][5] = inf;  // +inf: NaN, argmax at the inf
  logits = logits.to(device());
  at::Tensor targets = at::tensor({250, 0, 17, 5}, at::kLong).to(device());
  TargetScores got = logprob_gather(logits, targets), want = logprob_gather_reference(logits, targets);
  EXPECT_TRUE(at::allclose(got.logprobs, want.logprobs, 1e-5, 1e-4, /*equal_nan=*/true))
      << got.logprobs.cpu() << want.logprobs.cpu();
  EXPECT_TRUE(at::equal(got.is_greedy, want.is_greedy)) << got.is_greedy.cpu() << want.is_greedy.cpu();
  at::Tensor lp = got.logprobs.cpu();
  EXPECT_TRUE(std::isfinite(lp[0].item<float>()));
  for (int64_t r = 1; r < 4; ++r) EXPECT_TRUE(std::isnan(lp[r].item<float>())) << "row " << r;
}

TEST_P(Kernels, RotaryEmbeddingMatchesReferenceAndDefinition) {
  at::manual_seed(7);
  struct Shape {
    int64_t b, h, t, hd;
  };
  for (bool llama3 : {false, true}) {
    for (at::ScalarType dtype : kDtypes) {
      for (Shape s : {Shape{2, 3, 5, 64}, Shape{1, 1, 1, 64}, Shape{2, 3, 17, 128}, Shape{3, 8, 5, 64}}) {
        const std::string where =
            name_of(dtype) + (llama3 ? " llama3" : "") + " hd=" + std::to_string(s.hd) + " T=" + std::to_string(s.t);
        const ModelConfig c = rope_config(s.hd, llama3);
        RopeTables tables = tables_for(c, s.b, s.t, dtype, device());
        for (bool transposed : {true, false}) {
          at::Tensor x = transposed ? heads_transposed(s.b, s.h, s.t, s.hd, dtype).to(device())
                                    : at::randn({s.b, s.h, s.t, s.hd}).to(dtype).to(device());  // [B, H, T, hd]
          ASSERT_EQ(rotary_embedding_uses_kernel(x, tables), kernels()) << where;
          // Off the kernel, CPU float32 takes the one-pass loop (apply_rope_cpu), other dtypes the reference.
          ASSERT_EQ(apply_rope_cpu_applies(x, tables), device().is_cpu() && dtype == at::kFloat) << where;
          // Each product and the sum are rounded to the dtype as the reference's elementwise ops do: exact.
          at::Tensor got = rotary_embedding(x, tables);
          EXPECT_TRUE(at::equal(got, apply_rope(x, tables))) << where << (transposed ? " transposed" : "");
          if (!kernels()) EXPECT_EQ(got.strides(), apply_rope(x, tables).strides()) << where;
          // Against the rotation from its definition, row by row at that row's positions. The tables
          // are float32 angles rounded to the dtype, the oracle float64: the dtype's rounding apart.
          const double tol = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 2e-2 : 8e-2;
          at::Tensor positions = row_positions(s.b, s.t);  // [B, T]
          for (int64_t b = 0; b < s.b; ++b) {
            std::vector<int64_t> pos(positions[b].data_ptr<int64_t>(), positions[b].data_ptr<int64_t>() + s.t);
            for (int64_t h = 0; h < s.h; ++h) {
              at::Tensor in = x[b][h].to(at::kCPU, at::kDouble);  // [T, hd]
              at::Tensor def = testing::reference_rotary(c, in, pos);
              const double err = (got[b][h].to(at::kCPU, at::kDouble) - def).abs().max().item<double>();
              ASSERT_LE(err, tol) << where << " row " << b << " head " << h;
            }
          }
        }
        // A batch-1 table broadcast over the rows.
        RopeTables one = tables_for(c, 1, s.t, dtype, device());
        at::Tensor x = at::randn({2, s.h, s.t, s.hd}).to(dtype).to(device());
        ASSERT_EQ(rotary_embedding_uses_kernel(x, one), kernels());
        EXPECT_TRUE(at::equal(rotary_embedding(x, one), apply_rope(x, one))) << where << " broadcast table";
      }
    }
  }
}

TEST_P(Kernels, KvAppendWritesTheSlotsOnly) {
  at::manual_seed(8);
  struct Shape {
    int64_t b, kv, t, hd, capacity, offset;
  };
  for (at::ScalarType dtype : kDtypes) {
    for (Shape s : {Shape{2, 3, 4, 8, 10, 5}, Shape{1, 1, 1, 64, 1, 0}, Shape{2, 8, 5, 128, 40, 11},
                    Shape{3, 2, 7, 63, 9, 2}, Shape{1, 4, 33, 128, 33, 0}}) {
      const std::string where = name_of(dtype) + " hd=" + std::to_string(s.hd) + " T=" + std::to_string(s.t);
      at::Tensor kc = at::randn({s.b, s.kv, s.capacity, s.hd}).to(dtype).to(device());  // [B, KV, cap, hd]
      at::Tensor vc = at::randn({s.b, s.kv, s.capacity, s.hd}).to(dtype).to(device());
      at::Tensor k = heads_transposed(s.b, s.kv, s.t, s.hd, dtype).to(device());  // [B, KV, T, hd]
      at::Tensor v = at::randn({s.b, s.kv, s.t, s.hd}).to(dtype).to(device());
      // Built slot by slot, not with the reference's narrow-and-copy.
      at::Tensor kc_want = kc.cpu().clone(), vc_want = vc.cpu().clone();
      for (int64_t j = 0; j < s.t; ++j) {
        kc_want.select(2, s.offset + j).copy_(k.cpu().select(2, j));
        vc_want.select(2, s.offset + j).copy_(v.cpu().select(2, j));
      }
      ASSERT_EQ(kv_append_uses_kernel(kc, vc, k, v), kernels()) << where;
      kv_append(kc, vc, k, v, s.offset);
      EXPECT_TRUE(at::equal(kc.cpu(), kc_want)) << where;
      EXPECT_TRUE(at::equal(vc.cpu(), vc_want)) << where;
      EXPECT_THROW(kv_append(kc, vc, k, v, s.capacity - s.t + 1), Error) << where;
    }
  }
}

GPUEVAL_INSTANTIATE_DEVICE_TESTS(Kernels);

#ifdef GPUEVAL_WITH_CUDA_KERNELS
TEST(KernelsCuda, LogprobGatherAllocatesNoFloatLogits) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
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

}  // namespace
}  // namespace gpueval
