#include "evaluation/run_journal.h"

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

Plan RunJournal::remaining(const Plan& plan, std::vector<std::vector<ItemResult>>& items_of) {
  Plan todo = plan;
  todo.batches.clear();
  std::vector<bool> pending(keys_.size(), false), planned(keys_.size(), false);
  for (const Batch& b : plan.batches) {
    for (const WorkItem& w : b.items) planned[static_cast<size_t>(w.request_index)] = true;
    bool all_stored = true;
    for (const WorkItem& w : b.items) {
      auto it = stored_.find({w.request_index, w.part});
      all_stored = all_stored && it != stored_.end() && it->second.parts == w.parts;
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
  std::cerr << fmt::format("[sched] journal {}: {} of {} requests already scored; computing {} in {} batches\n",
                           path(), requests_resumed_, in_plan, to_compute, todo.batches.size());
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

nlohmann::json RunJournal::summary() const {
  return {{"path", path()},
          {"requests_resumed", requests_resumed_},
          {"requests_computed", requests_computed_},
          {"batches_resumed", batches_resumed_},
          {"batches_computed", batches_computed_}};
}

}  // namespace gpueval
