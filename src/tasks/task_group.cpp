#include "gpueval/task_group.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include <yaml-cpp/yaml.h>

#include "common/file_io.h"
#include "common/yaml_json.h"
#include "gpueval/error.h"
#include "gpueval/task.h"

namespace gpueval {
namespace {

YAML::Node load_yaml(const std::string& path) {
  try {
    return YAML::Load(io::read_file(path, uint64_t{1} << 24));
  } catch (const YAML::Exception& e) {
    fail(e.mark.line >= 0 ? path + ":" + std::to_string(e.mark.line + 1) : path, "invalid YAML: {}", e.msg);
  }
}

}  // namespace

bool TaskGroup::is_group_file(const std::string& path) {
  const YAML::Node root = load_yaml(path);
  return root.IsMap() && root["group"];
}

TaskGroup TaskGroup::load(const std::string& yaml_path) {
  const YAML::Node root = load_yaml(yaml_path);
  if (!root.IsMap()) fail(yaml_path, "a group file must be a YAML mapping of keys to values");
  TaskGroup g;
  g.yaml_path_ = yaml_path;
  for (const auto& entry : root) {
    const std::string where = yaml_where(yaml_path, entry.first);
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const YAML::Node& v = entry.second;
    if (key == "group") {
      if (!v.IsScalar() || v.Scalar().empty()) fail(where, "group must be a non-empty name");
      g.name_ = v.Scalar();
    } else if (key == "group_alias") {
      if (!v.IsScalar()) fail(where, "group_alias must be a string");
      g.alias_ = v.Scalar();
    } else if (key == "task") {
      if (!v.IsSequence() || v.size() == 0) fail(where, "task must be a non-empty list of task or group names");
      for (const YAML::Node& item : v) {
        if (!item.IsScalar() || item.Scalar().empty()) fail(yaml_where(yaml_path, item), "task entries must be names");
        g.members_.push_back(item.Scalar());
      }
    } else if (key == "aggregate_metric_list") {
      if (!v.IsSequence()) fail(where, "aggregate_metric_list must be a list");
      for (const YAML::Node& item : v) {
        const std::string at = yaml_where(yaml_path, item);
        const nlohmann::json m = yaml_to_json(item, yaml_path);
        if (!m.is_object() || !m.contains("metric") || !m["metric"].is_string()) {
          fail(at, "an aggregate_metric_list entry must be a mapping with 'metric'");
        }
        GroupMetricSpec spec;
        spec.metric = m["metric"].get<std::string>();
        for (const auto& [k, value] : m.items()) {
          if (k == "metric") continue;
          if (k == "aggregation") {
            if (value != "mean") fail(at, "aggregation {}: only mean is supported for groups", value.dump());
          } else if (k == "weight_by_size") {
            if (!value.is_boolean()) fail(at, "weight_by_size must be true or false");
            spec.weight_by_size = value.get<bool>();
          } else if (k == "filter_list") {
            if (value != nlohmann::json::array({"none"}) && value != "none") fail(at, "filter_list: only none is supported");
          } else {
            fail(at, "unknown aggregate_metric_list key '{}'", k);
          }
        }
        g.metrics_.push_back(spec);
      }
    } else if (key == "metadata") {
      const nlohmann::json m = yaml_to_json(v, yaml_path);
      if (!m.is_object()) fail(where, "metadata must be a mapping");
      if (m.contains("version")) g.version_ = m["version"];
    } else {
      fail(where, "unknown group key '{}' (group, group_alias, task, aggregate_metric_list, metadata)", key);
    }
  }
  if (g.name_.empty()) fail(yaml_path, "missing required key 'group'");
  if (g.members_.empty()) fail(yaml_path, "missing required key 'task'");
  if (g.alias_.empty()) g.alias_ = g.name_;
  return g;
}

TaskSelection expand_tasks(const std::vector<std::string>& names, const std::vector<std::string>& search_dirs) {
  TaskSelection out;
  std::map<std::string, size_t> group_index;  // finished groups
  std::vector<std::string> open;               // groups being expanded, for cycles
  auto add_task = [&](const std::string& t, std::vector<std::string>& into) {
    if (std::find(out.tasks.begin(), out.tasks.end(), t) == out.tasks.end()) out.tasks.push_back(t);
    if (std::find(into.begin(), into.end(), t) == into.end()) into.push_back(t);
  };
  std::function<void(const std::string&, std::vector<std::string>&)> visit = [&](const std::string& name,
                                                                                 std::vector<std::string>& into) {
    if (looks_like_task_path(name)) return add_task(name, into);
    const auto path = find_task_file(name, search_dirs);
    if (!path || !TaskGroup::is_group_file(*path)) return add_task(name, into);  // Task::load reports a missing one
    if (const auto it = group_index.find(name); it != group_index.end()) {
      for (const std::string& t : out.groups[it->second].tasks_) add_task(t, into);
      return;
    }
    if (std::find(open.begin(), open.end(), name) != open.end()) fail(*path, "group '{}' contains itself", name);
    TaskGroup g = TaskGroup::load(*path);
    if (g.name_ != name) fail(*path, "defines group '{}', not '{}'", g.name_, name);
    open.push_back(name);
    for (const std::string& member : g.members_) visit(member, g.tasks_);
    open.pop_back();
    for (const std::string& t : g.tasks_) add_task(t, into);
    group_index[name] = out.groups.size();
    out.groups.push_back(std::move(g));
  };
  std::vector<std::string> top;
  for (const std::string& name : names) visit(name, top);
  return out;
}

double aggregate_subtask_scores(const std::vector<SubtaskScore>& scores, bool weight_by_size) {
  std::vector<double> weighted, sizes;
  for (const SubtaskScore& s : scores) {
    const double size = weight_by_size ? static_cast<double>(s.size) : 1.0;
    weighted.push_back(s.value * size);
    sizes.push_back(size);
  }
  if (scores.empty()) return std::nan("");
  return python_sum(weighted) / python_sum(sizes);
}

std::optional<double> pooled_sample_stderr(const std::vector<SubtaskScore>& scores) {
  std::vector<double> terms, sizes;
  for (const SubtaskScore& s : scores) {
    if (!s.stderr) return std::nullopt;
    const double n = static_cast<double>(s.size);
    terms.push_back((n - 1) * (*s.stderr * *s.stderr) * n);  // Python: (size - 1) * stderr**2 * size
    sizes.push_back(n);
  }
  const double total = python_sum(sizes);
  if (scores.empty() || total <= static_cast<double>(scores.size())) return std::nullopt;
  const double variance = python_sum(terms) / (total - static_cast<double>(scores.size()));
  return std::sqrt(variance / total);
}

}  // namespace gpueval
