#include "test_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>

#include "aggregate/aggregator.h"
#include "gpueval/model.h"
#include "gpueval/tokenizer.h"
#include "cli/llama2c_convert.h"
#include "model/loading/safetensors.h"
#include "plan/planner.h"
#include "run/executor.h"

namespace gpueval::testing {

std::string source_dir() { return GPUEVAL_SOURCE_DIR; }

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string shared_dir() {
  if (const char* env = std::getenv("GPUEVAL_SHARED_DIR")) return env;
  return GPUEVAL_SHARED_DIR;
}

bool have_shared() {
  struct stat st;
  return ::stat((shared_dir() + "/data/stories260K/stories260K.bin").c_str(), &st) == 0;
}

std::string binary() { return GPUEVAL_BINARY; }

namespace {
// Runs without batch_tokens probe and cache their batch budgets; tests keep that cache beside the
// test binary (shared by every test, so each model/device is probed once), never in ~/.cache.
const bool kCacheDirSet = [] {
  std::string dir = GPUEVAL_BINARY;
  dir = dir.substr(0, dir.find_last_of('/')) + "/test_calibration_cache";
  ::setenv("GPUEVAL_CACHE_DIR", dir.c_str(), /*overwrite=*/0);
  return true;
}();
}  // namespace

TempDir::TempDir() {
  std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : "/tmp") + "/gpueval_test.XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::write(const std::string& name, const std::string& contents) const {
  write_text(file(name), contents);
  return file(name);
}

std::vector<std::string> TempDir::listing() const {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(path_)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::string write_quiz_task(const TempDir& dir, const std::string& documents, const std::string& extra_keys) {
  dir.write("quiz.jsonl", documents);
  return dir.write("quiz.yaml",
                   "task: quiz\ndataset_path: quiz.jsonl\noutput_type: multiple_choice\n"
                   "doc_to_text: \"Q: {{question}}\\nA:\"\ndoc_to_choice: \"{{choices}}\"\n"
                   "doc_to_target: \"{{label}}\"\nmetric_list: [acc, acc_norm]\n" +
                       extra_keys);
}

DocRecord scored_record(const Task& task, const Document& doc, std::vector<RequestResult> results) {
  DocRecord r;
  r.task = &task;
  r.doc = doc;
  r.requests = task.requests(doc);
  for (size_t i = 0; i < results.size(); ++i) results[i].index = static_cast<int64_t>(i);
  r.results = results;
  r.metrics = task.process_results_all(doc, results);
  return r;
}

std::string write_story_task(const TempDir& dir, const std::string& documents, const std::string& extra_keys) {
  dir.write("story.jsonl", documents);
  return dir.write("story.yaml",
                   "task: story\ndataset_path: story.jsonl\noutput_type: loglikelihood_rolling\n"
                   "doc_to_text: \"\"\ndoc_to_target: \"{{text}}\"\n" +
                       extra_keys);
}

std::string write_demo_config(const TempDir& dir, const std::string& name, const std::string& extra,
                              double heartbeat_timeout_s) {
  return dir.write(name + ".yaml", "model: " + source_dir() + "/models/stories260K\n" +
                                       "tasks: [demo_choice, demo_perplexity]\n"
                                       "output: " +
                                       dir.file(name) + "\nbatch_tokens: 192\nheartbeat_timeout_s: " +
                                       std::to_string(heartbeat_timeout_s) + "\n" + extra);
}

std::vector<std::string> mmlu_anatomy_run_args(const std::string& gpus, const std::string& output,
                                               const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run",
                                   "--gpus",
                                   gpus,
                                   "--model",
                                   converted_stories260k(),
                                   "--tasks",
                                   "mmlu_anatomy",
                                   "--limit",
                                   "12",
                                   "--num-fewshot",
                                   "1",
                                   "--data",
                                   "mmlu=" + shared_dir() + "/data/mmlu",
                                   "--output",
                                   output,
                                   source_dir() + "/configs/demo.yaml"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

namespace {

std::string drain(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

}  // namespace

CommandResult run_gpueval(const std::vector<std::string>& args, const std::string& stdin_text) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) || ::pipe2(out_pipe, O_CLOEXEC) || ::pipe2(err_pipe, O_CLOEXEC))
    throw std::runtime_error("pipe2 failed");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    std::vector<std::string> argv_s = {binary()};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  std::thread writer([&] {
    size_t done = 0;
    while (done < stdin_text.size()) {
      ssize_t n = ::write(in_pipe[1], stdin_text.data() + done, stdin_text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(in_pipe[1]);
  });
  CommandResult r;
  std::thread err_reader([&] { r.err = drain(err_pipe[0]); });
  r.out = drain(out_pipe[0]);
  err_reader.join();
  writer.join();
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

const std::string& converted_stories260k() {
  static TempDir dir;
  static const bool converted = [] {
    convert_llama2c(shared_dir() + "/data/stories260K/stories260K.bin", shared_dir() + "/data/stories260K/tok512.bin",
                    dir.path());
    return true;
  }();
  (void)converted;
  return dir.path();
}

namespace {
// gpueval runs under test keep their history (history.h) in a temp file, not the user's.
const bool kPrivateHistory = [] {
  if (!std::getenv("GPUEVAL_HISTORY")) {
    static TempDir dir;
    ::setenv("GPUEVAL_HISTORY", dir.file("history.sqlite").c_str(), 1);
  }
  return true;
}();
}  // namespace

void perturbed_copy(const std::string& src, const std::string& dst, double scale, uint64_t seed) {
  namespace fs = std::filesystem;
  fs::create_directories(dst);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (const auto& entry : fs::directory_iterator(src)) {
    const std::string name = entry.path().filename().string();
    const std::string to = dst + "/" + name;
    if (name.size() <= 12 || name.compare(name.size() - 12, 12, ".safetensors") != 0 || scale == 0) {
      fs::copy_file(entry.path(), to, fs::copy_options::overwrite_existing);
      continue;
    }
    const auto file = SafetensorsFile::open(entry.path().string());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const TensorInfo& t : file->tensors()) {
      at::Tensor w = file->tensor(t.name).clone();
      if (at::isFloatingType(w.scalar_type()) && w.numel() > 1) {
        const at::Tensor w32 = w.to(at::kFloat);
        const at::Tensor noise = at::randn(w32.sizes(), gen, at::TensorOptions().dtype(at::kFloat));
        w = (w32 + noise * (scale * w32.std().item<double>())).to(w.scalar_type());
      }
      tensors.emplace_back(t.name, w);
    }
    write_safetensors(to, tensors, file->metadata());
  }
}

const DecoderModelImpl& stories260k_model() {
  static const DecoderModel model = load_model(source_dir() + "/models/stories260K");
  return *model;
}

const Tokenizer& stories260k_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(source_dir() + "/models/stories260K");
  return *tokenizer;
}

std::vector<RequestResult> score_with_stories260k(const std::vector<Request>& requests) {
  const DecoderModelImpl& model = stories260k_model();
  const Tokenizer& tokenizer = stories260k_tokenizer();
  PlanOptions options;
  options.batch_tokens = 8192;
  options.max_length = model.config().max_position_embeddings;
  std::vector<ItemResult> items;
  for (const Batch& b : make_plan(requests, tokenizer, options).batches) {
    for (ItemResult& r : execute_batch(model, tokenizer, b)) items.push_back(std::move(r));
  }
  return combine_items(items);
}

ScoreRow score_row(const std::string& task, const std::string& metric, double value, std::optional<double> stderr_value,
                   int64_t n, bool higher_is_better, bool is_group, const std::string& filter) {
  ScoreRow r;
  r.task = task;
  r.metric = metric;
  r.filter = filter;
  r.value = value;
  r.stderr_value = stderr_value;
  r.n = n;
  r.higher_is_better = higher_is_better;
  r.is_group = is_group;
  return r;
}

std::vector<RequestResult> text_results(const std::vector<std::string>& texts) {
  std::vector<RequestResult> out;
  for (const std::string& t : texts) {
    RequestResult r;
    r.text = t;
    out.push_back(r);
  }
  return out;
}

}  // namespace gpueval::testing
