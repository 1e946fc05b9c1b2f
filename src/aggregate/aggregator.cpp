#include "aggregate/aggregator.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "gpueval/error.h"

namespace gpueval {

std::vector<RequestResult> combine_items(const std::vector<ItemResult>& items) {
  std::map<int64_t, std::vector<const ItemResult*>> by_request;
  for (const ItemResult& r : items) by_request[r.request_index].push_back(&r);
  std::vector<RequestResult> out;
  out.reserve(by_request.size());
  for (auto& [index, parts] : by_request) {
    const int32_t count = parts.front()->parts;
    for (const ItemResult* p : parts) {
      if (p->parts != count)
        throw Error(fmt::format("request {}: parts disagree on their count ({} and {})", index, count, p->parts));
      if (p->part < 0 || p->part >= count)
        throw Error(fmt::format("request {}: part {} outside [0, {})", index, p->part, count));
    }
    std::sort(parts.begin(), parts.end(), [](const ItemResult* a, const ItemResult* b) { return a->part < b->part; });
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k > 0 && parts[k]->part == parts[k - 1]->part)
        throw Error(fmt::format("request {}: part {} of {} appears twice", index, parts[k]->part, count));
      if (parts[k]->part != static_cast<int32_t>(k))
        throw Error(fmt::format("request {}: part {} of {} is missing", index, k, count));
    }
    if (static_cast<int64_t>(parts.size()) != count)
      throw Error(fmt::format("request {}: part {} of {} is missing", index, parts.size(), count));
    RequestResult r;
    r.index = index;
    r.is_greedy = true;
    for (const ItemResult* p : parts) {
      r.logprob += p->logprob;
      r.num_tokens += p->num_tokens;
      r.is_greedy = r.is_greedy && p->is_greedy;
    }
    if (count == 1) r.text = parts.front()->text;
    out.push_back(std::move(r));
  }
  return out;
}

Aggregator::Aggregator(const std::vector<Task>& tasks, const std::vector<Request>& requests)
    : tasks_(tasks),
      requests_(requests),
      task_of_(requests.size(), kOutside),
      doc_requests_(tasks.size()),
      items_(requests.size()),
      requests_left_(tasks.size()),
      documents_done_(tasks.size(), 0) {
  for (size_t t = 0; t < tasks.size(); ++t) task_index_[tasks[t].name()] = t;
  for (const Request& r : requests) {
    if (r.index < 0 || static_cast<size_t>(r.index) >= requests.size())
      fail("aggregator", "request index {} outside [0, {})", r.index, requests.size());
    const auto task = task_index_.find(r.task);
    if (task == task_index_.end()) continue;  // an lm_eval: task's: kept apart
    task_of_[static_cast<size_t>(r.index)] = task->second;
    auto& docs = doc_requests_[task->second];
    if (docs.size() <= static_cast<size_t>(r.doc_id)) docs.resize(static_cast<size_t>(r.doc_id) + 1);
    docs[static_cast<size_t>(r.doc_id)].push_back(r.index);
  }
  for (size_t t = 0; t < tasks.size(); ++t)
    for (const auto& doc : doc_requests_[t]) requests_left_[t].push_back(doc.size());
}

void Aggregator::add(std::vector<ItemResult> items) {
  for (ItemResult& r : items) {
    const size_t i = static_cast<size_t>(r.request_index);
    if (i >= items_.size()) fail("aggregator", "a result for request {}, but the run has {}", i, items_.size());
    items_[i].push_back(std::move(r));
    count_if_complete(i);
  }
}

void Aggregator::count_if_complete(size_t i) {
  if (!ours(i) || static_cast<int32_t>(items_[i].size()) != items_[i].front().parts) return;
  const size_t t = task_of_[i];
  if (--requests_left_[t][static_cast<size_t>(requests_[i].doc_id)] == 0) {
    ++documents_done_[t];
    if (tasks_[t].runs_programs()) ready_.emplace_back(t, static_cast<size_t>(requests_[i].doc_id));
  }
}

bool Aggregator::record(size_t t, size_t d, DocRecord& rec) const {
  rec.task = &tasks_[t];
  rec.doc = tasks_[t].documents()[d];
  for (int64_t i : doc_requests_[t][d]) {
    const std::vector<ItemResult>& items = items_[static_cast<size_t>(i)];
    if (items.empty()) return false;
    std::vector<ItemResult> parts = items;
    std::sort(parts.begin(), parts.end(), [](const ItemResult& a, const ItemResult& b) { return a.part < b.part; });
    try {
      rec.results.push_back(combine_items(parts).at(0));
    } catch (const Error&) {
      return false;  // some windows of a rolling request are missing: the request is incomplete
    }
    rec.requests.push_back(requests_[static_cast<size_t>(i)]);
  }
  return true;
}

std::vector<std::string> Aggregator::take_ready_programs() {
  std::vector<std::string> out;
  for (const auto& [t, d] : ready_) {
    DocRecord rec;
    if (!record(t, d, rec)) continue;
    for (size_t f = 0; f < rec.task->filters().size(); ++f)
      for (std::string& program : rec.task->programs(rec.doc, rec.results, f)) out.push_back(std::move(program));
  }
  ready_.clear();
  return out;
}

nlohmann::json Aggregator::progress() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t t = 0; t < tasks_.size(); ++t)
    j[tasks_[t].name()] = {{"documents", doc_requests_[t].size()}, {"documents_done", documents_done_[t]}};
  // The lm_eval: tasks' requests, counted together (lm-eval scores them after the run).
  int64_t outside = 0, done = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (ours(i)) continue;
    ++outside;
    if (!items_[i].empty() && static_cast<int32_t>(items_[i].size()) == items_[i].front().parts) ++done;
  }
  if (outside > 0) j["lm_eval"] = {{"requests", outside}, {"requests_done", done}};
  return j;
}

Aggregator::Documents Aggregator::records() const {
  // A document counts only when every one of its requests has a result.
  Documents out;
  for (size_t t = 0; t < tasks_.size(); ++t) {
    for (size_t d = 0; d < doc_requests_[t].size(); ++d) {
      DocRecord rec;
      if (!record(t, d, rec)) {
        out.incomplete.push_back(fmt::format("{} doc {}", tasks_[t].name(), rec.doc.doc_id));
        continue;
      }
      out.scored.push_back(std::move(rec));
    }
  }
  return out;
}

Aggregator::Documents Aggregator::documents(const ProgramVerdicts* verdicts) const {
  Documents all = records();
  Documents out;
  out.incomplete = std::move(all.incomplete);
  // The other tasks' requests, whole or not at all: their scorer (lm-eval) needs every response.
  size_t missing = 0, outside = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (ours(i)) continue;
    ++outside;
    std::vector<RequestResult> combined;
    try {
      if (!items_[i].empty()) combined = combine_items(items_[i]);
    } catch (const Error&) {
      combined.clear();  // some windows of a rolling request are missing
    }
    if (combined.empty()) {
      ++missing;
    } else {
      out.outside.push_back(std::move(combined.front()));
    }
  }
  if (missing > 0) {
    out.outside.clear();
    out.incomplete.push_back(fmt::format(
        "lm_eval tasks: {} of {} requests have no result, so lm-eval scored none of them", missing, outside));
  }
  for (DocRecord& rec : all.scored) {
    if (rec.task->runs_programs()) {
      // A document whose programs have no verdict (the run stopped before they ran) is not scored.
      bool judged = true;
      for (size_t f = 0; f < rec.task->filters().size() && judged; ++f)
        for (const std::string& program : rec.task->programs(rec.doc, rec.results, f))
          judged = judged && verdicts && verdicts->count(program);
      if (!judged) {
        out.incomplete.push_back(fmt::format("{} doc {} (its programs did not run)", rec.task->name(), rec.doc.doc_id));
        continue;
      }
    }
    rec.metrics = rec.task->process_results_all(rec.doc, rec.results, verdicts);
    out.scored.push_back(std::move(rec));
  }
  return out;
}

std::vector<std::string> Aggregator::programs() const {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (const DocRecord& rec : records().scored) {
    if (!rec.task->runs_programs()) continue;
    for (size_t f = 0; f < rec.task->filters().size(); ++f)
      for (std::string& program : rec.task->programs(rec.doc, rec.results, f))
        if (seen.insert(program).second) out.push_back(std::move(program));
  }
  return out;
}

std::vector<TaskScores> score_tasks(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                                    int64_t bootstrap_iters) {
  std::vector<TaskScores> out;
  std::map<const Task*, size_t> slot;
  std::set<std::string> names;
  for (const Task* task : tasks) {
    if (!names.insert(task->name()).second) fail("task '" + task->name() + "'", "listed twice");
    if (task->name().find('/') != std::string::npos) {
      fail("task '" + task->name() + "'", "a task name with '/' cannot name a samples file");
    }
    slot[task] = out.size();
    out.push_back(TaskScores{task, {}, {}});
  }
  for (const DocRecord& record : docs) {
    const auto it = slot.find(record.task);
    if (it == slot.end()) fail("aggregator", "document {} belongs to a task not being scored", record.doc.doc_id);
    if (record.results.size() != record.requests.size()) {
      fail(record.task->location(record.doc),
           "{} results for {} requests: incomplete documents belong in the "
           "incomplete list, not in the report",
           record.results.size(), record.requests.size());
    }
    if (record.metrics.size() != record.task->filters().size()) {
      fail(record.task->location(record.doc), "metrics for {} filters, but task '{}' has {}", record.metrics.size(),
           record.task->name(), record.task->filters().size());
    }
    out[it->second].records.push_back(&record);
  }
  for (TaskScores& t : out) {
    std::sort(t.records.begin(), t.records.end(),
              [](const DocRecord* a, const DocRecord* b) { return a->doc.doc_id < b->doc.doc_id; });
    for (size_t i = 1; i < t.records.size(); ++i) {
      if (t.records[i]->doc.doc_id == t.records[i - 1]->doc.doc_id) {
        fail(t.task->location(t.records[i]->doc), "document {} of task '{}' is reported twice",
             t.records[i]->doc.doc_id, t.task->name());
      }
    }
    // A uniform guess among a multiple-choice document's choices (one request each) is right
    // with probability 1 / choices; the task's chance level is the mean over its documents.
    std::optional<double> chance;
    if (t.task->output_type() == OutputType::kMultipleChoice && !t.records.empty()) {
      std::vector<double> per_doc;
      for (const DocRecord* r : t.records) {
        if (!r->requests.empty()) per_doc.push_back(1.0 / static_cast<double>(r->requests.size()));
      }
      if (per_doc.size() == t.records.size()) chance = mean(per_doc);
    }
    // lm-eval's order: filter by filter, each filter's metrics in metric order.
    for (size_t f = 0; f < t.task->filters().size(); ++f) {
      std::vector<const DocMetrics*> metrics;
      for (const DocRecord* r : t.records) metrics.push_back(&r->metrics[f]);
      for (MetricResult& m : aggregate_metrics(t.task->metrics(), metrics, bootstrap_iters)) {
        m.filter = t.task->filters()[f].name();
        // The accuracies; not exact_match (is_greedy) nor bpb, which a guess does not score so.
        if (m.name == "acc" || m.name == "acc_norm" || m.name == "acc_bytes") m.chance = chance;
        t.metrics.push_back(std::move(m));
      }
    }
  }
  return out;
}

namespace {

// The chance level of an aggregate: the same mean of the parts' chance levels as of their
// values; nullopt when any part has none.
std::optional<double> chance_of(const std::vector<std::optional<double>>& chances,
                                const std::vector<SubtaskScore>& sizes, bool weight_by_size) {
  std::vector<SubtaskScore> as_scores;
  for (size_t i = 0; i < chances.size(); ++i) {
    if (!chances[i]) return std::nullopt;
    as_scores.push_back(SubtaskScore{*chances[i], std::nullopt, sizes[i].size});
  }
  if (as_scores.empty()) return std::nullopt;
  return aggregate_subtask_scores(as_scores, weight_by_size);
}

}  // namespace

// Each group's aggregate over the scored tasks under it, as lm-eval's consolidate_group_results;
// a suite score over its members' own metrics (task_group.h).
std::vector<GroupScores> score_groups(const std::vector<TaskScores>& tasks, const std::vector<TaskGroup>& groups) {
  std::map<std::string, const TaskScores*> by_name;
  for (const TaskScores& t : tasks) by_name[t.task->name()] = &t;
  std::map<std::string, size_t> group_slot;  // groups scored so far (children come first)
  std::vector<GroupScores> out;
  out.reserve(groups.size());
  for (const TaskGroup& g : groups) {
    GroupScores r;
    r.group = &g;
    bool nested = false;
    for (const TaskGroup& parent : groups) {
      const auto& m = parent.members();
      nested = nested || std::find(m.begin(), m.end(), g.name()) != m.end();
    }
    r.alias = nested ? " - " + g.alias() : g.alias();
    for (const GroupMetricSpec& spec : g.metrics()) {
      std::vector<SubtaskScore> scores;
      std::vector<std::optional<double>> chances;
      MetricResult result;
      result.name = spec.metric;
      auto take = [&](const MetricResult& m) {
        scores.push_back(SubtaskScore{m.value, m.stderr, m.n});
        chances.push_back(m.chance);
        result.higher_is_better = m.higher_is_better;
        result.n += m.n;
      };
      if (spec.is_suite()) {
        // One metric per member, each its own (a member group's from its scores above); a
        // member without a value leaves the suite unscored rather than averaged over fewer.
        for (const MemberMetric& mm : spec.member_metrics) {
          const MetricResult* found = nullptr;
          if (const auto sub = group_slot.find(mm.member); sub != group_slot.end()) {
            for (const MetricResult& m : out[sub->second].metrics)
              if (m.name == mm.metric && mm.filter == "none") found = &m;
          } else if (const auto it = by_name.find(mm.member); it != by_name.end()) {
            for (const MetricResult& m : it->second->metrics)
              if (m.name == mm.metric && m.filter == mm.filter) found = &m;
          }
          if (!found) {
            scores.clear();
            break;
          }
          take(*found);
        }
        if (scores.empty()) continue;
        result.value = aggregate_subtask_scores(scores, false);
        result.stderr = suite_stderr(scores);
      } else {
        for (const std::string& name : g.tasks()) {
          const auto it = by_name.find(name);
          if (it == by_name.end()) continue;
          for (const MetricResult& m : it->second->metrics) {
            if (m.name != spec.metric || m.filter != "none") continue;  // groups aggregate filter "none" only
            take(m);
          }
        }
        if (scores.empty()) continue;
        result.value = aggregate_subtask_scores(scores, spec.weight_by_size);
        result.stderr = pooled_sample_stderr(scores);
      }
      result.chance = chance_of(chances, scores, spec.weight_by_size);
      r.metrics.push_back(result);
    }
    group_slot[g.name()] = out.size();
    out.push_back(std::move(r));
  }
  return out;
}

int64_t documents_under_limit(const Task& task, std::optional<int64_t> limit) {
  const int64_t original = static_cast<int64_t>(task.documents().size());
  return limit ? std::min(std::max<int64_t>(*limit, 0), original) : original;
}

Scores score_run(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs, int64_t bootstrap_iters,
                 const std::vector<TaskGroup>& groups) {
  Scores scores;
  scores.tasks = score_tasks(tasks, docs, bootstrap_iters);
  scores.groups = score_groups(scores.tasks, groups);
  return scores;
}

}  // namespace gpueval
