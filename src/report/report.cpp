#include "gpueval/report.h"

#include <algorithm>
#include <map>
#include <set>

#include "aggregate/aggregator.h"
#include "common/file_io.h"
#include "common/python_format.h"
#include "common/sha256.h"
#include "gpueval/error.h"
#include "report/markdown.h"
#include "report/report_files.h"
#include "report/report_html.h"

namespace gpueval {
namespace {

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
  const nlohmann::json target = task.target(record.doc);
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
  nlohmann::ordered_json resps = nlohmann::ordered_json::array();
  nlohmann::ordered_json filtered = nlohmann::ordered_json::array();
  nlohmann::ordered_json generation_kwargs = task.ordered_config().value("generation_kwargs", nlohmann::ordered_json());
  if (task.output_type() == OutputType::kGenerateUntil) {
    // lm-eval's one Instance per document: its repeats' responses together, and what the
    // pipeline left of them (a str after take_first, else a list).
    const FilterPipeline& pipeline = task.filters().at(filter);
    const std::vector<std::string> texts = task.filtered_output(record.doc, record.results, filter);
    nlohmann::ordered_json args;
    args["arg_0"] = record.requests.empty() ? std::string() : record.requests[0].context;
    args["arg_1"] = generation_kwargs;
    arguments["gen_args_0"] = args;
    nlohmann::ordered_json responses = nlohmann::ordered_json::array();
    for (const RequestResult& result : record.results) responses.push_back(task.response(result));
    resps.push_back(responses);
    if (pipeline.single_text() && texts.size() == 1) {
      filtered.push_back(texts.front());
    } else {
      filtered.push_back(nlohmann::ordered_json(texts));
    }
  }
  for (size_t i = 0; i < record.requests.size() && task.output_type() != OutputType::kGenerateUntil; ++i) {
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
      case RequestType::kGenerateUntil: break;  // above
    }
    arguments["gen_args_" + std::to_string(i)] = args;
    resps.push_back(nlohmann::ordered_json::array({response}));
    filtered.push_back(response);
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
  // gpueval's, after lm-eval's keys: how each program of a code task ended (Task::programs order).
  if (filter < record.programs.size() && !record.programs[filter].is_null()) line["programs"] = record.programs[filter];
  return line;
}

template <typename Map>
nlohmann::ordered_json sorted_by_name(const Map& entries) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, value] : entries) out[name] = value;
  return out;
}

nlohmann::ordered_json group_entry(const GroupScores& g) {
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

// "n-samples": each task's documents, and how many of them the limit let in.
nlohmann::ordered_json n_samples(const std::vector<TaskScores>& tasks, const std::vector<LmEvalScores>& lm_eval,
                                 const RunSummary& summary) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const TaskScores& t : tasks) {
    const int64_t original = static_cast<int64_t>(t.task->documents().size());
    out[t.task->name()] = {{"original", original}, {"effective", documents_under_limit(*t.task, summary.limit)}};
  }
  for (const LmEvalScores& t : lm_eval)
    if (!t.is_group && !t.n_samples.is_null()) out[t.name] = t.n_samples;
  return out;
}

// "config": the model first, then the run's settings, with lm-eval's limit and bootstrap_iters.
nlohmann::ordered_json run_config_entry(const RunSummary& summary) {
  nlohmann::ordered_json config;
  config["model"] = summary.model;
  for (const auto& [key, value] : summary.config.items()) {
    if (key != "model") config[key] = value;
  }
  if (!config.contains("limit")) config["limit"] = summary.limit ? nlohmann::ordered_json(*summary.limit) : nullptr;
  if (!config.contains("bootstrap_iters")) config["bootstrap_iters"] = summary.bootstrap_iters;
  return config;
}

// lm-eval's task hash: SHA-256 of the concatenated doc, prompt and target hashes of its samples.
nlohmann::ordered_json task_hashes(const std::vector<TaskScores>& tasks, const std::vector<LmEvalScores>& lm_eval) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const TaskScores& t : tasks) {
    std::string hashes;
    for (size_t f = 0; f < t.task->filters().size(); ++f) {
      for (const DocRecord* r : t.records) {
        const nlohmann::ordered_json s = sample(*r, f);
        hashes += s["doc_hash"].get<std::string>() + s["prompt_hash"].get<std::string>() +
                  s["target_hash"].get<std::string>();
      }
    }
    out[t.task->name()] = sha256_hex(hashes);
  }
  for (const LmEvalScores& t : lm_eval)
    if (!t.is_group && !t.task_hash.empty()) out[t.name] = t.task_hash;
  return out;
}

nlohmann::ordered_json results(const Scores& scores, const RunSummary& summary) {
  const std::vector<TaskScores>& tasks = scores.tasks;
  std::map<std::string, nlohmann::ordered_json> per_task, configs, versions, n_shot, higher, chance;
  for (const TaskScores& t : tasks) {
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
    for (const MetricResult& m : t.metrics) {
      if (m.chance) chance[name][m.name + "," + m.filter] = *m.chance;
    }
  }
  // lm-eval's tasks and groups, as lm-eval wrote them.
  for (const LmEvalScores& t : scores.lm_eval) {
    per_task[t.name] = t.result;
    versions[t.name] = t.version;
    if (!t.higher_is_better.empty()) higher[t.name] = t.higher_is_better;
    if (t.is_group) continue;
    configs[t.name] = t.config;
    n_shot[t.name] = t.num_fewshot;
  }
  const std::vector<GroupScores>& groups = scores.groups;
  std::map<std::string, nlohmann::ordered_json> per_group;
  std::set<std::string> grouped;
  for (const LmEvalScores& g : scores.lm_eval) {
    if (!g.is_group) continue;
    per_group[g.name] = g.result;
    grouped.insert(g.subtasks.begin(), g.subtasks.end());
  }
  for (const GroupScores& g : groups) {
    per_group[g.group->name()] = group_entry(g);
    per_task[g.group->name()] = per_group[g.group->name()];
    versions[g.group->name()] = g.group->version();
    for (const std::string& t : g.group->tasks()) grouped.insert(t);
    for (const MetricResult& m : g.metrics) {
      if (m.chance) chance[g.group->name()][m.name + ",none"] = *m.chance;
      // A suite score's direction is its members'; no task under it has a metric by its name.
      for (const GroupMetricSpec& spec : g.group->metrics()) {
        if (spec.is_suite() && spec.metric == m.name) higher[g.group->name()][m.name] = m.higher_is_better;
      }
    }
  }
  nlohmann::ordered_json out;
  out["results"] = sorted_by_name(per_task);  // lm-eval sorts its results table by task name
  if (!per_group.empty()) out["groups"] = sorted_by_name(per_group);
  nlohmann::ordered_json subtasks = nlohmann::ordered_json::object();
  for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {
    if (!grouped.count(it->task->name())) subtasks[it->task->name()] = nlohmann::ordered_json::array();
  }
  for (const GroupScores& g : groups) subtasks[g.group->name()] = g.group->members();
  for (const LmEvalScores& t : scores.lm_eval) {
    if (t.is_group) {
      subtasks[t.name] = t.subtasks;
    } else if (!grouped.count(t.name)) {
      subtasks[t.name] = nlohmann::ordered_json::array();
    }
  }
  out["group_subtasks"] = subtasks;
  out["configs"] = sorted_by_name(configs);
  out["versions"] = sorted_by_name(versions);
  out["n-shot"] = sorted_by_name(n_shot);
  out["higher_is_better"] = sorted_by_name(higher);
  out["n-samples"] = n_samples(tasks, scores.lm_eval, summary);
  out["config"] = run_config_entry(summary);
  if (!summary.batching.empty()) out["batching"] = summary.batching;
  if (!summary.journal.empty()) out["journal"] = summary.journal;
  if (!summary.code_execution.empty()) out["code_execution"] = summary.code_execution;
  if (!summary.timing.empty()) out["timing"] = summary.timing;
  if (summary.date) out["date"] = *summary.date;
  out["task_hashes"] = task_hashes(tasks, scores.lm_eval);
  out["model_name"] = summary.model;
  out["total_evaluation_time_seconds"] = py::float_repr(summary.wall_seconds);
  if (!chance.empty()) out["chance"] = sorted_by_name(chance);  // gpueval's: what a uniform guess scores
  out["incomplete"] = summary.incomplete;
  return out;
}

// A version as the table shows it: Python's str() of it, "N/A" when there is none.
std::string version_text(const nlohmann::json& version) { return version.is_null() ? "N/A" : py::str(version); }
std::string version_text(const nlohmann::ordered_json& version) { return version.is_null() ? "N/A" : py::str(version); }

std::string lm_eval_alias(const LmEvalScores& t) {
  return t.result.contains("alias") && t.result["alias"].is_string() ? t.result["alias"].get<std::string>() : t.name;
}

// A task's row of report.md's table, and a group's.
std::string metric_row(const std::string& alias, const std::string& version, int64_t num_fewshot,
                       const MetricResult& m) {
  return fmt::format("| {} | {} | {} | {} | {} | {} | {:.4f} | ± | {} | {} |\n", markdown_cell(alias),
                     markdown_cell(version), markdown_cell(m.filter), num_fewshot, m.name,
                     m.higher_is_better ? "↑" : "↓", m.value, m.stderr ? fmt::format("{:.4f}", *m.stderr) : "N/A", m.n);
}

std::string group_row(const std::string& alias, const std::string& version, const MetricResult& m) {
  return fmt::format("| {} | {} | {} | {} | {:.4f} | ± | {} | {} |\n", markdown_cell(alias), markdown_cell(version),
                     m.name, m.higher_is_better ? "↑" : "↓", m.value,
                     m.stderr ? fmt::format("{:.4f}", *m.stderr) : "N/A", m.n);
}

// report.md's table of scores: a row per task, metric and filter, then (when a group has a score)
// a table of the groups; also what a run prints on stdout (write_reports returns it).
std::string scores_table(const Scores& scores) {
  const std::vector<TaskScores>& tasks = scores.tasks;
  std::string out = "| Task | Version | Filter | n-shot | Metric |   | Value |   | Stderr | n |\n";
  out += "|------|--------:|--------|-------:|--------|---|------:|---|-------:|--:|\n";
  for (const TaskScores& t : tasks) {
    const std::string version = version_text(t.task->version());
    if (t.metrics.empty()) {
      out += fmt::format("| {} | {} |  | {} | (no documents) |  |  |  |  | 0 |\n", markdown_cell(t.task->alias()),
                         markdown_cell(version), t.task->num_fewshot());
    }
    for (const MetricResult& m : t.metrics) out += metric_row(t.task->alias(), version, t.task->num_fewshot(), m);
  }
  for (const LmEvalScores& t : scores.lm_eval) {
    if (t.is_group) continue;
    for (const MetricResult& m : t.metrics)
      out += metric_row(lm_eval_alias(t), version_text(t.version), t.num_fewshot, m);
  }
  const std::vector<GroupScores>& groups = scores.groups;
  // A group without aggregate_metric_list (ai2_arc, like lm-eval's tags) has no row to show.
  const bool any_group_score =
      std::any_of(groups.begin(), groups.end(), [](const GroupScores& g) { return !g.metrics.empty(); }) ||
      std::any_of(scores.lm_eval.begin(), scores.lm_eval.end(),
                  [](const LmEvalScores& g) { return g.is_group && !g.metrics.empty(); });
  if (any_group_score) {
    out += "\n| Group | Version | Metric |   | Value |   | Stderr | n |\n";
    out += "|-------|--------:|--------|---|------:|---|-------:|--:|\n";
    for (const GroupScores& g : groups)
      for (const MetricResult& m : g.metrics) out += group_row(g.alias, version_text(g.group->version()), m);
    for (const LmEvalScores& g : scores.lm_eval)
      if (g.is_group)
        for (const MetricResult& m : g.metrics) out += group_row(lm_eval_alias(g), version_text(g.version), m);
  }
  return out;
}

std::string markdown(const Scores& scores, const RunSummary& summary) {
  std::string out = "# gpueval results\n\n";
  out += fmt::format("- model: `{}`\n", markdown_cell(summary.model));
  out += fmt::format("- wall time: {:.1f} s\n", summary.wall_seconds);
  if (summary.timing.value("compute_s", 0.0) > 0) {
    const auto& t = summary.timing;
    const auto rate = [&](const char* key, const char* what) {
      return t.contains(key) && t.at(key).is_number()
                 ? fmt::format(", {:.0f} {} tokens/s", t.at(key).get<double>(), what)
                 : std::string();
    };
    out += fmt::format("- compute: {:.2f} s from the first batch sent to the last result{}{}\n",
                       t.at("compute_s").get<double>(), rate("requested_tokens_per_s", "requested"),
                       rate("computed_tokens_per_s", "computed"));
  }
  if (summary.limit) out += fmt::format("- limit: {} documents per task\n", *summary.limit);
  if (summary.batching.contains("tokens_computed")) {
    const auto& b = summary.batching;
    out += fmt::format(
        "- tokens: {} computed for {} requested (prefix reuse {}, continuations {}grouped), {:.1f}% "
        "padding\n",
        b.at("tokens_computed").get<int64_t>(), b.at("tokens_requested").get<int64_t>(),
        b.at("prefix_reuse").get<bool>() ? "on" : "off", b.value("group_continuations", true) ? "" : "not ",
        100 * b.at("padding_fraction").get<double>());
  }
  out += "\n" + scores_table(scores);
  std::vector<std::string> notes;
  for (const TaskScores& t : scores.tasks) notes.insert(notes.end(), t.task->notes().begin(), t.task->notes().end());
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

nlohmann::ordered_json results_json(const Scores& scores, const RunSummary& summary) {
  return results(scores, summary);
}

std::string report_markdown(const Scores& scores, const RunSummary& summary) { return markdown(scores, summary); }

std::string write_reports(const std::string& output_dir, const Scores& scores, const RunSummary& summary) {
  io::make_directories(output_dir);
  for (const TaskScores& t : scores.tasks) {
    std::string lines;
    for (size_t f = 0; f < t.task->filters().size(); ++f) {
      for (const DocRecord* r : t.records) lines += py::json_dumps(sample(*r, f)) + "\n";
    }
    io::write_file_atomic(output_dir + "/samples_" + t.task->name() + ".jsonl", lines);
  }
  for (const LmEvalScores& t : scores.lm_eval) {
    if (t.is_group) continue;
    if (t.name.find('/') != std::string::npos)
      fail("lm-eval task '" + t.name + "'", "a '/' cannot name a samples file");
    io::write_file_atomic(output_dir + "/samples_" + t.name + ".jsonl", t.samples);
  }
  // As lm-eval writes it: json.dumps(indent=2, ensure_ascii=False), no trailing newline.
  const nlohmann::ordered_json results_object = results(scores, summary);
  io::write_file_atomic(output_dir + "/results.json", py::json_dumps(results_object, 2));
  io::write_file_atomic(output_dir + "/report.md", markdown(scores, summary));
  MetricCounts counts;
  for (const TaskScores& t : scores.tasks) {
    for (const MetricResult& m : t.metrics) counts[t.task->name()][m.name] = m.n;  // the same n for every filter
  }
  for (const LmEvalScores& t : scores.lm_eval)
    for (const MetricResult& m : t.metrics) counts[t.name][m.name] = m.n;
  io::write_file_atomic(output_dir + "/report.html", report_html(results_object, counts));
  return scores_table(scores);
}

// The public header's forms: the aggregator scores, then the renderers above.
namespace {

Scores scored(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs, const RunSummary& summary) {
  return score_run(tasks, docs, summary.bootstrap_iters, summary.groups);
}

}  // namespace

nlohmann::ordered_json results_json(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                                    const RunSummary& summary) {
  return results(scored(tasks, docs, summary), summary);
}

std::string report_markdown(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                            const RunSummary& summary) {
  return markdown(scored(tasks, docs, summary), summary);
}

std::string write_reports(const std::string& output_dir, const std::vector<const Task*>& tasks,
                          const std::vector<DocRecord>& docs, const RunSummary& summary) {
  return write_reports(output_dir, scored(tasks, docs, summary), summary);
}

}  // namespace gpueval
