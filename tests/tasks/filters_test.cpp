// filter_list pipelines: lm-eval's regex / take_first / lowercase / uppercase /
// remove_whitespace on hand-written responses (expected values are what Python's re.findall
// and str methods give), and bad filter_list entries failing with the file and line.
#include "gpueval/filters.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "gpueval/error.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

std::vector<FilterPipeline> parse(const std::string& yaml) { return parse_filter_list(YAML::Load(yaml), "t.yaml"); }

using testing::error_of;

// The pipeline's output for pipelines that end in one text.
std::string one(const FilterPipeline& p, const std::vector<std::string>& responses) {
  const std::vector<std::string> out = p.apply(responses);
  EXPECT_EQ(out.size(), 1u) << p.name();
  return out.empty() ? std::string() : out.front();
}

// gsm8k's two pipelines, as its task file writes them.
const char* kGsm8kFilters =
    "- name: strict-match\n"
    "  filter:\n"
    "    - function: regex\n"
    "      regex_pattern: \"#### (\\\\-?[0-9\\\\.\\\\,]+)\"\n"
    "    - function: take_first\n"
    "- name: flexible-extract\n"
    "  filter:\n"
    "    - function: regex\n"
    "      group_select: -1\n"
    "      regex_pattern: \"(-?[$0-9.,]{2,})|(-?[0-9]+)\"\n"
    "    - function: take_first\n";

TEST(FiltersTest, NoneIsTakeFirst) {
  const FilterPipeline none = FilterPipeline::none();
  EXPECT_EQ(none.name(), "none");
  EXPECT_EQ(one(none, {" Raw text\n", "second"}), " Raw text\n");
}

TEST(FiltersTest, StrictMatchTakesTheNumberAfterHashes) {
  const auto pipelines = parse(kGsm8kFilters);
  ASSERT_EQ(pipelines.size(), 2u);
  const FilterPipeline& strict = pipelines[0];
  EXPECT_EQ(strict.name(), "strict-match");
  EXPECT_EQ(one(strict, {"She makes 9 * 2 = $18.\n#### 18"}), "18");
  EXPECT_EQ(one(strict, {"#### -5"}), "-5");
  EXPECT_EQ(one(strict, {"#### 1,234.50 dollars"}), "1,234.50");
  // The first match wins for group_select 0.
  EXPECT_EQ(one(strict, {"#### 7\n#### 8"}), "7");
  EXPECT_EQ(one(strict, {"The answer is 1,234."}), "[invalid]");
  EXPECT_EQ(one(strict, {""}), "[invalid]");
}

TEST(FiltersTest, FlexibleExtractTakesTheLastNumber) {
  const auto pipelines = parse(kGsm8kFilters);
  const FilterPipeline& flexible = pipelines[1];
  EXPECT_EQ(flexible.name(), "flexible-extract");
  // re.findall gives tuples of both groups; the first non-empty one of the last match.
  EXPECT_EQ(one(flexible, {"The answer is 1,234."}), "1,234.");
  EXPECT_EQ(one(flexible, {"3 apples and 4 pears make 7"}), "7");
  EXPECT_EQ(one(flexible, {"It costs $18 in total, 2 each"}), "2");
  EXPECT_EQ(one(flexible, {"It costs $18"}), "$18");
  EXPECT_EQ(one(flexible, {"#### -5"}), "-5");
  EXPECT_EQ(one(flexible, {"no number at all"}), "[invalid]");
  // A lone "." or "," is no number: the first group needs two characters.
  EXPECT_EQ(one(flexible, {"Yes. Done, 9"}), "9");
}

TEST(FiltersTest, GroupSelectCountsLikePythonIndexing) {
  const auto p = parse(
      "- name: second\n  filter:\n    - function: regex\n      regex_pattern: \"[0-9]+\"\n"
      "      group_select: 1\n    - function: take_first\n"
      "- name: custom-fallback\n  filter:\n    - function: regex\n      regex_pattern: \"x(y)\"\n"
      "      fallback: none found\n    - function: take_first\n");
  EXPECT_EQ(one(p[0], {"a 10 b 20 c 30"}), "20");
  EXPECT_THAT(error_of([&] { one(p[0], {"only 1"}); }), HasSubstr("group_select 1 is out of range"));
  EXPECT_EQ(one(p[1], {"zz xy"}), "y");
  EXPECT_EQ(one(p[1], {"zz"}), "none found");
}

// Python 3.7+'s findall: re.findall("[0-9]*", "a12") == ["", "12", ""].
TEST(FiltersTest, EmptyMatchesIterateAsInPython) {
  auto select = [](int64_t group) {
    return parse(
        "- name: x\n  filter:\n    - function: regex\n      regex_pattern: \"[0-9]*\"\n"
        "      group_select: " +
        std::to_string(group) + "\n    - function: take_first\n")[0];
  };
  EXPECT_EQ(one(select(0), {"a12"}), "");
  EXPECT_EQ(one(select(1), {"a12"}), "12");
  EXPECT_EQ(one(select(2), {"a12"}), "");
  EXPECT_THAT(error_of([&] { select(3).apply({"a12"}); }), HasSubstr("out of range for the 3 matches"));
  EXPECT_EQ(one(select(-2), {"a12"}), "12");
}

TEST(FiltersTest, TextSteps) {
  const auto p = parse(
      "- name: a\n  filter:\n    - function: remove_whitespace\n    - function: lowercase\n"
      "    - function: take_first\n"
      "- name: b\n  filter:\n    - function: uppercase\n    - function: take_first\n");
  EXPECT_EQ(one(p[0], {" \t The ANSWER\n\n", "x"}), "the answer");
  EXPECT_EQ(one(p[1], {" Mixed case 1 "}), " MIXED CASE 1 ");
  // str.strip() removes Unicode whitespace such as U+3000 and U+00A0.
  EXPECT_EQ(one(p[0], {"\u3000\u00a0Ok\u2003"}), "ok");
}

// lm-eval's filters over a request's repeats (gsm8k_cot_self_consistency's pipelines): values
// are what lm-eval's TakeKFilter, MajorityVoteFilter (Counter.most_common) and MapFilter give.
TEST(FiltersTest, RepeatFiltersKeepVoteAndMap) {
  const auto p = parse(
      "- name: all\n  filter:\n    - function: regex\n      regex_pattern: \"is (\\\\d+)\"\n"
      "- name: maj\n  filter:\n    - function: regex\n      regex_pattern: \"is (\\\\d+)\"\n"
      "    - function: majority_vote\n    - function: take_first\n"
      "- name: maj2\n  filter:\n    - function: take_first_k\n      k: 2\n    - function: regex\n"
      "      regex_pattern: \"is (\\\\d+)\"\n    - function: majority_vote\n"
      "- name: mapped\n  filter:\n    - function: map\n      mapping_dict: {A: 1, B: 0}\n"
      "      default_value: -1\n"
      "- name: mapped_none\n  filter:\n    - function: map\n      mapping_dict: {A: true}\n");
  ASSERT_EQ(p.size(), 5u);
  const std::vector<std::string> responses = {"it is 3", "it is 4", "it is 4", "nothing", "it is 3"};
  EXPECT_EQ(p[0].apply(responses), (std::vector<std::string>{"3", "4", "4", "[invalid]", "3"}));
  EXPECT_FALSE(p[0].single_text());
  // 3 and 4 both twice: the first seen wins, as Counter.most_common(1) keeps insertion order.
  EXPECT_EQ(p[1].apply(responses), (std::vector<std::string>{"3"}));
  EXPECT_TRUE(p[1].single_text());
  EXPECT_EQ(p[1].apply({"is 1", "is 2", "is 2"}), (std::vector<std::string>{"2"}));
  EXPECT_EQ(p[2].apply(responses), (std::vector<std::string>{"3"}));
  EXPECT_FALSE(p[2].single_text());
  EXPECT_THAT(error_of([&] { p[2].apply({"is 1"}); }), HasSubstr("take_first_k needs at least 2 responses, got 1"));
  EXPECT_EQ(p[3].apply({"A", "B", "C"}), (std::vector<std::string>{"1", "0", "-1"}));
  EXPECT_EQ(p[4].apply({"A", "B"}), (std::vector<std::string>{"True", "None"}));
  EXPECT_EQ(majority_vote({"a"}), "a");
  EXPECT_EQ(majority_vote({"b", "a", "a", "b", "c"}), "b");
  EXPECT_THROW(majority_vote({}), Error);
}

TEST(FiltersTest, BadFilterListNamesFileAndLine) {
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: multi_choice_regex\n"); }),
              HasSubstr("t.yaml:3: filter function 'multi_choice_regex' is not supported yet"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: take_first_k\n"); }),
              HasSubstr("t.yaml:3: take_first_k needs k"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: take_first_k\n      k: 0\n"); }),
              HasSubstr("t.yaml:4: take_first_k: k must be an integer >= 1"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: map\n      mapping_dict: [a]\n"); }),
              HasSubstr("t.yaml:4: map: mapping_dict must be a mapping"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: majority_vote\n      k: 2\n"); }),
              HasSubstr("t.yaml:4: filter function 'majority_vote' takes no option 'k'"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: regexp\n"); }),
              HasSubstr("t.yaml:3: unknown filter function 'regexp'"));
  EXPECT_THAT(error_of([] {
                parse(
                    "- name: x\n  filter:\n    - function: regex\n      regex_pattern: \"(unclosed\"\n"
                    "    - function: take_first\n");
              }),
              HasSubstr("t.yaml:3: bad regex '(unclosed'"));
  EXPECT_THAT(error_of([] {
                parse(
                    "- name: x\n  filter:\n    - function: regex\n      group: 1\n"
                    "    - function: take_first\n");
              }),
              HasSubstr("t.yaml:4: filter function 'regex' takes no option 'group'"));
  EXPECT_THAT(error_of([] {
                parse(
                    "- name: x\n  filter:\n    - function: take_first\n"
                    "- name: x\n  filter:\n    - function: take_first\n");
              }),
              HasSubstr("t.yaml:4: filter 'x' is named twice"));
  EXPECT_THAT(error_of([] { parse("name: x\n"); }), HasSubstr("t.yaml:1: filter_list must be a non-empty list"));
}

}  // namespace
}  // namespace gpueval
