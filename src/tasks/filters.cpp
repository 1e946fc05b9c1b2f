#include "gpueval/filters.h"

#include <set>

#include <yaml-cpp/yaml.h>

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
  } else if (function == "lowercase") {
    step.kind = FilterStep::Kind::kLowercase;
  } else if (function == "uppercase") {
    step.kind = FilterStep::Kind::kUppercase;
  } else if (function == "remove_whitespace") {
    step.kind = FilterStep::Kind::kRemoveWhitespace;
  } else {
    static const std::set<std::string> kLmEvalOnly = {"majority_vote", "take_first_k", "map", "regex_pos",
                                                      "multi_choice_regex", "custom", "format_span", "cot_filter"};
    if (kLmEvalOnly.count(function)) fail(where, "filter function '{}' is not supported yet", function);
    fail(where, "unknown filter function {} (known: regex, take_first, lowercase, uppercase, remove_whitespace)",
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
    case FilterStep::Kind::kTakeFirst: return text;
    case FilterStep::Kind::kLowercase: return ascii_case(text, false);
    case FilterStep::Kind::kUppercase: return ascii_case(text, true);
    case FilterStep::Kind::kRemoveWhitespace: return python_strip(text);
  }
  return text;
}

std::string FilterPipeline::apply(const std::vector<std::string>& responses) const {
  std::vector<std::string> current = responses;
  for (const FilterStep& step : steps_) {
    if (step.kind == FilterStep::Kind::kTakeFirst) {
      if (current.empty()) fail("filter '" + name_ + "'", "take_first of no responses");
      current.resize(1);
      continue;
    }
    for (std::string& text : current) text = apply_filter_step(step, text);
  }
  // parse_filter_list() makes every pipeline end with take_first.
  return current.empty() ? std::string() : current[0];
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
    if (pipeline.steps_.back().kind != FilterStep::Kind::kTakeFirst) {
      fail(yaml_where(yaml_path, steps), "filter '{}' must end with take_first (one response per request is scored)",
           pipeline.name_);
    }
    out.push_back(std::move(pipeline));
  }
  return out;
}

}  // namespace gpueval
