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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/metrics.h"

namespace gpueval {

struct GroupMetricSpec {
  std::string metric;          // "acc"
  bool weight_by_size = true;  // lm-eval's default
};

struct TaskSelection;

class TaskGroup {
 public:
  // Reads a group file; errors name the file and line.
  static TaskGroup load(const std::string& yaml_path);
  // Whether the YAML file at `path` defines a group (has a top-level `group` key).
  static bool is_group_file(const std::string& path);

  const std::string& name() const { return name_; }
  const std::string& alias() const { return alias_; }           // group_alias, else the name
  const std::vector<std::string>& members() const { return members_; }  // as listed
  const std::vector<std::string>& tasks() const { return tasks_; }      // every task under it, nested groups flattened
  const std::vector<GroupMetricSpec>& metrics() const { return metrics_; }
  const nlohmann::json& version() const { return version_; }    // metadata.version, or null

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

// One task's score for the group aggregation.
struct SubtaskScore {
  double value = 0;
  std::optional<double> stderr;  // nullopt: "N/A"
  int64_t size = 0;              // documents scored
};

// lm-eval's aggregate_subtask_metrics: sum(value * size) / sum(size), or the plain mean when
// !weight_by_size. NaN for no scores.
double aggregate_subtask_scores(const std::vector<SubtaskScore>& scores, bool weight_by_size);
// lm-eval's pooled_sample_stderr over the sizes; nullopt when any stderr is missing or there
// are no more documents than tasks.
std::optional<double> pooled_sample_stderr(const std::vector<SubtaskScore>& scores);

}  // namespace gpueval
