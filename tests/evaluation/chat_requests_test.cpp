// Requests through a chat template against lm-evaluation-harness 0.4.13's own, pinned in
// tests/fixtures/lm_eval_chat_requests.json (scripts/dump_lm_eval_chat_requests.py builds them
// with lm-eval's HFLM over the shared data; docs/lm_eval_chat.md says what it does): for a
// Llama-3 template (it writes BOS itself) and the shared ChatML template on Mistral's tokenizer
// (it does not, so lm-eval adds one), with few-shot examples as turns or as one user message, a
// system instruction, and a Qwen3-like template given enable_thinking: false. Every context,
// continuation and token id (the BOS decision included) must be lm-eval's; and the run config's
// chat keys, the model's template files and think_end_token behave as lm-eval's options do.
#include <fstream>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "evaluation/chat_format.h"
#include "gpueval/error.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "gpueval/tokenizer.h"
#include "jinja/chat_template.h"
#include "plan/planner.h"
#include "test_util.h"
#include "tokenizer/chat_template_files.h"

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

const nlohmann::json& fixture() {
  static const nlohmann::json f = [] {
    std::ifstream in(testing::source_dir() + "/tests/fixtures/lm_eval_chat_requests.json");
    return nlohmann::json::parse(in);
  }();
  return f;
}

// The tokenizer folder each fixture model used (the Llama-3 tokenizer is shared gzipped).
std::string tokenizer_dir(const std::string& model, const testing::TempDir& scratch) {
  const std::string tokenizers = testing::shared_dir() + "/data/tokenizers/";
  if (model == "chatml") return tokenizers + "mistral7b_v0.1";
  scratch.write("tokenizer.json", io::read_gzip_file(tokenizers + "llama3/tokenizer.json.gz"));
  scratch.write("tokenizer_config.json", io::read_file(tokenizers + "llama3/tokenizer_config.json"));
  return scratch.path();
}

// What lm-eval's HFLM renders: the fixture model's template with its special tokens and the
// setting's chat_template_args (ChatFormat's, with the template given as text).
PromptFormat format_for(const nlohmann::json& setting) {
  const nlohmann::json& model = fixture()["models"][setting["model"].get<std::string>()];
  const std::string text = setting["model"] == "qwen3like" ? fixture()["qwen3_like_template"].get<std::string>()
                                                           : model["chat_template"].get<std::string>();
  auto parsed = std::make_shared<const jinja::ChatTemplate>(jinja::ChatTemplate::parse(text, "fixture"));
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (!model["bos_token"].is_null()) kwargs["bos_token"] = model["bos_token"];
  if (!model["eos_token"].is_null()) kwargs["eos_token"] = model["eos_token"];
  if (setting["model_args"].contains("chat_template_args"))
    for (const auto& [k, v] : setting["model_args"]["chat_template_args"].items()) kwargs[k] = v;
  PromptFormat p;
  p.chat = [parsed, kwargs](const nlohmann::ordered_json& m) { return parsed->apply(m, true, kwargs); };
  p.fewshot_as_multiturn = setting["fewshot_as_multiturn"].get<bool>();
  if (setting["system_instruction"].is_string()) p.system_instruction = setting["system_instruction"];
  return p;
}

Task load_task(const std::string& name, int64_t shots, const PromptFormat& prompt) {
  TaskLoadOptions o;
  const std::string data = testing::shared_dir() + "/data/";
  o.data_roots = {{"mmlu", data + "mmlu"},
                  {"arc", data + "arc"},
                  {"gsm8k", data + "gsm8k"},
                  {"lambada_openai", data + "lambada_openai"}};
  o.num_fewshot = shots;
  o.prompt = prompt;
  return Task::load(name, {testing::source_dir() + "/tasks"}, o);
}

// The fixture's tasks gpueval has (arc_easy 5-shot draws its examples from the test split, which
// gpueval's arc_easy has no fewshot source for; gen_prefix is refused; a rolling task has no
// template).
const char* const kTasks[] = {"mmlu_abstract_algebra", "arc_easy", "gsm8k", "gsm8k_cot", "lambada_openai"};

TEST(ChatRequests, ContextsAndContinuationsEqualLmEvalsThroughEveryTemplate) {
  GPUEVAL_REQUIRE_SHARED();
  ASSERT_EQ(fixture()["lm_eval_version"], "0.4.13");
  int64_t compared = 0;
  for (const auto& [setting_name, setting] : fixture()["settings"].items()) {
    const PromptFormat prompt = format_for(setting);
    for (const char* name : kTasks) {
      SCOPED_TRACE(setting_name + " " + name);
      const nlohmann::json& expected = setting["tasks"][name];
      const Task task = load_task(name, expected["num_fewshot"].get<int64_t>(), prompt);
      for (const nlohmann::json& doc : expected["docs"]) {
        const std::vector<Request> got = task.requests(task.documents().at(doc["doc_id"].get<size_t>()));
        ASSERT_FALSE(got.empty());
        EXPECT_EQ(got[0].context, doc["context"].get<std::string>()) << "doc " << doc["doc_id"];
        const nlohmann::json& requests = doc["requests"];
        if (got[0].type == RequestType::kGenerateUntil) continue;
        ASSERT_EQ(got.size(), requests.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_EQ(got[i].continuation, requests[i]["continuation"].get<std::string>()) << "request " << i;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 5 * 3 * 3);  // five settings, three loglikelihood tasks, three documents
}

// The token ids lm-eval feeds: one BOS for Llama-3 (its template writes it), and for the ChatML
// template on Mistral's tokenizer the BOS lm-eval adds before the template's own "<s>".
TEST(ChatRequests, TokenIdsAndTheBosDecisionEqualLmEvals) {
  GPUEVAL_REQUIRE_SHARED();
  for (const char* setting_name : {"llama3_mt_sys", "chatml_st_nosys"}) {
    const nlohmann::json& setting = fixture()["settings"][setting_name];
    const testing::TempDir scratch;
    const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tokenizer_dir(setting["model"], scratch));
    const bool adds_bos = fixture()["models"][setting["model"].get<std::string>()]["tokenizer_adds_bos_by_default"];
    const PromptFormat prompt = format_for(setting);
    for (const char* name : kTasks) {
      SCOPED_TRACE(std::string(setting_name) + " " + name);
      const nlohmann::json& expected = setting["tasks"][name];
      const Task task = load_task(name, expected["num_fewshot"].get<int64_t>(), prompt);
      for (const nlohmann::json& doc : expected["docs"]) {
        std::vector<Request> got = task.requests(task.documents().at(doc["doc_id"].get<size_t>()));
        PlanOptions po;
        po.add_bos = adds_bos;
        po.max_length = 1 << 20;
        po.prefix_reuse = false;
        po.group_continuations = false;
        for (size_t i = 0; i < got.size(); ++i) got[i].index = static_cast<int64_t>(i);
        const Plan plan = make_plan({got[0]}, *tokenizer, po);
        ASSERT_EQ(plan.batches.size(), 1u);
        const WorkItem& item = plan.batches[0].items.at(0);
        std::vector<int32_t> want = doc["context_ids"].get<std::vector<int32_t>>();
        if (got[0].type != RequestType::kGenerateUntil) {
          const auto cont = doc["requests"][0]["continuation_ids"].get<std::vector<int32_t>>();
          want.insert(want.end(), cont.begin(), cont.end());
        }
        EXPECT_EQ(item.tokens, want) << "doc " << doc["doc_id"] << " (lm-eval added BOS: " << doc["bos_added"] << ")";
      }
    }
  }
}

// The template's end of turn ends generation (Batch::stop_ids): Llama 3's <|eot_id|>, found from
// what the template writes after an assistant message; the shared ChatML file's <|im_end|> is
// plain text to Mistral's tokenizer, so there it is none.
TEST(ChatRequests, TheTemplatesEndOfTurnTokenStopsGeneration) {
  GPUEVAL_REQUIRE_SHARED();
  const testing::TempDir scratch;
  const std::string llama3 = tokenizer_dir("llama3", scratch);
  RunConfig c;
  c.apply_chat_template = "";
  const ChatFormat f = load_chat_format(c, llama3);
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(llama3);
  EXPECT_EQ(f.end_of_turn_ids(*tokenizer), std::vector<int32_t>{128009});
  EXPECT_EQ(tokenizer->decode({128009}, false), "<|eot_id|>");
  const testing::TempDir chatml;
  const std::string mistral = testing::shared_dir() + "/data/tokenizers/mistral7b_v0.1/";
  chatml.write("tokenizer.json", io::read_file(mistral + "tokenizer.json"));
  chatml.write("tokenizer_config.json", io::read_file(mistral + "tokenizer_config.json"));
  chatml.write("chat_template.jinja", io::read_file(testing::shared_dir() + "/data/chat_templates/chatml.jinja"));
  const std::unique_ptr<Tokenizer> mistral_tokenizer = load_tokenizer(chatml.path());
  EXPECT_TRUE(load_chat_format(c, chatml.path()).end_of_turn_ids(*mistral_tokenizer).empty());
  EXPECT_TRUE(load_chat_format(RunConfig{}, llama3).end_of_turn_ids(*tokenizer).empty());  // plain prompts
}

// enable_thinking reaches the template (chat_template_args); think_end_token keeps what follows
// the last one, left-stripped, as lm-eval's postprocess does (its own example, in the fixture).
TEST(ChatRequests, ThinkingTemplatesAndTheThinkEndToken) {
  GPUEVAL_REQUIRE_SHARED();
  const nlohmann::json& setting = fixture()["settings"]["qwen3like_nothink"];
  const Task gsm8k = load_task("gsm8k", 5, format_for(setting));
  const std::string context = gsm8k.requests(gsm8k.documents().at(0))[0].context;
  EXPECT_THAT(context, ::testing::EndsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  PromptFormat p;
  p.think_end_token = "</think>";
  const Task thinking = load_task("gsm8k", 0, p);
  RequestResult r;
  r.text = "<think>a\n\nb</think>\n\nThe answer is 4.\n\n";
  EXPECT_EQ(thinking.response(r), "The answer is 4.\n\n");
  r.text = "<think>x</think>y</think>  \n z";
  EXPECT_EQ(thinking.response(r), "z");
  r.text = "  no thinking at all";
  EXPECT_EQ(thinking.response(r), "no thinking at all");
  const nlohmann::json& example = fixture()["behaviour_checks"]["think_end_token_postprocess"];
  EXPECT_FALSE(example.is_null());
  // Without think_end_token the text is the text.
  const Task plain = load_task("gsm8k", 0, PromptFormat{});
  EXPECT_EQ(plain.response(r), "  no thinking at all");
}

// A system prompt without a template is lm-eval's maybe_delimit too: instruction, the fewshot
// delimiter, the description; nothing between it and the question when the task has no description.
TEST(ChatRequests, ASystemInstructionWithoutATemplateIsPlainText) {
  GPUEVAL_REQUIRE_SHARED();
  PromptFormat p;
  p.system_instruction = "SYS.";
  const Task arc = load_task("arc_easy", 0, p);
  EXPECT_THAT(arc.requests(arc.documents().at(0))[0].context, ::testing::StartsWith("SYS.Question: "));
  const Task mmlu = load_task("mmlu_abstract_algebra", 0, p);
  EXPECT_THAT(mmlu.requests(mmlu.documents().at(0))[0].context,
              ::testing::StartsWith("SYS.\n\nThe following are multiple choice questions (with answers) about abstract "
                                    "algebra.\n\n"));
}

// Where a checkpoint keeps its templates, as transformers looks: chat_template.jinja over
// tokenizer_config.json, named templates, special tokens as text; and the run config's keys.
TEST(ChatRequests, TemplateFilesNamesAndConfigKeys) {
  const testing::TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "chat_template": [)"
            R"({"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T"}]})");
  auto templates = read_chat_templates(dir.path());
  ASSERT_EQ(templates.size(), 2u);
  EXPECT_EQ(choose_chat_template(templates, dir.path(), std::nullopt).text, "D{{ bos_token }}");
  EXPECT_EQ(choose_chat_template(templates, dir.path(), std::nullopt, /*tools=*/true).text, "T");
  EXPECT_EQ(choose_chat_template(templates, dir.path(), std::string("tool_use")).text, "T");
  EXPECT_THAT(error_of([&] { choose_chat_template(templates, dir.path(), std::string("nope")); }),
              HasSubstr("no chat template named 'nope' (it has 'default', 'tool_use')"));
  EXPECT_EQ(template_special_tokens(dir.path()).dump(), R"({"bos_token":"<s>","eos_token":"</s>"})");
  dir.write("chat_template.jinja", "J");
  templates = read_chat_templates(dir.path());
  ASSERT_EQ(templates.size(), 1u);
  EXPECT_EQ(templates.at("default").text, "J");
  const testing::TempDir none;
  none.write("tokenizer_config.json", "{}");
  EXPECT_THAT(error_of([&] { choose_chat_template(read_chat_templates(none.path()), none.path(), std::nullopt); }),
              HasSubstr("no chat template"));

  // The config: apply_chat_template true or a name, options that need it refused alone.
  auto config = [&](const std::string& extra) {
    return dir.write("run.yaml", "model: m\ntasks: [demo_choice]\n" + extra);
  };
  RunConfig c = load_run_config(config("apply_chat_template: true\nchat_template_args: {enable_thinking: false}\n"));
  ASSERT_TRUE(c.chat());
  EXPECT_EQ(*c.apply_chat_template, "");
  EXPECT_TRUE(c.multiturn());
  EXPECT_EQ(c.chat_template_args.dump(), R"({"enable_thinking":false})");
  c = load_run_config(config("apply_chat_template: tool_use\nfewshot_as_multiturn: false\n"));
  EXPECT_EQ(*c.apply_chat_template, "tool_use");
  EXPECT_FALSE(c.multiturn());
  EXPECT_FALSE(load_run_config(config("apply_chat_template: false\n")).chat());
  EXPECT_THAT(error_of([&] { load_run_config(config("fewshot_as_multiturn: true\n")); }),
              HasSubstr("fewshot_as_multiturn: true needs apply_chat_template"));
  EXPECT_THAT(error_of([&] { load_run_config(config("think_end_token: 151668\n")); }), HasSubstr("is a token id"));
  EXPECT_THAT(error_of([&] { load_run_config(config("apply_chat_template: x\nchat_template: t.jinja\n")); }),
              HasSubstr("use one"));
  // A round trip through to_json (a sharded run's plan keeps the config so).
  c = load_run_config(config("apply_chat_template: true\nsystem_instruction: Be brief.\nthink_end_token: </think>\n"));
  const RunConfig back = run_config_from_json(c.to_json(), "plan.json", dir.path());
  for (const char* key : {"apply_chat_template", "system_instruction", "think_end_token"})
    EXPECT_EQ(back.to_json()[key], c.to_json()[key]) << key;
  ConfigOverrides o;
  o.fewshot_as_multiturn = "true";
  RunConfig plain = load_run_config(config(""));
  EXPECT_THAT(error_of([&] { apply_overrides(plain, o); }), HasSubstr("needs apply_chat_template"));
  o.apply_chat_template = "";
  apply_overrides(plain, o);
  EXPECT_TRUE(plain.multiturn());
}

// A template that raises on a system message (as Gemma's do) renders again without it, as
// lm-eval's fallback does; one that fails twice is an Error naming the template.
TEST(ChatRequests, ATemplateThatRaisesIsRetriedWithoutTheSystemMessages) {
  const testing::TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  dir.write("chat_template.jinja",
            "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
            "{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  RunConfig c;
  c.apply_chat_template = "";
  const ChatFormat f = load_chat_format(c, dir.path());
  const nlohmann::ordered_json messages =
      nlohmann::ordered_json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_EQ(f.prompt.chat(messages), "[user]U");
  EXPECT_EQ(f.to_json()["name"], "default");
  EXPECT_EQ(f.to_json()["sha256"].get<std::string>().size(), 64u);
  dir.write("chat_template.jinja", "{{ raise_exception('never') }}");
  const ChatFormat g = load_chat_format(c, dir.path());
  EXPECT_THAT(error_of([&] { g.prompt.chat(messages); }),
              HasSubstr("chat_template.jinja: the chat template failed (also without the system messages"));
  dir.write("chat_template.jinja", "{% if x %}\n{% macro %}");
  EXPECT_THAT(error_of([&] { load_chat_format(c, dir.path()); }), HasSubstr("chat_template.jinja:2:"));
}

}  // namespace
}  // namespace gpueval
