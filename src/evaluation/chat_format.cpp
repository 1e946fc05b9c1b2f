#include "evaluation/chat_format.h"

#include <memory>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/sha256.h"
#include "gpueval/error.h"
#include "jinja/chat_template.h"
#include "jinja/value.h"
#include "tokenizer/chat_template_files.h"

namespace gpueval {
namespace {

// The errors jinja2.exceptions.TemplateError covers, which lm-eval's fallback catches (a Python
// TypeError or ValueError it does not).
bool jinja_error(const jinja::RenderError& e) {
  return e.type() == "TemplateError" || e.type() == "UndefinedError" || e.type() == "SecurityError" ||
         e.type() == "TemplateRuntimeError" || e.type() == "TemplateAssertionError";
}

}  // namespace

nlohmann::json ChatFormat::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  if (prompt.chat) {
    out["template"] = where;
    out["name"] = name;
    out["sha256"] = sha256;
    out["fewshot_as_multiturn"] = prompt.fewshot_as_multiturn;
  }
  if (!prompt.system_instruction.empty()) out["system_instruction"] = prompt.system_instruction;
  if (!prompt.think_end_token.empty()) out["think_end_token"] = prompt.think_end_token;
  return out;
}

std::vector<int32_t> ChatFormat::end_of_turn_ids(const Tokenizer& tokenizer) const {
  if (!parsed) return {};
  // An answer no template writes by itself, in a conversation every template accepts.
  const std::string answer = "Q7xZ answer Q7xZ";
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Q7xZ question"}, {"role": "assistant", "content": "Q7xZ answer Q7xZ"}])");
  std::string text;
  try {
    text = parsed->apply(messages, /*add_generation_prompt=*/false, kwargs);
  } catch (const std::exception&) {
    return {};  // a template that refuses this conversation says nothing about its turns
  }
  const size_t at = text.rfind(answer);
  if (at == std::string::npos) return {};
  const std::vector<int32_t> after = tokenizer.encode(text.substr(at + answer.size()), /*add_special_tokens=*/false);
  if (after.empty()) return {};
  // A special token: it has text of its own but none once special tokens are skipped.
  const int32_t first = after.front();
  if (tokenizer.decode({first}, /*skip_special_tokens=*/false).empty() ||
      !tokenizer.decode({first}, /*skip_special_tokens=*/true).empty())
    return {};
  return {first};
}

ChatFormat load_chat_format(const RunConfig& config, const std::string& model_dir) {
  ChatFormat out;
  out.prompt.system_instruction = config.system_instruction;
  out.prompt.think_end_token = config.think_end_token;
  out.prompt.fewshot_as_multiturn = config.multiturn();
  if (!config.chat()) return out;
  ChatTemplateSource source;
  if (!config.chat_template.empty()) {
    source = ChatTemplateSource{"default", io::read_file(config.chat_template), config.chat_template};
  } else {
    const std::map<std::string, ChatTemplateSource> templates = read_chat_templates(model_dir);
    const std::optional<std::string> name =
        config.apply_chat_template->empty() ? std::nullopt : std::optional(*config.apply_chat_template);
    source = choose_chat_template(templates, model_dir, name);
  }
  out.where = source.where;
  out.name = source.name;
  out.sha256 = sha256_hex(source.text);
  auto parsed = std::make_shared<const jinja::ChatTemplate>(jinja::ChatTemplate::parse(source.text, source.where));
  out.parsed = parsed;
  // The special tokens, then chat_template_args over them (apply_chat_template's order).
  nlohmann::ordered_json kwargs = template_special_tokens(model_dir);
  for (auto it = config.chat_template_args.begin(); it != config.chat_template_args.end(); ++it)
    kwargs[it.key()] = nlohmann::ordered_json(it.value());
  out.kwargs = kwargs;
  const std::string where = source.where;
  out.prompt.chat = [parsed, kwargs, where](const nlohmann::ordered_json& messages) {
    auto render = [&](const nlohmann::ordered_json& m) {
      return parsed->apply(m, /*add_generation_prompt=*/true, kwargs);
    };
    auto fail = [&](const std::exception& e, const char* when) -> std::string {
      throw Error(fmt::format("{}: the chat template failed{}: {}", where, when, e.what()));
    };
    try {
      return render(messages);
    } catch (const jinja::TemplateRaised&) {
    } catch (const jinja::RenderError& e) {
      if (!jinja_error(e)) return fail(e, "");
    }
    // lm-eval's fallback: the same messages without the system ones, once.
    nlohmann::ordered_json kept = nlohmann::ordered_json::array();
    for (const auto& m : messages)
      if (!(m.is_object() && m.value("role", "") == "system")) kept.push_back(m);
    try {
      return render(kept);
    } catch (const jinja::TemplateRaised& e) {
      return fail(e, " (also without the system messages, as lm-eval retries)");
    } catch (const jinja::RenderError& e) {
      return fail(e, " (also without the system messages, as lm-eval retries)");
    }
  };
  return out;
}

}  // namespace gpueval
