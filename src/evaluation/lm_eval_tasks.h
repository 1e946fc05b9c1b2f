// lm-evaluation-harness's own tasks inside a gpueval run (`tasks: [mmlu, lm_eval:bbh_cot_fewshot]`,
// docs/lm_eval.md "lm-eval tasks in a run config"). lm-eval builds their requests and scores their
// responses, each step a helper process (python -m gpueval_lm_eval.bridge, python/, run with the
// interpreter RunConfig::lm_eval names); gpueval computes the requests in between as part of the
// run: the same plan, journal, shards and merge as its own tasks' requests. What lm-eval says of
// the tasks comes back as LmEvalScores (aggregate/aggregator.h) for report/ and the history.
//
// Here: which task entries are lm-eval's, the bridge's arguments from the run config, the
// requests step (load_lm_eval_requests: its lines read as requests, request_run.h's format) and
// the score step (score_lm_eval_tasks: responses out, lm-eval's scores.json read back). A run with
// no lm_eval: entry never starts Python. It may call common/ (processes, files), plan/ (requests),
// aggregate/ (the scores' form) and request_run.h's line format.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "aggregate/aggregator.h"
#include "gpueval/request.h"
#include "gpueval/run_config.h"

namespace gpueval {

inline constexpr std::string_view kLmEvalPrefix = "lm_eval:";

// Whether a `tasks:` entry names an lm-eval task or group ("lm_eval:NAME").
bool is_lm_eval_task(const std::string& entry);
// What is wrong with an "lm_eval:NAME" entry, phrased to follow "key 'tasks' " or "--tasks: "; ""
// when it is fine (NAME not empty, without whitespace or commas).
std::string lm_eval_task_problem(const std::string& entry);

// The lm_eval: tasks of a run and their requests, as lm-eval built them.
struct LmEvalRequests {
  std::vector<std::string> tasks;  // lm-eval's names, in the config's order (no prefix)
  std::string python;  // the interpreter (a path)
  std::vector<std::string> arguments;  // the bridge's task and model arguments, both steps
  std::string lines;  // the requests step's output, the text of its JSONL lines
  // Its lines as requests, in line order, indices from 0, each task "lm_eval:<lm-eval's task>".
  std::vector<Request> requests;
  bool empty() const { return tasks.empty(); }
};

// The run's lm_eval: entries (none: an empty value, and no process). Otherwise asks lm-eval for
// their requests once: the bridge's requests step with the config's arguments (include_path,
// num_fewshot, limit, the chat flags, fewshot_seed, think_end_token), the checkpoint `model_dir`
// (its tokenizer and chat templates) and `executable` (the gpueval binary the package calls).
// A config the bridge cannot honour (extra_metrics, a chat_template file, chat_template_args other
// than enable_thinking) is an Error naming the config, as is a bridge that fails: its last line of
// output, and how to set the interpreter.
LmEvalRequests load_lm_eval_requests(const RunConfig& config, const std::string& executable,
                                     const std::string& model_dir);

// lm-eval's scores of `results` (the results of lm.requests, one each, in any order: matched by
// RequestResult::index - `first_index`): writes <output_dir>/lm_eval/requests.jsonl and
// responses.jsonl, runs the bridge's score step into scores.json there and reads it back: every
// task and group lm-eval reported, groups last. Error when a result is missing or the step fails.
std::vector<LmEvalScores> score_lm_eval_tasks(const LmEvalRequests& lm, const std::vector<RequestResult>& results,
                                              int64_t first_index, const std::string& output_dir);

// scores.json (the score step's output) as LmEvalScores; `where` names it in errors.
std::vector<LmEvalScores> read_lm_eval_scores(const std::string& text, const std::string& where);

}  // namespace gpueval
