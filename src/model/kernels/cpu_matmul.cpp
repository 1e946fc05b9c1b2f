#include "model/kernels/cpu_matmul.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "gpueval/error.h"
#include "model/kernels/cpu_parallel.h"

#ifdef GPUEVAL_WITH_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace gpueval {

bool pack_cpu_weights(int64_t bytes) {
  const char* setting = std::getenv("GPUEVAL_CPU_PACKED_WEIGHTS");
  if (setting && std::strcmp(setting, "1") == 0) return true;
  if (setting && std::strcmp(setting, "0") == 0) return false;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 && bytes <= static_cast<int64_t>(pages) * page / 8;
}

std::vector<std::pair<int64_t, int64_t>> project_row_blocks(int64_t m) {
  // As few blocks as keep each at most 512 rows, of equal size rounded up to a multiple of 16. One
  // call per batch of up to 512 tokens: dnnl_sgemm runs faster on more rows (its packed panels of
  // the weight serve more of them). On a Zen 4 core, 768x2048 weights: 94 GFLOPS in two blocks of
  // 128 rows, 98 in one of 256, 104 in one of 1024; the MLP's 2048x768: 84, 96, 101.
  std::vector<std::pair<int64_t, int64_t>> blocks;
  if (m <= 0) return blocks;
  const int64_t count = (m + kProjectBlockRows - 1) / kProjectBlockRows;
  const int64_t rows = ((m + count - 1) / count + 15) / 16 * 16;
  for (int64_t first = 0; first < m; first += rows) blocks.emplace_back(first, std::min(rows, m - first));
  return blocks;
}

#ifdef GPUEVAL_WITH_ONEDNN

namespace {

// The calling task's OpenMP thread count is 1 while it lives: oneDNN then runs the call on this
// thread alone, inside or outside a parallel region.
class OneOpenMpThread {
 public:
  OneOpenMpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOpenMpThread() { omp_set_num_threads(saved_); }
  OneOpenMpThread(const OneOpenMpThread&) = delete;
  OneOpenMpThread& operator=(const OneOpenMpThread&) = delete;

 private:
  int saved_;
};

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

bool is_cpu_float32(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

// Whether x [..., in] and bias ([out] or undefined) are inputs of a CPU float32 product with an
// [out, in] weight. Autograd is never needed here; a tensor that asks for it keeps LibTorch's own path.
bool takes_projection_inputs(const at::Tensor& x, int64_t in, int64_t out, const at::Tensor& bias) {
  if (!is_cpu_float32(x) || x.dim() < 1 || x.size(-1) != in || x.numel() == 0) return false;
  if (bias.defined() && (!is_cpu_float32(bias) || bias.dim() != 1 || bias.size(0) != out)) return false;
  return !(at::GradMode::is_enabled() && (x.requires_grad() || (bias.defined() && bias.requires_grad())));
}

}  // namespace

bool project_uses_onednn(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!is_cpu_float32(weight) || weight.dim() != 2 || !weight.is_contiguous()) return false;
  if (at::GradMode::is_enabled() && weight.requires_grad()) return false;
  return takes_projection_inputs(x, weight.size(1), weight.size(0), bias);
}

namespace {

// x [..., in] · Wᵀ (+ bias) -> [..., out] in project_row_blocks' blocks, the threads sharing them,
// each block multiply(first row, rows, its x, its y) on one thread with one OpenMP thread.
template <class Multiply>
at::Tensor project_in_blocks(const at::Tensor& x, int64_t in, int64_t out, const at::Tensor& bias,
                             const Multiply& multiply) {
  const at::Tensor rows = x.reshape({-1, in}).contiguous();
  const int64_t m = rows.size(0);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out;
  at::Tensor y = at::empty({m, out}, x.options());
  const float* a = rows.data_ptr<float>();
  float* c = y.data_ptr<float>();
  const std::vector<std::pair<int64_t, int64_t>> blocks = project_row_blocks(m);
  std::mutex mu;
  std::string error;
  cpu_parallel_for(0, static_cast<int64_t>(blocks.size()), 1, [&](int64_t begin, int64_t end) {
    OneOpenMpThread one;
    for (int64_t i = begin; i < end; ++i) {
      const auto [first, count] = blocks[static_cast<size_t>(i)];
      try {
        multiply(count, a + first * in, c + first * out);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        error = e.what();
      }
    }
  });
  if (!error.empty()) throw Error(error);
  if (bias.defined()) y.add_(bias);
  return y.view(shape);
}

void sgemm_rows(int64_t m, int64_t in, int64_t out, const float* x, const float* w, float* y) {
  // Row-major: Y[m, out] = X[m, in] · Wᵀ, W being [out, in].
  const dnnl_status_t st = dnnl_sgemm('N', 'T', m, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (st != dnnl_success)
    throw Error(fmt::format("oneDNN sgemm failed (status {}) multiplying {}x{} by {}x{}", static_cast<int>(st), m, in,
                            in, out));
}

}  // namespace

at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!project_uses_onednn(x, weight, bias)) return at::linear(x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);
  const float* w = weight.data_ptr<float>();
  return project_in_blocks(x, in, out, bias,
                           [&](int64_t m, const float* a, float* c) { sgemm_rows(m, in, out, a, w, c); });
}

// ---- PackedWeight ----

namespace {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc rows_desc(int64_t m, int64_t cols) {
  return dnnl::memory::desc({m, cols}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
}

// oneDNN's matmul of m rows by [in, out] weights in the layout its kernel prefers. Its scratchpad is
// the caller's (scratchpad_mode::user): the library's own is one buffer shared by every primitive
// (Debian's oneDNN is built without DNNL_ENABLE_CONCURRENT_EXEC), so two threads running products
// at once overwrote each other's partial sums.
dnnl::matmul::primitive_desc matmul_desc(int64_t m, int64_t in, int64_t out) {
  const dnnl::memory::desc any({in, out}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(rows_desc(m, in), any, rows_desc(m, out)), attr, cpu_engine());
}

// The calling thread's scratchpad for a product: at least `bytes`, grown as needed, kept until the
// thread ends.
void* thread_scratchpad(size_t bytes) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

bool is_brgemm(const dnnl::matmul::primitive_desc& pd) { return std::strncmp(pd.impl_info_str(), "brg", 3) == 0; }

}  // namespace

namespace {

// The kernels of packed products, one per (rows, in, out) for the whole process: every weight of a
// shape (a mixture's experts, the layers' projections) shares them. Per weight they would pile up:
// an expert meets every row count up to a block's 512, and oneDNN's own primitive cache (1,024
// entries) evicts and recompiles, so a MoE model's resident memory grew with every batch (Mixtral's
// bench shape: 1.15 GB after 11 windows, 1.71 GB after 102, against 0.73 GB unpacked).
class PackedKernels {
 public:
  struct Kernel {
    dnnl::matmul primitive;
    dnnl::memory::desc scratchpad;  // what one execution needs (each thread passes its own)
  };
  // The kernel for m rows of a weight packed as `packed`, or null when that row count's kernel wants
  // another weight layout (then sgemm).
  std::shared_ptr<const Kernel> get(int64_t m, int64_t in, int64_t out, const dnnl::memory::desc& packed) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{m, in, out};
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    std::shared_ptr<const Kernel> k;
    const dnnl::matmul::primitive_desc pd = matmul_desc(m, in, out);
    if (pd.weights_desc() == packed) k = std::make_shared<const Kernel>(Kernel{dnnl::matmul(pd), pd.scratchpad_desc()});
    kernels_.emplace(key, k);
    return k;
  }

 private:
  struct Key {
    int64_t m, in, out;
    bool operator==(const Key& o) const { return m == o.m && in == o.in && out == o.out; }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<int64_t>()(k.m) ^ (std::hash<int64_t>()(k.in) * 31) ^ (std::hash<int64_t>()(k.out) * 1009);
    }
  };
  std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<const Kernel>, Hash> kernels_;
};

PackedKernels& packed_kernels() {
  static PackedKernels* kernels = new PackedKernels();  // never destroyed: used until exit
  return *kernels;
}

}  // namespace

struct PackedWeight::Impl {
  at::Tensor plain;  // [out, in]: for a row count whose kernel wants another layout
  int64_t in = 0, out = 0;
  dnnl::memory packed;

  std::shared_ptr<const PackedKernels::Kernel> kernel(int64_t m) const {
    return packed_kernels().get(m, in, out, packed.get_desc());
  }
};

PackedWeight::PackedWeight(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedWeight::~PackedWeight() = default;

std::shared_ptr<const PackedWeight> PackedWeight::pack(const at::Tensor& weight) {
  if (!weight.defined() || !weight.device().is_cpu() || weight.scalar_type() != at::kFloat ||
      weight.layout() != at::kStrided || weight.dim() != 2 || !weight.is_contiguous() || weight.numel() == 0)
    return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->plain = weight;
  impl->out = weight.size(0);
  impl->in = weight.size(1);
  try {
    // The layout is chosen for a mid-sized product; kernel() checks every row count against it.
    const dnnl::matmul::primitive_desc pd = matmul_desc(256, impl->in, impl->out);
    if (!is_brgemm(pd)) return nullptr;
    // W [out, in] row-major is Wᵀ [in, out] with the in dimension outer: format "ba".
    dnnl::memory plain({{impl->in, impl->out}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ba},
                       cpu_engine(), const_cast<float*>(weight.data_ptr<float>()));
    impl->packed = dnnl::memory(pd.weights_desc(), cpu_engine());
    dnnl::stream stream(cpu_engine());
    OneOpenMpThread one;  // the bits of a copy do not depend on threads; one keeps the worker's count
    dnnl::reorder(plain, impl->packed).execute(stream, plain, impl->packed);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN could not pack a {}x{} weight: {}", impl->out, impl->in, e.what()));
  }
  return std::shared_ptr<const PackedWeight>(new PackedWeight(std::move(impl)));
}

int64_t PackedWeight::in() const { return impl_->in; }
int64_t PackedWeight::out() const { return impl_->out; }
int64_t PackedWeight::bytes() const { return static_cast<int64_t>(impl_->packed.get_desc().get_size()); }

void PackedWeight::multiply(int64_t m, const float* x, float* y) const {
  if (m <= 0) return;
  OneOpenMpThread one;
  try {
    const std::shared_ptr<const PackedKernels::Kernel> kernel = impl_->kernel(m);
    if (!kernel) return sgemm_rows(m, impl_->in, impl_->out, x, impl_->plain.data_ptr<float>(), y);
    dnnl::stream stream(cpu_engine());
    dnnl::memory src(rows_desc(m, impl_->in), cpu_engine(), const_cast<float*>(x));
    dnnl::memory dst(rows_desc(m, impl_->out), cpu_engine(), y);
    dnnl::memory scratchpad(kernel->scratchpad, cpu_engine(), thread_scratchpad(kernel->scratchpad.get_size()));
    kernel->primitive.execute(stream, {{DNNL_ARG_SRC, src},
                                       {DNNL_ARG_WEIGHTS, impl_->packed},
                                       {DNNL_ARG_DST, dst},
                                       {DNNL_ARG_SCRATCHPAD, scratchpad}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN matmul failed multiplying {}x{} by a packed {}x{}: {}", m, impl_->in, impl_->in,
                            impl_->out, e.what()));
  }
}

bool project_uses_packed(const at::Tensor& x, const PackedWeight& weight, const at::Tensor& bias) {
  return takes_projection_inputs(x, weight.in(), weight.out(), bias);
}

at::Tensor project(const at::Tensor& x, const PackedWeight& weight, const at::Tensor& bias) {
  if (!project_uses_packed(x, weight, bias))
    throw Error(fmt::format("project: a packed {}x{} weight takes CPU float32 rows of {}", weight.out(), weight.in(),
                            weight.in()));
  return project_in_blocks(x, weight.in(), weight.out(), bias,
                           [&](int64_t m, const float* a, float* c) { weight.multiply(m, a, c); });
}

namespace {

// How dnnl_sgemm reads matrix i of a [n, rows, cols] batch: 'N' with the row stride, or 'T' with the
// column stride when the rows are the unit-stride dimension. Null when neither stride is 1.
struct MatrixView {
  char trans = 0;
  int64_t ld = 0;
};

MatrixView matrix_view(const at::Tensor& t) {
  const int64_t rows = t.size(1), cols = t.size(2);
  if ((t.stride(2) == 1 || cols == 1) && (rows == 1 || t.stride(1) >= cols))
    return {'N', rows == 1 ? cols : t.stride(1)};
  if ((t.stride(1) == 1 || rows == 1) && (cols == 1 || t.stride(2) >= rows))
    return {'T', cols == 1 ? rows : t.stride(2)};
  return {};
}

}  // namespace

bool batched_product_uses_onednn(const at::Tensor& a, const at::Tensor& b) {
  const auto cpu_float = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided && t.dim() == 3;
  };
  if (!cpu_float(a) || !cpu_float(b) || a.size(0) != b.size(0) || a.size(2) != b.size(1)) return false;
  if (a.numel() == 0 || b.numel() == 0) return false;
  return !(at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad()));
}

at::Tensor batched_product(const at::Tensor& a_in, const at::Tensor& b_in) {
  if (!batched_product_uses_onednn(a_in, b_in)) return at::bmm(a_in, b_in);
  const at::Tensor a = matrix_view(a_in).trans ? a_in : a_in.contiguous();
  const at::Tensor b = matrix_view(b_in).trans ? b_in : b_in.contiguous();
  const MatrixView va = matrix_view(a), vb = matrix_view(b);
  const int64_t n = a.size(0), m = a.size(1), k = a.size(2), p = b.size(2);
  at::Tensor c = at::empty({n, m, p}, a.options());
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* pc = c.data_ptr<float>();
  std::atomic<int> failed{0};
  cpu_parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    OneOpenMpThread one;
    for (int64_t i = begin; i < end; ++i) {
      const dnnl_status_t st = dnnl_sgemm(va.trans, vb.trans, m, p, k, 1.0f, pa + i * a.stride(0), va.ld,
                                          pb + i * b.stride(0), vb.ld, 0.0f, pc + i * m * p, p);
      if (st != dnnl_success) failed.store(static_cast<int>(st));
    }
  });
  if (failed.load() != 0)
    throw Error(fmt::format("oneDNN sgemm failed (status {}) multiplying {} matrices {}x{} by {}x{}", failed.load(), n,
                            m, k, k, p));
  return c;
}

void sgemm_on_this_thread(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  OneOpenMpThread one;
  const dnnl_status_t st = dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success)
    throw Error(
        fmt::format("oneDNN sgemm failed (status {}) multiplying {}x{} by {}x{}", static_cast<int>(st), m, k, k, n));
}

std::string cpu_matmul_description() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} ({})", v->major, v->minor, v->patch, isa_name(dnnl_get_effective_cpu_isa()));
}

#else

struct PackedWeight::Impl {};
PackedWeight::PackedWeight(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedWeight::~PackedWeight() = default;
std::shared_ptr<const PackedWeight> PackedWeight::pack(const at::Tensor&) { return nullptr; }
int64_t PackedWeight::in() const { return 0; }
int64_t PackedWeight::out() const { return 0; }
int64_t PackedWeight::bytes() const { return 0; }
void PackedWeight::multiply(int64_t, const float*, float*) const {
  throw Error("PackedWeight: this build has no oneDNN (GPUEVAL_ONEDNN is OFF)");
}
bool project_uses_packed(const at::Tensor&, const PackedWeight&, const at::Tensor&) { return false; }
at::Tensor project(const at::Tensor&, const PackedWeight&, const at::Tensor&) {
  throw Error("project: this build has no oneDNN (GPUEVAL_ONEDNN is OFF)");
}

bool project_uses_onednn(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return at::linear(x, weight, bias);
}

bool batched_product_uses_onednn(const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor batched_product(const at::Tensor& a, const at::Tensor& b) { return at::bmm(a, b); }

void sgemm_on_this_thread(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t) {
  throw Error("sgemm_on_this_thread: this build has no oneDNN (GPUEVAL_ONEDNN is OFF)");
}

std::string cpu_matmul_description() { return ""; }

#endif

}  // namespace gpueval
