#include "fuzz/fuzz_targets.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>
#include <typeinfo>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "common/strict_json.h"
#include "gpueval/error.h"
#include "gpueval/model_config.h"
#include "gpueval/run_config.h"
#include "gpueval/task.h"
#include "gpueval/template.h"
#include "gpueval/tokenizer.h"
#include "jinja/chat_template.h"
#include "model/loading/checkpoint.h"
#include "cli/llama2c_convert.h"
#include "model/loading/safetensors.h"
#include "plan/item_result.h"
#include "plan/planner.h"
#include "run/batch_probe.h"
#include "run/wire.h"
#include "run/worker_hello.h"
#include "run/worker_messages.h"
#include "run/worker_prefork.h"
#include "tasks/csv.h"
#include "tasks/hellaswag_text.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace gpueval::fuzz {
namespace {

// A private scratch directory for the files a target hands to a file-reading parser; removed at exit.
const std::string& scratch() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/gpueval-fuzz-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::string d = tmpl;
    static const std::string keep = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return d;
  }();
  return dir;
}

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  return path;
}

// The contract: the call returns, or throws gpueval::Error with one non-empty line.
template <typename F>
std::optional<std::string> contract(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    const std::string m = e.what();
    // GPUEVAL_FUZZ_VERBOSE=1 prints each refusal: what a seed or a stuck corpus runs into.
    static const bool verbose = std::getenv("GPUEVAL_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "refused: %s\n", m.c_str());
    if (m.empty()) return std::string("threw gpueval::Error with an empty message");
    if (m.find('\n') != std::string::npos) return "threw gpueval::Error with a multi-line message: " + m;
  } catch (const std::exception& e) {
    return std::string("threw ") + typeid(e).name() + " instead of gpueval::Error: " + e.what();
  } catch (...) {
    return std::string("threw something that is not a std::exception");
  }
  return std::nullopt;
}

std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits "<first><sep><second>"; without the separator, all is first and second is `fallback`.
std::pair<std::string_view, std::string_view> split_input(std::string_view in, std::string_view sep,
                                                          std::string_view fallback) {
  const size_t at = in.rfind(sep);
  if (at == std::string_view::npos) return {in, fallback};
  return {in.substr(0, at), in.substr(at + sep.size())};
}

constexpr std::string_view kSampleText =
    "Hello world! It's 2026: ünïcödé, 日本語, emoji 🙂 and  two  spaces.\n\ttab";

// ---- model files -----------------------------------------------------------------------------

std::optional<std::string> fuzz_safetensors(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("model.safetensors", as_text(data, size));
  return contract([&] {
    const auto file = SafetensorsFile::open(path);
    for (const TensorInfo& t : file->tensors()) (void)file->tensor(t.name).numel();
    (void)file->metadata().size();
  });
}

// Two real shards; the input is the index that says which tensor is in which.
std::optional<std::string> fuzz_checkpoint_index(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = scratch() + "/checkpoint";
    std::filesystem::create_directories(d);
    write_safetensors(d + "/model-00001-of-00002.safetensors",
                      {{"model.embed_tokens.weight", torch::ones({4, 2})}, {"model.norm.weight", torch::ones({2})}});
    write_safetensors(d + "/model-00002-of-00002.safetensors", {{"lm_head.weight", torch::zeros({4, 2})}});
    return d;
  }();
  write_scratch("checkpoint/model.safetensors.index.json", as_text(data, size));
  return contract([&] {
    const CheckpointFiles c = CheckpointFiles::open(dir);
    for (const std::string& name : c.names()) (void)c.tensor(name).numel();
  });
}

std::optional<std::string> fuzz_model_config(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("config.json", as_text(data, size));
  return contract([&] {
    const ModelConfig c = ModelConfig::load(path);
    (void)c.num_parameters();
    (void)ModelConfig::from_json(c.to_json(), path);
  });
}

std::optional<std::string> fuzz_llama2c_checkpoint(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("model.bin", as_text(data, size));
  return contract([&] { (void)read_llama2c_checkpoint(path).weights.size(); });
}

// ---- tokenizers ------------------------------------------------------------------------------

void exercise(const Tokenizer& t, std::string_view text) {
  const std::vector<int32_t> ids = t.encode(text, true);
  (void)t.decode(ids, false);
  (void)t.decode(ids, true);
  const int32_t n = t.vocab_size();
  std::vector<int32_t> some;
  for (int32_t id : {0, 1, 2, n / 2, n - 1})
    if (id >= 0 && id < n) some.push_back(id);
  (void)t.decode(some, false);
  for (int32_t id : some) (void)t.id_to_piece(id);
  (void)t.piece_to_id(text.substr(0, 8));
}

// Input: a tokenizer.json, optionally followed by "\n#text\n" and the text to encode.
std::optional<std::string> fuzz_tokenizer_json(const uint8_t* data, size_t size) {
  const auto parts = split_input(as_text(data, size), "\n#text\n", kSampleText);
  const std::string_view file = parts.first, text = parts.second;
  const std::string path = write_scratch("tokenizer.json", file);
  return contract([&] { exercise(*load_tokenizer(path), text); });
}

std::optional<std::string> fuzz_llama2c_tokenizer(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("tokenizer.bin", as_text(data, size));
  return contract([&] {
    const nlohmann::json j = llama2c_tokenizer_to_json(path);
    const nlohmann::json config = llama2c_tokenizer_config();
    exercise(*load_tokenizer_json(j, path, &config), kSampleText);
  });
}

// ---- tasks and runs --------------------------------------------------------------------------

constexpr std::string_view kDocs =
    "{\"question\": \"Two plus two?\", \"choices\": [\"3\", \"4\", \"5\"], \"label\": 1, \"text\": \"four\"}\n"
    "{\"question\": \"Sky colour?\", \"choices\": [\"blue\", \"green\", \"red\"], \"label\": 0, \"text\": \"blue\"}\n";

// Input: a task YAML (templates, filters, metrics, few-shot settings) over a small fixed dataset.
std::optional<std::string> fuzz_task_yaml(const uint8_t* data, size_t size) {
  static const bool docs_written = (write_scratch("docs.jsonl", kDocs), true);
  (void)docs_written;
  const std::string path = write_scratch("fuzz_task.yaml", as_text(data, size));
  return contract([&] {
    const Task t = Task::load(path, {scratch()});
    (void)build_requests({&t}, std::nullopt).size();
  });
}

// Input: the JSONL dataset of a fixed multiple-choice task.
std::optional<std::string> fuzz_jsonl(const uint8_t* data, size_t size) {
  static const std::string yaml = write_scratch("jsonl_task.yaml",
                                                "task: fuzz_jsonl\n"
                                                "dataset_path: fuzz_docs.jsonl\n"
                                                "output_type: multiple_choice\n"
                                                "doc_to_text: \"Q: {{question}}\\nA:\"\n"
                                                "doc_to_choice: \"{{choices}}\"\n"
                                                "doc_to_target: \"{{label}}\"\n"
                                                "num_fewshot: 1\n"
                                                "fewshot_path: fuzz_docs.jsonl\n"
                                                "metric_list:\n  - metric: acc\n");
  write_scratch("fuzz_docs.jsonl", as_text(data, size));
  return contract([&] {
    const Task t = Task::load(yaml, {scratch()});
    (void)build_requests({&t}, std::nullopt).size();
  });
}

std::optional<std::string> fuzz_run_config(const uint8_t* data, size_t size) {
  const std::string path = write_scratch("run.yaml", as_text(data, size));
  return contract([&] { (void)load_run_config(path).to_json().dump(); });
}

std::optional<std::string> fuzz_csv(const uint8_t* data, size_t size) {
  const std::string_view text = as_text(data, size);
  return contract([&] {
    (void)parse_csv(text, "fuzz.csv").size();
    (void)parse_csv(text, "fuzz.csv", 6).size();
  });
}

std::optional<std::string> fuzz_hellaswag(const uint8_t* data, size_t size) {
  return contract([&] { (void)parse_hellaswag_text(as_text(data, size), "fuzz.txt").size(); });
}

// Input: a template, optionally followed by "\n#doc\n" and the JSON document it renders.
std::optional<std::string> fuzz_template(const uint8_t* data, size_t size) {
  const auto parts = split_input(
      as_text(data, size), "\n#doc\n",
      R"({"question": "Q?", "choices": ["a", "b"], "label": 1, "n": 3, "x": 2.5, "d": {"k": [1, 2]}, "t": true})");
  const std::string_view text = parts.first, doc_text = parts.second;
  return contract([&] {
    const nlohmann::json doc = parse_strict_json(doc_text, "fuzz doc", "document");
    const Template t = Template::parse(std::string(text), "doc_to_text", "fuzz.yaml:1");
    (void)t.render(doc, "fuzz.jsonl:1");
    (void)t.value(doc, "fuzz.jsonl:1");
  });
}

// Input: a chat template, optionally followed by "\n#context\n" and the JSON context it renders
// with. Rendering may also end in the template's raise_exception or a Python-like error
// (jinja::TemplateRaised, jinja::RenderError): both are outcomes a template can have.
std::optional<std::string> fuzz_chat_template(const uint8_t* data, size_t size) {
  const auto parts = split_input(
      as_text(data, size), "\n#context\n",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi é 🙂"},)"
      R"( {"role": "assistant", "content": "<think>x</think>Hello", "tool_calls": [{"function": {"name": "f",)"
      R"( "arguments": {"a": [1, 2.5, null]}}}]}], "tools": [{"type": "function", "function": {"name": "f"}}],)"
      R"( "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  const std::string_view text = parts.first, context_text = parts.second;
  return contract([&] {
    // Strictly parsed (a malformed context is a refusal), then read with its keys in order.
    const nlohmann::ordered_json context =
        nlohmann::ordered_json::parse(parse_strict_json(context_text, "fuzz context", "context").dump());
    const jinja::ChatTemplate t = jinja::ChatTemplate::parse(std::string(text), "chat_template.jinja");
    try {
      (void)t.render(context);
    } catch (const jinja::TemplateRaised&) {
    } catch (const jinja::RenderError&) {}
  });
}

// ---- the wire --------------------------------------------------------------------------------

// Decodes a frame as each side would: the scheduler what a worker sends, a worker what the
// scheduler sends.
void decode_frame(const Frame& f) {
  const nlohmann::json j = unpack_payload(f);
  switch (f.type) {
    case FrameType::kHello:
      (void)hello_reply_from_json(j);
      (void)worker_hello_from_json(j);
      break;
    case FrameType::kWork:
      if (j.is_object() && j.contains("batch"))
        (void)batch_from_json(j.at("batch"));
      else
        (void)batch_from_json(j);
      break;
    case FrameType::kResult:
      if (j.is_object() && j.contains("probe"))
        (void)probe_result_from_json(j.at("probe"));
      else
        (void)result_reply_from_json(j);
      break;
    case FrameType::kError: (void)error_reply_from_json(j); break;
    case FrameType::kProbe: (void)probe_options_from_json(j); break;
    case FrameType::kBroadcast: (void)broadcast_id_from_json(j); break;
    case FrameType::kLaunch: (void)launch_request_from_json(j); break;
    case FrameType::kItems: (void)items_reply_from_json(j); break;
    case FrameType::kHeartbeat:
    case FrameType::kShutdown: break;
  }
}

// Input: a byte stream from a pipe. Its first byte sets the size of the pieces it arrives in.
std::optional<std::string> fuzz_wire(const uint8_t* data, size_t size) {
  if (size == 0) return std::nullopt;
  const size_t chunk = 1 + data[0] % 64;
  return contract([&] {
    FrameDecoder decoder;
    for (size_t pos = 1; pos < size; pos += chunk) {
      decoder.feed(reinterpret_cast<const char*>(data) + pos, std::min(chunk, size - pos));
      while (std::optional<Frame> f = decoder.next()) decode_frame(*f);
    }
  });
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"safetensors", "a .safetensors file (header, offsets, dtypes, shapes)", fuzz_safetensors},
      {"checkpoint_index", "model.safetensors.index.json over two real shards", fuzz_checkpoint_index},
      {"model_config", "a model's config.json", fuzz_model_config},
      {"llama2c_checkpoint", "a llama2.c checkpoint (.bin, version 0 or 1)", fuzz_llama2c_checkpoint},
      {"tokenizer_json", "tokenizer.json [\\n#text\\n TEXT], then encode and decode", fuzz_tokenizer_json},
      {"llama2c_tokenizer", "a llama2.c tokenizer.bin, then encode and decode", fuzz_llama2c_tokenizer},
      {"task_yaml", "a task YAML with its templates over a fixed dataset", fuzz_task_yaml},
      {"jsonl", "a JSONL dataset of a fixed multiple-choice task", fuzz_jsonl},
      {"run_config", "a run config YAML", fuzz_run_config},
      {"csv", "a CSV dataset", fuzz_csv},
      {"hellaswag", "HellaSwag's six-line text records", fuzz_hellaswag},
      {"template", "a doc_to_* template [\\n#doc\\n JSON document], parsed and rendered", fuzz_template},
      {"chat_template", "a chat template [\\n#context\\n JSON context], parsed and rendered as transformers does",
       fuzz_chat_template},
      {"wire", "bytes from a worker or scheduler pipe: frames and their CBOR payloads", fuzz_wire},
  };
  return all;
}

const Target* find_target(const std::string& name) {
  for (const Target& t : targets())
    if (name == t.name) return &t;
  return nullptr;
}

}  // namespace gpueval::fuzz
