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
// repeat; gpueval runs one repeat) and the task scores every pipeline separately, so
// results.json carries "exact_match,strict-match", "exact_match,flexible-extract", ... and
// the samples file one line per document and pipeline. A task without filter_list has
// lm-eval's implicit pipeline "none" = [take_first].
//
// Steps, with lm-eval's names and semantics:
//   regex             regex_pattern (default "#### (\-?[0-9\.\,]+)"), group_select (default 0;
//                     negative counts from the end), fallback (default "[invalid]"): Python's
//                     re.findall over the response, match number group_select, the first
//                     non-empty group when the pattern has several, .strip()ped; the fallback
//                     when nothing matches. Patterns run on PCRE2 with Python's iteration
//                     rule (unicode_regex.h); \w, \s and \Z can differ from Python's re on
//                     rare code points or a trailing newline.
//   take_first        keeps the first response; every pipeline must end with it (one response
//                     per request is scored).
//   lowercase,        str.lower() / str.upper(), ASCII letters only (other letters are kept
//   uppercase         as they are, where Python would change them).
//   remove_whitespace str.strip() (lm-eval's current definition).
// Other lm-eval filters (majority_vote, take_first_k, map, multi_choice_regex, custom, ...)
// are rejected at load with the YAML file and line; an unknown function likewise.
//
// A FilterPipeline is immutable once parsed and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace gpueval {

class UnicodeRegex;

struct FilterStep {
  enum class Kind { kRegex, kTakeFirst, kLowercase, kUppercase, kRemoveWhitespace };
  Kind kind = Kind::kTakeFirst;
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

  // The answer scored for one request whose responses (one per repeat) are `responses`.
  std::string apply(const std::vector<std::string>& responses) const;

 private:
  friend std::vector<FilterPipeline> parse_filter_list(const YAML::Node&, const std::string&);
  std::string name_;
  std::vector<FilterStep> steps_;
};

// The pipelines of a task file's filter_list node; throws Error naming yaml_path and the line
// of the offending entry (unknown or unsupported function, bad option, a regex that does not
// compile, duplicate names, a pipeline that does not end with take_first).
std::vector<FilterPipeline> parse_filter_list(const YAML::Node& node, const std::string& yaml_path);

// One step on one text (take_first is the identity here): exposed for tests.
std::string apply_filter_step(const FilterStep& step, const std::string& text);

}  // namespace gpueval
