// The result files of a run, laid out as lm-evaluation-harness lays out its own so that the
// tools people use on lm-eval output read ours:
//   results.json           lm-eval's results file (v0.4 layout): "results" {task: {"alias",
//                          "<metric>,<filter>", "<metric>_stderr,<filter>"}} (filter "none"
//                          unless the task has a filter_list), "group_subtasks",
//                          "configs", "versions", "n-shot", "higher_is_better", "n-samples",
//                          "config", "task_hashes", "model_name", "total_evaluation_time_seconds",
//                          plus gpueval's "incomplete" list; with groups, lm-eval's "groups"
//                          {group: {"<metric>,none", "<metric>_stderr,none", "alias"}} (the
//                          scores of gpueval/task_group.h), also listed under "results", and
//                          each group's members under "group_subtasks" (a suite score's
//                          direction under "higher_is_better", as no task has its name); and
//                          gpueval's "chance" {task or group: {"<metric>,<filter>": value}},
//                          what a uniform guess scores (MetricResult::chance), when any has one;
//   samples_<task>.jsonl   one line per filter and document (filter by filter, documents in
//                          order), as lm-eval's --log_samples writes it: doc_id,
//                          doc, target, arguments {gen_args_i: {arg_j}}, resps and
//                          filtered_resps (values as Python str()s, as lm-eval sanitizes them),
//                          filter, metrics, doc/prompt/target SHA-256 hashes, and each metric;
//   report.md              a table of task, filter, metric, value ± stderr and n, one of the
//                          groups, the tasks' notes, and the incomplete or quarantined work, if any;
//   report.html            the same for a browser, with a bar chart (report_html.h).
// Output is a function of the inputs alone: JSON is written the way Python's json.dumps writes
// it (floats in repr form, which round-trips exactly), records are ordered by task and doc_id
// whatever order they arrive in, nothing takes the clock, and a timestamp appears only when the
// caller passes one (RunSummary::date). Each file is replaced atomically. Only the aggregator
// calls this; the functions are stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/metrics.h"
#include "gpueval/request.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"

namespace gpueval {

struct RunSummary {
  nlohmann::json config = nlohmann::json::object();  // results.json "config": model_args, batch_size, device, ...
  std::string model;  // model name or path ("config"."model", "model_name")
  double wall_seconds = 0;
  std::vector<std::string> incomplete;  // one line per quarantined batch or missing request
  std::optional<int64_t> limit;  // documents per task asked for; n-samples "effective"
  int64_t bootstrap_iters = kDefaultBootstrapIters;
  std::optional<double> date;  // UNIX time the run started; left out when absent
  std::vector<TaskGroup> groups;  // the run's groups, children before parents
  // How the work was batched and what was computed (results.json "batching"); empty: left out.
  nlohmann::json batching = nlohmann::json::object();
  // Where the run's time went, measured (results.json "timing": RunTiming::summary); empty: left out.
  nlohmann::json timing = nlohmann::json::object();
  // What the run took from its journal and computed (results.json "journal"); empty: left out.
  nlohmann::json journal = nlohmann::json::object();
  // How the code tasks' programs ran (results.json "code_execution": the sandbox, its limits, the
  // programs run and taken from the journal, their verdicts); empty: left out.
  nlohmann::json code_execution = nlohmann::json::object();
};

// Writes results.json, samples_<task>.jsonl for every task, report.md and report.html into output_dir
// (created if missing). `docs` holds the complete documents of `tasks` in any order; a
// document whose results do not match its requests, or of a task not in `tasks`, or seen
// twice, is an Error (incomplete documents belong in summary.incomplete instead). Returns
// report.md's table of scores (the tasks', then the groups' when any has a score), Markdown as
// report.md holds it, for the caller to show (a run prints it on stdout).
std::string write_reports(const std::string& output_dir, const std::vector<const Task*>& tasks,
                          const std::vector<DocRecord>& docs, const RunSummary& summary);

// The pieces write_reports() writes, for tests and other writers.
nlohmann::ordered_json results_json(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                                    const RunSummary& summary);
nlohmann::ordered_json sample_json(const DocRecord& record, size_t filter = 0);  // filter: index into task->filters()
std::string report_markdown(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                            const RunSummary& summary);

}  // namespace gpueval
