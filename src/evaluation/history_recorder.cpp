#include "evaluation/history_recorder.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "common/console.h"
#include "common/file_io.h"
#include "gpueval/error.h"
#include "report/tensorboard.h"

namespace gpueval {
namespace {

CheckpointInfo info(const Checkpoint& c) { return CheckpointInfo{c.fingerprint, c.path, c.name, c.mtime, c.step}; }

// What score_rows reads of a run's scores, keyed as results.json keys it (report.cpp): each
// task's documents counted under the limit (n-samples "effective"), each group's members
// (group_subtasks), the directions (higher_is_better) and the chance levels ("chance").
struct ScoreIndex {
  std::map<std::string, int64_t> effective;
  std::map<std::string, std::vector<std::string>> members;  // groups only
  std::vector<std::string> group_order;  // group_subtasks' order of the groups
  std::map<std::string, std::map<std::string, bool>> higher;
  std::map<std::string, std::map<std::string, double>> chance;  // "<metric>,<filter>" -> level
};

ScoreIndex index_scores(const Scores& scores, std::optional<int64_t> limit) {
  ScoreIndex x;
  for (const TaskScores& t : scores.tasks) {
    const std::string& name = t.task->name();
    x.effective[name] = documents_under_limit(*t.task, limit);
    std::map<std::string, bool> hib;
    for (const MetricSpec& spec : t.task->metrics()) hib[spec.name] = spec.higher_is_better;
    x.higher[name] = hib;
    for (const MetricResult& m : t.metrics)
      if (m.chance) x.chance[name][m.name + "," + m.filter] = *m.chance;
  }
  for (const LmEvalScores& t : scores.lm_eval) {  // lm-eval's tasks and groups, as lm-eval reported them
    if (t.is_group) {
      if (x.members.emplace(t.name, t.subtasks).second) x.group_order.push_back(t.name);
    } else if (!t.metrics.empty()) {
      x.effective[t.name] = t.metrics.front().n;
    }
    for (const MetricResult& m : t.metrics) x.higher[t.name][m.name] = m.higher_is_better;
  }
  for (const GroupScores& g : scores.groups) {
    const std::string& name = g.group->name();
    if (x.members.emplace(name, g.group->members()).second) x.group_order.push_back(name);
    for (const MetricResult& m : g.metrics) {
      if (m.chance) x.chance[name][m.name + ",none"] = *m.chance;
      for (const GroupMetricSpec& spec : g.group->metrics())
        if (spec.is_suite() && spec.metric == m.name) x.higher[name][m.name] = m.higher_is_better;
    }
  }
  return x;
}

std::optional<bool> direction(const ScoreIndex& x, const std::string& task, const std::string& metric) {
  const auto h = x.higher.find(task);
  if (h == x.higher.end()) return std::nullopt;
  const auto b = h->second.find(metric);
  return b == h->second.end() ? std::nullopt : std::optional<bool>(b->second);
}

// The tasks under a group, through nested groups; `seen` stops a cycle.
void leaves(const ScoreIndex& x, const std::string& name, std::set<std::string>& seen, std::vector<std::string>& out) {
  if (!seen.insert(name).second) return;
  const auto m = x.members.find(name);
  if (m == x.members.end()) {
    out.push_back(name);
    return;
  }
  for (const std::string& member : m->second) leaves(x, member, seen, out);
}

// One score of a task or group: a row with its stderr, chance level and parent; n and direction
// are the caller's.
ScoreRow score_row(const ScoreIndex& x, const std::string& task, const MetricResult& m, const std::string& filter,
                   const std::map<std::string, std::string>& parent) {
  ScoreRow r;
  r.task = task;
  r.metric = m.name;
  r.filter = filter;
  r.value = m.value;
  r.stderr_value = m.stderr;
  r.is_group = x.members.count(task) > 0;
  if (const auto p = parent.find(task); p != parent.end()) r.parent = p->second;
  if (const auto c = x.chance.find(task); c != x.chance.end()) {
    if (const auto v = c->second.find(m.name + "," + filter); v != c->second.end()) r.chance = v->second;
  }
  return r;
}

// One row per metric and filter of a task's or group's scores, in results.json's key order: a
// metric and filter scored twice keeps its first place and its last value.
std::vector<ScoreRow> rows_of(const ScoreIndex& x, const std::string& task, const std::vector<MetricResult>& metrics,
                              bool group, const std::map<std::string, std::string>& parent) {
  std::vector<ScoreRow> rows;
  static const std::string kStderr = "_stderr";
  for (const MetricResult& m : metrics) {
    if (m.name.size() > kStderr.size() && m.name.compare(m.name.size() - kStderr.size(), kStderr.size(), kStderr) == 0)
      continue;  // results.json's stderr keys end so: never a score
    ScoreRow r = score_row(x, task, m, group ? "none" : m.filter, parent);
    const auto same = std::find_if(rows.begin(), rows.end(),
                                   [&](const ScoreRow& o) { return o.metric == r.metric && o.filter == r.filter; });
    if (same != rows.end()) {
      *same = std::move(r);
    } else {
      rows.push_back(std::move(r));
    }
  }
  for (ScoreRow& r : rows) {
    if (group) {
      std::vector<std::string> under;
      std::set<std::string> seen;
      leaves(x, task, seen, under);
      std::optional<bool> hib = direction(x, task, r.metric);  // a suite score's own
      for (const std::string& t : under) {
        if (const auto e = x.effective.find(t); e != x.effective.end()) r.n += e->second;
        if (!hib) hib = direction(x, t, r.metric);
      }
      r.higher_is_better = hib.value_or(true);
    } else {
      r.n = x.effective.at(task);
      r.higher_is_better = direction(x, task, r.metric).value_or(true);
    }
  }
  return rows;
}

}  // namespace

std::vector<ScoreRow> score_rows(const Scores& scores, std::optional<int64_t> limit) {
  const ScoreIndex x = index_scores(scores, limit);
  // Each task's or group's parent: the first group (in group_subtasks' order) that lists it.
  std::map<std::string, std::string> parent;
  for (const std::string& g : x.group_order)
    for (const std::string& m : x.members.at(g))
      if (m != g) parent.emplace(m, g);
  // results.json's "results": by name, a group in the place of a task of its name.
  std::map<std::string, std::vector<ScoreRow>> by_name;
  for (const TaskScores& t : scores.tasks)
    by_name[t.task->name()] = rows_of(x, t.task->name(), t.metrics, false, parent);
  for (const GroupScores& g : scores.groups)
    by_name[g.group->name()] = rows_of(x, g.group->name(), g.metrics, true, parent);
  for (const LmEvalScores& t : scores.lm_eval) by_name[t.name] = rows_of(x, t.name, t.metrics, t.is_group, parent);
  std::vector<ScoreRow> out;
  for (auto& [name, rows] : by_name) out.insert(out.end(), rows.begin(), rows.end());
  return out;
}

HistoryRecorder::HistoryRecorder(const RunConfig& config, const std::string& config_fp)
    : history_(History::open(History::default_path(config.history))), config_fp_(config_fp) {
  run_id_ = history_.begin_run(config_fp, config.to_json(), config.source);
}

ScoredCallback HistoryRecorder::recorder(const Checkpoint& c, nlohmann::json* line) {
  return [this, &c, line](const std::vector<DocRecord>& records, const Scores& run_scores, const RunSummary& summary,
                          const std::string& state) {
    const std::vector<ScoreRow> scores = score_rows(run_scores, summary.limit);
    history_.record(run_id_, info(c), config_fp_, state == "complete" ? "complete" : "incomplete", scores,
                    samples_from_records(records));
    if (line) (*line)["scores"] = primary_json(scores);
    scored_.push_back(c.name);
  };
}

nlohmann::json HistoryRecorder::primary_json(const std::vector<ScoreRow>& scores) {
  ScoredCheckpoint sc;
  sc.scores = scores;
  nlohmann::json out = nlohmann::json::object();
  for (const ScoreRow& r : primary_scores(sc))
    out[r.task] = {{"metric", r.metric},
                   {"value", r.value},
                   {"stderr", r.stderr_value ? nlohmann::json(*r.stderr_value) : nlohmann::json()}};
  return out;
}

std::vector<Regression> HistoryRecorder::regressions(double points) const {
  std::vector<Regression> out;
  for (const Regression& r : find_regressions(history_.trend(config_fp_), points)) {
    if (std::find(scored_.begin(), scored_.end(), r.current) == scored_.end()) continue;
    // Why the run exits 4: shown even when quiet.
    Console::error(fmt::format(
        "[sched] regression: {} {} went from {:.4f} ({}) to {:.4f} ({}): {:.2f} {} worse, more than {}", r.task,
        r.metric, r.before, r.previous, r.after, r.current, r.drop_points, r.in_points ? "points" : "units", points));
    out.push_back(r);
  }
  return out;
}

std::string config_name(const RunConfig& config) {
  std::string name = io::base_name(config.source);
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

void HistoryRecorder::export_tensorboard(const std::string& logdir, const std::string& name) const {
  if (logdir.empty()) return;
  tensorboard::ExportResult r;
  try {
    r = tensorboard::export_trend(logdir, name, config_fp_, history_.trend(config_fp_));
  } catch (const Error& e) {
    throw Error(std::string("TensorBoard export (the scores are in the reports and the history): ") + e.what());
  }
  if (r.checkpoints == 0)
    std::cerr << fmt::format("[sched] tensorboard: {} holds every checkpoint already ({})\n", r.run_dir, r.already);
  else
    std::cerr << fmt::format("[sched] tensorboard: {} checkpoint{}, {} scalars written to {}\n", r.checkpoints,
                             r.checkpoints == 1 ? "" : "s", r.scalars, r.file);
}

}  // namespace gpueval
