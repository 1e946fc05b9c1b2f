// What a worker sends back for one WorkItem of a batch (plan/planner.h): plain values whose JSON
// form is what crosses the pipe and what the journal stores. The aggregator
// (aggregate/aggregator.h) folds them into per-request results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/request.h"

namespace gpueval {

struct ItemResult {
  int64_t request_index = 0;
  int32_t part = 0;
  int32_t parts = 1;  // copied from the WorkItem, so a missing last part is detectable
  double logprob = 0;  // loglikelihood*: sum of target logprobs, in token order, in double
  bool is_greedy = false;  // loglikelihood*: every target was the argmax
  int64_t num_tokens = 0;  // targets scored, or tokens generated (EOS excluded)
  std::string text;  // generate_until: the decoded continuation cut before the first stop string
};

nlohmann::json to_json(const ItemResult& r);
ItemResult item_result_from_json(const nlohmann::json& j);  // throws Error on a malformed object

// Where an item sits, as a WorkItem and its ItemResult both carry it: the object `j` at `path` and
// its request_index (>= 0), parts (>= 1) and part (in [0, parts)), checked as common/wire_json.h
// checks fields. The one decoding of these that work_item_from_json and item_result_from_json share.
void read_item_place(const nlohmann::json& j, const std::string& path, int64_t& request_index, int32_t& part,
                     int32_t& parts);

}  // namespace gpueval
