#include "gpueval/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace gpueval {

namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: {}", std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) fail(path, "cannot read: {}", std::strerror(errno));
  return contents.str();
}

nlohmann::json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, "not valid JSON: {}", e.what());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& file_or_dir) {
  std::error_code error;
  const fs::file_status status = fs::status(file_or_dir, error);
  if (!fs::exists(status)) fail(file_or_dir, "no such file or directory");
  fs::path path = file_or_dir;
  if (fs::is_directory(status)) {
    if (fs::exists(path / "tokenizer.json")) {
      path /= "tokenizer.json";
    } else if (fs::exists(path / "tokenizer.model")) {
      path /= "tokenizer.model";
    } else {
      fail(file_or_dir, "directory holds neither tokenizer.json nor tokenizer.model");
    }
  }

  const fs::path config_path = path.parent_path() / "tokenizer_config.json";
  std::optional<nlohmann::json> config;
  if (fs::exists(config_path)) config = parse_json_file(config_path.string());
  const nlohmann::json* config_ptr = config ? &*config : nullptr;

  if (path.extension() == ".model") return load_sentencepiece_tokenizer(path.string(), config_ptr);
  return load_tokenizer_json(parse_json_file(path.string()), path.string(), config_ptr);
}

}  // namespace gpueval
