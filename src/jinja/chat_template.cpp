#include "jinja/chat_template.h"

#include "gpueval/error.h"

namespace gpueval::jinja {
namespace {

// transformers' _alias_reasoning_fields: a message with any of reasoning_content, thinking or
// reasoning (the first not None, in that order) becomes {"thinking": r, **message,
// "reasoning_content": r}.
nlohmann::ordered_json alias_reasoning(const nlohmann::ordered_json& message) {
  if (!message.is_object()) return message;
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const auto it = message.find(key);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (!reasoning) return message;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["thinking"] = *reasoning;
  for (auto it = message.begin(); it != message.end(); ++it) out[it.key()] = it.value();
  out["thinking"] = message.contains("thinking") ? message["thinking"] : *reasoning;
  out["reasoning_content"] = *reasoning;
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& text, const std::string& where) {
  SyntaxOptions syntax;
  syntax.trim_blocks = true;
  syntax.lstrip_blocks = true;
  syntax.keep_trailing_newline = false;
  ChatTemplate t;
  t.program_ = Program::parse(text, where, syntax);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) throw Error(program_.where() + ": the chat template's context must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = nlohmann::ordered_json::array();
  if (const auto it = context.find("messages"); it != context.end()) {
    if (!it->is_array()) throw Error(program_.where() + ": 'messages' must be a list of message objects");
    for (const auto& m : *it) {
      if (!m.is_object())
        throw RenderError("TypeError",
                          "Chat messages should be dicts, dataclasses or pydantic models, but got " + m.dump() + ".");
      ctx["messages"].push_back(alias_reasoning(m));
    }
  }
  ctx["tools"] = context.value("tools", nlohmann::ordered_json());
  ctx["documents"] = context.value("documents", nlohmann::ordered_json());
  ctx["add_generation_prompt"] = context.value("add_generation_prompt", nlohmann::ordered_json(false));
  for (auto it = context.begin(); it != context.end(); ++it) {
    if (!ctx.contains(it.key())) ctx[it.key()] = it.value();
  }
  RenderOptions options;
  options.strftime_now = strftime_now_;
  try {
    return program_.render(Value::from_json(ctx), options);
  } catch (const RenderError& e) {
    if (e.type() == "TemplateError") throw TemplateRaised(e.message());
    throw;
  }
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& kwargs) const {
  if (!messages.is_array()) throw Error(program_.where() + ": 'messages' must be a list of message objects");
  if (messages.empty())
    throw RenderError("ValueError",
                      "Cannot apply chat template to an empty conversation. Provide at least one message.");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    if (!m.is_object()) {
      context["messages"].push_back(m);  // render() refuses it as transformers does
      continue;
    }
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) kept[it.key()] = it.value();
    context["messages"].push_back(std::move(kept));
  }
  context["add_generation_prompt"] = add_generation_prompt;
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
      if (it.key() != "messages" && it.key() != "add_generation_prompt") context[it.key()] = it.value();
  return render(context);
}

}  // namespace gpueval::jinja
