// Chat templates rendered by gpueval's Jinja engine against transformers' apply_chat_template:
// the shared corpus (../shared/data/chat_templates/references.json: each template on each
// conversation, as the files are and as their README preprocesses them), byte for byte, or
// raising the same "<ExceptionType>: <message>"; and the refusals at load time.
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "jinja/chat_template.h"

namespace gpueval::testing {
std::string shared_dir();  // tests/test_util.cpp
bool have_shared();
}  // namespace gpueval::testing

namespace gpueval::jinja {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// The corpus froze strftime_now's clock at 2025-06-15T12:00:00.
std::string frozen_strftime(const std::string& format) {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 5;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  std::tm copy = tm;
  timegm(&copy);  // fills the weekday and day of the year
  tm.tm_wday = copy.tm_wday;
  tm.tm_yday = copy.tm_yday;
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return std::string(buf, n);
}

// "ok" / "raised" (as expected) / "mismatch: ..." for one rendered case.
std::string check(const ChatTemplate& t, const ojson& context, const ojson& expected) {
  std::string got;
  try {
    got = t.render(context);
  } catch (const TemplateRaised& e) {
    got = std::string("\x01TemplateError: ") + e.what();
  } catch (const RenderError& e) {
    got = std::string("\x01") + e.type() + ": " + e.message();
  }
  if (expected["ok"].get<bool>()) {
    if (got == expected["output"].get<std::string>()) return "ok";
    return "mismatch: expected " + ojson(expected["output"]).dump() + "\n  got " + ojson(got).dump();
  }
  if (got == "\x01" + expected["error"].get<std::string>()) return "raised";
  return "mismatch: expected error " + expected["error"].dump() + "\n  got " + ojson(got).dump();
}

TEST(ChatTemplateCorpus, ByteIdenticalToTransformers) {
  if (!::gpueval::testing::have_shared()) GTEST_SKIP() << "shared data not found";
  const std::string dir = ::gpueval::testing::shared_dir() + "/data/chat_templates/";
  std::ifstream in(dir + "references.json");
  if (!in) GTEST_SKIP() << "no " << dir << "references.json";
  const ojson refs = ojson::parse(in);
  std::map<std::string, ojson> conversations;
  for (const ojson& c : refs["conversations"]) conversations[c["id"].get<std::string>()] = c["messages"];

  for (const char* set : {"results", "results_readme_preprocessed"}) {
    std::map<std::string, ChatTemplate> templates;
    int ok = 0, raised = 0, mismatched = 0;
    for (const ojson& r : refs[set]) {
      const std::string name = r["template"].get<std::string>();
      const ojson& info = refs["templates"][name];
      if (!templates.count(name)) {
        std::string text = read_file(dir + info["file"].get<std::string>());
        if (std::string(set) == "results_readme_preprocessed")
          text = replace_all(replace_all(text, "    ", ""), "\n", "");
        ChatTemplate t = ChatTemplate::parse(text, info["file"].get<std::string>());
        t.set_clock(frozen_strftime);
        templates.emplace(name, std::move(t));
      }
      ojson context = ojson::object();
      context["messages"] = conversations.at(r["conversation"].get<std::string>());
      context["add_generation_prompt"] = r["add_generation_prompt"];
      context["bos_token"] = info["bos_token"];
      context["eos_token"] = info["eos_token"];
      const std::string verdict = check(templates.at(name), context, r);
      if (verdict == "ok")
        ++ok;
      else if (verdict == "raised")
        ++raised;
      else {
        ++mismatched;
        ADD_FAILURE() << set << ": " << name << " on " << r["conversation"].get<std::string>()
                      << " (add_generation_prompt=" << r["add_generation_prompt"] << "): " << verdict;
      }
    }
    std::printf("[corpus] %s: %zu cases, %d byte-identical, %d raised as expected, %d mismatched\n", set,
                refs[set].size(), ok, raised, mismatched);
    EXPECT_EQ(mismatched, 0);
    EXPECT_EQ(static_cast<size_t>(ok + raised), refs[set].size());
  }
}

std::string refusal(const std::string& text) {
  try {
    ChatTemplate::parse(text, "chat_template.jinja");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ChatTemplateRefusals, OneLineWithFileAndLine) {
  EXPECT_EQ(refusal("a\nb\n{% include 'x.jinja' %}"), "chat_template.jinja:3: unsupported statement 'include'");
  EXPECT_EQ(refusal("{% import 'm' as m %}"), "chat_template.jinja:1: unsupported statement 'import'");
  EXPECT_EQ(refusal("{% extends 'base' %}"), "chat_template.jinja:1: unsupported statement 'extends'");
  EXPECT_EQ(refusal("x\n{% block b %}{% endblock %}"), "chat_template.jinja:2: unsupported statement 'block'");
  EXPECT_EQ(refusal("{% with a = 1 %}{% endwith %}"), "chat_template.jinja:1: unsupported statement 'with'");
  EXPECT_EQ(refusal("{% frobnicate %}"), "chat_template.jinja:1: unknown statement 'frobnicate'");
  EXPECT_EQ(refusal("\n\n{{ x | nosuchfilter }}"), "chat_template.jinja:3: unsupported filter 'nosuchfilter'");
  EXPECT_EQ(refusal("{{ x is nosuchtest }}"), "chat_template.jinja:1: unsupported test 'nosuchtest'");
  // Inside an if, Jinja2 loads it and raises only if it runs (JinjaEngine.UnknownFilterOrTestRaisesWhenEvaluated).
  EXPECT_EQ(refusal("{% if x is nosuchtest %}{% endif %}"), "(accepted)");
  EXPECT_EQ(
      refusal("{% for m in messages recursive %}{% endfor %}"),
      "chat_template.jinja:1: unsupported: recursive loops ('for ... recursive') are outside gpueval's Jinja subset");
  // Syntax errors: the line of the fault, one line.
  EXPECT_EQ(
      refusal("line1\n{% if x %}\nno end"),
      "chat_template.jinja:2: unexpected end of template: 'if' opened here was never closed (looking for 'elif' or "
      "'else' or 'endif')");
  EXPECT_EQ(refusal("{{ x + }}"), "chat_template.jinja:1: unexpected end of print statement");
  EXPECT_EQ(refusal("a\n{{ (x }}"), "chat_template.jinja:2: unexpected '}', expected ')'");
  EXPECT_EQ(refusal("{% endfor %}"), "chat_template.jinja:1: unexpected 'endfor' (no open statement it closes)");
  EXPECT_EQ(refusal("{# never closed"), "chat_template.jinja:1: missing end of comment tag ('#}')");
  EXPECT_EQ(refusal("{{ 'abc }}"), "chat_template.jinja:1: unexpected char \"'\" at 3");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheMessage) {
  const ChatTemplate t =
      ChatTemplate::parse("{{ raise_exception('Only user and assistant roles: ' ~ messages[0].role) }}", "t.jinja");
  try {
    t.render(ojson{{"messages", ojson::array({ojson{{"role", "tool"}, {"content", "x"}}})}});
    FAIL() << "no exception";
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Only user and assistant roles: tool");
  }
  const ChatTemplate u = ChatTemplate::parse("{{ messages[0].content.x }}", "t.jinja");
  try {
    u.render(ojson{{"messages", ojson::array({ojson{{"role", "user"}}})}});
    FAIL() << "no exception";
  } catch (const RenderError& e) {
    EXPECT_EQ(e.type(), "UndefinedError");
    EXPECT_EQ(e.message(), "'dict object' has no attribute 'content'");
  }
}

}  // namespace
}  // namespace gpueval::jinja
