// Document preprocessors: what lm-evaluation-harness's `process_docs: !function utils.xxx`
// does to a dataset before any template sees it, built in and chosen by name, because gpueval
// runs no Python. A task file writes `process_docs: arc` or `process_docs: hellaswag`; every
// document of dataset_path and fewshot_path goes through the function as it is read, so the
// task's templates can be lm-eval's verbatim.
//
//   arc        normalises the ARC layouts users bring to the Hugging Face ai2_arc layout the
//              lm-eval templates read, {"id", "question": str, "choices": {"text": [...],
//              "label": [...]}, "answerKey"}: that layout as is; AI2's original
//              ARC-*.jsonl ({"id", "question": {"stem", "choices": [{"text", "label"}]},
//              "answerKey"}); MosaicML's ({"query": "Question: <q>", "choices": [...],
//              "gold": i}, labels "A", "B", ... given). answerKey may be a letter or "1".."4";
//              it is kept as written (the template looks it up among the labels).
//   hellaswag  lm-eval's hellaswag utils.process_docs on the original rowanz JSONL layout
//              ({"activity_label", "ctx_a", "ctx_b", "endings", "label", ...}): adds
//              query = preprocess(activity_label + ": " + ctx_a + " " + capitalize(ctx_b)),
//              choices = [preprocess(e) for e in endings], gold = int(label) and
//              answer_letter, keeping the other fields, as datasets.map does. A document that
//              already has query, choices and label (dataset_kind: hellaswag_text, or an
//              lm-eval dump) is taken as already processed and passed through.
//
// Doc functions: what lm-eval's `doc_to_text/doc_to_target/doc_to_choice: !function
// utils.xxx` compute, built in and named `!function <task>.<function>` in a task file (the
// task files are lm-eval's with only that name changed):
//
//   copa.doc_to_text         premise.strip() without its last character, + " because" (question
//                            "cause") or " therefore" ("effect")
//   copa.doc_to_target       " " + the correct choice with its first character lower-cased
//                            (label 0: choice1, 1: choice2; any other label is an error)
//   copa.doc_to_choice       [" " + choice1, " " + choice2], first characters lower-cased
//   winogrande.doc_to_text   the answer as an index ("1" -> 0, "2" -> 1): an integer, which
//                            makes the task "multiple input" (task.h)
//   winogrande.doc_to_target the sentence after the first '_', stripped
//   winogrande.doc_to_choice [sentence before '_' + option1, ... + option2]
//
// Functions are stateless and thread-safe; a document they cannot use is an Error naming it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval {

// Returns the processed document; `where` ("data.jsonl:12") names it in errors.
using DocProcessor = nlohmann::json (*)(const nlohmann::json& doc, const std::string& where);

// The built-in preprocessor called `name`, or nullopt.
std::optional<DocProcessor> find_doc_processor(const std::string& name);
// The names find_doc_processor knows, for messages.
std::vector<std::string> doc_processor_names();

// The built-in doc function called `name` ("copa.doc_to_text"), or nullopt.
std::optional<DocProcessor> find_doc_function(const std::string& name);
std::vector<std::string> doc_function_names();

// Python's str.capitalize(): the first character title-cased, the rest lower-cased. Exact for
// ASCII and Latin-1 (U+0000-U+00FF, with Python's "ß" -> "Ss", "ÿ" -> "Ÿ", "µ" -> "Μ" first);
// other characters are left as they are, where Python would change the case of other
// scripts' letters too ("ĀĀ" stays "ĀĀ" here, "Āā" in Python).
std::string python_capitalize(const std::string& s);

// lm-eval's HellaSwag preprocess(): strip(); " [title]" -> ". "; every "[...]" (shortest match,
// not across a line break, as Python's re `\[.*?\]`) removed; then "  " -> " " once (Python's
// str.replace: every non-overlapping pair, left to right, so three spaces become two).
std::string hellaswag_preprocess(const std::string& text);

}  // namespace gpueval
