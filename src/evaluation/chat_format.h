// A run's chat prompt format for one checkpoint: the chat template the config asks for (its
// chat_template file, else the checkpoint's own, named or default: tokenizer/chat_template_files.h),
// parsed once (jinja/chat_template.h), given the checkpoint's special tokens and the config's
// chat_template_args, and rendering a task's message list as lm-eval's HFLM.apply_chat_template
// does: with the generation prompt, and on a Jinja error (the template's raise_exception, an
// undefined attribute) once more without the system messages, as lm-eval's fallback does
// (docs/lm_eval_chat.md). Builds the tasks' PromptFormat (gpueval/task.h) and what results.json
// records of it. Calls tokenizer and jinja; reads files only. Immutable once loaded; its render
// function may run on several threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "gpueval/tokenizer.h"

namespace gpueval::jinja {
class ChatTemplate;
}

namespace gpueval {

struct ChatFormat {
  PromptFormat prompt;  // for TaskLoadOptions: system_instruction, the render function, multiturn
  std::string where;  // the template's file (and entry)
  std::string name;  // "default" or the named template
  std::string sha256;  // of the template's text
  // The template's end-of-turn token for `tokenizer`: what it writes right after an assistant
  // message's content, when that starts with a special token (Llama 3's <|eot_id|>, ChatML's
  // <|im_end|>, Gemma's <end_of_turn>); empty for plain prompts or a template that ends a turn
  // with text. Generation ends at it as at EOS (Batch::stop_ids), so an instruct model stops
  // where it ends its turn even when generation_config.json does not list it.
  std::vector<int32_t> end_of_turn_ids(const Tokenizer& tokenizer) const;
  std::shared_ptr<const jinja::ChatTemplate> parsed;  // null for plain prompts
  nlohmann::ordered_json kwargs;  // the special tokens and chat_template_args
  // results.json's "chat": {"template", "name", "sha256", "fewshot_as_multiturn",
  // "system_instruction", "chat_template_args", "think_end_token"}.
  nlohmann::json to_json() const;
};

// The prompt format `config` gives the checkpoint in `model_dir`: without apply_chat_template, plain
// prompts (its system_instruction and think_end_token only, no template). Error naming the file
// for a template that is missing, does not load (file and line) or has no such name.
ChatFormat load_chat_format(const RunConfig& config, const std::string& model_dir);

}  // namespace gpueval
