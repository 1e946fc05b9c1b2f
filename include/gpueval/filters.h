// Filters turn a generate_until task's raw responses into the answers it scores, the way
// lm-evaluation-harness's filter_list does (lm_eval/filters). A task YAML names one or more
// pipelines:
//
//   filter_list:
//     - name: strict-match
//       filter:
//         - function: regex
//           regex_pattern: "#### (\\-?[0-9\\.\\,]+)"
//         - function: take_first
//
// Each pipeline runs its steps in order over the responses of one request (a list, one per
// repeat: the task's `repeats`) and the task scores every pipeline separately, so
// results.json carries "exact_match,strict-match", "exact_match,flexible-extract", ... and
// the samples file one line per document and pipeline. A task without filter_list has
// lm-eval's implicit pipeline "none" = [take_first].
//
// Steps, with lm-eval's names and semantics:
//   regex             regex_pattern (default "#### (\-?[0-9\.\,]+)"), group_select (default 0;
//                     negative counts from the end), fallback (default "[invalid]"): Python's
//                     re.findall over each response, match number group_select, the first
//                     non-empty group when the pattern has several, .strip()ped; the fallback
//                     when nothing matches. Patterns run on PCRE2 with Python's iteration
//                     rule (unicode_regex.h); \w, \s and \Z can differ from Python's re on
//                     rare code points or a trailing newline.
//   take_first        keeps the first response (the pipeline's output is then one text, as
//                     lm-eval's filtered_resps is a str).
//   take_first_k      k: keeps the first k responses (fewer than k is an error, as in lm-eval).
//   majority_vote     keeps the most frequent response, the earliest of equally frequent ones
//                     (Python's Counter.most_common(1)), as a list of one.
//   map               mapping_dict, default_value: each response replaced by its value in
//                     mapping_dict (str() of it), else default_value (absent: None, which
//                     scores as the text "None").
//   lowercase,        str.lower() / str.upper(), ASCII letters only (other letters are kept
//   uppercase         as they are, where Python would change them).
//   remove_whitespace str.strip() (lm-eval's current definition).
// Other lm-eval filters (multi_choice_regex, custom, ...) are rejected at load with the YAML
// file and line; an unknown function likewise. What a metric scores of the output: exact_match
// the first response (lm-eval's results[0]), pass_at_k and maj_at_k all of them (metrics.h).
//
// A FilterPipeline is immutable once parsed and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace YAML {
class Node;
}

namespace gpueval {

class UnicodeRegex;

struct FilterStep {
  enum class Kind {
    kRegex,
    kTakeFirst,
    kTakeFirstK,
    kMajorityVote,
    kMap,
    kLowercase,
    kUppercase,
    kRemoveWhitespace,
    // `function: custom` with `filter_fn: !function utils.build_predictions`, lm-eval's humaneval
    // filter: each response after its document's "prompt" (the program's head that the model
    // continued).
    kPromptPlusResponse,
  };
  Kind kind = Kind::kTakeFirst;
  int64_t k = 1;  // kTakeFirstK
  // kMap: mapping_dict as (key, str(value)) pairs, and default_value's text.
  std::vector<std::pair<std::string, std::string>> mapping;
  std::string default_value = "None";
  // kRegex only:
  std::string pattern;
  std::shared_ptr<const UnicodeRegex> regex;  // `pattern` compiled
  int64_t group_select = 0;
  std::string fallback = "[invalid]";
};

class FilterPipeline {
 public:
  // lm-eval's implicit pipeline of a task without filter_list: "none" = [take_first].
  static FilterPipeline none();

  const std::string& name() const { return name_; }
  const std::vector<FilterStep>& steps() const { return steps_; }

  // What the pipeline leaves of one request's responses (one per repeat), in order; throws
  // Error for take_first of none or take_first_k of fewer than k. `doc`: the document's fields,
  // which a step that reads them needs (kPromptPlusResponse; Error without them).
  std::vector<std::string> apply(const std::vector<std::string>& responses, const nlohmann::json* doc = nullptr) const;
  // Whether the output is one text rather than a list (the last step is take_first), as the
  // samples file writes lm-eval's filtered_resps.
  bool single_text() const { return !steps_.empty() && steps_.back().kind == FilterStep::Kind::kTakeFirst; }
  // How many texts apply() leaves of `responses` responses (take_first_k of too few: 0).
  int64_t output_count(int64_t responses) const;

 private:
  friend std::vector<FilterPipeline> parse_filter_list(const YAML::Node&, const std::string&);
  std::string name_;
  std::vector<FilterStep> steps_;
};

// The pipelines of a task file's filter_list node; throws Error naming yaml_path and the line
// of the offending entry (unknown or unsupported function, bad option, a regex that does not
// compile, duplicate names).
std::vector<FilterPipeline> parse_filter_list(const YAML::Node& node, const std::string& yaml_path);

// Python's Counter(responses).most_common(1)[0][0]: the most frequent text, the earliest of
// equally frequent ones; throws Error when `responses` is empty.
std::string majority_vote(const std::vector<std::string>& responses);

// One step on one text (take_first, take_first_k and majority_vote are the identity here):
// exposed for tests.
std::string apply_filter_step(const FilterStep& step, const std::string& text);

}  // namespace gpueval
