#include "run/cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "test_util.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gpueval {
namespace {

// After keep_freed_memory(), a block far above glibc's mmap threshold comes from the heap (no
// new mmapped bytes) and freeing it keeps the heap (nothing trimmed), so the next batch reuses it.
TEST(CpuAllocator, LargeBlocksComeFromTheHeapAndStayAfterFree) {
  GPUEVAL_REQUIRE_GLIBC_MALLOC();
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc";
#else
  keep_freed_memory();
  constexpr size_t kBytes = 96u << 20;  // 96 MiB: three times the largest mmap threshold
  const size_t mmapped_before = mallinfo2().hblkhd;
  char* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  EXPECT_EQ(mallinfo2().hblkhd, mmapped_before) << "the block was mmapped";
  const size_t arena_with_block = mallinfo2().arena;
  EXPECT_GE(arena_with_block, kBytes);
  std::free(block);
  EXPECT_EQ(mallinfo2().arena, arena_with_block) << "the heap was trimmed";
#endif
}

}  // namespace
}  // namespace gpueval
