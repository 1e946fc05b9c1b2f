// A Task is one benchmark defined the way lm-evaluation-harness defines its tasks: a YAML file
// with lm-eval's key names (task, dataset_path, output_type, doc_to_text, doc_to_target,
// doc_to_choice, target_delimiter, description, metric_list, generation_kwargs, metadata, ...)
// over a dataset file. The Task turns each document into the same
// requests lm-eval builds for it and scores the results with lm-eval's metrics:
//
//   multiple_choice        one loglikelihood(context, target_delimiter + choice) per choice;
//                          acc, acc_norm, acc_bytes, exact_match
//   loglikelihood          loglikelihood(context, target); perplexity, acc (= is_greedy)
//   loglikelihood_rolling  loglikelihood_rolling(target); word_perplexity, byte_perplexity,
//                          bits_per_byte (lm-eval reads the text from doc_to_target; a file
//                          with doc_to_text only uses that)
//   generate_until         generate_until(context, until, max_gen_toks), `repeats` times
//                          (each its own sample); exact_match, pass_at_k, maj_at_k
//
// where context = description + few-shot examples + doc_to_text, all templates
// (gpueval/template.h). Each few-shot example is doc_to_text + target_delimiter + its target
// (the choice text when the target is an index), and examples and the question are joined by
// fewshot_delimiter ("\n\n"), as lm-eval's ContextSampler builds them. Examples come from
// fewshot_path, chosen by lm-eval's samplers: `fewshot_config: {sampler: first_n}` takes them
// in file order; `{sampler: default}` or no fewshot_config draws them as lm-eval's default
// sampler does, random.Random(fewshot_seed).sample(pool, num_fewshot) per document, one
// Random for the whole task advanced in document order (fewshot_seed is the run's, default
// 1234 as lm-eval's fewshot_random_seed). `fewshot_config: {samples: [...]}` writes the
// example documents in the task file instead (gsm8k_cot's eight, with first_n): they are the
// pool, as lm-eval's list of samples is, not run through process_docs, and an error in one
// names its line in the task file. Every document's draws are made at load, so the
// prompts do not depend on --limit or on the workers; they equal lm-eval's for the first
// `limit` documents of a single-process (world_size 1) lm-eval run. num_fewshot comes from
// the task file (default 0) unless the run sets it.
//
// Datasets. gpueval reads local files, so it adds a few keys to lm-eval's (they are kept in
// results.json "configs" as written):
//   dataset_kind: KIND          jsonl (default): one JSON object per line. csv: RFC 4180
//                               records without a header (src/tasks/csv.h). hellaswag_text:
//                               HellaSwag's six-line records (src/tasks/hellaswag_text.h), read
//                               as {query, choices, gold, label} (label the gold as a string).
//                               text: the whole file (UTF-8) is one document {text}, for
//                               perplexity over a corpus file (loglikelihood_rolling with
//                               doc_to_target "{{text}}", as tasks/demo_perplexity_text.yaml);
//   column_names: [a, b, ...]   csv only: the field name of each column; every record must
//                               have exactly this many fields;
//   data_root: NAME             dataset_path and fewshot_path are relative to the data root
//                               NAME, which the run sets (`--data NAME=PATH`, or the run
//                               config's `data: {NAME: PATH}`); a task whose data root the
//                               run does not set fails to load, saying how to set it. Without
//                               data_root, paths are relative to the YAML file;
//   fewshot_path: FILE          the documents few-shot examples are drawn from (lm-eval's
//                               fewshot_split; same kind and columns as dataset_path).
// dataset_path and fewshot_path may also be a list of candidates, of which the first that
// exists is used, so a built-in task finds the file under the names users' copies have
// (`dataset_path: [ARC-Easy-Test.jsonl, arc_easy_test_mosaic.jsonl]`); a candidate written
// {path: FILE, dataset_kind: KIND} has its own layout. A copy under another name is found by
// pointing the data root at a directory holding it under one of those names, or by a task
// file of one's own.
// process_docs takes the name of a built-in preprocessor (gpueval/process_docs.h: arc,
// hellaswag) instead of lm-eval's `!function`; it rewrites every document as it is read.
// doc_to_text, doc_to_target and doc_to_choice may be `!function <name>`, a built-in standing
// for lm-eval's Python function (process_docs.h: copa.doc_to_*, winogrande.doc_to_*).
// Multiple input (lm-eval's name, Winogrande's partial scoring): when doc_to_text gives an
// integer for the task's first document, it is the gold choice's index, each choice is a
// context of its own (the few-shot prompt + the choice) and every choice scores the same
// continuation, target_delimiter + doc_to_target; the planner runs such a document's contexts
// as one row over their shared prefix (src/plan/packing.h).
// Few-shot examples from the evaluated file. When fewshot_path resolves to dataset_path itself
// (gsm8k's `fewshot_path: [train.jsonl, test.jsonl]` when only test.jsonl is on disk), the
// examples come as lm-eval chooses them when fewshot_split equals the evaluation split: the
// default sampler draws num_fewshot + 1, drops every one equal (by content, as lm-eval's !=) to
// the document being asked and keeps the first num_fewshot (if copies of the document left too
// few, it draws num_fewshot again from the documents unequal to it); first_n takes the first
// num_fewshot documents unequal to it. The task says so once in notes(), which the run logs and
// report.md lists.
// Filters. generate_until tasks may give lm-eval's filter_list (gpueval/filters.h): each
// pipeline is scored on its own, and results are keyed "<metric>,<filter>"; without one,
// every task has the single pipeline "none".
// Everything a
// document needs is rendered once when the task loads, so a bad file fails at load with one
// line naming the file and line: YAML syntax, an unknown or unsupported key, a missing required
// key, an unknown output_type, metric or process_docs, a dataset line that is not a JSON
// object, a template field a document lacks, a label outside its choices, a CSV record with
// the wrong number of fields, a filter_list step gpueval does not have, an unknown sampler.
// Python process_docs/process_results are not supported yet and are rejected rather than ignored.
//
// A loaded Task is immutable; every method is const and safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/filters.h"
#include "gpueval/metrics.h"
#include "gpueval/process_docs.h"
#include "gpueval/request.h"
#include "gpueval/template.h"

namespace gpueval {

enum class OutputType { kMultipleChoice, kLoglikelihood, kLoglikelihoodRolling, kGenerateUntil };

const char* output_type_name(OutputType type);  // lm-eval's spelling: "multiple_choice", ...

// Data root name -> directory, as the run sets them (`--data mmlu=PATH`).
using DataRoots = std::map<std::string, std::string>;

// How description, few-shot examples and the question become a context: lm-eval's
// --system_instruction, --apply_chat_template and --fewshot_as_multiturn (docs/lm_eval_chat.md).
// The system prompt is lm-eval's maybe_delimit(system_instruction, description, fewshot_delimiter).
// Plain (no `chat`): system prompt + the examples + the question, as text. With `chat`: a message
// list, [system prompt as a "system" message when not empty], then per example a "user" question
// and an "assistant" answer (fewshot_as_multiturn) or all examples and the question as one "user"
// message (the plain text without the system prompt), then the question as "user", rendered by
// `chat` (the model's template with the generation prompt, as lm-eval's HFLM.apply_chat_template);
// a multiple-choice continuation then has no target_delimiter.
struct PromptFormat {
  std::string system_instruction;  // "" : none
  std::function<std::string(const nlohmann::ordered_json& messages)> chat;  // null: plain text prompts
  bool fewshot_as_multiturn = true;
  // generate_until: a response keeps what follows the last occurrence of this text, left-stripped
  // (lm-eval's think_end_token; the whole text, left-stripped, when it has none); "": as generated.
  std::string think_end_token;
};

// What the run decides about every task it loads.
struct TaskLoadOptions {
  DataRoots data_roots;
  std::optional<int64_t> num_fewshot;  // the run's num_fewshot: overrides the task file's
  uint64_t fewshot_seed = 1234;  // seeds the default sampler (lm-eval's fewshot_random_seed)
  // Metrics added to every task whose output type computes them (the run's extra_metrics: bpb).
  std::vector<std::string> extra_metrics;
  PromptFormat prompt;
};

// A program's verdict by its text: whether it passed (ran without an exception within its limits).
using ProgramVerdicts = std::unordered_map<std::string, bool>;

// One dataset line: doc_id is its position among the documents (0..n-1, file order).
struct DocEvidence;  // what a document's results say, as the metric table reads it (tasks/metric_table.h)

struct Document {
  int64_t doc_id = 0;
  nlohmann::json fields;  // the line's JSON object; for CSV, column name -> field text
};

class Task {
 public:
  // How a dataset file is laid out (the task file's dataset_kind).
  enum class DatasetKind { kJsonl, kCsv, kHellaswagText, kText };

  // name_or_path: a path to a .yaml/.yml file (anything with a '/' or that suffix), or a task
  // name looked up by find_task_file().
  static Task load(const std::string& name_or_path, const std::vector<std::string>& search_dirs,
                   const TaskLoadOptions& options = {});

  const std::string& name() const { return name_; }
  const std::string& alias() const { return alias_; }  // task_alias, else the name
  OutputType output_type() const { return output_type_; }
  const std::string& yaml_path() const { return yaml_path_; }
  const std::string& dataset_file() const { return dataset_file_; }  // dataset_path resolved
  const std::vector<Document>& documents() const { return documents_; }
  const std::vector<MetricSpec>& metrics() const { return metrics_; }
  int64_t num_fewshot() const { return num_fewshot_; }
  // The documents few-shot examples are drawn from: fewshot_path's (documents() itself when
  // fewshot_from_dataset()); empty when num_fewshot is 0.
  const std::vector<Document>& fewshot_pool() const { return fewshot_from_dataset_ ? documents_ : fewshot_pool_; }
  // The examples of `doc` (one of documents()), as indices into fewshot_pool() in prompt order.
  const std::vector<size_t>& fewshot_indices(const Document& doc) const;
  bool fewshot_from_dataset() const { return fewshot_from_dataset_; }
  // fewshot_config's sampler: "default" (also without fewshot_config) or "first_n".
  const std::string& fewshot_sampler() const { return fewshot_sampler_; }
  // Things the run should tell the user about this task, once (the few-shot fallback).
  const std::vector<std::string>& notes() const { return notes_; }
  // The filter pipelines, in filter_list order; {"none" = take_first} without filter_list.
  const std::vector<FilterPipeline>& filters() const { return filters_; }
  // generate_until: the responses each document gets (the task file's repeats, default 1).
  int64_t repeats() const { return repeats_; }
  // metadata.version, as lm-eval reports it under "versions"; null when the file has none.
  const nlohmann::json& version() const { return version_; }

  // "<dataset file>:<line>", where the document came from, for messages.
  std::string location(const Document& doc) const;

  // The prompt: description + few-shot examples + doc_to_text (PromptFormat: with the system
  // instruction, or through the chat template). For a multiple-input task the part every choice's
  // context starts with: description + few-shot examples (no chat template: refused).
  std::string context(const Document& doc) const;
  // Whether doc_to_text gives a choice index for the task's first document, which makes it
  // lm-eval's "multiple input" task (Winogrande's partial scoring): each choice is then a
  // context of its own, context(doc) + choice, the requests share one continuation,
  // target_delimiter + doc_to_target, and the gold is doc_to_text's index.
  bool multiple_input() const { return multiple_input_; }
  // doc_to_choice (multiple_choice, and generate_until tasks that map a target index to text).
  std::vector<std::string> choices(const Document& doc) const;
  // doc_to_target as lm-eval returns it: an index into the choices (integer), several indices
  // (array), or text (string).
  nlohmann::json target(const Document& doc) const;

  // The requests of one document, in lm-eval's order (one per choice for multiple choice).
  // `index` is left 0: build_requests() numbers a whole run.
  std::vector<Request> requests(const Document& doc) const;

  // Per-document metric values from the results of requests(doc), in the same order, as
  // filters()[filter] gives the answers. Throws Error naming the document when the count of
  // results does not match.
  // A task that runs programs (runs_programs()) needs `verdicts` holding every program of
  // programs(doc, results, filter); Error naming the document otherwise.
  DocMetrics process_results(const Document& doc, const std::vector<RequestResult>& results, size_t filter = 0,
                             const ProgramVerdicts* verdicts = nullptr) const;
  // Every filter's metrics, in filters() order.
  std::vector<DocMetrics> process_results_all(const Document& doc, const std::vector<RequestResult>& results,
                                              const ProgramVerdicts* verdicts = nullptr) const;
  // A generate_until response as filters and metrics see it: the generated text after
  // PromptFormat::think_end_token (unchanged without one).
  std::string response(const RequestResult& result) const;
  // generate_until: one document's responses (its requests' texts, one per repeat) through
  // filters()[filter] (lm-eval's filtered_resps; one text when the pipeline ends with
  // take_first). Other output types have nothing to filter: their texts are returned as is.
  std::vector<std::string> filtered_output(const Document& doc, const std::vector<RequestResult>& results,
                                           size_t filter) const;

  // Whether a metric of the task runs the model's programs (lm-eval's code_eval metrics:
  // `!function utils.pass_at_k`, humaneval's, and `!function utils.pass_at_1`, mbpp's; the task
  // file says `unsafe_code: true`). A program passes when it runs without an exception
  // (src/sandbox/).
  bool runs_programs() const { return runs_programs_; }
  // The programs one document's filtered responses make, as lm-eval's code_eval assembles them:
  // each filtered response + "\n" + the document's target (the tests). Empty for a task that
  // runs none.
  std::vector<std::string> programs(const Document& doc, const std::vector<RequestResult>& results,
                                    size_t filter) const;

  // The task's definition as lm-eval dumps it into results.json "configs": the file's keys with
  // lm-eval's defaults filled in (description "", target_delimiter " ", num_fewshot 0, ...) and
  // metric_list entries spelled out ({metric, aggregation, higher_is_better}).
  nlohmann::json config() const { return config_; }
  // The same, keys in lm-eval's TaskConfig field order, for writing results.json.
  const nlohmann::ordered_json& ordered_config() const { return config_; }

  // document_range: only the documents whose integer `field` is within [first, last].
  struct DocumentRange {
    std::string field;
    int64_t first = 0, last = 0;
    std::string where;  // the task file's line, for messages
  };

 private:
  // The evidence of a multiple_choice / generate_until document for process_results.
  void choice_evidence(const Document& doc, const std::vector<RequestResult>& results, const std::string& where,
                       DocEvidence& evidence) const;
  void generation_evidence(const Document& doc, const std::vector<RequestResult>& results, size_t filter,
                           const ProgramVerdicts* verdicts, const std::string& where, DocEvidence& evidence) const;
  // target() with errors located at `where` (a few-shot example's own file and line).
  nlohmann::json target_at(const Document& doc, const std::string& where) const;
  Task() = default;
  static Task parse(const std::string& yaml_path, const TaskLoadOptions& options);
  std::vector<Document> read_documents(const std::string& file, DatasetKind kind, std::vector<int64_t>& lines) const;
  void load_documents();
  // Every document's few-shot indices, drawn in document order as lm-eval's sampler draws them.
  void draw_fewshot();
  // doc_to_text and doc_to_target of one few-shot example, as lm-eval's build_qa_turn makes it:
  // the question, and the answer text when it has one.
  struct FewshotTurn {
    std::string question;
    std::optional<std::string> answer;
  };
  FewshotTurn fewshot_example(const Document& doc, const std::string& where) const;
  std::vector<size_t> gold_indices(const Document& doc, const std::vector<std::string>& choices) const;

  std::string name_;
  std::string alias_;
  std::string yaml_path_;
  std::string dataset_file_;
  std::string fewshot_file_;  // empty when the task has no fewshot_path
  DatasetKind dataset_kind_ = DatasetKind::kJsonl;
  DatasetKind fewshot_kind_ = DatasetKind::kJsonl;
  DocProcessor process_docs_ = nullptr;  // process_docs, applied to every document read
  std::optional<DocumentRange> document_range_;  // dataset_path's documents kept (all without one)
  std::vector<std::string> column_names_;  // csv only
  int64_t num_fewshot_ = 0;
  std::string fewshot_delimiter_ = "\n\n";
  std::string fewshot_sampler_ = "default";
  uint64_t fewshot_seed_ = 1234;
  bool fewshot_from_dataset_ = false;  // fewshot_path is dataset_path: skip the asked document
  std::vector<Document> fewshot_pool_;  // fewshot_path's documents (empty when from the dataset)
  std::vector<int64_t> fewshot_lines_;  // their source lines
  bool fewshot_inline_ = false;  // fewshot_pool_ is fewshot_config.samples (fewshot_file_: the YAML)
  std::vector<std::vector<size_t>> fewshot_draws_;  // per document: its examples' pool indices
  std::vector<std::string> fewshot_rendered_;  // per pool index: the example and fewshot_delimiter ("" if unused)
  std::vector<FewshotTurn> fewshot_turns_;  // per pool index: the example's turns (used ones)
  PromptFormat prompt_;
  std::vector<std::string> notes_;
  std::vector<FilterPipeline> filters_;
  OutputType output_type_ = OutputType::kGenerateUntil;
  std::optional<Template> doc_to_text_;
  std::optional<Template> doc_to_target_;
  std::optional<Template> doc_to_choice_;  // a template that yields a list
  // `!function` built-ins (process_docs.h find_doc_function), used instead of the template.
  DocProcessor doc_to_text_fn_ = nullptr;
  DocProcessor doc_to_target_fn_ = nullptr;
  DocProcessor doc_to_choice_fn_ = nullptr;
  bool multiple_input_ = false;
  bool runs_programs_ = false;  // a metric runs the model's programs (runs_programs())
  bool has_choices() const { return doc_to_choice_ || choice_list_ || doc_to_choice_fn_; }
  // doc_to_text's value for a document (a field, a rendered template, a function's result).
  nlohmann::json doc_text(const Document& doc, const std::string& where) const;
  // A multiple-input task's doc_to_text: the gold choice's index (an Error when it is not one).
  int64_t index_of_text(const Document& doc, const std::string& where) const;
  std::optional<std::vector<std::string>> choice_list_;  // doc_to_choice written as a YAML list or map
  std::optional<Template> description_;
  std::string target_delimiter_ = " ";
  std::vector<std::string> until_;
  int64_t max_gen_toks_ = 256;
  int64_t repeats_ = 1;  // generate_until: responses per document (lm-eval's repeats)
  double temperature_ = 0.0;  // generate_until sampling, as Request's fields (request.h)
  int64_t top_k_ = 0;
  double top_p_ = 1.0;
  std::vector<MetricSpec> metrics_;
  nlohmann::json version_;
  nlohmann::ordered_json config_;
  std::vector<Document> documents_;
  std::vector<int64_t> lines_;  // source line of each document
};

// Where the task or group `name` is defined: <dir>/<name>.yaml, else <dir>/<sub>/<name>.yaml
// (one level down, subdirectories in name order), in each of search_dirs in turn; nullopt if
// none has it.
std::optional<std::string> find_task_file(const std::string& name, const std::vector<std::string>& search_dirs);

// Whether a `tasks:` entry names a file (it has a slash or ends in .yaml/.yml) rather than a task.
bool looks_like_task_path(const std::string& name);

// The requests of `tasks` in (task, document, choice) order over the first `limit` documents
// of each task (all when nullopt), with `index` numbered 0..N-1.
std::vector<Request> build_requests(const std::vector<const Task*>& tasks, std::optional<int64_t> limit = std::nullopt);

// Everything about one scored document: its requests, their results in the same order, and
// task->process_results_all() of them: one DocMetrics per filter of the task, in order.
struct DocRecord {
  const Task* task = nullptr;
  Document doc;
  std::vector<Request> requests;
  std::vector<RequestResult> results;
  std::vector<DocMetrics> metrics;
  // Code tasks: per filter, [{"verdict", "detail"}] for each of Task::programs() in order (the
  // samples file's "programs"); empty for other tasks.
  std::vector<nlohmann::json> programs;
};

}  // namespace gpueval
