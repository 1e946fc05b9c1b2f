// gpueval's Jinja subset (gpueval/template.h): every expected string below is what Jinja2
// 3.x renders for the same template and document in lm-evaluation-harness's environment
// (StrictUndefined, keep_trailing_newline), measured with jinja2 itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/template.h"
#include "jinja/expression.h"
#include "test_util.h"

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

const nlohmann::json& doc() {
  static const nlohmann::json d = {{"sol1", "fold it"},
                                   {"sol2", "cut it"},
                                   {"text", "a b  c d"},
                                   {"label", "3"},
                                   {"answerKey", " B"},
                                   {"choices", {{"label", {"A", "B"}}, {"text", {"x", "y"}}}},
                                   {"q", "h\u00e9llo w\u00f6rld"},
                                   {"w", "  two  words\n"},
                                   {"x", "\u00c0bC"}};
  return d;
}

std::string render(const std::string& text) {
  return Template::parse(text, "doc_to_text", "t.yaml:3").render(doc(), "d.jsonl:1");
}

TEST(TemplateTest, RendersLmEvalsTemplatesAsJinjaDoes) {
  EXPECT_EQ(render("{{[sol1, sol2]}}"), "['fold it', 'cut it']");  // piqa doc_to_choice
  EXPECT_EQ(render("{{text.split(' ')[:-1]|join(' ')}}"), "a b  c");  // lambada doc_to_text
  EXPECT_EQ(render("{{' '+text.split(' ')[-1]}}"), " d");  // lambada doc_to_target
  EXPECT_EQ(render("{{choices.label.index(answerKey.lstrip())}}"), "1");  // openbookqa doc_to_target
  EXPECT_EQ(render("{{(label|int) - 1}}"), "2");
  EXPECT_EQ(render("{{label|int - 1}}"), "2");  // a filter binds tighter than '-'
}

TEST(TemplateTest, StringMethodsAndSlicesCountCodePoints) {
  EXPECT_EQ(render("{{ x|lower }}|{{ x|upper }}|{{ x.lower() }}"), "\u00e0bc|\u00c0BC|\u00e0bc");
  EXPECT_EQ(render("{{q[2:5]}}|{{q[-3:]}}|{{q[::-2]}}|{{q[1]}}"), "llo|rld|drwolh|\u00e9");
  EXPECT_EQ(render("{{w.split()}}|{{w.strip()}}|{{w|trim}}"), "['two', 'words']|two  words|two  words");
  EXPECT_EQ(render("{{ q|length }}"), "11");
  EXPECT_EQ(render("{{ text.split(' ', 1) }}"), "['a', 'b  c d']");
  EXPECT_EQ(render("{{ q.replace('l', 'L') }}"), "h\u00e9LLo w\u00f6rLd");
  EXPECT_EQ(render("{{ q.index('w') }}"), "6");
  EXPECT_EQ(render("{{ q.split('\u00f6') }}"), "['h\u00e9llo w', 'rld']");
}

TEST(TemplateTest, LiteralsOperatorsAndFilters) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 2 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }}"), "3 -4 1 3.5 7");
  EXPECT_EQ(render("{{ label ~ 1 }}"), "31");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }}"), "[1, 'a', None, True, 1.5]");
  EXPECT_EQ(render("{{ '2.5'|int }} {{ 'x'|int }} {{ ' 4 '|int }}"), "2 0 4");  // Jinja's int filter
  EXPECT_EQ(render("{{ choices['text'][-1] }}{{ choices.text.0 }}"), "yx");
  EXPECT_EQ(render("{{ choices.text + ['z'] }}"), "['x', 'y', 'z']");
  EXPECT_EQ(render("{{ choices.text|join(', ') }}"), "x, y");
  EXPECT_EQ(render(R"({{ 'it\'s' }}|{{ "a\nb" }}|{{ '}}' }})"), "it's|a\nb|}}");
}

// lm-eval's gsm8k-cot doc_to_target: a few-shot sample has `target`, a test document `answer`.
TEST(TemplateTest, ConditionalsTestsAndBooleans) {
  EXPECT_EQ(render("{{ label if label is defined else nope }}"), "3");
  EXPECT_EQ(render("{{ nope if nope is defined else label }}"), "3");
  EXPECT_EQ(render("{{ nope.x if nope is defined and nope.x is defined else 'no' }}"), "no");
  EXPECT_EQ(
      render("{{ choices.text[5] is defined }}|{{ choices.text[-2] is defined }}|{{ choices.nope is undefined }}"),
      "False|True|True");
  EXPECT_EQ(render("{{ none is none }}|{{ label is not none }}|{{ label is string }}|{{ 1.5 is number }}"),
            "True|True|True|True");
  EXPECT_EQ(render("{{ not label }}|{{ not '' }}|{{ '' or 'x' }}|{{ 'a' and 0 }}|{{ [] or none }}"),
            "False|True|x|0|None");
  EXPECT_EQ(render("{{ 'a' if '' else 'b' if 0 else 'c' }}"), "c");
  EXPECT_EQ(render("{{ label ~ 'x' is defined }}"), "3True");  // a test binds tighter than '~'
  EXPECT_EQ(render("{{ (text.split('####')[-1].strip() if text is defined else nope) }}"), "a b  c d");
  const nlohmann::json sample = {{"question", "q"}, {"target", "It is 6. The answer is 6."}};
  const nlohmann::json document = {{"question", "q"}, {"answer", "6 + 1 = 7\n#### 7"}};
  const Template target = Template::parse("{{answer.split('####')[-1].strip() if answer is defined else target}}",
                                          "doc_to_target", "t.yaml:2");
  EXPECT_EQ(target.render(sample, "d"), "It is 6. The answer is 6.");
  EXPECT_EQ(target.render(document, "d"), "7");
}

TEST(TemplateTest, WhitespaceControlAndComments) {
  EXPECT_EQ(render("a  {{- label -}}  b"), "a3b");
  EXPECT_EQ(render("x{# note #}y"), "xy");
  EXPECT_EQ(render("x \n{#- note -#}\n y"), "xy");
}

TEST(TemplateTest, SingleExpressionsKeepTheirType) {
  const Template choice = Template::parse("{{[sol1, sol2]}}", "doc_to_choice", "t.yaml:4");
  EXPECT_EQ(choice.value(doc(), "d"), nlohmann::json({"fold it", "cut it"}));
  EXPECT_EQ(Template::parse("{{(label|int) - 1}}", "doc_to_target", "t").value(doc(), "d"), 2);
  EXPECT_TRUE(Template::parse("{{ a }}", "x", "t").is_single_expression());
  EXPECT_FALSE(Template::parse("{{ a }} ", "x", "t").is_single_expression());
}

TEST(TemplateTest, ConstructsOutsideTheSubsetNameFileLineAndConstruct) {
  auto parse_error = [](const std::string& text) {
    return error_of([&] { Template::parse(text, "doc_to_text", "tasks/x.yaml:7"); });
  };
  EXPECT_THAT(parse_error("{{ a == b }}"),
              HasSubstr("tasks/x.yaml:7: doc_to_text '{{ a == b }}': the comparison '==' is not supported"));
  EXPECT_THAT(
      parse_error("{{ a if b }}"),
      HasSubstr(
          "tasks/x.yaml:7: doc_to_text '{{ a if b }}': the expression ' a if b ' (it ends too early (a conditional expression needs its 'else' part)) is not supported"));
  EXPECT_THAT(parse_error("{{ a in b }}"), HasSubstr("the operator 'in' is not supported"));
  EXPECT_THAT(parse_error("{{ range(3) }}"), HasSubstr("the function call 'range()' is not supported"));
  EXPECT_THAT(parse_error("{{ x|title }}"), HasSubstr("the filter 'title' is not supported"));
  EXPECT_THAT(parse_error("{{ {'a': 1} }}"), HasSubstr("a dict literal is not supported"));
  EXPECT_THAT(parse_error("{{ x is odd }}"), HasSubstr("the test 'odd' is not supported"));
  EXPECT_THAT(parse_error("{{ x is divisibleby(3) }}"), HasSubstr("the test 'divisibleby' is not supported"));
  EXPECT_THAT(parse_error("{{ x|join(sep=',') }}"), HasSubstr("the keyword argument 'sep=' is not supported"));
  EXPECT_THAT(
      parse_error("{% for x in y %}{{x}}{% endfor %}"),
      HasSubstr(
          "tasks/x.yaml:7: doc_to_text '{% for x in y %}{{x}}{% endfor %}': a '{% for %}' statement is not supported (gpueval's templates have if/elif/else/endif only)"));
  EXPECT_THAT(parse_error("{{ a + }}"), HasSubstr("the expression ' a + ' (it ends too early) is not supported"));
  EXPECT_THAT(parse_error("{{ 'open }}"), HasSubstr("'{{' without a closing '}}'"));
  // Depth is bounded, so a deep template is refused, not a stack overflow (found by fuzz_template).
  EXPECT_THAT(parse_error("{{ " + std::string(65, '[') + "1" + std::string(65, ']') + " }}"),
              HasSubstr("brackets nested more than 64 deep is not supported"));
  EXPECT_THAT(parse_error("{{ 1" +
                          [] {
                            std::string s;
                            for (int i = 0; i < 300; ++i) s += " + 1";
                            return s;
                          }() +
                          " }}"),
              HasSubstr("an expression more than 256 operations deep is not supported"));
  // Long chains of `not` and of conditionals are bounded too, never a deep recursion.
  EXPECT_THAT(parse_error("{{ " +
                          [] {
                            std::string s;
                            for (int i = 0; i < 300; ++i) s += "not ";
                            return s;
                          }() +
                          "x }}"),
              HasSubstr("an expression more than 256 operations deep is not supported"));
  EXPECT_THAT(parse_error("{{ " +
                          [] {
                            std::string s;
                            for (int i = 0; i < 100; ++i) s += "a if b else ";
                            return s;
                          }() +
                          "c }}"),
              HasSubstr("brackets nested more than 64 deep is not supported"));
  EXPECT_EQ(Template::parse("{{ " + std::string(64, '(') + "2" + std::string(64, ')') + " * 3 }}", "doc_to_text", "t")
                .render(doc(), "d"),
            "6");
}

TEST(TemplateTest, IfStatementsChooseABranchAsJinjaDoes) {
  // lm-eval's mbpp doc_to_target: the few-shot examples carry is_fewshot, the asked documents do not.
  const std::string mbpp =
      "{% if is_fewshot is defined %}{{code}}\n[DONE]{% else %}{{tests[0]}}\n{{tests[1]}}{% endif %}";
  const Template t = Template::parse(mbpp, "doc_to_target", "t");
  EXPECT_FALSE(t.is_single_expression());
  const nlohmann::json asked = {{"code", "def f(): pass"}, {"tests", {"assert f() is None", "assert 1"}}};
  nlohmann::json example = asked;
  example["is_fewshot"] = true;
  EXPECT_EQ(t.render(asked, "d"), "assert f() is None\nassert 1");
  EXPECT_EQ(t.render(example, "d"), "def f(): pass\n[DONE]");
  // elif, else, nesting, Python truth values, and no trim_blocks: the text around a tag stays.
  const Template branches = Template::parse(
      "a{% if x %}X{% elif y %}Y{% if z %}Z{% else %}z{% endif %}{% else %}-{% endif %}\n{% if x %}1{% endif %}b", "x",
      "t");
  EXPECT_EQ(branches.render({{"x", "s"}, {"y", 0}, {"z", 0}}, "d"), "aX\n1b");
  EXPECT_EQ(branches.render({{"x", ""}, {"y", {1}}, {"z", 1.5}}, "d"), "aYZ\nb");
  EXPECT_EQ(branches.render({{"x", nullptr}, {"y", true}, {"z", nlohmann::json::array()}}, "d"), "aYz\nb");
  EXPECT_EQ(branches.render({{"x", false}, {"y", 0.0}, {"z", 1}}, "d"), "a-\nb");
  // Whitespace control on statement tags.
  EXPECT_EQ(Template::parse("a  {%- if x -%}  b  {%- endif %} c", "x", "t").render({{"x", 1}}, "d"), "ab c");
  // A condition is only evaluated when reached: a missing field in an untaken elif is no error.
  EXPECT_EQ(Template::parse("{% if x %}1{% elif missing %}2{% endif %}", "x", "t").render({{"x", 1}}, "d"), "1");
  EXPECT_THAT(error_of([] {
                Template::parse("{% if x %}1{% elif missing %}2{% endif %}", "x", "t").render({{"x", 0}}, "d:3");
              }),
              HasSubstr("d:3: x '{% if x %}1{% elif missing %}2{% endif %}' references missing field 'missing'"));
}

TEST(TemplateTest, MalformedStatementsAreOneLineErrors) {
  auto parse_error = [](const std::string& text) {
    return error_of([&] { Template::parse(text, "doc_to_target", "tasks/x.yaml:7"); });
  };
  EXPECT_THAT(parse_error("{% if x %}a"),
              HasSubstr("tasks/x.yaml:7: doc_to_target '{% if x %}a': '{% if %}' without '{% endif %}'"));
  EXPECT_THAT(parse_error("a{% endif %}"), HasSubstr("'{% endif %}' without an open '{% if %}'"));
  EXPECT_THAT(parse_error("{% if x %}{% else %}{% elif y %}{% endif %}"), HasSubstr("'{% elif %}' after '{% else %}'"));
  EXPECT_THAT(parse_error("{% if x %}{% else %}{% else %}{% endif %}"), HasSubstr("'{% else %}' after '{% else %}'"));
  EXPECT_THAT(parse_error("{% if %}{% endif %}"), HasSubstr("'{% if %}' without a condition"));
  EXPECT_THAT(parse_error("{% if x %}{% endif y %}"), HasSubstr("'{% endif %}' takes nothing after it, not 'y'"));
  EXPECT_THAT(parse_error("{% if x == 1 %}{% endif %}"), HasSubstr("the comparison '==' is not supported"));
  EXPECT_THAT(parse_error("{% if x %}"), HasSubstr("without '{% endif %}'"));
  EXPECT_THAT(parse_error("{% set x = 1 %}"), HasSubstr("a '{% set %}' statement is not supported"));
  EXPECT_THAT(parse_error("{% if x "), HasSubstr("'{%' without a closing '%}'"));
  // A '%}' inside a string literal does not close the tag.
  EXPECT_EQ(Template::parse("{% if 'a %}' %}A{% endif %}", "x", "t").render(nlohmann::json::object(), "d"), "A");
  std::string deep;
  for (int i = 0; i < 33; ++i) deep += "{% if x %}";
  EXPECT_THAT(parse_error(deep), HasSubstr("'{% if %}' nested more than 32 deep"));
}

TEST(TemplateTest, EvaluationErrorsNameTheDocument) {
  auto render_error = [](const std::string& text) {
    return error_of([&] { Template::parse(text, "doc_to_text", "t.yaml:3").render(doc(), "d.jsonl:9"); });
  };
  EXPECT_EQ(render_error("{{ nope }}"), "d.jsonl:9: doc_to_text '{{ nope }}' references missing field 'nope'");
  EXPECT_EQ(render_error("{{ choices.text[5] }}"),
            "d.jsonl:9: doc_to_text '{{ choices.text[5] }}' references missing field 'choices.text[5]'");
  EXPECT_EQ(render_error("{{ label + 1 }}"),
            "d.jsonl:9: doc_to_text '{{ label + 1 }}': unsupported operand type(s) for +: 'str' and 'int'");
  // The template is quoted as untrusted text: its own quotes come escaped.
  EXPECT_EQ(render_error("{{ choices.label.index(\"E\") }}"),
            "d.jsonl:9: doc_to_text '{{ choices.label.index(\"E\") }}': 'E' is not in list ['A', 'B']");
  EXPECT_EQ(render_error("{{ text.split(1) }}"),
            "d.jsonl:9: doc_to_text '{{ text.split(1) }}': split() separator must be str, not int");
  EXPECT_EQ(render_error("{{ label // 0 }}"),
            "d.jsonl:9: doc_to_text '{{ label // 0 }}': unsupported operand type(s) for //: 'str' and 'int'");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "d.jsonl:9: doc_to_text '{{ 1 // 0 }}': integer division or modulo by zero");
  // 64-bit integers: past them is an error, never undefined behaviour (found by fuzz_template).
  EXPECT_EQ(render_error("{{ 212211222222666 * 1222222222121222 }}"),
            "d.jsonl:9: doc_to_text '{{ 212211222222666 * 1222222222121222 }}': integer overflow in '*'");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"),
            "d.jsonl:9: doc_to_text '{{ 9223372036854775807 + 1 }}': integer overflow in '+'");
  EXPECT_EQ(render_error("{{ (0 - 9223372036854775807 - 1) // -1 }}"),
            "d.jsonl:9: doc_to_text '{{ (0 - 9223372036854775807 - 1) // -1 }}': integer overflow in '//'");
  // A runaway string is refused before it is built (found by fuzz_template: a filter binds tighter
  // than '*', so this repeats the string '12222' 102 million times).
  EXPECT_EQ(render_error("{{ 102212666*12222 | trim }}"),
            "d.jsonl:9: doc_to_text '{{ 102212666*12222 | trim }}': '*' would repeat a string of 5 bytes "
            "102212666 times, over the 16 MiB a template may render");
  EXPECT_THAT(render_error("{{ ('ab' * 5000000) ~ ('ab' * 5000000) }}"),
              HasSubstr("'~' would make a string of 20000000 bytes, over the 16 MiB a template may render"));
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ 'ab' * -1 }}|{{ '' * 9000000000000 }}"), "ababab|xx||");
}

TEST(TemplateTest, LiteralEvalReadsPythonListReprs) {
  EXPECT_EQ(jinja::literal_eval("['a', \"it's\", 2, None]"), nlohmann::json({"a", "it's", 2, nullptr}));
  EXPECT_EQ(jinja::literal_eval("[]"), nlohmann::json::array());
  EXPECT_FALSE(jinja::literal_eval("[a, b]").has_value());
  EXPECT_FALSE(jinja::literal_eval("['a'").has_value());
}

}  // namespace
}  // namespace gpueval
