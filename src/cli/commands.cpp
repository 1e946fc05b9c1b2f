#include "cli/commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "gpueval/history.h"
#include "gpueval/model.h"
#include "gpueval/model_config.h"
#include "gpueval/tokenizer.h"
#include "model/decoder/generate.h"
#include "cli/llama2c_convert.h"
#include "cli/random_model.h"
#include "model/decoder/scorer.h"
#include "report/trend_report.h"
#include "run/cpu_allocator.h"

namespace gpueval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

LoadOptions load_options(const ModelOptions& m) {
  LoadOptions o;
  try {
    o.device = at::Device(m.device);
  } catch (const std::exception&) {
    throw Error(fmt::format("--device: '{}' is not a device (expected cpu or cuda:N)", m.device));
  }
  if (o.device.is_cuda() && !at::hasCUDA())
    throw Error(fmt::format("--device {}: this build of LibTorch has no CUDA support", m.device));
  try {
    o.dtype = parse_dtype(m.dtype);
  } catch (const Error& e) {
    throw Error(std::string("--dtype: ") + e.what());
  }
  return o;
}

DecoderModel open_model(const ModelOptions& m) {
  if (m.model_dir.empty()) throw Error("--model: a model directory is required");
  if (!io::is_directory(m.model_dir)) fail(m.model_dir, "model directory does not exist");
  auto t0 = Clock::now();
  DecoderModel model = load_model(m.model_dir, load_options(m));
  std::cerr << fmt::format("[gpueval] loaded {} ({:.2f}M parameters, {}, {}) in {:.2f}s\n", m.model_dir,
                           model->config().num_parameters() / 1e6, m.device, m.dtype, seconds_since(t0));
  return model;
}

// Strips a leading BOS so that decode() shows only the text the user wrote.
std::vector<int32_t> body_of(const std::vector<int32_t>& ids, const Tokenizer& tok) {
  if (!ids.empty() && tok.bos_id() && ids.front() == *tok.bos_id()) return {ids.begin() + 1, ids.end()};
  return ids;
}

bool ends_with_replacement_char(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw Error(fmt::format("{}: '{}' is not a token id", flag, item));
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error(fmt::format("{}: no token ids given", flag));
  return ids;
}

void run_generate(const GenerateCommand& cmd, std::ostream& out) {
  DecoderModel model = open_model(cmd.model);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(cmd.model.model_dir);
  const std::vector<int32_t> prompt = tok->encode(cmd.prompt, /*add_special_tokens=*/true);
  const std::vector<int32_t> body = body_of(prompt, *tok);
  SamplingOptions o;
  o.max_new_tokens = cmd.max_new_tokens;
  o.temperature = cmd.temperature;
  o.top_k = cmd.top_k;
  o.top_p = cmd.top_p;
  o.seed = cmd.seed;
  o.stop_token_ids = model->config().eos_token_ids;
  if (tok->eos_id()) o.stop_token_ids.push_back(*tok->eos_id());

  // Stream the continuation: print what decoding the whole sequence adds to the
  // prompt, holding back a trailing replacement character that may still be an
  // incomplete UTF-8 sequence spelled in byte tokens.
  out << cmd.prompt << std::flush;
  std::vector<int32_t> all = body;
  const std::string base = tok->decode(body);
  std::string printed = base;
  auto emit = [&](bool final) {
    std::string text = tok->decode(all);
    if (text.compare(0, printed.size(), printed) != 0) return;
    if (!final && ends_with_replacement_char(text)) return;
    out << text.substr(printed.size()) << std::flush;
    printed = text;
  };
  std::vector<int64_t> stops = o.stop_token_ids;
  auto t0 = Clock::now();
  auto gens = generate(*model, {prompt}, o, [&](size_t, int32_t id) {
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) return;
    all.push_back(id);
    emit(false);
  });
  emit(true);
  out << "\n" << std::flush;
  const double secs = seconds_since(t0);
  std::cerr << fmt::format("[gpueval] {} prompt + {} new tokens in {:.3f}s ({:.1f} tok/s){}\n", prompt.size(),
                           gens[0].tokens.size(), secs, gens[0].tokens.size() / std::max(secs, 1e-9),
                           gens[0].stopped ? ", stopped on EOS" : "");
}

void run_logits(const LogitsCommand& cmd, std::ostream& out) {
  const std::vector<int32_t> ids = parse_id_list(cmd.ids, "--ids");
  DecoderModel model = open_model(cmd.model);
  const auto& c = model->config();
  for (int32_t id : ids)
    if (id >= c.vocab_size)
      throw Error(fmt::format("--ids: token id {} outside the vocabulary [0, {})", id, c.vocab_size));
  // Dynamic NTK scaling exists to run past max_position_embeddings (its base grows there).
  if (static_cast<int64_t>(ids.size()) > c.max_position_embeddings && c.rope_scaling.type != RopeScalingType::kDynamic)
    throw Error(
        fmt::format("--ids: {} tokens exceed the model's context of {}", ids.size(), c.max_position_embeddings));
  c10::InferenceMode guard;
  const int64_t t = static_cast<int64_t>(ids.size());
  const at::Device dev = model->options().device;
  at::Tensor tokens = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).view({1, t}).to(dev);
  at::Tensor positions = at::arange(t, at::kLong).view({1, t}).to(dev);
  at::Tensor valid = at::ones({1, t}, at::kBool).to(dev);
  nlohmann::json routing = nlohmann::json::array();
  if (cmd.routing) {
    if (c.arch.moe.num_experts == 0) throw Error("--routing: the model has no mixture of experts (a dense model)");
    model->observe_routing([&](int64_t layer, const at::Tensor& chosen, const at::Tensor& weights) {
      // Each token's experts in ascending order, its weights in the same order.
      const auto [experts, order] = chosen.to(at::kCPU).sort(-1);
      const at::Tensor w = weights.to(at::kCPU).to(at::kDouble).gather(-1, order);
      nlohmann::json e = nlohmann::json::array(), v = nlohmann::json::array();
      for (int64_t i = 0; i < experts.size(0); ++i) {
        const at::Tensor er = experts[i].contiguous(), wr = w[i].contiguous();
        e.push_back(std::vector<int64_t>(er.data_ptr<int64_t>(), er.data_ptr<int64_t>() + er.numel()));
        v.push_back(std::vector<double>(wr.data_ptr<double>(), wr.data_ptr<double>() + wr.numel()));
      }
      routing.push_back({{"layer", layer}, {"experts", e}, {"weights", v}});
    });
  }
  at::Tensor logits =
      model->logits(model->forward(tokens, positions, valid))[0].to(at::kFloat).to(at::kCPU).contiguous();  // [T, V]
  model->observe_routing(nullptr);
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t i = 0; i < t; ++i) {
    const float* p = logits[i].data_ptr<float>();
    rows.push_back(std::vector<float>(p, p + c.vocab_size));
  }
  nlohmann::json result = {{"logits", rows}};
  if (cmd.routing) result["routing"] = routing;
  out << result.dump() << "\n";
}

void run_tokenize(const TokenizeCommand& cmd, std::istream& in, std::ostream& out) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer(cmd.tokenizer);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("<stdin>:{}", line_no);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail(where, "not valid JSON");
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail(where, "expected an object with a string field \"text\"");
    std::vector<int32_t> ids = tok->encode(j["text"].get<std::string>(), cmd.add_special);
    out << nlohmann::json{{"ids", ids}}.dump() << "\n";
  }
}

void run_score(const ScoreCommand& cmd, std::ostream& out) {
  keep_freed_memory();  // window after window, as a worker runs batches (run/cpu_allocator.h)
  const std::string text = io::read_file(cmd.text_file);
  DecoderModel model = open_model(cmd.model);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(cmd.model.model_dir);
  const std::vector<int32_t> ids = tok->encode(text, /*add_special_tokens=*/false);
  if (ids.empty()) fail(cmd.text_file, "text has no tokens");
  std::optional<int32_t> prefix = tok->bos_id() ? tok->bos_id() : tok->eos_id();
  if (!prefix) fail(cmd.model.model_dir, "tokenizer has neither a BOS nor an EOS token to start the text with");
  const int64_t max_length = cmd.max_length > 0 ? cmd.max_length : model->config().max_position_embeddings;
  std::vector<ScoreRequest> windows = rolling_windows(ids, *prefix, max_length);

  auto t0 = Clock::now();
  std::vector<float> logprobs;
  std::vector<bool> greedy;
  int64_t computed = 0;
  for (size_t i = 0; i < windows.size();) {
    std::vector<ScoreRequest> chunk;
    if (cmd.stepwise) {
      chunk.push_back(windows[i++]);
      ScoreResult r = score_stepwise(*model, chunk[0]);
      logprobs.insert(logprobs.end(), r.logprobs.begin(), r.logprobs.end());
      greedy.insert(greedy.end(), r.is_greedy.begin(), r.is_greedy.end());
    } else {
      for (int64_t k = 0; k < std::max<int64_t>(1, cmd.batch_windows) && i < windows.size(); ++k)
        chunk.push_back(windows[i++]);
      for (const ScoreResult& r : score_batch(*model, chunk)) {
        logprobs.insert(logprobs.end(), r.logprobs.begin(), r.logprobs.end());
        greedy.insert(greedy.end(), r.is_greedy.begin(), r.is_greedy.end());
      }
    }
    for (const auto& w : chunk) computed += static_cast<int64_t>(w.tokens.size()) - 1;
  }
  const double secs = seconds_since(t0);
  double sum = 0;
  for (float lp : logprobs) sum += lp;
  const double n = static_cast<double>(logprobs.size());
  int64_t words = 0;
  bool in_word = false;
  for (char ch : text) {
    const bool space = std::isspace(static_cast<unsigned char>(ch));
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  nlohmann::json j = {{"model", cmd.model.model_dir},
                      {"text_file", cmd.text_file},
                      {"tokens", ids.size()},
                      {"bytes", text.size()},
                      {"words", words},
                      {"windows", windows.size()},
                      {"sum_logprob", sum},
                      {"token_perplexity", std::exp(-sum / n)},
                      {"word_perplexity", words > 0 ? std::exp(-sum / words) : NAN},
                      {"byte_perplexity", std::exp(-sum / text.size())},
                      {"bits_per_byte", -sum / text.size() / std::log(2.0)},
                      {"greedy_fraction", std::count(greedy.begin(), greedy.end(), true) / n},
                      {"ids", ids},
                      {"logprobs", logprobs},
                      {"seconds", secs},
                      {"tokens_per_second", computed / std::max(secs, 1e-9)},
                      {"mode", cmd.stepwise ? "stepwise" : "batched"}};
  out << j.dump() << "\n";
  std::cerr << fmt::format("[gpueval] {} tokens in {} windows, {} mode: {:.3f}s, {:.0f} tok/s, perplexity {:.4f}\n",
                           ids.size(), windows.size(), cmd.stepwise ? "stepwise" : "batched", secs,
                           computed / std::max(secs, 1e-9), std::exp(-sum / n));
}

void run_convert_llama2c(const ConvertLlama2cCommand& cmd) {
  convert_llama2c(cmd.checkpoint, cmd.tokenizer, cmd.out_dir);
  std::cerr << fmt::format(
      "[gpueval] wrote {}/{{config.json,model.safetensors,tokenizer.json,tokenizer_config.json}}\n", cmd.out_dir);
}

void run_init_model(const InitModelCommand& cmd) {
  if (cmd.out_dir.empty()) throw Error("--out: an output directory is required");
  if (io::path_exists(cmd.out_dir) && !cmd.force) {
    if (!io::is_directory(cmd.out_dir)) fail(cmd.out_dir, "--out exists and is not a directory");
    if (!std::filesystem::is_empty(cmd.out_dir))
      fail(cmd.out_dir, "--out directory is not empty (pass --force to overwrite the model there)");
  }
  auto t0 = Clock::now();
  write_random_model(cmd.out_dir, cmd.spec, cmd.tokenizer_dir);
  const ModelConfig config = ModelConfig::load(cmd.out_dir + "/config.json");
  std::cerr << fmt::format("[gpueval] wrote {} (random llama, {:.2f}M parameters, vocab {}, {}, seed {}) in {:.2f}s\n",
                           cmd.out_dir, config.num_parameters() / 1e6, config.vocab_size, config.torch_dtype,
                           cmd.spec.seed, seconds_since(t0));
}

void run_history(const HistoryCommand& cmd, std::ostream& out) {
  const std::string path = History::default_path(cmd.history);
  const History history = History::open(path, /*create=*/false);
  std::vector<std::string> configs = history.configs();
  if (configs.empty()) {
    out << path << ": no runs recorded yet\n";
    return;
  }
  if (!cmd.config.empty()) {
    std::vector<std::string> matching;
    for (const std::string& c : configs) {
      if (c.compare(0, cmd.config.size(), cmd.config) == 0) matching.push_back(c);
    }
    if (matching.empty()) {
      std::string list;
      for (const std::string& c : configs) list += (list.empty() ? "" : ", ") + c;
      fail("--config", "no config in {} starts with '{}' (configs: {})", path, cmd.config, list);
    }
    configs = matching;
  }
  std::vector<std::pair<std::string, std::vector<ScoredCheckpoint>>> shown;
  std::vector<std::string> all_tasks;
  for (const std::string& c : configs) {
    std::vector<ScoredCheckpoint> trend = history.trend(c);
    const std::vector<std::string> tasks = trend_tasks(trend);
    for (const std::string& t : tasks) {
      if (std::find(all_tasks.begin(), all_tasks.end(), t) == all_tasks.end()) all_tasks.push_back(t);
    }
    if (cmd.task.empty() || std::find(tasks.begin(), tasks.end(), cmd.task) != tasks.end()) {
      shown.emplace_back(c, std::move(trend));
    }
  }
  if (!cmd.task.empty() && shown.empty()) {
    std::sort(all_tasks.begin(), all_tasks.end());
    std::string list;
    for (const std::string& t : all_tasks) list += (list.empty() ? "" : ", ") + t;
    fail("--task", "no task '{}' in {} (tasks: {})", cmd.task, path, list.empty() ? "none" : list);
  }
  bool first = true;
  for (const auto& [config, trend] : shown) {
    if (!first) out << "\n";
    first = false;
    const nlohmann::json json = history.config_of(config);
    std::string model;
    if (json.is_object() && json.contains("model") && json["model"].is_string())
      model = json["model"].get<std::string>();
    out << "## config " << config << " (" << trend.size() << " checkpoint" << (trend.size() == 1 ? "" : "s")
        << (model.empty() ? "" : ", model " + model) << ")\n\n";
    if (trend.empty()) {
      out << "No checkpoint of this config has been scored.\n";
    } else {
      out << trend_table(trend, nullptr, cmd.task);
    }
    if (!cmd.report.empty()) write_trend_reports(cmd.report + "/" + config, history, config);
  }
}

}  // namespace gpueval
