// How a long-lived process that runs batch after batch on the CPU should use glibc's malloc.
//
// LibTorch's CPU tensors come from malloc. By default glibc serves every block above its
// mmap threshold (at most 32 MiB) with a fresh mmap and unmaps it on free, and gives freed
// heap tops back to the kernel above a trim threshold, so each batch's activations (attention
// scores alone are batch * heads * T^2 floats) are faulted in page by page again. Measured on
// MMLU 5-shot with stories260K, 2 CPU workers: 44% of the CPU time was the kernel's (1.19
// billion minor faults in the full run). keep_freed_memory() turns both off, so freed blocks
// are reused; the process keeps its peak heap, as a caching allocator does.
#pragma once

namespace gpueval {

// Call once, early, before the heavy allocations start; safe to call more than once. A no-op
// where the C library is not glibc.
void keep_freed_memory();

}  // namespace gpueval
