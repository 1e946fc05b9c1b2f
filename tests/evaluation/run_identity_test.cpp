// Fingerprints of what decides a run's results, and the per-request journal key.
#include "evaluation/run_identity.h"

#include <gmock/gmock.h>

namespace gpueval {
namespace {

std::vector<Request> requests() {
  Request a;
  a.index = 0;
  a.task = "t";
  a.doc_id = 0;
  a.choice = 1;
  a.context = "Q: 1+1\nA:";
  a.continuation = " 2";
  Request b = a;
  b.index = 1;
  b.choice = 2;
  b.continuation = " 3";
  return {a, b};
}

TEST(RunIdentity, ConfigFingerprintCoversWhatChangesResultsOnly) {
  RunConfig base;
  base.models = {"m"};
  base.tasks = {"t"};
  const std::string fp = config_fingerprint(base, requests());
  EXPECT_EQ(fp.size(), 64u);
  EXPECT_EQ(config_fingerprint(base, requests()), fp);

  std::vector<std::function<void(RunConfig&)>> changes = {
      [](RunConfig& c) { c.limit = 5; },
      [](RunConfig& c) { c.num_fewshot = 0; },
      [](RunConfig& c) { c.seed = 7; },
      [](RunConfig& c) { c.fewshot_seed = 7; },
      [](RunConfig& c) { c.dtype = "bfloat16"; },
      [](RunConfig& c) { c.add_bos = "false"; },
      [](RunConfig& c) { c.max_length = 128; },
      [](RunConfig& c) { c.code_execution.cpu_seconds = 1; },
      [](RunConfig& c) { c.code_execution.memory = int64_t{1} << 30; },
      [](RunConfig& c) { c.code_execution.unsafe_no_sandbox = true; }};
  for (size_t i = 0; i < changes.size(); ++i) {
    RunConfig c = base;
    changes[i](c);
    EXPECT_NE(config_fingerprint(c, requests()), fp) << "change " << i;
  }
  std::vector<std::function<void(RunConfig&)>> same = {[](RunConfig& c) { c.gpus = "cpu:4"; },
                                                       [](RunConfig& c) { c.batch_tokens = 99; },
                                                       [](RunConfig& c) { c.batch_size = "8"; },
                                                       [](RunConfig& c) { c.output = "elsewhere"; },
                                                       [](RunConfig& c) { c.prefix_reuse = false; },
                                                       [](RunConfig& c) { c.models = {"other"}; },
                                                       [](RunConfig& c) { c.code_execution.max_sandboxes = 5; }};
  for (size_t i = 0; i < same.size(); ++i) {
    RunConfig c = base;
    same[i](c);
    EXPECT_EQ(config_fingerprint(c, requests()), fp) << "setting " << i;
  }
  std::vector<Request> other = requests();
  other[1].continuation = " 4";
  EXPECT_NE(config_fingerprint(base, other), fp);
  other = requests();
  other.pop_back();
  EXPECT_NE(config_fingerprint(base, other), fp);
}

TEST(RunIdentity, RequestKeyIsPerModelConfigAndRequest) {
  const auto rs = requests();
  const std::string k = request_key("model", "config", rs[0]);
  EXPECT_EQ(k.size(), 64u);
  EXPECT_NE(request_key("model", "config", rs[1]), k);
  EXPECT_NE(request_key("model2", "config", rs[0]), k);
  EXPECT_NE(request_key("model", "config2", rs[0]), k);
  Request moved = rs[0];
  moved.index = 17;  // the index is where it sits in the list, not what it is
  EXPECT_EQ(request_key("model", "config", moved), k);
  // Field boundaries are encoded: moving bytes from context to continuation changes the key.
  Request shifted = rs[0];
  shifted.context = "Q: 1+1\nA: 2";
  shifted.continuation = "";
  EXPECT_NE(request_key("model", "config", shifted), k);
  Request stops = rs[0];
  stops.stops = {"a", "b"};
  Request joined = rs[0];
  joined.stops = {"ab"};
  EXPECT_NE(canonical_request(stops), canonical_request(joined));
}

}  // namespace
}  // namespace gpueval
