#include "gpueval/filters.h"

#include <algorithm>
#include <set>

#include <yaml-cpp/yaml.h>

#include "common/python_format.h"
#include "common/strict_json.h"
#include "common/unicode_regex.h"
#include "common/utf8.h"
#include "common/yaml_json.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

// Python's str.isspace(): Unicode White_Space plus the ASCII separators U+001C..U+001F.
bool python_space(char32_t c) { return (c >= 0x1C && c <= 0x1F) || is_unicode_whitespace(c); }

// Python's str.strip() with no argument.
std::string python_strip(const std::string& s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t length = 0;
    const char32_t c = utf8_decode(s, begin, &length);
    if (!python_space(c)) break;
    begin += length;
  }
  size_t end = s.size();
  while (end > begin) {
    const size_t previous = utf8_previous(s, end);
    size_t length = 0;
    if (!python_space(utf8_decode(s, previous, &length))) break;
    end = previous;
  }
  return s.substr(begin, end - begin);
}

// re.findall(pattern, text)[group_select] as lm-eval's RegexFilter takes it.
std::string regex_extract(const FilterStep& step, const std::string& text) {
  const std::vector<UnicodeRegex::Match> matches = step.regex->python_find_all(text);
  const int64_t n = static_cast<int64_t>(matches.size());
  if (n == 0) return step.fallback;
  // Python indexing: negative counts from the end; out of range raises IndexError in lm-eval,
  // which gpueval reports as an error rather than a crash.
  const int64_t i = step.group_select < 0 ? n + step.group_select : step.group_select;
  if (i < 0 || i >= n) {
    fail("regex filter", "group_select {} is out of range for the {} matches of '{}'", step.group_select, n,
         step.pattern);
  }
  const UnicodeRegex::Match& m = matches[static_cast<size_t>(i)];
  auto text_of = [&](const std::optional<std::pair<size_t, size_t>>& span) {
    return span ? text.substr(span->first, span->second - span->first) : std::string();
  };
  std::string found;
  if (m.groups.empty()) {
    found = text_of(m.span);
  } else if (m.groups.size() == 1) {
    found = text_of(m.groups[0]);
  } else {
    // findall gives a tuple of every group; lm-eval takes the first non-empty one.
    bool any = false;
    for (const auto& g : m.groups) {
      found = text_of(g);
      if (!found.empty()) {
        any = true;
        break;
      }
    }
    if (!any) return step.fallback;
  }
  return python_strip(found);
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string scalar_text(const YAML::Node& node, const std::string& what, const std::string& where) {
  if (!node.IsScalar()) fail(where, "{} must be a string", what);
  return node.Scalar();
}

FilterStep parse_step(const YAML::Node& item, const std::string& yaml_path) {
  const std::string where = yaml_where(yaml_path, item);
  if (!item.IsMap() || !item["function"]) fail(where, "a filter step must be a mapping with 'function'");
  const std::string function = scalar_text(item["function"], "function", where);
  FilterStep step;
  std::set<std::string> options;
  if (function == "regex") {
    step.kind = FilterStep::Kind::kRegex;
    step.pattern = "#### (\\-?[0-9\\.\\,]+)";  // lm-eval's default regex_pattern
    options = {"regex_pattern", "group_select", "fallback"};
  } else if (function == "take_first") {
    step.kind = FilterStep::Kind::kTakeFirst;
  } else if (function == "take_first_k") {
    step.kind = FilterStep::Kind::kTakeFirstK;
    options = {"k"};
    if (!item["k"]) fail(where, "take_first_k needs k (how many responses to keep)");
  } else if (function == "majority_vote") {
    step.kind = FilterStep::Kind::kMajorityVote;
  } else if (function == "map") {
    step.kind = FilterStep::Kind::kMap;
    options = {"mapping_dict", "default_value"};
  } else if (function == "lowercase") {
    step.kind = FilterStep::Kind::kLowercase;
  } else if (function == "uppercase") {
    step.kind = FilterStep::Kind::kUppercase;
  } else if (function == "remove_whitespace") {
    step.kind = FilterStep::Kind::kRemoveWhitespace;
  } else if (function == "custom") {
    // lm-eval's custom filter runs a Python function of the task's utils.py; gpueval has the ones
    // its shipped tasks use, by name.
    if (!item["filter_fn"] || item["filter_fn"].Tag() != "!function")
      fail(where, "filter function 'custom' needs filter_fn: !function NAME");
    const std::string fn = scalar_text(item["filter_fn"], "filter_fn", where);
    if (fn != "utils.build_predictions")
      fail(where,
           "custom filter_fn {}: gpueval runs no Python; its built-in filter functions are "
           "utils.build_predictions (humaneval's: the document's prompt + the response)",
           quote_untrusted(fn));
    step.kind = FilterStep::Kind::kPromptPlusResponse;
    options = {"filter_fn"};
    YAML::Node fn_node = item["filter_fn"];
    fn_node.SetTag("!");  // read as its name from here on (the task's config in results.json)
  } else {
    static const std::set<std::string> kLmEvalOnly = {"regex_pos", "multi_choice_regex", "format_span", "cot_filter"};
    if (kLmEvalOnly.count(function)) fail(where, "filter function '{}' is not supported yet", function);
    fail(where,
         "unknown filter function {} (known: regex, take_first, take_first_k, majority_vote, map, lowercase, "
         "uppercase, remove_whitespace, custom)",
         quote_untrusted(function));
  }
  for (const auto& entry : item) {
    const std::string key = entry.first.Scalar();
    if (key == "function") continue;
    const std::string at = yaml_where(yaml_path, entry.second);
    if (!options.count(key)) fail(at, "filter function '{}' takes no option '{}'", function, key);
    if (key == "regex_pattern") {
      step.pattern = scalar_text(entry.second, key, at);
    } else if (key == "fallback") {
      step.fallback = scalar_text(entry.second, key, at);
    } else if (key == "group_select") {
      const nlohmann::ordered_json v = yaml_to_json(entry.second, yaml_path);
      if (!v.is_number_integer()) fail(at, "group_select must be an integer");
      step.group_select = v.get<int64_t>();
    } else if (key == "k") {
      const nlohmann::ordered_json v = yaml_to_json(entry.second, yaml_path);
      if (!v.is_number_integer() || v.get<int64_t>() < 1) fail(at, "take_first_k: k must be an integer >= 1");
      step.k = v.get<int64_t>();
    } else if (key == "mapping_dict") {
      const nlohmann::ordered_json v = yaml_to_json(entry.second, yaml_path);
      if (!v.is_object()) fail(at, "map: mapping_dict must be a mapping");
      for (const auto& [from, to] : v.items()) step.mapping.emplace_back(from, py::str(to));
    } else if (key == "default_value") {
      step.default_value = py::str(yaml_to_json(entry.second, yaml_path));
    }
  }
  if (step.kind == FilterStep::Kind::kRegex) {
    step.regex = std::make_shared<const UnicodeRegex>(step.pattern, where);
  }
  return step;
}

}  // namespace

FilterPipeline FilterPipeline::none() {
  FilterPipeline p;
  p.name_ = "none";
  p.steps_.push_back(FilterStep{});
  return p;
}

std::string apply_filter_step(const FilterStep& step, const std::string& text) {
  switch (step.kind) {
    case FilterStep::Kind::kRegex: return regex_extract(step, text);
    case FilterStep::Kind::kTakeFirst:
    case FilterStep::Kind::kTakeFirstK:
    case FilterStep::Kind::kMajorityVote:
    case FilterStep::Kind::kPromptPlusResponse: return text;  // FilterPipeline::apply does these
    case FilterStep::Kind::kMap:
      for (const auto& [from, to] : step.mapping) {
        if (from == text) return to;
      }
      return step.default_value;
    case FilterStep::Kind::kLowercase: return ascii_case(text, false);
    case FilterStep::Kind::kUppercase: return ascii_case(text, true);
    case FilterStep::Kind::kRemoveWhitespace: return python_strip(text);
  }
  return text;
}

std::vector<std::string> FilterPipeline::apply(const std::vector<std::string>& responses,
                                               const nlohmann::json* doc) const {
  std::vector<std::string> current = responses;
  for (const FilterStep& step : steps_) {
    switch (step.kind) {
      case FilterStep::Kind::kPromptPlusResponse: {
        if (!doc || !doc->is_object() || !doc->contains("prompt") || !(*doc)["prompt"].is_string())
          fail("filter '" + name_ + "'", "utils.build_predictions needs the document's 'prompt' string");
        const std::string& prompt = (*doc)["prompt"].get_ref<const std::string&>();
        for (std::string& text : current) text = prompt + text;
        break;
      }
      case FilterStep::Kind::kTakeFirst:
        if (current.empty()) fail("filter '" + name_ + "'", "take_first of no responses");
        current.resize(1);
        break;
      case FilterStep::Kind::kTakeFirstK:
        if (static_cast<int64_t>(current.size()) < step.k) {
          fail("filter '" + name_ + "'", "take_first_k needs at least {} responses, got {} (the task's repeats)",
               step.k, current.size());
        }
        current.resize(static_cast<size_t>(step.k));
        break;
      case FilterStep::Kind::kMajorityVote: current = {majority_vote(current)}; break;
      default:
        for (std::string& text : current) text = apply_filter_step(step, text);
    }
  }
  return current;
}

int64_t FilterPipeline::output_count(int64_t responses) const {
  int64_t n = responses;
  for (const FilterStep& step : steps_) {
    if (step.kind == FilterStep::Kind::kTakeFirst || step.kind == FilterStep::Kind::kMajorityVote)
      n = std::min<int64_t>(n, 1);
    if (step.kind == FilterStep::Kind::kTakeFirstK) n = n < step.k ? 0 : step.k;
  }
  return n;
}

std::string majority_vote(const std::vector<std::string>& responses) {
  if (responses.empty()) fail("majority_vote", "no responses to vote over");
  // Counter(responses).most_common(1): the highest count, the first seen among equal counts.
  std::vector<std::pair<std::string, int64_t>> counts;  // in order of first appearance
  for (const std::string& r : responses) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == r; });
    if (it == counts.end()) {
      counts.emplace_back(r, 1);
    } else {
      ++it->second;
    }
  }
  size_t best = 0;
  for (size_t i = 1; i < counts.size(); ++i) {
    if (counts[i].second > counts[best].second) best = i;
  }
  return counts[best].first;
}

std::vector<FilterPipeline> parse_filter_list(const YAML::Node& node, const std::string& yaml_path) {
  const std::string where = yaml_where(yaml_path, node);
  if (!node.IsSequence() || node.size() == 0) fail(where, "filter_list must be a non-empty list of pipelines");
  std::vector<FilterPipeline> out;
  std::set<std::string> names;
  for (const YAML::Node& entry : node) {
    const std::string at = yaml_where(yaml_path, entry);
    if (!entry.IsMap() || !entry["name"] || !entry["filter"]) {
      fail(at, "a filter_list entry must be a mapping with 'name' and 'filter'");
    }
    for (const auto& kv : entry) {
      const std::string key = kv.first.Scalar();
      if (key != "name" && key != "filter") fail(yaml_where(yaml_path, kv.first), "unknown filter_list key '{}'", key);
    }
    FilterPipeline pipeline;
    pipeline.name_ = scalar_text(entry["name"], "name", at);
    if (pipeline.name_.empty() || pipeline.name_.find(',') != std::string::npos) {
      fail(at, "filter name {} must be non-empty and without ','", quote_untrusted(pipeline.name_));
    }
    if (!names.insert(pipeline.name_).second) fail(at, "filter '{}' is named twice", pipeline.name_);
    const YAML::Node steps = entry["filter"];
    if (!steps.IsSequence() || steps.size() == 0) {
      fail(yaml_where(yaml_path, steps), "filter '{}': 'filter' must be a non-empty list of steps", pipeline.name_);
    }
    for (const YAML::Node& item : steps) pipeline.steps_.push_back(parse_step(item, yaml_path));
    out.push_back(std::move(pipeline));
  }
  return out;
}

}  // namespace gpueval
