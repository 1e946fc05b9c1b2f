#include "evaluation/run_journal.h"

#include <algorithm>
#include <iostream>
#include <unordered_map>

#include "evaluation/run_identity.h"

namespace gpueval {

RunJournal::RunJournal(const std::string& output_dir, const std::string& model_fp, const std::string& model_path,
                       const std::string& config_fp, const std::vector<Request>& requests, bool fresh)
    : config_fp_(config_fp),
      journal_(Journal::open(path_in(output_dir), JournalIdentity{model_fp, model_path, config_fp_}, fresh)) {
  std::unordered_map<std::string, int64_t> index_of;
  keys_.reserve(requests.size());
  for (const Request& r : requests) {
    keys_.push_back(request_key(model_fp, config_fp_, r));
    index_of.emplace(keys_.back(), r.index);
  }
  computed_.assign(requests.size(), false);
  // Rows of requests this run does not have cannot occur with a matching config fingerprint;
  // they are ignored rather than trusted.
  for (JournalItem& item : journal_.load()) {
    auto it = index_of.find(item.first);
    if (it == index_of.end()) continue;
    item.second.request_index = it->second;
    stored_[{it->second, item.second.part}] = std::move(item.second);
  }
}

Plan RunJournal::remaining(const Plan& plan, std::vector<std::vector<ItemResult>>& items_of,
                           bool generation_rows_independent) {
  Plan todo = plan;
  todo.batches.clear();
  std::vector<bool> pending(keys_.size(), false), planned(keys_.size(), false);
  int64_t batches_cut = 0;
  for (const Batch& b : plan.batches) {
    for (const WorkItem& w : b.items) planned[static_cast<size_t>(w.request_index)] = true;
    std::vector<bool> stored(b.items.size());
    for (size_t k = 0; k < b.items.size(); ++k) {
      const WorkItem& w = b.items[k];
      auto it = stored_.find({w.request_index, w.part});
      stored[k] = it != stored_.end() && it->second.parts == w.parts;
    }
    const int64_t n_stored = std::count(stored.begin(), stored.end(), true);
    const bool all_stored = n_stored == static_cast<int64_t>(b.items.size());
    const bool generation = !b.items.empty() && b.items.front().type == RequestType::kGenerateUntil;
    if (!all_stored && n_stored > 0 && generation && generation_rows_independent) {
      // Its sequences do not depend on each other: the stored ones are final, the rest runs alone.
      std::vector<size_t> left;
      for (size_t k = 0; k < b.items.size(); ++k) {
        const WorkItem& w = b.items[k];
        if (!stored[k]) {
          left.push_back(k);
          pending[static_cast<size_t>(w.request_index)] = true;
        } else {
          items_of[static_cast<size_t>(w.request_index)].push_back(stored_.at({w.request_index, w.part}));
        }
      }
      todo.batches.push_back(generation_batch_subset(b, left));
      ++batches_cut;
      items_resumed_in_batches_ += n_stored;
      continue;
    }
    if (!all_stored) {
      todo.batches.push_back(b);
      for (const WorkItem& w : b.items) pending[static_cast<size_t>(w.request_index)] = true;
      continue;
    }
    ++batches_resumed_;
    for (const WorkItem& w : b.items)
      items_of[static_cast<size_t>(w.request_index)].push_back(stored_.at({w.request_index, w.part}));
  }
  int64_t to_compute = 0, in_plan = 0;
  for (bool p : pending) to_compute += p;
  for (bool p : planned) in_plan += p;
  requests_resumed_ = in_plan - to_compute;
  std::cerr << fmt::format("[sched] journal {}: {} of {} requests already scored; computing {} in {} batches{}\n",
                           path(), requests_resumed_, in_plan, to_compute, todo.batches.size(),
                           batches_cut == 0 ? std::string()
                                            : fmt::format(" ({} go on without their {} sequences that ended before)",
                                                          batches_cut, items_resumed_in_batches_));
  return todo;
}

void RunJournal::record(const std::vector<ItemResult>& items) {
  std::vector<JournalItem> rows;
  rows.reserve(items.size());
  for (const ItemResult& r : items) rows.emplace_back(keys_.at(static_cast<size_t>(r.request_index)), r);
  journal_.record_batch(rows);
  ++batches_computed_;
  for (const ItemResult& r : items) {
    const size_t i = static_cast<size_t>(r.request_index);
    if (!computed_[i]) ++requests_computed_;
    computed_[i] = true;
  }
}

void RunJournal::record_ahead(const std::vector<ItemResult>& items) {
  std::vector<JournalItem> rows;
  rows.reserve(items.size());
  for (const ItemResult& r : items) rows.emplace_back(keys_.at(static_cast<size_t>(r.request_index)), r);
  journal_.record_batch(rows);
  items_recorded_ahead_ += static_cast<int64_t>(items.size());
}

nlohmann::json RunJournal::summary() const {
  return {{"path", path()},
          {"requests_resumed", requests_resumed_},
          {"requests_computed", requests_computed_},
          {"batches_resumed", batches_resumed_},
          {"batches_computed", batches_computed_},
          {"items_resumed_in_batches", items_resumed_in_batches_},
          {"items_recorded_ahead", items_recorded_ahead_}};
}

}  // namespace gpueval
