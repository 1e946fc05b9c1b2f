// Checkpoints pinned with transformers' own logits: tests/fixtures/architectures/<family>/ and
// tests/fixtures/rope/<case>/ each hold a tiny random checkpoint and expected_logits.json (the
// float32 logits transformers computed on a few token sequences; scripts/verify_architectures.py and
// scripts/verify_rope.py --write-fixtures write them). The helpers read those files and run our
// model the ways the tests compare: a plain forward, a prefix shared through prefill() and
// forward_packed(), and a KV cache filled step by step. Test code only; no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/model.h"

namespace gpueval::testing {

struct LogitsSequence {
  std::vector<int64_t> ids;
  at::Tensor logits;  // [T, V] float32, transformers'
};

nlohmann::json read_json(const std::string& path);  // fails the test (and throws) when unreadable
// The sequences of `dir`/expected_logits.json.
std::vector<LogitsSequence> expected_logits(const std::string& dir);
// max |ours - theirs| over max |theirs|.
double relative_error(const at::Tensor& ours, const at::Tensor& theirs);
// ids[begin, end) as a [1, end - begin] int64 row.
at::Tensor ids_row(const std::vector<int64_t>& ids, int64_t begin, int64_t end);
// The logits [T, V] of one sequence by a plain forward at positions 0..T-1.
at::Tensor full_logits(const DecoderModel& model, const std::vector<int64_t>& ids);

// The relative errors against s.logits of the two other ways to the same logits: the first p tokens as
// a shared prefix (prefill) and the rest as a packed row after it; and a KV cache filled by a first
// step of p tokens, then one token at a time.
struct PrefixCacheErrors {
  double packed = 0, cached = 0;
};
PrefixCacheErrors prefix_and_cache_errors(const DecoderModel& model, const LogitsSequence& s, int64_t p);

}  // namespace gpueval::testing
