// `gpueval chat-template`: a chat template rendered without a run (commands.h).
#include <istream>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/file_io.h"
#include "gpueval/error.h"
#include "jinja/chat_template.h"
#include "jinja/value.h"
#include "tokenizer/chat_template_files.h"

namespace gpueval {

void run_chat_template(const ChatTemplateCommand& cmd, std::istream& in, std::ostream& out) {
  if (cmd.model_dir.empty() == cmd.template_file.empty())
    throw Error("chat-template: give either --model DIR or --template FILE");
  std::string text, where;
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  std::map<std::string, ChatTemplateSource> named;
  if (!cmd.template_file.empty()) {
    if (!cmd.name.empty()) throw Error("chat-template: --name picks a template of --model, not of --template");
    text = io::read_file(cmd.template_file);
    where = cmd.template_file;
  } else {
    named = read_chat_templates(cmd.model_dir);
    special = template_special_tokens(cmd.model_dir);
  }
  if (cmd.bos_token) special["bos_token"] = *cmd.bos_token;
  if (cmd.eos_token) special["eos_token"] = *cmd.eos_token;
  // Each template is parsed once, when first used (a line with tools may pick "tool_use").
  std::map<std::string, jinja::ChatTemplate> parsed;
  auto template_for = [&](bool tools) -> const jinja::ChatTemplate& {
    if (!cmd.template_file.empty()) {
      if (!parsed.count("")) parsed.emplace("", jinja::ChatTemplate::parse(text, where));
      return parsed.at("");
    }
    const ChatTemplateSource& source =
        choose_chat_template(named, cmd.model_dir, cmd.name.empty() ? std::nullopt : std::optional(cmd.name), tools);
    if (!parsed.count(source.name)) parsed.emplace(source.name, jinja::ChatTemplate::parse(source.text, source.where));
    return parsed.at(source.name);
  };
  template_for(false);  // a missing or bad template fails before any input is read
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = fmt::format("<stdin>:{}", line_no);
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw Error(at + ": not valid JSON");
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
      throw Error(at + ": expected an object with a list \"messages\"");
    if (j.contains("add_generation_prompt") && !j["add_generation_prompt"].is_boolean())
      throw Error(at + ": \"add_generation_prompt\" must be true or false");
    nlohmann::ordered_json kwargs = special;
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "messages" && it.key() != "add_generation_prompt") kwargs[it.key()] = it.value();
    const bool generation_prompt = j.value("add_generation_prompt", cmd.add_generation_prompt);
    const bool tools = j.contains("tools") && !j["tools"].is_null();
    nlohmann::ordered_json reply;
    try {
      reply["text"] = template_for(tools).apply(j["messages"], generation_prompt, kwargs);
    } catch (const jinja::TemplateRaised& e) {
      reply["error"] = e.what();
    } catch (const jinja::RenderError& e) {
      reply["error"] = e.what();
    }
    // Line by line: a caller may keep the command running and write its next line once it read this one.
    out << reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
  }
}

}  // namespace gpueval
