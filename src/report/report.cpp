#include "gpueval/report.h"

#include <algorithm>
#include <map>
#include <set>

#include "gpueval/error.h"
#include "common/file_io.h"
#include "report/report_html.h"
#include "common/python_format.h"
#include "report/markdown.h"
#include "common/sha256.h"

namespace gpueval {
namespace {

// One task's documents in doc_id order and its aggregated metrics.
struct TaskResults {
  const Task* task = nullptr;
  std::vector<const DocRecord*> records;
  std::vector<MetricResult> metrics;
};

std::vector<TaskResults> collect(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                                 const RunSummary& summary) {
  std::vector<TaskResults> out;
  std::map<const Task*, size_t> slot;
  std::set<std::string> names;
  for (const Task* task : tasks) {
    if (!names.insert(task->name()).second) fail("task '" + task->name() + "'", "listed twice");
    if (task->name().find('/') != std::string::npos) {
      fail("task '" + task->name() + "'", "a task name with '/' cannot name a samples file");
    }
    slot[task] = out.size();
    out.push_back(TaskResults{task, {}, {}});
  }
  for (const DocRecord& record : docs) {
    const auto it = slot.find(record.task);
    if (it == slot.end()) fail("write_reports", "document {} belongs to a task not being reported", record.doc.doc_id);
    if (record.results.size() != record.requests.size()) {
      fail(record.task->location(record.doc), "{} results for {} requests: incomplete documents belong in the "
           "incomplete list, not in the report", record.results.size(), record.requests.size());
    }
    if (record.metrics.size() != record.task->filters().size()) {
      fail(record.task->location(record.doc), "metrics for {} filters, but task '{}' has {}", record.metrics.size(),
           record.task->name(), record.task->filters().size());
    }
    out[it->second].records.push_back(&record);
  }
  for (TaskResults& t : out) {
    std::sort(t.records.begin(), t.records.end(),
              [](const DocRecord* a, const DocRecord* b) { return a->doc.doc_id < b->doc.doc_id; });
    for (size_t i = 1; i < t.records.size(); ++i) {
      if (t.records[i]->doc.doc_id == t.records[i - 1]->doc.doc_id) {
        fail(t.task->location(t.records[i]->doc), "document {} of task '{}' is reported twice",
             t.records[i]->doc.doc_id, t.task->name());
      }
    }
    // lm-eval's order: filter by filter, each filter's metrics in metric order.
    for (size_t f = 0; f < t.task->filters().size(); ++f) {
      std::vector<const DocMetrics*> metrics;
      for (const DocRecord* r : t.records) metrics.push_back(&r->metrics[f]);
      for (MetricResult& m : aggregate_metrics(t.task->metrics(), metrics, summary.bootstrap_iters)) {
        m.filter = t.task->filters()[f].name();
        t.metrics.push_back(std::move(m));
      }
    }
  }
  return out;
}

// lm-eval's process_results returns int(...) for these two and floats for the others; the
// samples file shows the difference (1 versus 1.0).
bool is_integer_metric(const Task& task, const std::string& metric) {
  return (task.output_type() == OutputType::kMultipleChoice && metric == "exact_match") ||
         (task.output_type() == OutputType::kLoglikelihood && metric == "acc");
}

nlohmann::ordered_json metric_json(const Task& task, const std::string& name, const MetricValue& v) {
  if (v.count) return nlohmann::ordered_json::array({v.value, *v.count});
  if (is_integer_metric(task, name)) return static_cast<int64_t>(v.value);
  return v.value;
}

nlohmann::ordered_json sample(const DocRecord& record, size_t filter) {
  const Task& task = *record.task;
  const DocMetrics& metrics = record.metrics.at(filter);
  const std::vector<std::string> texts = task.filtered_texts(record.results, filter);
  const nlohmann::json target = task.target(record.doc);
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  nlohmann::ordered_json resps = nlohmann::ordered_json::array();
  nlohmann::ordered_json filtered = nlohmann::ordered_json::array();
  nlohmann::ordered_json generation_kwargs = task.ordered_config().value("generation_kwargs", nlohmann::ordered_json());
  for (size_t i = 0; i < record.requests.size(); ++i) {
    const Request& request = record.requests[i];
    const RequestResult& result = record.results[i];
    // Instance.args of lm-eval's requests, and the response each LM method returns, with
    // every leaf turned into str() as lm-eval's sanitize_list does before writing.
    nlohmann::ordered_json args;
    nlohmann::ordered_json response;
    switch (request.type) {
      case RequestType::kLoglikelihood:
        args["arg_0"] = request.context;
        args["arg_1"] = request.continuation;
        response = {py::float_repr(result.logprob), result.is_greedy ? "True" : "False"};
        break;
      case RequestType::kLoglikelihoodRolling:
        args["arg_0"] = request.context;
        response = py::float_repr(result.logprob);
        break;
      case RequestType::kGenerateUntil:
        args["arg_0"] = request.context;
        args["arg_1"] = generation_kwargs;
        response = result.text;
        break;
    }
    arguments["gen_args_" + std::to_string(i)] = args;
    resps.push_back(nlohmann::ordered_json::array({response}));
    filtered.push_back(request.type == RequestType::kGenerateUntil ? nlohmann::ordered_json(texts[i]) : response);
  }
  const std::string target_text = py::str(target);
  nlohmann::ordered_json line;
  line["doc_id"] = record.doc.doc_id;
  line["doc"] = record.doc.fields;
  line["target"] = target_text;
  line["arguments"] = arguments;
  line["resps"] = resps;
  line["filtered_resps"] = filtered;
  line["filter"] = task.filters().at(filter).name();
  nlohmann::ordered_json names = nlohmann::ordered_json::array();
  for (const MetricSpec& spec : task.metrics()) {
    if (metrics.count(spec.name)) names.push_back(spec.name);
  }
  line["metrics"] = names;
  line["doc_hash"] = sha256_hex(py::json_dumps(record.doc.fields, 2));
  line["prompt_hash"] = sha256_hex(record.requests.empty() ? std::string() : record.requests[0].context);
  line["target_hash"] = sha256_hex(target_text);
  for (const MetricSpec& spec : task.metrics()) {
    if (const auto it = metrics.find(spec.name); it != metrics.end()) {
      line[spec.name] = metric_json(task, spec.name, it->second);
    }
  }
  return line;
}

template <typename Map>
nlohmann::ordered_json sorted_by_name(const Map& entries) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, value] : entries) out[name] = value;
  return out;
}

struct GroupResults {
  const TaskGroup* group = nullptr;
  std::string alias;
  std::vector<MetricResult> metrics;
};

// Each group's aggregate over the scored tasks under it, as lm-eval's consolidate_group_results.
std::vector<GroupResults> group_results(const std::vector<TaskResults>& tasks, const RunSummary& summary) {
  std::map<std::string, const TaskResults*> by_name;
  for (const TaskResults& t : tasks) by_name[t.task->name()] = &t;
  std::vector<GroupResults> out;
  for (const TaskGroup& g : summary.groups) {
    GroupResults r;
    r.group = &g;
    bool nested = false;
    for (const TaskGroup& parent : summary.groups) {
      const auto& m = parent.members();
      nested = nested || std::find(m.begin(), m.end(), g.name()) != m.end();
    }
    r.alias = nested ? " - " + g.alias() : g.alias();
    for (const GroupMetricSpec& spec : g.metrics()) {
      std::vector<SubtaskScore> scores;
      MetricResult result;
      result.name = spec.metric;
      for (const std::string& name : g.tasks()) {
        const auto it = by_name.find(name);
        if (it == by_name.end()) continue;
        for (const MetricResult& m : it->second->metrics) {
          if (m.name != spec.metric || m.filter != "none") continue;  // groups aggregate filter "none" only
          scores.push_back(SubtaskScore{m.value, m.stderr, m.n});
          result.higher_is_better = m.higher_is_better;
          result.n += m.n;
        }
      }
      if (scores.empty()) continue;
      result.value = aggregate_subtask_scores(scores, spec.weight_by_size);
      result.stderr = pooled_sample_stderr(scores);
      r.metrics.push_back(result);
    }
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::ordered_json group_entry(const GroupResults& g) {
  nlohmann::ordered_json r;
  for (const MetricResult& m : g.metrics) {
    r[m.name + ",none"] = m.value;
    if (m.stderr) {
      r[m.name + "_stderr,none"] = *m.stderr;
    } else {
      r[m.name + "_stderr,none"] = "N/A";
    }
  }
  r["alias"] = g.alias;
  return r;
}

nlohmann::ordered_json results(const std::vector<TaskResults>& tasks, const RunSummary& summary) {
  std::map<std::string, nlohmann::ordered_json> per_task, configs, versions, n_shot, higher;
  for (const TaskResults& t : tasks) {
    const std::string& name = t.task->name();
    nlohmann::ordered_json r;
    r["alias"] = t.task->alias();
    for (const MetricResult& m : t.metrics) {
      r[m.name + "," + m.filter] = m.value;
      if (m.stderr) {
        r[m.name + "_stderr," + m.filter] = *m.stderr;
      } else {
        r[m.name + "_stderr," + m.filter] = "N/A";
      }
    }
    per_task[name] = r;
    configs[name] = t.task->ordered_config();
    versions[name] = t.task->version();
    n_shot[name] = t.task->num_fewshot();
    nlohmann::ordered_json hib = nlohmann::ordered_json::object();
    for (const MetricSpec& spec : t.task->metrics()) hib[spec.name] = spec.higher_is_better;
    higher[name] = hib;
  }
  const std::vector<GroupResults> groups = group_results(tasks, summary);
  std::map<std::string, nlohmann::ordered_json> per_group;
  std::set<std::string> grouped;
  for (const GroupResults& g : groups) {
    per_group[g.group->name()] = group_entry(g);
    per_task[g.group->name()] = per_group[g.group->name()];
    versions[g.group->name()] = g.group->version();
    for (const std::string& t : g.group->tasks()) grouped.insert(t);
  }
  nlohmann::ordered_json out;
  out["results"] = sorted_by_name(per_task);  // lm-eval sorts its results table by task name
  if (!groups.empty()) out["groups"] = sorted_by_name(per_group);
  nlohmann::ordered_json subtasks = nlohmann::ordered_json::object();
  for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {
    if (!grouped.count(it->task->name())) subtasks[it->task->name()] = nlohmann::ordered_json::array();
  }
  for (const GroupResults& g : groups) subtasks[g.group->name()] = g.group->members();
  out["group_subtasks"] = subtasks;
  out["configs"] = sorted_by_name(configs);
  out["versions"] = sorted_by_name(versions);
  out["n-shot"] = sorted_by_name(n_shot);
  out["higher_is_better"] = sorted_by_name(higher);
  nlohmann::ordered_json n_samples = nlohmann::ordered_json::object();
  for (const TaskResults& t : tasks) {
    const int64_t original = static_cast<int64_t>(t.task->documents().size());
    const int64_t effective = summary.limit ? std::min(std::max<int64_t>(*summary.limit, 0), original) : original;
    n_samples[t.task->name()] = {{"original", original}, {"effective", effective}};
  }
  out["n-samples"] = n_samples;

  nlohmann::ordered_json config;
  config["model"] = summary.model;
  for (const auto& [key, value] : summary.config.items()) {
    if (key != "model") config[key] = value;
  }
  if (!config.contains("limit")) config["limit"] = summary.limit ? nlohmann::ordered_json(*summary.limit) : nullptr;
  if (!config.contains("bootstrap_iters")) config["bootstrap_iters"] = summary.bootstrap_iters;
  out["config"] = config;
  if (!summary.batching.empty()) out["batching"] = summary.batching;
  if (!summary.journal.empty()) out["journal"] = summary.journal;
  if (summary.date) out["date"] = *summary.date;
  // lm-eval's task hash: SHA-256 of the concatenated doc, prompt and target hashes of its samples.
  nlohmann::ordered_json task_hashes = nlohmann::ordered_json::object();
  for (const TaskResults& t : tasks) {
    std::string hashes;
    for (size_t f = 0; f < t.task->filters().size(); ++f) {
      for (const DocRecord* r : t.records) {
        const nlohmann::ordered_json s = sample(*r, f);
        hashes += s["doc_hash"].get<std::string>() + s["prompt_hash"].get<std::string>() +
                  s["target_hash"].get<std::string>();
      }
    }
    task_hashes[t.task->name()] = sha256_hex(hashes);
  }
  out["task_hashes"] = task_hashes;
  out["model_name"] = summary.model;
  out["total_evaluation_time_seconds"] = py::float_repr(summary.wall_seconds);
  out["incomplete"] = summary.incomplete;
  return out;
}

std::string markdown(const std::vector<TaskResults>& tasks, const RunSummary& summary) {
  std::string out = "# gpueval results\n\n";
  out += fmt::format("- model: `{}`\n", markdown_cell(summary.model));
  out += fmt::format("- wall time: {:.1f} s\n", summary.wall_seconds);
  if (summary.limit) out += fmt::format("- limit: {} documents per task\n", *summary.limit);
  if (summary.batching.contains("tokens_computed")) {
    const auto& b = summary.batching;
    out += fmt::format("- tokens: {} computed for {} requested (prefix reuse {}), {:.1f}% padding\n",
                       b.at("tokens_computed").get<int64_t>(), b.at("tokens_requested").get<int64_t>(),
                       b.at("prefix_reuse").get<bool>() ? "on" : "off", 100 * b.at("padding_fraction").get<double>());
  }
  out += "\n| Task | Version | Filter | n-shot | Metric |   | Value |   | Stderr | n |\n";
  out += "|------|--------:|--------|-------:|--------|---|------:|---|-------:|--:|\n";
  for (const TaskResults& t : tasks) {
    const std::string version = t.task->version().is_null() ? "N/A" : py::str(t.task->version());
    if (t.metrics.empty()) {
      out += fmt::format("| {} | {} |  | {} | (no documents) |  |  |  |  | 0 |\n", markdown_cell(t.task->alias()),
                         markdown_cell(version), t.task->num_fewshot());
    }
    for (const MetricResult& m : t.metrics) {
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {:.4f} | ± | {} | {} |\n", markdown_cell(t.task->alias()),
                         markdown_cell(version), markdown_cell(m.filter), t.task->num_fewshot(), m.name,
                         m.higher_is_better ? "↑" : "↓",
                         m.value, m.stderr ? fmt::format("{:.4f}", *m.stderr) : "N/A", m.n);
    }
  }
  const std::vector<GroupResults> groups = group_results(tasks, summary);
  // A group without aggregate_metric_list (ai2_arc, like lm-eval's tags) has no row to show.
  const bool any_group_score =
      std::any_of(groups.begin(), groups.end(), [](const GroupResults& g) { return !g.metrics.empty(); });
  if (any_group_score) {
    out += "\n| Group | Version | Metric |   | Value |   | Stderr | n |\n";
    out += "|-------|--------:|--------|---|------:|---|-------:|--:|\n";
    for (const GroupResults& g : groups) {
      const std::string version = g.group->version().is_null() ? "N/A" : py::str(g.group->version());
      for (const MetricResult& m : g.metrics) {
        out += fmt::format("| {} | {} | {} | {} | {:.4f} | ± | {} | {} |\n", markdown_cell(g.alias),
                           markdown_cell(version), m.name, m.higher_is_better ? "↑" : "↓", m.value,
                           m.stderr ? fmt::format("{:.4f}", *m.stderr) : "N/A", m.n);
      }
    }
  }
  std::vector<std::string> notes;
  for (const TaskResults& t : tasks) notes.insert(notes.end(), t.task->notes().begin(), t.task->notes().end());
  if (!notes.empty()) {
    out += "\n## Notes\n\n";
    for (const std::string& note : notes) out += "- " + markdown_cell(note) + "\n";
  }
  if (!summary.incomplete.empty()) {
    out += fmt::format("\n## Incomplete ({})\n\nThese were not scored; the metrics above leave them out.\n\n",
                       summary.incomplete.size());
    for (const std::string& item : summary.incomplete) out += "- " + markdown_cell(item) + "\n";
  }
  return out;
}

}  // namespace

nlohmann::ordered_json sample_json(const DocRecord& record, size_t filter) {
  if (!record.task) fail("sample_json", "document {} has no task", record.doc.doc_id);
  if (record.results.size() != record.requests.size()) {
    fail(record.task->location(record.doc), "{} results for {} requests", record.results.size(),
         record.requests.size());
  }
  if (filter >= record.metrics.size()) {
    fail(record.task->location(record.doc), "no metrics for filter {} ({} given)", filter, record.metrics.size());
  }
  return sample(record, filter);
}

nlohmann::ordered_json results_json(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                                    const RunSummary& summary) {
  return results(collect(tasks, docs, summary), summary);
}

std::string report_markdown(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                            const RunSummary& summary) {
  return markdown(collect(tasks, docs, summary), summary);
}

void write_reports(const std::string& output_dir, const std::vector<const Task*>& tasks,
                   const std::vector<DocRecord>& docs, const RunSummary& summary) {
  const std::vector<TaskResults> collected = collect(tasks, docs, summary);
  io::make_directories(output_dir);
  for (const TaskResults& t : collected) {
    std::string lines;
    for (size_t f = 0; f < t.task->filters().size(); ++f) {
      for (const DocRecord* r : t.records) lines += py::json_dumps(sample(*r, f)) + "\n";
    }
    io::write_file_atomic(output_dir + "/samples_" + t.task->name() + ".jsonl", lines);
  }
  // As lm-eval writes it: json.dumps(indent=2, ensure_ascii=False), no trailing newline.
  const nlohmann::ordered_json results_object = results(collected, summary);
  io::write_file_atomic(output_dir + "/results.json", py::json_dumps(results_object, 2));
  io::write_file_atomic(output_dir + "/report.md", markdown(collected, summary));
  MetricCounts counts;
  for (const TaskResults& t : collected) {
    for (const MetricResult& m : t.metrics) counts[t.task->name()][m.name] = m.n;  // the same n for every filter
  }
  io::write_file_atomic(output_dir + "/report.html", report_html(results_object, counts));
}

}  // namespace gpueval
