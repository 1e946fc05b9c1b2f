// The aggregator: the step of the flow between the workers and the report. Item results come in
// (plan/item_result.h) as batches finish or as the journal gives them back, in any order; they
// are folded into per-request results (a rolling request's windows summed in part order), and a
// document whose every request is in is scored by its task (Task::process_results_all). Out come
// the scored documents (DocRecord), the documents that stayed incomplete, and from the scored
// documents each task's metrics (filter by filter, each with its stderr, as lm-eval aggregates
// them) and each group's scores (lm-eval's consolidate_group_results), together a Scores value.
//
// Requests of tasks outside the aggregator's own (a run's lm_eval: tasks, which lm-eval scores:
// evaluation/lm_eval_tasks.h) are folded into request results too and handed out as they are
// (Documents::outside), not scored here.
//
// It keeps results in memory only: the journal (store/journal.h) and the report files
// (report/) are its callers' business. It may call tasks/, plan/ and common/. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/metrics.h"
#include "gpueval/request.h"
#include "gpueval/task.h"
#include "gpueval/task_group.h"
#include "plan/item_result.h"

namespace gpueval {

// One RequestResult per request, ordered by request index: a rolling request's windows are
// summed in part order, so the total does not depend on which worker scored which window or
// when it arrived (logprob, num_tokens; is_greedy of all parts). Throws
// Error if a part is missing or duplicated, or parts disagree on their count.
std::vector<RequestResult> combine_items(const std::vector<ItemResult>& items);

class Aggregator {
 public:
  // `tasks` and `requests` (numbered 0..N-1; a task's in (document, choice) order, as
  // build_requests gives them) must outlive the aggregator. A request of a task not in `tasks`
  // is kept apart (Documents::outside).
  Aggregator(const std::vector<Task>& tasks, const std::vector<Request>& requests);

  // Item results of a finished batch, or resumed from the journal. Each (request, part) once.
  void add(std::vector<ItemResult> items);

  // For status.json: {task: {"documents": N, "documents_done": n}}, a document being done when
  // every part of every one of its requests is in; with requests outside the tasks, also
  // "lm_eval": {"requests": N, "requests_done": n}.
  nlohmann::json progress() const;

  struct Documents {
    std::vector<DocRecord> scored;  // complete documents with their metrics, task by task, in doc order
    std::vector<std::string> incomplete;  // "<task> doc <doc_id>" for each document missing a result
    // The requests of tasks not in `tasks`, by request index, when every one of them has its
    // result; else empty, and one line in `incomplete` says how many are missing.
    std::vector<RequestResult> outside;
  };
  // `verdicts`: every program of programs() (tasks that run programs need them; Error otherwise).
  Documents documents(const ProgramVerdicts* verdicts = nullptr) const;

  // The programs the complete documents of tasks that run programs need verdicts for (Task::programs),
  // each once, in task and document order. Its callers run them (src/sandbox/) before documents().
  std::vector<std::string> programs() const;
  // The programs of the documents of such tasks that became complete since the last call (add()
  // completes them): what a run hands its ProgramRunner while generation goes on.
  std::vector<std::string> take_ready_programs();

 private:
  Documents records() const;  // the documents, unscored
  // Document d of task t with its requests and combined results; false when one is missing.
  bool record(size_t t, size_t d, DocRecord& rec) const;

  void count_if_complete(size_t request);

  // Whether request i is of one of tasks_ (else it is kept apart: Documents::outside).
  bool ours(size_t i) const { return task_of_[i] != kOutside; }
  static constexpr size_t kOutside = static_cast<size_t>(-1);

  const std::vector<Task>& tasks_;
  std::vector<size_t> task_of_;  // [request] -> index into tasks_, or kOutside
  const std::vector<Request>& requests_;
  std::map<std::string, size_t> task_index_;
  std::vector<std::vector<std::vector<int64_t>>> doc_requests_;  // [task][doc] -> request indices
  std::vector<std::vector<ItemResult>> items_;  // [request] -> its parts so far
  std::vector<std::vector<size_t>> requests_left_;  // [task][doc] -> requests not complete
  std::vector<int64_t> documents_done_;  // [task]
  std::vector<std::pair<size_t, size_t>> ready_;  // (task, doc) complete, programs not taken
};

// One task's scored documents in doc_id order and its metrics, filter by filter.
struct TaskScores {
  const Task* task = nullptr;
  std::vector<const DocRecord*> records;
  std::vector<MetricResult> metrics;
};

// A task or group of lm-evaluation-harness itself (a run's `lm_eval:` entries), scored by lm-eval
// from the responses gpueval computed (evaluation/lm_eval_tasks.h): what lm-eval's results said of
// it, kept as lm-eval wrote it for results.json, and its metrics as the table and the history read them.
struct LmEvalScores {
  std::string name;  // lm-eval's name, as its results key it
  bool is_group = false;
  nlohmann::ordered_json result = nlohmann::ordered_json::object();  // its "results" entry, as lm-eval wrote it
  std::vector<MetricResult> metrics;  // the entry's numeric "<metric>,<filter>" values, n from n-samples
  nlohmann::ordered_json config;  // "configs" entry (tasks; null for groups)
  nlohmann::ordered_json version;  // "versions" entry (null: none)
  int64_t num_fewshot = 0;  // "n-shot" (tasks)
  nlohmann::ordered_json higher_is_better = nlohmann::ordered_json::object();  // {metric: bool}
  nlohmann::ordered_json n_samples;  // {"original", "effective"} (tasks; null for groups)
  std::vector<std::string> subtasks;  // "group_subtasks" (groups)
  std::string task_hash;  // "task_hashes" entry; "" : none
  std::string samples;  // samples_<name>.jsonl as lm-eval's --log_samples writes it (tasks)
};

// One group's scores over the scored tasks under it (filter "none" only, as lm-eval).
struct GroupScores {
  const TaskGroup* group = nullptr;
  std::string alias;  // " - <alias>" for a group nested in another, as lm-eval prints it
  std::vector<MetricResult> metrics;
};

// The metrics of every task in `tasks`, from `docs` (any order). A document of a task not in
// `tasks`, one reported twice, or one whose results or metrics do not match its task is an
// Error, as is a task listed twice or named with a '/'.
std::vector<TaskScores> score_tasks(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs,
                                    int64_t bootstrap_iters);

// The scores of each of `groups` (children before parents) from the task scores: lm-eval's
// aggregate over the tasks under a group, or a suite score over its members' own metrics
// (task_group.h), a member group's taken from its scores here. Each metric's chance level
// (MetricResult::chance) is the same mean of the parts' chance levels as the score, or
// nullopt when any part has none; a task's is set by score_tasks for a multiple_choice task's
// mean-aggregated metrics (the mean over its scored documents of 1 / number of choices).
std::vector<GroupScores> score_groups(const std::vector<TaskScores>& tasks, const std::vector<TaskGroup>& groups);

// A run's scores as a value: each task's metrics and each group's, what report/ renders and the
// history records. It points into the documents, tasks and groups it was scored from
// (TaskScores::records, ::task, GroupScores::group), which must outlive it unchanged.
struct Scores {
  std::vector<TaskScores> tasks;
  std::vector<GroupScores> groups;  // in the order of `groups` given to score_run
  std::vector<LmEvalScores> lm_eval;  // the run's lm_eval: tasks and groups, as lm-eval scored them
};

// A task's documents that a run with `limit` documents per task scores (results.json's n-samples
// "effective"): all of them without a limit.
int64_t documents_under_limit(const Task& task, std::optional<int64_t> limit);

// score_tasks, then score_groups over `groups` (children before parents).
Scores score_run(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs, int64_t bootstrap_iters,
                 const std::vector<TaskGroup>& groups);

}  // namespace gpueval
