// load_tokenizer(): choosing the file, reading tokenizer_config.json beside
// it, and the one-line errors for files that are missing, empty or broken.
#include <filesystem>

#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "gpueval/tokenizer.h"
#include "tokenizer_test_util.h"

namespace gpueval {
namespace {

using testing::TempDir;

// The message load_tokenizer(path) fails with; the test fails if it loads.
std::string load_error(const std::string& path) {
  try {
    load_tokenizer(path);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  }
  ADD_FAILURE() << "load_tokenizer(" << path << ") did not throw";
  return "";
}

TEST(TokenizerLoadTest, MissingFile) {
  EXPECT_EQ(load_error("/nonexistent/dir/tokenizer.json"),
            "/nonexistent/dir/tokenizer.json: no such file or directory");
}

TEST(TokenizerLoadTest, EmptyDirectory) {
  TempDir dir;
  EXPECT_EQ(load_error(dir.path()), dir.path() + ": directory holds neither tokenizer.json nor tokenizer.model");
}

TEST(TokenizerLoadTest, NotJson) {
  TempDir dir;
  const std::string path = dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\",\n oops");
  const std::string message = load_error(dir.path());
  EXPECT_EQ(message.rfind(path + ": not valid JSON: ", 0), 0u) << message;
  EXPECT_NE(message.find("parse error"), std::string::npos) << message;
}

TEST(TokenizerLoadTest, UnsupportedModelType) {
  TempDir dir;
  const std::string path =
      dir.write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]"}})");
  EXPECT_EQ(load_error(path), path + ": unsupported tokenizer model type 'WordPiece'");
}

TEST(TokenizerLoadTest, BrokenConfigBesideTheTokenizer) {
  TempDir dir;
  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  const std::string config = dir.write("tokenizer_config.json", "not json");
  EXPECT_EQ(load_error(dir.path()).rfind(config + ": not valid JSON: ", 0), 0u);
}

TEST(TokenizerLoadTest, BrokenSentencePieceModel) {
  GPUEVAL_REQUIRE_SENTENCEPIECE();
  TempDir dir;
  const std::string path = dir.write("tokenizer.model", "this is not a protobuf");
  EXPECT_EQ(load_error(path).rfind(path + ": cannot load SentencePiece model: ", 0), 0u);
}

TEST(TokenizerLoadTest, DirectoryPrefersTokenizerJsonAndReadsConfig) {
  TempDir dir;
  dir.write("tokenizer.json",
            R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<go>": 3}, "merges": ["a b"]}})");
  dir.write("tokenizer.model", "ignored: tokenizer.json wins");
  dir.write("tokenizer_config.json", R"({"bos_token": "<go>", "eos_token": null})");
  const auto tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->origin(), dir.file("tokenizer.json"));
  EXPECT_EQ(tok->encode("abab", false), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(tok->bos_id(), 3);
  EXPECT_FALSE(tok->eos_id().has_value());
}

TEST(TokenizerLoadTest, SentencePieceConfigFlags) {
  GPUEVAL_REQUIRE_SENTENCEPIECE();
  if (!testing::have_shared_data()) GTEST_SKIP() << "shared data dir " << testing::shared_dir() << " is missing";
  TempDir dir;
  std::filesystem::copy_file(testing::tokenizer_data("llama2_sentencepiece/tokenizer.model"),
                             dir.file("tokenizer.model"));
  dir.write("tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true})");
  const auto tok = load_tokenizer(dir.path());
  EXPECT_EQ(tok->encode("Hello", true), (std::vector<int32_t>{15043, 2}));
  EXPECT_EQ(tok->encode("Hello", false), (std::vector<int32_t>{15043}));
}

}  // namespace
}  // namespace gpueval
