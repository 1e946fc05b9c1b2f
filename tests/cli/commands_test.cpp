// The gpueval binary as users and scripts call it: real child processes, real
// files, exit codes and one-line errors.
#include <cmath>
#include <fstream>
#include <map>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/tokenizer.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using testing::converted_stories260k;
using ::testing::HasSubstr;
using testing::run_gpueval;

// A failed command's error is exactly one line, prefixed "gpueval: ", and the
// last thing on stderr (progress lines before it start with "[gpueval]").
void expect_one_line_error(const testing::CommandResult& r, int code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  const size_t start = r.err.rfind("gpueval: ");
  ASSERT_NE(start, std::string::npos) << r.err;
  EXPECT_TRUE(start == 0 || r.err[start - 1] == '\n') << r.err;
  const std::string line = r.err.substr(start);
  EXPECT_THAT(line, HasSubstr(needle));
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << r.err;
  EXPECT_EQ(line.back(), '\n');
}

TEST(Cli, TokenizeMatchesLibraryAndAddsBosOnRequest) {
  GPUEVAL_REQUIRE_SHARED();
  const std::string dir = converted_stories260k();
  auto r = run_gpueval({"tokenize", "--tokenizer", dir, "--add-special"},
                       "{\"text\": \"Once upon a time\"}\n\n{\"text\": \"\"}\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[1,403,407,261,378]}\n{\"ids\":[1]}\n");
  r = run_gpueval({"tokenize", "--tokenizer", dir + "/tokenizer.json"}, "{\"text\": \"Once upon a time\"}\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[403,407,261,378]}\n");
}

TEST(Cli, TokenizeRejectsBadLinesWithTheirNumber) {
  GPUEVAL_REQUIRE_SHARED();
  auto r = run_gpueval({"tokenize", "--tokenizer", converted_stories260k()}, "{\"text\": \"a\"}\n[1, 2]\n");
  expect_one_line_error(r, 1, "<stdin>:2: expected an object with a string field \"text\"");
  r = run_gpueval({"tokenize", "--tokenizer", converted_stories260k()}, "{\"text\": \n");
  expect_one_line_error(r, 1, "<stdin>:1: not valid JSON");
}

// `gpueval chat-template`: the shared corpus's conversations through a template file give
// transformers' renderings (references.json) line by line, a template's raise_exception its own
// message; --model finds the checkpoint's named templates and special tokens; bad templates and
// bad input lines are one-line errors naming the file (and line) or <stdin>:N.
TEST(Cli, ChatTemplateRendersAsTransformersAndNamesWhatIsWrong) {
  GPUEVAL_REQUIRE_SHARED();
  const std::string corpus = testing::shared_dir() + "/data/chat_templates/";
  std::ifstream in(corpus + "references.json");
  const nlohmann::json refs = nlohmann::json::parse(in);
  std::map<std::string, nlohmann::json> conversations;
  for (const nlohmann::json& c : refs["conversations"]) conversations[c["id"].get<std::string>()] = c["messages"];
  for (const char* name : {"chatml", "llama-2-chat", "zephyr"}) {
    SCOPED_TRACE(name);
    std::string input, expected;
    for (const nlohmann::json& r : refs["results"]) {
      if (r["template"] != name || r["add_generation_prompt"] != true) continue;
      input += nlohmann::json{{"messages", conversations.at(r["conversation"].get<std::string>())}}.dump() + "\n";
      const std::string error = r["error"].is_string() ? r["error"].get<std::string>() : "";
      nlohmann::json line = r["ok"].get<bool>() ? nlohmann::json{{"text", r["output"]}}
                                                : nlohmann::json{{"error", error.substr(error.find(": ") + 2)}};
      expected += line.dump() + "\n";
    }
    const nlohmann::json& t = refs["templates"][name];
    auto r = run_gpueval({"chat-template", "--template", corpus + t["file"].get<std::string>(),
                          "--add-generation-prompt", "--bos-token", t["bos_token"], "--eos-token", t["eos_token"]},
                         input);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, expected);
  }

  testing::TempDir dir;
  dir.write(
      "tokenizer_config.json",
      R"({"bos_token": "<s>", "chat_template": [{"name": "default", "template": "{{ bos_token }}{% for m in messages %})"
      R"([{{ m.role }}]{{ m.content }}{% endfor %}{% if enable_thinking is false %}!{% endif %}"},)"
      R"( {"name": "tool_use", "template": "{{ tools | tojson }}"}]})");
  auto r = run_gpueval({"chat-template", "--model", dir.path()},
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"name\": null}], "
                       "\"enable_thinking\": false}\n{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                       "\"tools\": [{\"name\": \"f\"}]}\n{\"messages\": []}\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\"text\":\"<s>[user]hi!\"}\n{\"text\":\"[{\\\"name\\\": \\\"f\\\"}]\"}\n"
            "{\"error\":\"ValueError: Cannot apply chat template to an empty conversation. Provide at least one "
            "message.\"}\n");
  r = run_gpueval({"chat-template", "--model", dir.path(), "--name", "nope"}, "");
  expect_one_line_error(r, 1, "no chat template named 'nope' (it has 'default', 'tool_use')");
  dir.write("bad.jinja", "{% for m in messages %}\n{% include 'x' %}{% endfor %}");
  r = run_gpueval({"chat-template", "--template", dir.file("bad.jinja")}, "");
  expect_one_line_error(r, 1, "bad.jinja:2: unsupported statement 'include'");
  dir.write("open.jinja", "{{ messages ");
  r = run_gpueval({"chat-template", "--template", dir.file("open.jinja")}, "");
  expect_one_line_error(r, 1, "open.jinja:1:");
  r = run_gpueval({"chat-template", "--template", corpus + "chatml.jinja"}, "{\"messages\": []}\n[1]\n");
  expect_one_line_error(r, 1, "<stdin>:2: expected an object with a list \"messages\"");
  r = run_gpueval({"chat-template", "--model", converted_stories260k()}, "");
  expect_one_line_error(r, 1, "no chat template");
}

TEST(Cli, MissingModelDirectoryIsOneLine) {
  testing::TempDir dir;
  auto r = run_gpueval({"generate", "--model", dir.file("nope"), "--prompt", "hi"});
  expect_one_line_error(r, 1, dir.file("nope") + ": model directory does not exist");
}

TEST(Cli, BadIdsAndFlagsAreRefused) {
  GPUEVAL_REQUIRE_SHARED();
  auto r = run_gpueval({"logits", "--model", converted_stories260k(), "--ids", "1,x,3"});
  expect_one_line_error(r, 1, "--ids: 'x' is not a token id");
  r = run_gpueval({"logits", "--model", converted_stories260k(), "--ids", "1,99999"});
  expect_one_line_error(r, 1, "outside the vocabulary");
  r = run_gpueval({"generate", "--model", converted_stories260k(), "--dtype", "int3"});
  expect_one_line_error(r, 1, "unknown dtype 'int3'");
  r = run_gpueval({"generate", "--model", converted_stories260k(), "--device", "cuda:0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("cuda:0"));
  r = run_gpueval({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
}

// `logits --routing`: per sparse layer, each token's experts (ascending) and weights; refused for a dense model.
TEST(Cli, LogitsReportsEachTokensExperts) {
  const std::string model = testing::source_dir() + "/tests/fixtures/architectures/deepseek_v3";
  auto r = run_gpueval({"logits", "--model", model, "--ids", "1,7,3,9,4", "--routing"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["logits"].size(), 5u);
  ASSERT_EQ(out["routing"].size(), 1u);  // layer 0 is dense (first_k_dense_replace 1)
  const json& layer = out["routing"][0];
  EXPECT_EQ(layer["layer"], 1);
  ASSERT_EQ(layer["experts"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto experts = layer["experts"][i].get<std::vector<int64_t>>();
    const auto weights = layer["weights"][i].get<std::vector<double>>();
    ASSERT_EQ(experts.size(), 2u);
    EXPECT_LT(experts[0], experts[1]);
    EXPECT_NEAR(weights[0] + weights[1], 2.5, 1e-5);  // renormalised, times routed_scaling_factor
  }
  r = run_gpueval({"logits", "--model", testing::source_dir() + "/tests/fixtures/architectures/llama", "--ids", "1,2",
                   "--routing"});
  expect_one_line_error(r, 1, "--routing: the model has no mixture of experts");
}

// A checkpoint whose weights (every expert) exceed the machine is refused before any worker loads it,
// in one line saying what it needs: DeepSeek-V3's widths with 4096 experts in 1024 layers (740 TB in
// float32, past any machine) over the tiny fixture's file.
TEST(Cli, RunRefusesAModelThatDoesNotFitSayingWhatItNeeds) {
  testing::TempDir dir;
  const std::string fixture = testing::source_dir() + "/tests/fixtures/architectures/deepseek_v3";
  json config = json::parse(io::read_file(fixture + "/config.json"));
  const json v3 = {{"vocab_size", 129280},
                   {"hidden_size", 7168},
                   {"intermediate_size", 18432},
                   {"moe_intermediate_size", 2048},
                   {"num_hidden_layers", 1024},
                   {"num_attention_heads", 128},
                   {"num_key_value_heads", 128},
                   {"n_routed_experts", 4096},
                   {"num_experts_per_tok", 8},
                   {"n_group", 8},
                   {"topk_group", 4},
                   {"first_k_dense_replace", 3}};
  for (const auto& [key, value] : v3.items()) config[key] = value;
  const std::string model = dir.file("v3");
  io::make_directories(model);
  testing::write_text(model + "/config.json", config.dump());
  testing::write_text(model + "/model.safetensors", io::read_file(fixture + "/model.safetensors"));
  auto r =
      run_gpueval({"run", testing::source_dir() + "/configs/demo.yaml", "--model", model, "--output", dir.file("out")});
  expect_one_line_error(r, 1, model + ": the model does not fit cpu: its weights need ");
  EXPECT_THAT(r.err, HasSubstr("all 4096 experts of each sparse layer in float32"));
  EXPECT_FALSE(io::path_exists(dir.file("out") + "/results.json"));
}

TEST(Cli, ScoreBatchedEqualsStepwiseAndReportsPerplexity) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  testing::write_text(dir.file("t.txt"), "Once upon a time, there was a little girl named Lily. She liked to play.\n");
  auto a = run_gpueval({"score", "--model", converted_stories260k(), "--text", dir.file("t.txt"), "--max-length", "8"});
  auto b = run_gpueval(
      {"score", "--model", converted_stories260k(), "--text", dir.file("t.txt"), "--max-length", "8", "--stepwise"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  json ja = json::parse(a.out), jb = json::parse(b.out);
  const size_t n = ja["ids"].size();
  ASSERT_EQ(ja["logprobs"].size(), n);  // every token predicted exactly once
  EXPECT_GT(ja["windows"].get<int>(), 1);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(ja["logprobs"][i].get<double>(), jb["logprobs"][i].get<double>(), 1e-5);
  double sum = 0;
  for (const auto& lp : ja["logprobs"]) sum += lp.get<double>();
  EXPECT_NEAR(ja["sum_logprob"].get<double>(), sum, 1e-6);
  EXPECT_NEAR(ja["token_perplexity"].get<double>(), std::exp(-sum / n), 1e-6);
  // A TinyStories model finds a TinyStories sentence far likelier than chance (512-token vocabulary).
  EXPECT_LT(ja["token_perplexity"].get<double>(), 50.0);
}

TEST(Cli, ConvertWritesAHuggingFaceDirectory) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  auto r = run_gpueval({"convert-llama2c", "--checkpoint", testing::shared_dir() + "/data/stories260K/stories260K.bin",
                        "--tokenizer", testing::shared_dir() + "/data/stories260K/tok512.bin", "--out", dir.file("m")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(io::read_file(dir.file("m") + "/" + f), io::read_file(converted_stories260k() + "/" + f)) << f;
  r = run_gpueval(
      {"convert-llama2c", "--checkpoint", dir.file("missing.bin"), "--tokenizer", "x", "--out", dir.file("o")});
  expect_one_line_error(r, 1, dir.file("missing.bin"));
}

}  // namespace
}  // namespace gpueval
