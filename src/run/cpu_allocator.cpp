#include "run/cpu_allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <climits>

namespace gpueval {

void keep_freed_memory() {
#if defined(__GLIBC__)
  ::mallopt(M_MMAP_MAX, 0);  // large blocks from the heap, never a fresh mmap
  ::mallopt(M_TRIM_THRESHOLD, INT_MAX);  // never hand the heap top back to the kernel
#endif
}

}  // namespace gpueval
