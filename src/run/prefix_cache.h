// A worker's shared prefixes (model.h's PrefixKV): the keys and values of a
// prefix that several batches start with (a task's few-shot examples), kept
// between batches so that each prefix is computed once per worker however many
// batches use it. Entries are looked up by their tokens; the least recently
// used are dropped beyond max_entries or max_bytes. A prefix computed under
// row-invariant products (model/kernels/row_invariant.h: generation) is another entry
// than the same tokens computed for scoring. One cache per worker;
// not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "gpueval/model.h"

namespace gpueval {

class PrefixCache {
 public:
  explicit PrefixCache(size_t max_entries = 4, int64_t max_bytes = int64_t{2} << 30);

  // The prefix's keys and values, computed with model.prefill on a miss (then
  // *computed_tokens, when given, grows by the prefix length).
  std::shared_ptr<const PrefixKV> get(const DecoderModelImpl& model, const std::vector<int32_t>& tokens,
                                      int64_t* computed_tokens = nullptr);

  size_t size() const { return entries_.size(); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    bool row_invariant = false;  // computed under row_invariant_products_on()
    std::shared_ptr<const PrefixKV> kv;
  };
  size_t max_entries_;
  int64_t max_bytes_;
  std::list<Entry> entries_;  // most recently used first
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace gpueval
