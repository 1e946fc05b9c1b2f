// Where a checkpoint keeps its chat templates, found as transformers' tokenizer finds them, and the
// special tokens a template reads. A `chat_template.jinja` beside the tokenizer (the default
// template) and `additional_chat_templates/<name>.jinja` (named ones) take priority over
// tokenizer_config.json's `chat_template`, which is one template (a string) or a list of named
// ones ([{"name", "template"}]). choose_chat_template() picks one as get_chat_template() does;
// template_special_tokens() gives the named special tokens (bos_token, eos_token, unk_token,
// sep_token, pad_token, cls_token, mask_token) as text, as apply_chat_template passes them. The
// templates are returned as text: parsing and rendering are jinja/chat_template.h's. Reads files
// only; every error names the file and what is wrong. Thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gpueval {

struct ChatTemplateSource {
  std::string name;  // "default", or the named template's name
  std::string text;  // the template
  std::string where;  // the file it came from, for messages ("DIR/chat_template.jinja",
                      // "DIR/tokenizer_config.json: chat_template 'tool_use'")
};

// Every chat template of the checkpoint (or tokenizer folder) in `dir`, by name; a single one is
// "default". Empty when it has none. Error for an unreadable or malformed file or entry.
std::map<std::string, ChatTemplateSource> read_chat_templates(const std::string& dir);

// transformers' get_chat_template: `name` when given (Error listing the names it has when none is
// so called), else "tool_use" when the call has tools and that exists, else "default" (Error
// listing the names when the checkpoint has only named ones, or saying it has none).
const ChatTemplateSource& choose_chat_template(const std::map<std::string, ChatTemplateSource>& templates,
                                               const std::string& dir, const std::optional<std::string>& name,
                                               bool tools = false);

// The named special tokens of tokenizer_config.json in `dir` (special_tokens_map.json's where the
// config has none) as strings: {"bos_token": "<s>", "eos_token": "</s>", ...}, those that are set.
nlohmann::ordered_json template_special_tokens(const std::string& dir);

}  // namespace gpueval
