#include "run/prefix_cache.h"

#include <algorithm>

#include "model/kernels/row_invariant.h"

namespace gpueval {

PrefixCache::PrefixCache(size_t max_entries, int64_t max_bytes)
    : max_entries_(std::max<size_t>(1, max_entries)), max_bytes_(max_bytes) {}

std::shared_ptr<const PrefixKV> PrefixCache::get(const DecoderModelImpl& model, const std::vector<int32_t>& tokens,
                                                 int64_t* computed_tokens) {
  const bool row_invariant = row_invariant_products_on();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->tokens != tokens || it->row_invariant != row_invariant) continue;
    ++hits_;
    entries_.splice(entries_.begin(), entries_, it);
    return entries_.front().kv;
  }
  ++misses_;
  auto kv = std::make_shared<const PrefixKV>(model.prefill(tokens));
  if (computed_tokens) *computed_tokens += static_cast<int64_t>(tokens.size());
  entries_.push_front({tokens, row_invariant, kv});
  // The newest entry always stays, even alone over the byte limit: the batch needs it.
  int64_t bytes = 0;
  for (const Entry& e : entries_) bytes += e.kv->bytes();
  while (entries_.size() > 1 && (entries_.size() > max_entries_ || bytes > max_bytes_)) {
    bytes -= entries_.back().kv->bytes();
    entries_.pop_back();
  }
  return kv;
}

}  // namespace gpueval
