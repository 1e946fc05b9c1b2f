// The model's CPU kernels' threads (model/kernels/cpu_parallel.h): a range is shared among LibTorch's
// threads, really on as many OS threads, each index exactly once; one thread or a nested call runs
// it on the caller; an exception from a chunk reaches the caller.
#include "model/kernels/cpu_parallel.h"

#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

namespace gpueval {
namespace {

struct Threads {
  int saved = at::get_num_threads();
  ~Threads() { at::set_num_threads(saved); }
};

// Which OS threads ran chunks of [0, n), and how often each index was visited.
struct Visits {
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<int> count;
  explicit Visits(int64_t n) : count(static_cast<size_t>(n), 0) {}
  void chunk(int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    for (int64_t i = begin; i < end; ++i) ++count[static_cast<size_t>(i)];
  }
};

TEST(CpuParallel, SharesARangeAmongTheThreads) {
  if (!cpu_parallel_forks()) GTEST_SKIP() << "this build's cpu_parallel_for runs on one thread (no OpenMP)";
  Threads restore;
  at::set_num_threads(2);
  Visits v(8);
  cpu_parallel_for(0, 8, 1, [&](int64_t b, int64_t e) { v.chunk(b, e); });
  EXPECT_EQ(v.threads.size(), 2u) << "two threads, eight indices: both threads run a chunk";
  for (int c : v.count) EXPECT_EQ(c, 1);
}

TEST(CpuParallel, OneThreadOrANestedCallRunsOnTheCaller) {
  Threads restore;
  at::set_num_threads(1);
  Visits one(8);
  cpu_parallel_for(0, 8, 1, [&](int64_t b, int64_t e) { one.chunk(b, e); });
  EXPECT_EQ(one.threads, std::set<std::thread::id>{std::this_thread::get_id()});
  for (int c : one.count) EXPECT_EQ(c, 1);

  at::set_num_threads(2);
  std::mutex mu;
  std::vector<std::unique_ptr<Visits>> owned;
  bool each_on_its_caller = true;
  cpu_parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    auto v = std::make_unique<Visits>(4);
    cpu_parallel_for(0, 4, 1, [&](int64_t b, int64_t e) { v->chunk(b, e); });
    std::lock_guard<std::mutex> lock(mu);
    each_on_its_caller &= v->threads == std::set<std::thread::id>{std::this_thread::get_id()};
    for (int c : v->count) each_on_its_caller &= c == 1;
    owned.push_back(std::move(v));
  });
  EXPECT_TRUE(each_on_its_caller);
  EXPECT_EQ(owned.size(), 2u);
}

TEST(CpuParallel, AChunksExceptionReachesTheCaller) {
  Threads restore;
  at::set_num_threads(2);
  EXPECT_THROW(cpu_parallel_for(0, 8, 1,
                                [&](int64_t b, int64_t) {
                                  if (b == 0) throw std::runtime_error("chunk failed");
                                }),
               std::runtime_error);
  EXPECT_NO_THROW(cpu_parallel_for(0, 0, 1, [&](int64_t, int64_t) { throw std::runtime_error("empty range"); }));
}

}  // namespace
}  // namespace gpueval
