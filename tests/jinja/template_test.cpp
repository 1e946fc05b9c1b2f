// Task files' templates (gpueval/template.h) on the template engine: every expected string below
// is what Jinja2 3.x renders for the same template and document in lm-evaluation-harness's
// environment (StrictUndefined, keep_trailing_newline), measured with jinja2 itself, and
// tests/fixtures/task_template_cases.json (scripts/task_template_cases.py) holds jinja2's renders of
// every shipped task template and of the subset's constructs on three documents.
#include <cstdio>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpueval/template.h"
#include "test_util.h"

namespace gpueval::testing {
std::string source_dir();  // tests/test_util.cpp
}  // namespace gpueval::testing

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

// Each case renders byte-identical to jinja2, or fails where jinja2 raises: a missing field
// (UndefinedError) as "references missing field", anything else with Python's message.
TEST(TemplateTest, MatchesJinja2OnEveryShippedTaskTemplateAndTheSubset) {
  std::ifstream in(testing::source_dir() + "/tests/fixtures/task_template_cases.json");
  ASSERT_TRUE(in) << "tests/fixtures/task_template_cases.json missing (scripts/task_template_cases.py writes it)";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  int rendered = 0, raised = 0;
  for (const nlohmann::json& c : fixture["cases"]) {
    const std::string name = c["name"].get<std::string>();
    const Template t = Template::parse(c["template"].get<std::string>(), "doc_to_text", name);
    const nlohmann::json& doc = fixture["documents"][c["doc"].get<size_t>()];
    if (c.contains("output")) {
      std::string got;
      EXPECT_NO_THROW(got = t.render(doc, "d")) << name;
      EXPECT_EQ(got, c["output"].get<std::string>()) << name;
      ++rendered;
      continue;
    }
    const std::string want = c["error"].get<std::string>();
    const std::string got = error_of([&] { t.render(doc, "d"); });
    // A field the document lacks is named as written; an attribute a str, list or number lacks (or
    // a method called that its value lacks) says so, naming the object; list.index adds the list.
    if (want.rfind("UndefinedError: ", 0) == 0) {
      const size_t attr = want.find(" has no attribute ");
      EXPECT_THAT(got, HasSubstr(attr == std::string::npos ? "' references missing field '" : want.substr(attr)))
          << name << ": jinja2 gives " << want;
    } else {
      EXPECT_THAT(got, HasSubstr(": " + want.substr(want.find(": ") + 2))) << name;
    }
    ++raised;
  }
  std::printf("[task-template fixture] %d cases: %d byte-identical, %d raised as jinja2 does\n", rendered + raised,
              rendered, raised);
  EXPECT_GT(rendered, 100);
  EXPECT_GT(raised, 10);
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

std::string repeated(const std::string& piece, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += piece;
  return s;
}

TEST(TemplateTest, ConstructsOutsideTheSubsetNameFileLineAndConstruct) {
  auto parse_error = [](const std::string& text) {
    return error_of([&] { Template::parse(text, "doc_to_text", "tasks/x.yaml:7"); });
  };
  EXPECT_THAT(parse_error("{{ a == b }}"),
              HasSubstr("tasks/x.yaml:7: doc_to_text '{{ a == b }}': the comparison '==' is not supported"));
  EXPECT_THAT(parse_error("{{ a if b }}"),
              HasSubstr("tasks/x.yaml:7: doc_to_text '{{ a if b }}': a conditional expression without its 'else' "
                        "part is not supported (gpueval's Jinja subset: "));
  EXPECT_THAT(parse_error("{{ a in b }}"), HasSubstr("the operator 'in' is not supported"));
  EXPECT_THAT(parse_error("{{ a not in b }}"), HasSubstr("the operator 'not in' is not supported"));
  EXPECT_THAT(parse_error("{{ range(3) }}"), HasSubstr("the function call 'range()' is not supported"));
  EXPECT_THAT(parse_error("{{ x|title }}"), HasSubstr("the filter 'title' is not supported"));
  EXPECT_THAT(parse_error("{{ x|nosuchfilter }}"), HasSubstr("the filter 'nosuchfilter' is not supported"));
  // Outside the subset even where Jinja2 would only fail when it is evaluated.
  EXPECT_THAT(parse_error("{% if x %}{{ x|fromjson }}{% endif %}"),
              HasSubstr("the filter 'fromjson' is not supported"));
  EXPECT_THAT(parse_error("{{ {'a': 1} }}"), HasSubstr("a dict literal is not supported"));
  EXPECT_THAT(parse_error("{{ (a, b) }}"), HasSubstr("a tuple literal is not supported"));
  EXPECT_THAT(parse_error("{{ x is odd }}"), HasSubstr("the test 'odd' is not supported"));
  EXPECT_THAT(parse_error("{{ x is divisibleby(3) }}"), HasSubstr("the test 'divisibleby' is not supported"));
  EXPECT_THAT(parse_error("{{ x is defined(3) }}"), HasSubstr("the test 'defined' with arguments is not supported"));
  EXPECT_THAT(parse_error("{{ x|join(sep=',') }}"), HasSubstr("the keyword argument 'sep=' is not supported"));
  EXPECT_THAT(parse_error("{{ x.split(sep=',') }}"), HasSubstr("the keyword argument 'sep=' is not supported"));
  EXPECT_THAT(parse_error("{{ x.y()() }}"), HasSubstr("calling the value of an expression is not supported"));
  EXPECT_THAT(
      parse_error("{% for x in y %}{{x}}{% endfor %}"),
      HasSubstr(
          "tasks/x.yaml:7: doc_to_text '{% for x in y %}{{x}}{% endfor %}': a '{% for %}' statement is not supported (gpueval's templates have if/elif/else/endif only)"));
  for (const char* statement : {"{% set x = 1 %}", "{% set x %}a{% endset %}", "{% macro m() %}{% endmacro %}",
                                "{% filter upper %}a{% endfilter %}", "{% generation %}a{% endgeneration %}"}) {
    EXPECT_THAT(parse_error(statement), HasSubstr("statement is not supported")) << statement;
  }
  EXPECT_THAT(parse_error("{% include 'x' %}"), HasSubstr("unsupported statement 'include'"));
  // Syntax errors in Jinja2's words; past the first line, the line is named.
  EXPECT_THAT(parse_error("{{ a + }}"), HasSubstr("doc_to_text '{{ a + }}': unexpected end of print statement"));
  EXPECT_THAT(parse_error("{{ 'open }}"), HasSubstr("doc_to_text '{{ \\'open }}': unexpected char \"'\" at 3"));
  EXPECT_THAT(parse_error("{{ open "), HasSubstr("doc_to_text '{{ open ': '{{' without a closing '}}'"));
  EXPECT_THAT(parse_error("a {# open "), HasSubstr("doc_to_text 'a {# open ': '{#' without a closing '#}'"));
  EXPECT_THAT(parse_error("a\nb\n{{ a ] }}"), HasSubstr(": line 3: unexpected ']'"));
  // Depth is bounded, so a deep template is refused, not a stack overflow (found by fuzz_template).
  EXPECT_THAT(parse_error("{{ " + std::string(150, '[') + "1" + std::string(150, ']') + " }}"),
              HasSubstr("the template nests more than 200 deep"));
  EXPECT_THAT(parse_error("{{ 1" + repeated(" + 1", 300) + " }}"),
              HasSubstr("an expression more than 200 operations deep"));
  // Long chains of `not` and of conditionals are bounded too, never a deep recursion.
  EXPECT_THAT(parse_error("{{ " + repeated("not ", 300) + "x }}"), HasSubstr("the template nests more than 200 deep"));
  EXPECT_THAT(parse_error("{{ " + repeated("a if b else ", 300) + "c }}"),
              HasSubstr("the template nests more than 200 deep"));
  EXPECT_EQ(Template::parse("{{ " + std::string(64, '(') + "2" + std::string(64, ')') + " * 3 }}", "doc_to_text", "t")
                .render(doc(), "d"),
            "6");
  EXPECT_EQ(Template::parse("{{ " + repeated("nope if nope is defined else ", 60) + "1 }}", "doc_to_text", "t")
                .render(doc(), "d"),
            "1");
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
              HasSubstr("tasks/x.yaml:7: doc_to_target '{% if x %}a': unexpected end of template: 'if' opened here "
                        "was never closed (looking for 'elif' or 'else' or 'endif')"));
  EXPECT_THAT(parse_error("a{% endif %}"), HasSubstr("unexpected 'endif' (no open statement it closes)"));
  EXPECT_THAT(parse_error("{% if x %}{% else %}{% elif y %}{% endif %}"),
              HasSubstr("unexpected 'elif' (no open statement it closes)"));
  EXPECT_THAT(parse_error("{% if x %}{% else %}{% else %}{% endif %}"),
              HasSubstr("unexpected 'else' (no open statement it closes)"));
  EXPECT_THAT(parse_error("{% if %}{% endif %}"), HasSubstr("unexpected end of statement block"));
  EXPECT_THAT(parse_error("{% if x %}{% endif y %}"), HasSubstr("expected end of statement block, got 'y'"));
  EXPECT_THAT(parse_error("{% if x == 1 %}{% endif %}"), HasSubstr("the comparison '==' is not supported"));
  EXPECT_THAT(parse_error("{% if x %}{% elif x in y %}{% endif %}"), HasSubstr("the operator 'in' is not supported"));
  EXPECT_THAT(parse_error("{% if x %}{% else %}{{ x|title }}{% endif %}"), HasSubstr("the filter 'title' is not"));
  EXPECT_THAT(parse_error("{% if x %}"), HasSubstr("was never closed"));
  EXPECT_THAT(parse_error("{% set x = 1 %}"), HasSubstr("a '{% set %}' statement is not supported"));
  EXPECT_THAT(parse_error("{% if x "), HasSubstr("'{%' without a closing '%}'"));
  // A '%}' inside a string literal does not close the tag.
  EXPECT_EQ(Template::parse("{% if 'a %}' %}A{% endif %}", "x", "t").render(nlohmann::json::object(), "d"), "A");
  EXPECT_THAT(parse_error(repeated("{% if x %}", 250)), HasSubstr("the template nests more than 200 deep"));
  EXPECT_EQ(
      Template::parse(repeated("{% if x %}", 40) + "y" + repeated("{% endif %}", 40), "x", "t").render({{"x", 1}}, "d"),
      "y");
}

TEST(TemplateTest, EvaluationErrorsNameTheDocument) {
  auto render_error = [](const std::string& text) {
    return error_of([&] { Template::parse(text, "doc_to_text", "t.yaml:3").render(doc(), "d.jsonl:9"); });
  };
  EXPECT_EQ(render_error("{{ nope }}"), "d.jsonl:9: doc_to_text '{{ nope }}' references missing field 'nope'");
  EXPECT_EQ(render_error("{{ choices.text[5] }}"),
            "d.jsonl:9: doc_to_text '{{ choices.text[5] }}' references missing field 'choices.text[5]'");
  EXPECT_EQ(render_error("{{ choices['nope'] }}"),
            "d.jsonl:9: doc_to_text '{{ choices[\\'nope\\'] }}' references missing field 'choices['nope']'");
  EXPECT_EQ(render_error("{{ nope.x }}"), "d.jsonl:9: doc_to_text '{{ nope.x }}' references missing field 'nope'");
  EXPECT_EQ(render_error("{{ text.split(' ')[9] }}"),
            "d.jsonl:9: doc_to_text '{{ text.split(\\' \\')[9] }}' references missing field 'text.split(' ')[9]'");
  EXPECT_EQ(render_error("{{ [sol1, nope] }}"),
            "d.jsonl:9: doc_to_text '{{ [sol1, nope] }}' references missing field 'nope'");
  EXPECT_EQ(render_error("{{ nope|length }}"),
            "d.jsonl:9: doc_to_text '{{ nope|length }}' references missing field 'nope'");
  // Where jinja2 gives a TypeError naming StrictUndefined, the field is named instead.
  EXPECT_EQ(render_error("{{ text.split(nope) }}"),
            "d.jsonl:9: doc_to_text '{{ text.split(nope) }}' references missing field 'nope'");
  EXPECT_EQ(render_error("{{ text[1:nope] }}"),
            "d.jsonl:9: doc_to_text '{{ text[1:nope] }}' references missing field 'nope'");
  EXPECT_EQ(render_error("{% if nope %}x{% endif %}"),
            "d.jsonl:9: doc_to_text '{% if nope %}x{% endif %}' references missing field 'nope'");
  // Python's own messages (each as jinja2 raises it).
  EXPECT_EQ(render_error("{{ label + 1 }}"),
            "d.jsonl:9: doc_to_text '{{ label + 1 }}': can only concatenate str (not \"int\") to str");
  // The template is quoted as untrusted text: its own quotes come escaped.
  EXPECT_EQ(render_error("{{ choices.label.index(\"E\") }}"),
            "d.jsonl:9: doc_to_text '{{ choices.label.index(\"E\") }}': 'E' is not in list ['A', 'B']");
  EXPECT_EQ(render_error("{{ text.split(1) }}"),
            "d.jsonl:9: doc_to_text '{{ text.split(1) }}': must be str or None, not int");
  EXPECT_EQ(render_error("{{ text.foo() }}"),
            "d.jsonl:9: doc_to_text '{{ text.foo() }}': text (str) has no attribute 'foo'");
  EXPECT_EQ(render_error("{{ choices.foo() }}"),
            "d.jsonl:9: doc_to_text '{{ choices.foo() }}': choices (dict) has no attribute 'foo'");
  EXPECT_EQ(render_error("{{ text.split().x }}"),
            "d.jsonl:9: doc_to_text '{{ text.split().x }}': text.split() (list) has no attribute 'x'");
  EXPECT_EQ(render_error("{{ label // 0 }}"),
            "d.jsonl:9: doc_to_text '{{ label // 0 }}': unsupported operand type(s) for //: 'str' and 'int'");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "d.jsonl:9: doc_to_text '{{ 1 // 0 }}': integer division or modulo by zero");
  // 64-bit integers: past them is an error, never undefined behaviour (found by fuzz_template).
  for (const char* past :
       {"212211222222666 * 1222222222121222", "9223372036854775807 + 1", "(0 - 9223372036854775807 - 1) // -1"}) {
    EXPECT_THAT(render_error(std::string("{{ ") + past + " }}"),
                ::testing::EndsWith("': integer past 64 bits (gpueval's Jinja subset)"))
        << past;
  }
  // A runaway string is refused before it is built (found by fuzz_template: a filter binds tighter
  // than '*', so this repeats the string '12222' 102 million times).
  EXPECT_EQ(render_error("{{ 102212666*12222 | trim }}"),
            "d.jsonl:9: doc_to_text '{{ 102212666*12222 | trim }}': a string past 64 MiB");
  EXPECT_THAT(render_error("{{ ('ab' * 20000000) ~ ('ab' * 20000000) }}"), HasSubstr("a string past 64 MiB"));
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ 'ab' * -1 }}|{{ '' * 9000000000000 }}"), "ababab|xx||");
}

TEST(TemplateTest, PythonLiteralReadsPythonListReprs) {
  EXPECT_EQ(python_literal("['a', \"it's\", 2, None]"), nlohmann::json({"a", "it's", 2, nullptr}));
  EXPECT_EQ(python_literal("[]"), nlohmann::json::array());
  EXPECT_EQ(python_literal("[-1, 2.5, True, ['x']]"), nlohmann::json({-1, 2.5, true, {"x"}}));
  EXPECT_EQ(python_literal("-1"), nlohmann::json(-1));  // not `{{-` whitespace control
  EXPECT_FALSE(python_literal("[a, b]").has_value());
  EXPECT_FALSE(python_literal("['a'").has_value());
  EXPECT_FALSE(python_literal("['a'] + ['b']").has_value());
  EXPECT_FALSE(python_literal("[1]}}{{ x").has_value());
}

}  // namespace
}  // namespace gpueval
