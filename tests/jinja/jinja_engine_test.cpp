// gpueval's Jinja engine against real jinja2: tests/fixtures/jinja_cases.json holds small
// templates covering each construct, filter, test and method the engine supports (and its
// edge cases: trim_blocks/lstrip_blocks with - and +, loop variables, scopes, namespaces,
// macros, tojson's arguments and Unicode, slices, Python's str() of values, lenient
// Undefined, errors) plus real-world chat templates (Llama 3.1 with tools, Qwen3 with
// enable_thinking, Gemma 2/3, DeepSeek-R1, OLMo 2, Mistral v3 tool calls), each rendered by
// scripts/jinja_reference_cases.py through transformers' render_jinja_template. Every case must
// render byte-identical, or raise the same "<ExceptionType>: <message>"; a template jinja2
// rejects when compiling (TemplateSyntaxError, TemplateAssertionError, Python's SyntaxError for
// a break outside a loop, include without a loader) must be refused by ChatTemplate::parse.
#include <ctime>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "jinja/chat_template.h"

namespace gpueval::testing {
std::string source_dir();  // tests/test_util.cpp
}  // namespace gpueval::testing

namespace gpueval::jinja {
namespace {

using ojson = nlohmann::ordered_json;

std::string frozen_strftime(const std::string& format) {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 5;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  std::tm copy = tm;
  timegm(&copy);
  tm.tm_wday = copy.tm_wday;
  tm.tm_yday = copy.tm_yday;
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return std::string(buf, n);
}

bool refused_by_jinja2_at_compile(const ojson& c) {
  if (c["ok"].get<bool>()) return false;
  const std::string e = c["error"].get<std::string>();
  // SyntaxError: Python's, compiling what Jinja2 generated (a break outside a loop).
  return e.rfind("TemplateSyntaxError:", 0) == 0 || e.rfind("TemplateAssertionError:", 0) == 0 ||
         e.rfind("SyntaxError:", 0) == 0 || e == "TypeError: no loader for this environment specified";
}

TEST(JinjaEngine, MatchesJinja2OnTheDifferentialFixture) {
  std::ifstream in(::gpueval::testing::source_dir() + "/tests/fixtures/jinja_cases.json");
  ASSERT_TRUE(in) << "tests/fixtures/jinja_cases.json missing (scripts/jinja_reference_cases.py writes it)";
  const ojson fixture = ojson::parse(in);
  int rendered = 0, raised = 0, refused = 0, mismatched = 0;
  for (const ojson& c : fixture["cases"]) {
    const std::string name = c["name"].get<std::string>();
    std::optional<ChatTemplate> t;
    try {
      t = ChatTemplate::parse(c["template"].get<std::string>(), name + ".jinja");
    } catch (const Error& e) {
      if (refused_by_jinja2_at_compile(c)) {
        ++refused;
      } else {
        ++mismatched;
        ADD_FAILURE() << name << ": refused (" << e.what() << ") but jinja2 gives "
                      << (c["ok"].get<bool>() ? ojson(c["output"]).dump() : c["error"].dump());
      }
      continue;
    }
    if (refused_by_jinja2_at_compile(c)) {
      ++mismatched;
      ADD_FAILURE() << name << ": accepted, but jinja2 refuses it: " << c["error"];
      continue;
    }
    t->set_clock(frozen_strftime);
    std::string got;
    bool threw = false;
    try {
      got = t->render(c["context"]);
    } catch (const TemplateRaised& e) {
      got = std::string("TemplateError: ") + e.what();
      threw = true;
    } catch (const RenderError& e) {
      got = e.type() + ": " + e.message();
      threw = true;
    }
    const bool ok = c["ok"].get<bool>();
    const std::string want = ok ? c["output"].get<std::string>() : c["error"].get<std::string>();
    if (threw == !ok && got == want) {
      ++(ok ? rendered : raised);
    } else {
      ++mismatched;
      ADD_FAILURE() << name << ":\n  want " << (ok ? "" : "error ") << ojson(want).dump() << "\n  got  "
                    << (threw ? "error " : "") << ojson(got).dump();
    }
  }
  std::printf(
      "[jinja2 fixture] %zu cases: %d byte-identical, %d raised as expected, %d refused at load as jinja2 does, "
      "%d mismatched\n",
      fixture["cases"].size(), rendered, raised, refused, mismatched);
  EXPECT_EQ(mismatched, 0);
}

}  // namespace
}  // namespace gpueval::jinja

namespace gpueval::jinja {
namespace {

std::string render_with(const std::string& text, const nlohmann::ordered_json& context, bool strict) {
  const Program p = Program::parse(text, "t.jinja", SyntaxOptions{});
  RenderOptions options;
  options.strict_undefined = strict;
  try {
    return p.render(Value::from_json(context), options);
  } catch (const RenderError& e) {
    return "error " + std::string(e.what());
  }
}

// Task files' mode (lm-eval's StrictUndefined): using a missing value is an error, testing or
// defaulting it is not. No trim_blocks/lstrip_blocks there: text around tags stays.
TEST(JinjaEngine, StrictUndefined) {
  const nlohmann::ordered_json doc = {{"a", 1}, {"d", nlohmann::ordered_json::object()}};
  EXPECT_EQ(render_with("{{ a }} {{ b is defined }} {{ b|default('x') }}", doc, true), "1 False x");
  EXPECT_EQ(render_with("{{ b }}", doc, true), "error UndefinedError: 'b' is undefined");
  EXPECT_EQ(render_with("{{ d.k }}", doc, true), "error UndefinedError: 'dict object' has no attribute 'k'");
  EXPECT_EQ(render_with("{% if b %}x{% endif %}", doc, true), "error UndefinedError: 'b' is undefined");
  EXPECT_EQ(render_with("{% for x in b %}{% endfor %}", doc, true), "error UndefinedError: 'b' is undefined");
  EXPECT_EQ(render_with("{{ b }}|{% if b %}x{% endif %}", doc, false), "|");
  EXPECT_EQ(render_with("{% if a %}\n  x\n{% endif %}\n", doc, false), "\n  x\n");
  // An empty sequence repeated a huge number of times is empty at once, not a loop of that many steps.
  EXPECT_EQ(render_with("{{ '' * 9000000000000 }}|{{ [] * 9000000000000 }}|{{ 'ab' * 2 }}", doc, true), "|[]|abab");
}

// Jinja2's rule for a filter or test it does not know (checked against jinja2 3.1.6 in
// transformers' environment): inside an if statement or an inline if-expression of the same frame
// the template loads and raises "No filter named 'x' found." only when that part is evaluated,
// after its operand; anywhere else (a for body, a macro, a filter block start frames of their own)
// the template is refused at load.
TEST(JinjaEngine, UnknownFilterOrTestRaisesWhenEvaluated) {
  auto outcome = [](const std::string& text, const nlohmann::ordered_json& context) {
    std::optional<ChatTemplate> t;
    try {
      t = ChatTemplate::parse(text, "t.jinja");
    } catch (const Error& e) {
      return "refused " + std::string(e.what());
    }
    try {
      return t->render(context);
    } catch (const RenderError& e) {
      return e.type() + ": " + e.message();
    }
  };
  using ojson = nlohmann::ordered_json;
  const std::string tools =
      "{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls | fromjson }}{% endif %}"
      "{{ m.content }}{% endfor %}";
  EXPECT_EQ(outcome(tools, {{"messages", ojson::array({{{"content", "hi"}}})}}), "hi");
  EXPECT_EQ(outcome(tools, {{"messages", ojson::array({{{"content", "hi"}, {"tool_calls", "[1]"}}})}}),
            "TemplateRuntimeError: No filter named 'fromjson' found.");
  EXPECT_EQ(outcome("{{ (y | fromjson) if x else 'b' }}", {{"x", false}}), "b");
  EXPECT_EQ(outcome("{{ (y | fromjson) if x else 'b' }}", {{"x", true}, {"y", 1}}),
            "TemplateRuntimeError: No filter named 'fromjson' found.");
  EXPECT_EQ(outcome("{% if x %}a{% elif x is nosuchtest %}b{% else %}{{ x | nosuch }}{% endif %}", {{"x", 1}}), "a");
  EXPECT_EQ(outcome("{% if x is nosuchtest %}a{% else %}b{% endif %}", {{"x", 1}}),
            "TemplateRuntimeError: No test named 'nosuchtest' found.");
  EXPECT_EQ(outcome("{% if x %}{% for i in y | nosuch %}{% endfor %}{% endif %}{% if x %}{% set y = 1 | nosuch %}"
                    "{% endif %}ok",
                    {{"x", 0}}),
            "ok");
  EXPECT_EQ(outcome("{% if true %}{{ (1/0) | nosuch }}{% endif %}", ojson::object()),
            "ZeroDivisionError: division by zero");
  EXPECT_EQ(outcome("{% if x %}{% for i in y %}{{ i | nosuch }}{% endfor %}{% endif %}", ojson::object()),
            "refused t.jinja:1: unsupported filter 'nosuch'");
  EXPECT_EQ(outcome("{% if x %}{% macro m() %}{{ 1 | nosuch }}{% endmacro %}{% endif %}", ojson::object()),
            "refused t.jinja:1: unsupported filter 'nosuch'");
  EXPECT_EQ(outcome("{% if x %}{% filter nosuch %}a{% endfilter %}{% endif %}", ojson::object()),
            "refused t.jinja:1: unsupported filter 'nosuch'");
  EXPECT_EQ(outcome("{% for i in [1] %}{{ i is nosuchtest }}{% endfor %}", ojson::object()),
            "refused t.jinja:1: unsupported test 'nosuchtest'");
}

TEST(JinjaEngine, RefusesRunawayNesting) {
  auto refusal = [](const std::string& text) {
    try {
      Program::parse(text, "deep.jinja", SyntaxOptions{});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string chain = "{{ x";
  for (int i = 0; i < 5000; ++i) chain += ".a";
  EXPECT_EQ(refusal(chain + " }}"), "deep.jinja:1: an expression more than 200 operations deep");
  std::string sum = "{{ 1";
  for (int i = 0; i < 5000; ++i) sum += "+1";
  EXPECT_EQ(refusal(sum + " }}"), "deep.jinja:1: an expression more than 200 operations deep");
  EXPECT_EQ(refusal("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").substr(0, 12),
            "deep.jinja:1");
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if x %}";
  EXPECT_EQ(refusal(ifs), "deep.jinja:1: the template nests more than 200 deep");
}

}  // namespace
}  // namespace gpueval::jinja
