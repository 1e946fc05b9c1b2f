// The threads of the model's own CPU kernels (projections, batched products, tiled attention,
// RoPE, the router's fixed-order product): cpu_parallel_for shares a range among a worker's
// threads (at::get_num_threads(), its cpu_threads) as at::parallel_for does.
// Why not at::parallel_for itself: it is a header template, and with LibTorch's OpenMP backend its
// `#pragma omp parallel` forks only in a file compiled with -fopenmp. gpueval_core is not (the flag
// would change the precompiled header every target shares), so there it ran every range on the
// calling thread: a worker of two threads multiplied on one (measured on 2 cores: `gpueval score`
// 1,350 tokens/s, one core busy). cpu_parallel.cpp alone is compiled with OpenMP, where LibTorch's
// backend is the system's libgomp (CMakeLists.txt: not in builds against a PyTorch wheel, which
// carries its own OpenMP runtime; there the range runs on the calling thread, as before).
// Each chunk of the range runs on one thread, cut by the range and the thread count alone; callers
// whose bits must not depend on the threads cut their work by its own shape (cpu_matmul.h). A chunk
// runs with the caller's thread-local state (inference and grad modes), so f may call ATen, whose
// own parallel loops then run on the chunk's thread.
// Stateless; callable from any thread (inside a parallel region the range runs on the caller).
#pragma once

#include <cstdint>
#include <functional>

namespace gpueval {

// f(chunk_begin, chunk_end) over [begin, end) in chunks of at least `grain` (>= 1) indices, one per
// thread. An exception from f is rethrown here (the first one) after every chunk has ended.
void cpu_parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// Whether cpu_parallel_for forks (this build compiled it with OpenMP).
bool cpu_parallel_forks();

}  // namespace gpueval
