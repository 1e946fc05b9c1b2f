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

YAML::Node load_yaml(const std::string& path) { return parse_yaml(io::read_file(path, uint64_t{1} << 24), path); }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// member_metrics: {member: "metric" or "metric,filter"}, in file order.
std::vector<MemberMetric> parse_member_metrics(const YAML::Node& node, const std::string& yaml_path) {
  const std::string at = yaml_where(yaml_path, node);
  if (!node.IsMap() || node.size() == 0) {
    fail(at, "member_metrics must be a mapping of member names to their metrics (arc_easy: acc_norm)");
  }
  std::vector<MemberMetric> out;
  for (const auto& entry : node) {
    MemberMetric m;
    m.where = yaml_where(yaml_path, entry.first);
    if (!entry.first.IsScalar() || entry.first.Scalar().empty())
      fail(m.where, "member_metrics: a key must be a member name");
    m.member = entry.first.Scalar();
    if (!entry.second.IsScalar() || entry.second.Scalar().empty()) {
      fail(m.where, "member_metrics: the metric of '{}' must be a name, or \"metric,filter\"", m.member);
    }
    const std::string spelled = entry.second.Scalar();
    const size_t comma = spelled.find(',');
    m.metric = spelled.substr(0, comma);
    if (comma != std::string::npos) m.filter = spelled.substr(comma + 1);
    if (m.metric.empty() || m.filter.empty() || m.filter.find(',') != std::string::npos) {
      fail(m.where, "member_metrics: '{}' of '{}' is not \"metric\" or \"metric,filter\"", spelled, m.member);
    }
    for (const MemberMetric& earlier : out) {
      if (earlier.member == m.member) fail(m.where, "member_metrics: '{}' is named twice", m.member);
    }
    out.push_back(std::move(m));
  }
  return out;
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
        spec.where = at;
        bool weight_given = false;
        for (const auto& [k, value] : m.items()) {
          if (k == "metric") continue;
          if (k == "aggregation") {
            if (value != "mean") fail(at, "aggregation {}: only mean is supported for groups", value.dump());
          } else if (k == "weight_by_size") {
            if (!value.is_boolean()) fail(at, "weight_by_size must be true or false");
            spec.weight_by_size = value.get<bool>();
            weight_given = true;
          } else if (k == "filter_list") {
            if (value != nlohmann::json::array({"none"}) && value != "none")
              fail(at, "filter_list: only none is supported");
          } else if (k == "member_metrics") {
            spec.member_metrics = parse_member_metrics(item["member_metrics"], yaml_path);
          } else {
            fail(at,
                 "unknown aggregate_metric_list key '{}' (metric, aggregation, weight_by_size, filter_list, "
                 "member_metrics)",
                 k);
          }
        }
        if (spec.is_suite()) {
          if (weight_given && spec.weight_by_size) {
            fail(at,
                 "weight_by_size: a suite score (member_metrics) is the unweighted mean of its members; "
                 "leave weight_by_size out or set it false");
          }
          spec.weight_by_size = false;
        }
        for (const GroupMetricSpec& earlier : g.metrics_) {
          if (earlier.metric == spec.metric && (earlier.is_suite() || spec.is_suite()))
            fail(at, "metric '{}' is listed twice", spec.metric);
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
  for (GroupMetricSpec& spec : g.metrics_) {
    if (!spec.is_suite()) continue;
    std::vector<MemberMetric> ordered;
    for (const std::string& member : g.members_) {
      if (std::count(g.members_.begin(), g.members_.end(), member) > 1) {
        fail(spec.where, "member_metrics: member '{}' is listed twice under task, so the mean would count it twice",
             member);
      }
      const auto it = std::find_if(spec.member_metrics.begin(), spec.member_metrics.end(),
                                   [&](const MemberMetric& m) { return m.member == member; });
      if (it == spec.member_metrics.end()) {
        fail(spec.where, "member_metrics: no metric for member '{}' (every member of group '{}' needs one)", member,
             g.name_);
      }
      ordered.push_back(*it);
    }
    for (const MemberMetric& m : spec.member_metrics) {
      if (std::find(g.members_.begin(), g.members_.end(), m.member) == g.members_.end()) {
        fail(m.where, "member_metrics: '{}' is not a member of group '{}' (its members: {})", m.member, g.name_,
             join(g.members_));
      }
    }
    spec.member_metrics = std::move(ordered);
  }
  return g;
}

TaskSelection expand_tasks(const std::vector<std::string>& names, const std::vector<std::string>& search_dirs) {
  TaskSelection out;
  std::map<std::string, size_t> group_index;  // finished groups
  std::vector<std::string> open;  // groups being expanded, for cycles
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

std::optional<double> suite_stderr(const std::vector<SubtaskScore>& scores) {
  if (scores.empty()) return std::nullopt;
  std::vector<double> squares;
  for (const SubtaskScore& s : scores) {
    if (!s.stderr) return std::nullopt;
    squares.push_back(*s.stderr * *s.stderr);
  }
  return std::sqrt(python_sum(squares)) / static_cast<double>(scores.size());
}

void check_member_metrics(const std::vector<TaskGroup>& groups, const std::vector<const Task*>& tasks) {
  std::map<std::string, const Task*> task_by_name;
  for (const Task* t : tasks) task_by_name[t->name()] = t;
  std::map<std::string, const TaskGroup*> group_by_name;
  for (const TaskGroup& g : groups) group_by_name[g.name()] = &g;
  // A member group's direction for `metric`: a suite score's members', else that of the first
  // task under it that has the metric (true if none), as the aggregator sets it.
  std::function<bool(const TaskGroup&, const std::string&)> group_direction = [&](const TaskGroup& g,
                                                                                  const std::string& metric) {
    for (const GroupMetricSpec& spec : g.metrics()) {
      if (spec.metric != metric || !spec.is_suite()) continue;
      // A suite's members share one direction (checked before it, as children come first).
      const MemberMetric& first = spec.member_metrics.front();
      if (const auto sub = group_by_name.find(first.member); sub != group_by_name.end())
        return group_direction(*sub->second, first.metric);
      if (const auto t = task_by_name.find(first.member); t != task_by_name.end()) {
        for (const MetricSpec& ms : t->second->metrics())
          if (ms.name == first.metric) return ms.higher_is_better;
      }
      return true;
    }
    for (const std::string& name : g.tasks()) {
      const auto t = task_by_name.find(name);
      if (t == task_by_name.end()) continue;
      for (const MetricSpec& ms : t->second->metrics())
        if (ms.name == metric) return ms.higher_is_better;
    }
    return true;
  };
  for (const TaskGroup& g : groups) {
    for (const GroupMetricSpec& spec : g.metrics()) {
      std::optional<bool> direction;
      std::string first_member;
      for (const MemberMetric& m : spec.member_metrics) {
        const std::string label = m.filter == "none" ? m.metric : m.metric + "," + m.filter;
        bool higher = true;
        if (const auto sub = group_by_name.find(m.member); sub != group_by_name.end()) {
          std::vector<std::string> names;
          bool found = false;
          for (const GroupMetricSpec& s : sub->second->metrics()) {
            names.push_back(s.metric);
            found = found || s.metric == m.metric;
          }
          if (!found) {
            fail(m.where, "member_metrics: group '{}' has no aggregate metric '{}' (its aggregate metrics: {})",
                 m.member, m.metric, names.empty() ? std::string("none") : join(names));
          }
          if (m.filter != "none") {
            fail(m.where, "member_metrics: group '{}' is scored under filter none only, not '{}'", m.member, m.filter);
          }
          higher = group_direction(*sub->second, m.metric);
        } else if (const auto t = task_by_name.find(m.member); t != task_by_name.end()) {
          const Task& task = *t->second;
          std::vector<std::string> names;
          const MetricSpec* found = nullptr;
          for (const MetricSpec& ms : task.metrics()) {
            names.push_back(ms.name);
            if (ms.name == m.metric) found = &ms;
          }
          if (!found) {
            fail(m.where, "member_metrics: task '{}' has no metric '{}' (its metrics: {})", m.member, m.metric,
                 join(names));
          }
          std::vector<std::string> filters;
          for (const FilterPipeline& f : task.filters()) filters.push_back(f.name());
          if (std::find(filters.begin(), filters.end(), m.filter) == filters.end()) {
            fail(m.where, "member_metrics: task '{}' has no filter '{}' for {} (its filters: {})", m.member, m.filter,
                 m.metric, join(filters));
          }
          higher = found->higher_is_better;
        } else {
          fail(m.where, "member_metrics: '{}' is neither a task nor a group of this run", m.member);
        }
        if (!direction) {
          direction = higher;
          first_member = m.member + " " + label;
        } else if (*direction != higher) {
          fail(m.where, "member_metrics: {} is {}-is-better but {} is {}-is-better: a suite score needs one direction",
               m.member + " " + label, higher ? "higher" : "lower", first_member, *direction ? "higher" : "lower");
        }
      }
    }
  }
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
