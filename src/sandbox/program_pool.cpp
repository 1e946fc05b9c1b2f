#include "sandbox/program_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "gpueval/error.h"

namespace gpueval {

void run_programs(const Sandbox& sandbox, const std::vector<ProgramRequest>& requests, int max_sandboxes,
                  const std::function<void(size_t, const Verdict&)>& on_verdict) {
  std::atomic<size_t> next{0};
  std::mutex lock;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < requests.size();) {
      Verdict v;
      try {
        v = sandbox.run(requests[i].program, requests[i].limits, requests[i].mode);
      } catch (const Error& e) {
        v.kind = Verdict::Kind::kError;
        v.detail = e.what();
      }
      std::lock_guard<std::mutex> g(lock);
      on_verdict(i, v);
    }
  };
  const size_t threads = std::min<size_t>(static_cast<size_t>(std::max(1, max_sandboxes)), requests.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

int default_max_sandboxes(int busy_cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = 1;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  return std::max(1, cores - std::max(0, busy_cores));
}

}  // namespace gpueval
