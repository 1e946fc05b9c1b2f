#include "run/dispatch.h"

#include <algorithm>
#include <map>
#include <utility>

namespace gpueval {

DispatchChoice choose_dispatch(const std::vector<QueuedBatch>& queued, bool holds_checkpoint, int64_t held_prefix,
                               const std::vector<int64_t>& others_prefixes) {
  DispatchChoice choice;
  if (queued.empty()) return choice;
  if (!holds_checkpoint) {
    choice.action = DispatchChoice::Action::kSwitchCheckpoint;
    return choice;
  }
  const auto holders = [&](int64_t prefix) {
    return std::count(others_prefixes.begin(), others_prefixes.end(), prefix);
  };
  const auto send = [&](size_t k) {
    choice.action = DispatchChoice::Action::kSend;
    choice.position = k;
    return choice;
  };
  if (held_prefix >= 0)
    for (size_t k = 0; k < queued.size(); ++k)
      if (queued[k].prefix_id == held_prefix) return send(k);
  // Work no other worker holds: each batch without a prefix, and each prefix nobody holds (its
  // length and all its queued batches, which this worker then goes on with). The most work first.
  std::map<int64_t, std::pair<int64_t, size_t>> free_prefixes;  // prefix -> (tokens, first batch)
  int64_t most = -1;
  size_t first = 0;
  for (size_t k = 0; k < queued.size(); ++k) {
    const QueuedBatch& batch = queued[k];
    if (batch.prefix_id < 0) {
      if (batch.tokens > most) most = batch.tokens, first = k;
    } else if (holders(batch.prefix_id) == 0) {
      auto [it, added] = free_prefixes.try_emplace(batch.prefix_id, batch.prefix_tokens, k);
      it->second.first += batch.tokens;
    }
  }
  for (const auto& [prefix, w] : free_prefixes)
    if (w.first > most || (w.first == most && w.second < first)) most = w.first, first = w.second;
  if (most >= 0) return send(first);
  // Every queued prefix is held by another worker: per prefix, its queued tokens and last batch.
  std::map<int64_t, std::pair<int64_t, size_t>> work;
  for (size_t k = 0; k < queued.size(); ++k) {
    auto& [tokens, last] = work[queued[k].prefix_id];
    tokens += queued[k].tokens;
    last = k;
  }
  double best_share = 0;
  for (const auto& [prefix, w] : work) {
    const QueuedBatch& last = queued[w.second];
    const double share = static_cast<double>(w.first) / static_cast<double>(holders(prefix));
    if (static_cast<double>(last.prefix_tokens + last.tokens) < share && share > best_share) {
      best_share = share;
      send(w.second);
    }
  }
  return choice;  // kWait unless a batch was chosen
}

std::optional<size_t> choose_ahead(const std::vector<QueuedBatch>& queued, const std::vector<FlightBatch>& in_flight,
                                   size_t workers_up) {
  if (in_flight.size() != 1 || queued.size() < workers_up) return std::nullopt;
  const FlightBatch& b = in_flight.front();
  if (!b.generation || b.ended == 0) return std::nullopt;
  const int64_t rows = b.rows > 0 ? b.rows : b.items;
  if (b.items - b.ended > rows) return std::nullopt;
  for (size_t k = 0; k < queued.size(); ++k)
    if (queued[k].generation && queued[k].prefix_id == b.prefix_id) return k;
  return std::nullopt;
}

}  // namespace gpueval
