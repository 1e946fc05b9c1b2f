// The aggregator: the step of the flow between the workers and the report. Item results come in
// (plan/item_result.h) as batches finish or as the journal gives them back, in any order; they
// are folded into per-request results (a rolling request's windows summed in part order), and a
// document whose every request is in is scored by its task (Task::process_results_all). Out come
// the scored documents (DocRecord), the documents that stayed incomplete, and from the scored
// documents each task's metrics (filter by filter, each with its stderr, as lm-eval aggregates
// them) and each group's scores (lm-eval's consolidate_group_results), together a Scores value.
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
  // `tasks` and `requests` (numbered 0..N-1 in (task, document, choice) order, as build_requests
  // gives them) must outlive the aggregator.
  Aggregator(const std::vector<Task>& tasks, const std::vector<Request>& requests);

  // Item results of a finished batch, or resumed from the journal. Each (request, part) once.
  void add(std::vector<ItemResult> items);

  // For status.json: {task: {"documents": N, "documents_done": n}}, a document being done when
  // every part of every one of its requests is in.
  nlohmann::json progress() const;

  struct Documents {
    std::vector<DocRecord> scored;  // complete documents with their metrics, task by task, in doc order
    std::vector<std::string> incomplete;  // "<task> doc <doc_id>" for each document missing a result
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

  const std::vector<Task>& tasks_;
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
};

// A task's documents that a run with `limit` documents per task scores (results.json's n-samples
// "effective"): all of them without a limit.
int64_t documents_under_limit(const Task& task, std::optional<int64_t> limit);

// score_tasks, then score_groups over `groups` (children before parents).
Scores score_run(const std::vector<const Task*>& tasks, const std::vector<DocRecord>& docs, int64_t bootstrap_iters,
                 const std::vector<TaskGroup>& groups);

}  // namespace gpueval
