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
  EXPECT_EQ(none.apply({" Raw text\n", "second"}), " Raw text\n");
}

TEST(FiltersTest, StrictMatchTakesTheNumberAfterHashes) {
  const auto pipelines = parse(kGsm8kFilters);
  ASSERT_EQ(pipelines.size(), 2u);
  const FilterPipeline& strict = pipelines[0];
  EXPECT_EQ(strict.name(), "strict-match");
  EXPECT_EQ(strict.apply({"She makes 9 * 2 = $18.\n#### 18"}), "18");
  EXPECT_EQ(strict.apply({"#### -5"}), "-5");
  EXPECT_EQ(strict.apply({"#### 1,234.50 dollars"}), "1,234.50");
  // The first match wins for group_select 0.
  EXPECT_EQ(strict.apply({"#### 7\n#### 8"}), "7");
  EXPECT_EQ(strict.apply({"The answer is 1,234."}), "[invalid]");
  EXPECT_EQ(strict.apply({""}), "[invalid]");
}

TEST(FiltersTest, FlexibleExtractTakesTheLastNumber) {
  const auto pipelines = parse(kGsm8kFilters);
  const FilterPipeline& flexible = pipelines[1];
  EXPECT_EQ(flexible.name(), "flexible-extract");
  // re.findall gives tuples of both groups; the first non-empty one of the last match.
  EXPECT_EQ(flexible.apply({"The answer is 1,234."}), "1,234.");
  EXPECT_EQ(flexible.apply({"3 apples and 4 pears make 7"}), "7");
  EXPECT_EQ(flexible.apply({"It costs $18 in total, 2 each"}), "2");
  EXPECT_EQ(flexible.apply({"It costs $18"}), "$18");
  EXPECT_EQ(flexible.apply({"#### -5"}), "-5");
  EXPECT_EQ(flexible.apply({"no number at all"}), "[invalid]");
  // A lone "." or "," is no number: the first group needs two characters.
  EXPECT_EQ(flexible.apply({"Yes. Done, 9"}), "9");
}

TEST(FiltersTest, GroupSelectCountsLikePythonIndexing) {
  const auto p = parse("- name: second\n  filter:\n    - function: regex\n      regex_pattern: \"[0-9]+\"\n"
                       "      group_select: 1\n    - function: take_first\n"
                       "- name: custom-fallback\n  filter:\n    - function: regex\n      regex_pattern: \"x(y)\"\n"
                       "      fallback: none found\n    - function: take_first\n");
  EXPECT_EQ(p[0].apply({"a 10 b 20 c 30"}), "20");
  EXPECT_THAT(error_of([&] { p[0].apply({"only 1"}); }), HasSubstr("group_select 1 is out of range"));
  EXPECT_EQ(p[1].apply({"zz xy"}), "y");
  EXPECT_EQ(p[1].apply({"zz"}), "none found");
}

// Python 3.7+'s findall: re.findall("[0-9]*", "a12") == ["", "12", ""].
TEST(FiltersTest, EmptyMatchesIterateAsInPython) {
  auto select = [](int64_t group) {
    return parse("- name: x\n  filter:\n    - function: regex\n      regex_pattern: \"[0-9]*\"\n"
                 "      group_select: " + std::to_string(group) + "\n    - function: take_first\n")[0];
  };
  EXPECT_EQ(select(0).apply({"a12"}), "");
  EXPECT_EQ(select(1).apply({"a12"}), "12");
  EXPECT_EQ(select(2).apply({"a12"}), "");
  EXPECT_THAT(error_of([&] { select(3).apply({"a12"}); }), HasSubstr("out of range for the 3 matches"));
  EXPECT_EQ(select(-2).apply({"a12"}), "12");
}

TEST(FiltersTest, TextSteps) {
  const auto p = parse("- name: a\n  filter:\n    - function: remove_whitespace\n    - function: lowercase\n"
                       "    - function: take_first\n"
                       "- name: b\n  filter:\n    - function: uppercase\n    - function: take_first\n");
  EXPECT_EQ(p[0].apply({" \t The ANSWER\n\n", "x"}), "the answer");
  EXPECT_EQ(p[1].apply({" Mixed case 1 "}), " MIXED CASE 1 ");
  // str.strip() removes Unicode whitespace such as U+3000 and U+00A0.
  EXPECT_EQ(p[0].apply({"\u3000\u00a0Ok\u2003"}), "ok");
}

TEST(FiltersTest, BadFilterListNamesFileAndLine) {
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: majority_vote\n    - function: take_first\n"); }),
              HasSubstr("t.yaml:3: filter function 'majority_vote' is not supported yet"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: regexp\n"); }),
              HasSubstr("t.yaml:3: unknown filter function 'regexp'"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: regex\n      regex_pattern: \"(unclosed\"\n"
                                  "    - function: take_first\n"); }),
              HasSubstr("t.yaml:3: bad regex '(unclosed'"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: regex\n      group: 1\n"
                                  "    - function: take_first\n"); }),
              HasSubstr("t.yaml:4: filter function 'regex' takes no option 'group'"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: regex\n"); }),
              HasSubstr("t.yaml:3: filter 'x' must end with take_first"));
  EXPECT_THAT(error_of([] { parse("- name: x\n  filter:\n    - function: take_first\n"
                                  "- name: x\n  filter:\n    - function: take_first\n"); }),
              HasSubstr("t.yaml:4: filter 'x' is named twice"));
  EXPECT_THAT(error_of([] { parse("name: x\n"); }), HasSubstr("t.yaml:1: filter_list must be a non-empty list"));
}

}  // namespace
}  // namespace gpueval
