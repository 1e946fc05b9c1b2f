#include "tokenizer/chat_template_files.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/strict_json.h"
#include "gpueval/error.h"
#include "tokenizer/tokenizer_config.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

std::optional<nlohmann::json> read_json_file(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  const nlohmann::ordered_json j = parse_strict_json(io::read_file(path.string()), path.string(), "the file");
  return nlohmann::json(j);
}

std::string names_of(const std::map<std::string, ChatTemplateSource>& templates) {
  std::string out;
  for (const auto& [name, t] : templates) out += (out.empty() ? "'" : ", '") + name + "'";
  return out;
}

}  // namespace

std::map<std::string, ChatTemplateSource> read_chat_templates(const std::string& dir) {
  std::map<std::string, ChatTemplateSource> out;
  const fs::path base(dir);
  // Files beside the tokenizer first: when any exists, tokenizer_config.json's entry is not read.
  if (const fs::path file = base / "chat_template.jinja"; fs::exists(file))
    out["default"] = ChatTemplateSource{"default", io::read_file(file.string()), file.string()};
  if (const fs::path extra = base / "additional_chat_templates"; fs::is_directory(extra)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(extra))
      if (e.path().extension() == ".jinja") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      const std::string name = f.stem().string();
      out[name] = ChatTemplateSource{name, io::read_file(f.string()), f.string()};
    }
  }
  if (!out.empty()) return out;
  const fs::path config_path = base / "tokenizer_config.json";
  const std::optional<nlohmann::json> config = read_json_file(config_path);
  if (!config || !config->is_object() || !config->contains("chat_template")) return out;
  const nlohmann::json& entry = config->at("chat_template");
  const std::string where = config_path.string() + ": chat_template";
  if (entry.is_null()) return out;
  if (entry.is_string()) {
    out["default"] = ChatTemplateSource{"default", entry.get<std::string>(), where};
    return out;
  }
  if (!entry.is_array())
    throw Error(fmt::format("{} is neither a template (a string) nor a list of named templates", where));
  for (size_t i = 0; i < entry.size(); ++i) {
    const nlohmann::json& t = entry[i];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("template") ||
        !t["template"].is_string())
      throw Error(fmt::format("{}[{}] is not a {{\"name\": ..., \"template\": ...}} object of strings", where, i));
    const std::string name = t["name"].get<std::string>();
    if (out.count(name)) throw Error(fmt::format("{} names the template '{}' twice", where, name));
    out[name] = ChatTemplateSource{name, t["template"].get<std::string>(), fmt::format("{} '{}'", where, name)};
  }
  return out;
}

const ChatTemplateSource& choose_chat_template(const std::map<std::string, ChatTemplateSource>& templates,
                                               const std::string& dir, const std::optional<std::string>& name,
                                               bool tools) {
  if (templates.empty())
    throw Error(
        fmt::format("{}: no chat template (no chat_template.jinja, and tokenizer_config.json has no "
                    "chat_template); give one with chat_template: PATH",
                    dir));
  if (name) {
    const auto it = templates.find(*name);
    if (it == templates.end())
      throw Error(fmt::format("{}: no chat template named '{}' (it has {})", dir, *name, names_of(templates)));
    return it->second;
  }
  if (tools)
    if (const auto it = templates.find("tool_use"); it != templates.end()) return it->second;
  const auto it = templates.find("default");
  if (it == templates.end())
    throw Error(
        fmt::format("{}: several chat templates and none is 'default': name one of {}", dir, names_of(templates)));
  return it->second;
}

nlohmann::ordered_json template_special_tokens(const std::string& dir) {
  const fs::path base(dir);
  const std::optional<nlohmann::json> config = read_json_file(base / "tokenizer_config.json");
  const std::optional<nlohmann::json> map = read_json_file(base / "special_tokens_map.json");
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::optional<std::string> token = config ? config_token(&*config, key) : std::nullopt;
    if (!token && map) token = config_token(&*map, key);
    if (token) out[key] = *token;
  }
  return out;
}

}  // namespace gpueval
