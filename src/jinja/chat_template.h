// ChatTemplate renders a model's chat template (the `chat_template` of tokenizer_config.json or
// a chat_template.jinja file) as transformers' apply_chat_template does, byte for byte: the
// template runs on gpueval's Jinja engine (jinja/engine.h) with the environment transformers
// builds (trim_blocks, lstrip_blocks, no trailing newline kept, Jinja2's lenient Undefined,
// loop controls, {% generation %}, the globals raise_exception, strftime_now, namespace and
// dict, and tojson as json.dumps with ensure_ascii/indent/separators/sort_keys), and the
// context render_jinja_template gives it: messages (with reasoning_content, thinking and
// reasoning aliased to each other as transformers does), tools and documents (None when
// absent), add_generation_prompt (False when absent), and every other key (bos_token,
// eos_token, enable_thinking, ...) as is. This file owns that context and the error types a
// caller sees; it calls common and the rest of jinja/ only.
//
// A template outside the subset (a statement such as include or import, an unknown filter)
// or with a syntax error is refused by parse() with gpueval::Error
// "<where>:<line>: <what>". While rendering, the template's raise_exception(msg) throws
// TemplateRaised whose what() is exactly msg (transformers: "TemplateError: msg"); any other
// failure is a RenderError (jinja/value.h) with Python's exception type and Jinja2's message
// ("UndefinedError: 'dict object' has no attribute 'content'").
//
// A ChatTemplate is immutable after parse() and may render from several threads at once.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/engine.h"

namespace gpueval::jinja {

class TemplateRaised : public std::runtime_error {
 public:
  explicit TemplateRaised(const std::string& message) : std::runtime_error(message) {}
};

class ChatTemplate {
 public:
  // `where` names the template in errors ("models/x/chat_template.jinja").
  static ChatTemplate parse(const std::string& text, const std::string& where);

  // `context` is an object with "messages" (a list of message objects) and optionally
  // "tools", "documents", "add_generation_prompt" and any other keyword the template reads.
  std::string render(const nlohmann::ordered_json& context) const;

  // tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...) as
  // transformers runs it: every message's keys whose value is null dropped (_normalize_chat_messages),
  // an empty conversation refused (ValueError), and `kwargs` (the special tokens, tools,
  // documents, enable_thinking, ...) beside the messages. Throws as render().
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object()) const;

  // strftime_now's clock (tests freeze it); absent, the local time now.
  void set_clock(std::function<std::string(const std::string& format)> strftime_now) {
    strftime_now_ = std::move(strftime_now);
  }

 private:
  Program program_;
  std::function<std::string(const std::string&)> strftime_now_;
};

}  // namespace gpueval::jinja
