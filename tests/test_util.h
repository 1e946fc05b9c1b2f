// Fixture helpers shared by the test files: where the repository and the
// shared data live, a self-deleting temporary directory, and running the real
// gpueval binary as a child process.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpueval/error.h"
#include "gpueval/history.h"
#include "gpueval/model.h"
#include "gpueval/request.h"
#include "gpueval/task.h"
#include "gpueval/tokenizer.h"

namespace gpueval::testing {

// The message of the gpueval::Error that `fn` throws; fails the test when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no gpueval::Error thrown";
  return "";
}

std::string source_dir();
std::string shared_dir();  // ../shared beside the repository
bool have_shared();
std::string binary();  // the gpueval executable under test
double cpu_seconds();  // CPU time this process has used: for bounds a loaded machine must not break

// Skips the current test with a message when ../shared is absent.
#define GPUEVAL_REQUIRE_SHARED()                                                       \
  do {                                                                                 \
    if (!::gpueval::testing::have_shared())                                            \
      GTEST_SKIP() << "shared data not found at " << ::gpueval::testing::shared_dir(); \
  } while (0)

// The sanitizer build (scripts/sanitize.sh, -DGPUEVAL_SANITIZE=ON) cannot run two kinds of test:
// SentencePiece's module needs RTLD_DEEPBIND, which AddressSanitizer refuses, so tokenizer.model
// does not load (src/tokenizer/sentencepiece_tokenizer.cpp); and ASan's allocator replaces glibc's
// (no malloc arenas, freed memory held in quarantine), so tests of how much memory the process
// holds measure ASan instead. Such a test skips there, saying why.
#ifdef GPUEVAL_SANITIZE
#define GPUEVAL_SKIP_UNDER_SANITIZERS(why) GTEST_SKIP() << "not under the sanitizers: " << why
#else
#define GPUEVAL_SKIP_UNDER_SANITIZERS(why) \
  do {                                     \
  } while (0)
#endif
#define GPUEVAL_REQUIRE_SENTENCEPIECE() \
  GPUEVAL_SKIP_UNDER_SANITIZERS("SentencePiece's module needs RTLD_DEEPBIND, which AddressSanitizer refuses")
#define GPUEVAL_REQUIRE_GLIBC_MALLOC() \
  GPUEVAL_SKIP_UNDER_SANITIZERS("AddressSanitizer's allocator replaces glibc malloc and holds freed memory")

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `contents` to file(name) and returns that path.
  std::string write(const std::string& name, const std::string& contents) const;
  // The names of the entries directly inside path(), sorted.
  std::vector<std::string> listing() const;

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `args` (argv[0] excluded) of the gpueval binary with `stdin_text` on stdin.
CommandResult run_gpueval(const std::vector<std::string>& args, const std::string& stdin_text = "");

void write_text(const std::string& path, const std::string& text);

// The two small tasks several tests score, written into `dir` as <name>.yaml over <name>.jsonl
// (`documents`: JSON objects, one a line); each returns the YAML's path. "quiz" is multiple
// choice over {question, choices, label} with metric_list [acc, acc_norm]; "story" is
// loglikelihood_rolling over {text}. `extra_keys` (YAML lines) end the task file.
std::string write_quiz_task(const TempDir& dir, const std::string& documents, const std::string& extra_keys = "");
std::string write_story_task(const TempDir& dir, const std::string& documents, const std::string& extra_keys = "");
// A run config scoring the demo tasks (demo_choice, demo_perplexity) with the shipped
// models/stories260K in many small batches (batch_tokens 192), so that faults, kills and shards land
// mid-run: <dir>/<name>.yaml, its output <dir>/<name>, `extra` (YAML lines) at its end. Its path.
std::string write_demo_config(const TempDir& dir, const std::string& name, const std::string& extra = "",
                              double heartbeat_timeout_s = 20);
// `gpueval run` over 12 MMLU anatomy questions 1-shot (../shared/data/mmlu) with the converted
// stories260K on `gpus`, its output at `output`; `extra` flags end the arguments.
std::vector<std::string> mmlu_anatomy_run_args(const std::string& gpus, const std::string& output,
                                               const std::vector<std::string>& extra = {});

// One generate_until result per text (the responses of a document's repeats), the other fields left default.
std::vector<RequestResult> text_results(const std::vector<std::string>& texts);
// `doc` of `task` scored as the aggregator scores it, from one result per request in order.
DocRecord scored_record(const Task& task, const Document& doc, std::vector<RequestResult> results);

// The stories260K llama2.c checkpoint converted once per test process into a temp dir.
const std::string& converted_stories260k();

// Copies the checkpoint directory `src` to `dst` (created) with every floating-point weight w
// replaced by w + scale * std(w) * N(0, 1) (a generator seeded with `seed`): a checkpoint of the
// same architecture whose scores differ. scale 0 gives a byte-identical copy.
void perturbed_copy(const std::string& src, const std::string& dst, double scale, uint64_t seed);

// The shipped models/stories260K and its tokenizer, loaded once per test process (fp32, CPU).
const DecoderModelImpl& stories260k_model();
const Tokenizer& stories260k_tokenizer();

// Scores `requests` (indices 0..n-1) with the shipped models/stories260K in process, the way a
// worker does (plan with the model's context, execute every batch, combine windows); the
// results in index order.
std::vector<RequestResult> score_with_stories260k(const std::vector<Request>& requests);

// A ScoreRow as results.json would give it, for the history, trend and TensorBoard tests.
ScoreRow score_row(const std::string& task, const std::string& metric, double value,
                   std::optional<double> stderr_value = std::nullopt, int64_t n = 0, bool higher_is_better = true,
                   bool is_group = false, const std::string& filter = "none");

}  // namespace gpueval::testing
