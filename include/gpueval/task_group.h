// A TaskGroup is a set of tasks reported together, defined the way lm-evaluation-harness defines
// its groups: a YAML file with `group` (its name), optional `group_alias`, `task` (member task
// or group names) and `aggregate_metric_list` (entries {metric, aggregation: mean,
// weight_by_size: true}), plus metadata. Naming a group in a run's `tasks:` selects every task
// under it (expand_tasks). The group's score for a metric is lm-eval's
// aggregate_subtask_metrics over every task under it, nested groups flattened: the mean of the
// task scores weighted by their number of documents (or unweighted when weight_by_size is
// false), and its stderr lm-eval's pooled_sample_stderr:
//   sqrt( sum_i (n_i - 1) * n_i * se_i^2 / (sum_i n_i - k) / sum_i n_i )   over k tasks,
// "N/A" when any task's stderr is. A loaded TaskGroup is an immutable value.
//
// gpueval extension, a *suite score*: an aggregate_metric_list entry with `member_metrics`
// scores the group as the unweighted mean of its MEMBERS' own metrics, which may differ from
// member to member (lm-eval's groups need one metric in every task):
//   aggregate_metric_list:
//     - metric: score                 # the name the group's score is reported under
//       member_metrics:               # every member listed under `task`, once each
//         arc_easy: acc_norm          # a task's metric under filter "none"
//         triviaqa: exact_match,remove_whitespace   # "metric,filter", as results.json keys it
//         mmlu_continuation: acc      # a member group: its own aggregate metric
// (In a flow mapping, {triviaqa: "exact_match,remove_whitespace"}, quote the comma's value.)
// weight_by_size may be left out or false (never true), aggregation is mean. The score is
//   mean_i v_i,   stderr sqrt( sum_i se_i^2 ) / k   over the k members (independent samples),
// "N/A" when any member's stderr is, and no score at all when a member has no value for its
// metric (unscored). Its chance level (MetricResult::chance) is the mean of the members', when
// every member has one. A member not under `task`, a member left out or named twice (in
// member_metrics or under `task`), and (once the
// tasks are loaded, check_member_metrics) a metric, filter or group metric the member does not
// have, or members whose metrics point different ways (higher vs lower is better), are errors
// naming the group file and the line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/metrics.h"

namespace gpueval {

// One member's metric in a suite score (gpueval's member_metrics).
struct MemberMetric {
  std::string member;  // a task or group listed under the group's `task`
  std::string metric;  // "acc_norm"
  std::string filter = "none";  // "remove_whitespace" for "exact_match,remove_whitespace"
  std::string where;  // "<group file>:<line>" of its entry, for errors
};

struct GroupMetricSpec {
  std::string metric;  // "acc"
  bool weight_by_size = true;  // lm-eval's default (false for a suite score)
  // Non-empty: a suite score, one entry per member in `task` order (see above).
  std::vector<MemberMetric> member_metrics;
  std::string where;  // "<group file>:<line>" of the entry
  bool is_suite() const { return !member_metrics.empty(); }
};

struct TaskSelection;

class TaskGroup {
 public:
  // Reads a group file; errors name the file and line.
  static TaskGroup load(const std::string& yaml_path);
  // Whether the YAML file at `path` defines a group (has a top-level `group` key).
  static bool is_group_file(const std::string& path);

  const std::string& name() const { return name_; }
  const std::string& alias() const { return alias_; }  // group_alias, else the name
  const std::vector<std::string>& members() const { return members_; }  // as listed
  const std::vector<std::string>& tasks() const { return tasks_; }  // every task under it, nested groups flattened
  const std::vector<GroupMetricSpec>& metrics() const { return metrics_; }
  const nlohmann::json& version() const { return version_; }  // metadata.version, or null
  const std::string& yaml_path() const { return yaml_path_; }

 private:
  friend TaskSelection expand_tasks(const std::vector<std::string>&, const std::vector<std::string>&);
  std::string name_;
  std::string alias_;
  std::string yaml_path_;
  std::vector<std::string> members_;
  std::vector<std::string> tasks_;
  std::vector<GroupMetricSpec> metrics_;
  nlohmann::json version_;
};

// What a run's `tasks:` list selects: the tasks to load (names or paths, each once, in the
// order first reached) and the groups named in it or under it, children before parents.
struct TaskSelection {
  std::vector<std::string> tasks;
  std::vector<TaskGroup> groups;
};

// Expands group names (found with find_task_file) into their tasks. A group that contains
// itself, or a name that is neither a task nor a group file, is an Error.
TaskSelection expand_tasks(const std::vector<std::string>& names, const std::vector<std::string>& search_dirs);

class Task;

// Checks every suite score's member metrics against the loaded tasks of the run and its groups
// (children before parents, as expand_tasks gives them): a task member must have the metric and
// the filter, a group member the aggregate metric (filter "none"), and the members' metrics one
// direction. Errors are "<group file>:<line>: member_metrics: ..." naming what the member has.
void check_member_metrics(const std::vector<TaskGroup>& groups, const std::vector<const Task*>& tasks);

// One task's score for the group aggregation.
struct SubtaskScore {
  double value = 0;
  std::optional<double> stderr;  // nullopt: "N/A"
  int64_t size = 0;  // documents scored
};

// lm-eval's aggregate_subtask_metrics: sum(value * size) / sum(size), or the plain mean when
// !weight_by_size. NaN for no scores.
double aggregate_subtask_scores(const std::vector<SubtaskScore>& scores, bool weight_by_size);
// lm-eval's pooled_sample_stderr over the sizes; nullopt when any stderr is missing or there
// are no more documents than tasks.
std::optional<double> pooled_sample_stderr(const std::vector<SubtaskScore>& scores);
// A suite score's stderr: sqrt(sum se_i^2) / k over the k members; nullopt when any stderr is
// missing or there are no scores. (Its value is aggregate_subtask_scores(scores, false).)
std::optional<double> suite_stderr(const std::vector<SubtaskScore>& scores);

}  // namespace gpueval
