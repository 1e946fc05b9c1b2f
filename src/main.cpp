// gpueval: the command-line entry point. Parses flags with CLI11 and hands off
// to the commands in commands.h; every gpueval::Error becomes one line on
// stderr and exit code 1, a usage error exit code 2.
#include <ATen/Parallel.h>

#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>

#include "gpueval/commands.h"
#include "gpueval/error.h"

namespace {

void add_model_flags(CLI::App* app, gpueval::ModelOptions& m) {
  app->add_option("--model", m.model_dir, "model directory (config.json, *.safetensors, tokenizer)")->required();
  app->add_option("--device", m.device, "cpu or cuda:N")->capture_default_str();
  app->add_option("--dtype", m.dtype, "float32, bfloat16 or float16")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpueval: multi-GPU local inference evaluator for language models"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags such as --threads may follow the subcommand
  app.set_version_flag("--version", GPUEVAL_VERSION);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads for LibTorch (0: all cores)");

  gpueval::GenerateCommand gen;
  auto* generate = app.add_subcommand("generate", "continue a prompt (greedy unless --temperature)");
  add_model_flags(generate, gen.model);
  generate->add_option("--prompt", gen.prompt, "prompt text")->capture_default_str();
  generate->add_option("--max-new-tokens", gen.max_new_tokens)->capture_default_str()->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", gen.temperature)->capture_default_str()->check(CLI::NonNegativeNumber);
  generate->add_option("--top-k", gen.top_k)->capture_default_str()->check(CLI::NonNegativeNumber);
  generate->add_option("--top-p", gen.top_p)->capture_default_str()->check(CLI::Range(0.0, 1.0));
  generate->add_option("--seed", gen.seed)->capture_default_str();

  gpueval::LogitsCommand logits;
  auto* logits_cmd = app.add_subcommand("logits", "print the logits of every position as JSON");
  add_model_flags(logits_cmd, logits.model);
  logits_cmd->add_option("--ids", logits.ids, "comma-separated token ids, BOS included")->required();

  gpueval::TokenizeCommand tokenize;
  auto* tokenize_cmd = app.add_subcommand("tokenize", "JSONL {\"text\"} on stdin -> {\"ids\"} on stdout");
  tokenize_cmd->add_option("--tokenizer", tokenize.tokenizer, "tokenizer.json, tokenizer.model or a directory")->required();
  tokenize_cmd->add_flag("--add-special", tokenize.add_special, "add the tokenizer's special tokens (BOS)");

  gpueval::ScoreCommand score;
  auto* score_cmd = app.add_subcommand("score", "per-token log-probabilities and perplexity of a text file");
  add_model_flags(score_cmd, score.model);
  score_cmd->add_option("--text", score.text_file, "UTF-8 text file")->required();
  score_cmd->add_option("--max-length", score.max_length, "window length (default: the model's context)")
      ->check(CLI::NonNegativeNumber);
  score_cmd->add_option("--batch-windows", score.batch_windows, "windows per forward pass")->capture_default_str();
  score_cmd->add_flag("--stepwise", score.stepwise, "token-at-a-time through the KV cache (baseline)");

  gpueval::ConvertLlama2cCommand convert;
  auto* convert_cmd = app.add_subcommand("convert-llama2c", "convert a llama2.c checkpoint to Hugging Face layout");
  convert_cmd->add_option("--checkpoint", convert.checkpoint, "llama2.c model .bin")->required();
  convert_cmd->add_option("--tokenizer", convert.tokenizer, "llama2.c tokenizer .bin")->required();
  convert_cmd->add_option("--out", convert.out_dir, "output directory")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  at::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  try {
    if (*generate) gpueval::run_generate(gen, std::cout);
    else if (*logits_cmd) gpueval::run_logits(logits, std::cout);
    else if (*tokenize_cmd) gpueval::run_tokenize(tokenize, std::cin, std::cout);
    else if (*score_cmd) gpueval::run_score(score, std::cout);
    else if (*convert_cmd) gpueval::run_convert_llama2c(convert);
  } catch (const gpueval::Error& e) {
    std::cerr << "gpueval: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "gpueval: internal error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "gpueval: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
