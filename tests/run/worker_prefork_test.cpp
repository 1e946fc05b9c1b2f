// The kLaunch message of run/worker_prefork.h, and when launch_worker must not use a process forked
// ahead. Forking itself is tested end to end (run_test.cpp: "forked ahead" workers give the
// reference results; a killed one is replaced by an exec'd one; an unused one ends silently),
// since a test process has threads and prefork_workers refuses to fork there.
#include <gmock/gmock.h>

#include "gpueval/error.h"
#include "run/worker_prefork.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

TEST(WorkerPrefork, LaunchRequestRoundTrips) {
  const LaunchRequest r{"/tmp/out/logs/worker_cpu_0.log", {{"OMP_NUM_THREADS", "2"}, {"X", ""}}};
  const LaunchRequest back = launch_request_from_json(to_json(r));
  EXPECT_EQ(back.log_path, r.log_path);
  EXPECT_EQ(back.env, r.env);
  EXPECT_EQ(launch_request_from_json(to_json(LaunchRequest{})).env.size(), 0u);
}

// [[entry...]]: an env list of one entry (brace-initialised JSON would read pairs as objects).
nlohmann::json pairs(const nlohmann::json& entry) { return nlohmann::json::array({nlohmann::json(entry)}); }

TEST(WorkerPrefork, BadLaunchRequestsNameTheField) {
  struct Case {
    nlohmann::json j;
    std::string message;
  };
  const std::vector<Case> cases = {
      {nlohmann::json::array(), "launch"},
      {{{"env", nlohmann::json::array()}}, "log_path"},
      {{{"log_path", 3}, {"env", nlohmann::json::array()}}, "launch: log_path"},
      {{{"log_path", ""}}, "env"},
      {{{"log_path", ""}, {"env", pairs({"OMP_NUM_THREADS"})}}, "launch: env: each entry must be [name, value]"},
      {{{"log_path", ""}, {"env", pairs({"A=B", "1"})}}, "launch: env: bad variable name 'A=B'"},
      {{{"log_path", ""}, {"env", pairs({"", "1"})}}, "launch: env: bad variable name ''"},
      {{{"log_path", ""}, {"env", pairs({"A", 1})}}, "launch: env: value"},
  };
  for (const Case& c : cases) {
    try {
      launch_request_from_json(c.j);
      ADD_FAILURE() << c.j.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.message)) << c.j.dump();
    }
  }
}

}  // namespace
}  // namespace gpueval
