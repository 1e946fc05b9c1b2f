// `gpueval requests` (evaluation/request_run.h), the engine behind lm-eval's `gpueval` model: the
// request lines it reads and refuses, the numbers it gives (the in-process scoring's, with rolling
// texts windowed as lm-eval's hf model does), and its journal keyed by the requests: the same
// command again computes nothing, and a run killed with SIGKILL goes on, on another worker count,
// to the same bits, computing only what was missing.
#include <gmock/gmock.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "async_run.h"
#include "common/file_io.h"
#include "evaluation/request_run.h"
#include "gpueval/error.h"
#include "test_util.h"

namespace gpueval {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(RequestLinesTest, ReadsEveryTypeAndNumbersEachDocumentsRequests) {
  const std::string text =
      R"({"type": "loglikelihood", "context": "A", "continuation": " b", "task": "t", "doc_id": 3})"
      "\n\n"
      R"({"type": "loglikelihood", "context": "A", "continuation": " c", "task": "t", "doc_id": 3})"
      "\n"
      R"({"type": "loglikelihood_rolling", "context": "text"})"
      "\n"
      R"({"type": "generate_until", "context": "Q", "until": ["\n", ""], "max_gen_toks": 7, "task": "g"})"
      "\n"
      R"({"type": "generate_until", "context": "Q", "temperature": 0.5, "top_p": 0.9, "task": "g"})"
      "\n";
  const std::vector<Request> r = read_request_lines(text, "in.jsonl");
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].index, 0);
  EXPECT_EQ(r[1].index, 1);
  EXPECT_EQ(r[1].continuation, " c");
  EXPECT_EQ(r[0].choice, 0);
  EXPECT_EQ(r[1].choice, 1);  // the second request of t doc 3
  EXPECT_EQ(r[1].doc_id, 3);
  EXPECT_EQ(r[2].type, RequestType::kLoglikelihoodRolling);
  EXPECT_EQ(r[2].task, "");
  EXPECT_EQ(r[3].stops, std::vector<std::string>{"\n"});  // an empty stop stops nothing, as in lm-eval
  EXPECT_EQ(r[3].max_tokens, 7);
  EXPECT_FALSE(r[3].sampled());
  EXPECT_EQ(r[4].max_tokens, 256);
  EXPECT_EQ(r[4].choice, 1);  // g doc 0's second: its own sampling seed
  EXPECT_DOUBLE_EQ(r[4].temperature, 0.5);
  EXPECT_DOUBLE_EQ(r[4].top_p, 0.9);
}

TEST(RequestLinesTest, ABadLineIsOneErrorNamingTheFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "in.jsonl:2: not JSON"},
      {"[1]", "in.jsonl:2: expected an object"},
      {R"({"type": "loglikelihood", "context": "a"})", "in.jsonl:2: missing"},
      {R"({"type": "loglikelihood", "context": "a", "continuation": "b", "until": ["x"]})",
       "in.jsonl:2: 'until' is for generate_until requests only"},
      {R"({"type": "loglikelihood_rolling", "context": "a", "continuation": "b"})",
       "in.jsonl:2: 'continuation' is for loglikelihood requests only"},
      {R"({"type": "score", "context": "a"})", "score"},
      {R"({"type": "generate_until", "context": "a", "max_gen_toks": 0})", "max_gen_toks"},
      {R"({"type": "generate_until", "context": "a", "top_k": 5})", "top_k and top_p apply when sampling only"},
      {R"({"type": "generate_until", "context": "a", "temperature": 1, "top_p": 1.5})", "top_p must be at most 1"},
      {R"({"type": "generate_until", "context": "a", "seed": 1})", "in.jsonl:2: unknown key 'seed'"},
      {R"({"type": "loglikelihood_rolling", "context": 5})", "in.jsonl:2: context"},
      {R"({"type": "loglikelihood_rolling", "context": "a", "doc_id": -1})", "doc_id"},
  };
  for (const auto& [line, message] : cases) {
    const std::string text = R"({"type": "loglikelihood_rolling", "context": "fine"})"
                             "\n" +
                             line + "\n";
    const std::string err = testing::error_of([&] { read_request_lines(text, "in.jsonl"); });
    EXPECT_THAT(err, HasSubstr(message)) << line;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

// ~100 requests of every type over the demo tasks' documents: multiple-choice contexts (which
// share a few-shot-like head), rolling texts and greedy generations.
std::vector<json> demo_lines() {
  std::vector<json> lines;
  std::ifstream choice(testing::source_dir() + "/tasks/demo_choice.jsonl");
  const std::string head = "Once upon a time, in a small town, there lived a kind old man. ";
  int64_t doc = 0;
  for (std::string l; std::getline(choice, l); ++doc) {
    const json d = json::parse(l);
    for (const auto& c : d["choices"])
      lines.push_back({{"type", "loglikelihood"},
                       {"context", head + d["context"].get<std::string>()},
                       {"continuation", " " + c.get<std::string>()},
                       {"task", "choice"},
                       {"doc_id", doc}});
    if (doc % 5 == 0)
      lines.push_back({{"type", "generate_until"},
                       {"context", d["context"]},
                       {"until", {"."}},
                       {"max_gen_toks", 12},
                       {"task", "gen"},
                       {"doc_id", doc}});
  }
  std::ifstream story(testing::source_dir() + "/tasks/demo_perplexity.jsonl");
  doc = 0;
  for (std::string l; std::getline(story, l) && doc < 8; ++doc)
    lines.push_back({{"type", "loglikelihood_rolling"}, {"context", json::parse(l)["text"]}, {"task", "story"}});
  return lines;
}

std::string write_lines(const testing::TempDir& dir, const std::vector<json>& lines) {
  std::string text;
  for (const json& l : lines) text += l.dump() + "\n";
  return dir.write("requests.jsonl", text);
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

std::vector<json> read_results(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
  return out;
}

std::vector<std::string> request_args(const std::string& requests, const std::string& results,
                                      const std::string& output, const std::string& gpus) {
  return {"requests", "--model",   testing::source_dir() + "/models/stories260K",
          "--gpus",   gpus,        "--requests",
          requests,   "--results", results,
          "--output", output,      "--batch-tokens",
          "192",      "--dtype",   "float32"};
}

class RequestRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    lines_ = new std::vector<json>(demo_lines());
    requests_ = new std::string(write_lines(*dir_, *lines_));
    const auto r =
        testing::run_gpueval(request_args(*requests_, dir_->file("reference.jsonl"), dir_->file("reference"), "cpu:1"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    reference_ = new std::string(io::read_file(dir_->file("reference.jsonl")));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete requests_;
    delete lines_;
    delete dir_;
  }
  static testing::TempDir* dir_;
  static std::vector<json>* lines_;
  static std::string *requests_, *reference_;
  testing::TempDir tmp_;
};
testing::TempDir* RequestRunTest::dir_ = nullptr;
std::vector<json>* RequestRunTest::lines_ = nullptr;
std::string* RequestRunTest::requests_ = nullptr;
std::string* RequestRunTest::reference_ = nullptr;

TEST_F(RequestRunTest, ResultsAreTheEnginesNumbersInTheOrderGiven) {
  const std::vector<json> got = read_results(dir_->file("reference.jsonl"));
  ASSERT_EQ(got.size(), lines_->size());
  // The same requests scored in process as gpueval's own tasks are (plan, execute, combine):
  // score_with_stories260k without lm-eval's hf encoding of rolling texts (Request::as_hf).
  std::vector<Request> requests = read_request_lines(io::read_file(*requests_), "requests.jsonl");
  for (const Request& r : requests) EXPECT_TRUE(r.as_hf);
  for (Request& r : requests) r.as_hf = false;
  const std::vector<RequestResult> expected = testing::score_with_stories260k(requests);
  int rolling = 0, generations = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const Request& r = requests[i];
    SCOPED_TRACE(fmt::format("request {} ({})", i, request_type_name(r.type)));
    if (r.type == RequestType::kGenerateUntil) {
      EXPECT_EQ(got[i]["text"], expected[i].text);
      EXPECT_EQ(got[i]["tokens"], expected[i].num_tokens);
      ++generations;
    } else if (r.type == RequestType::kLoglikelihood) {
      EXPECT_NEAR(got[i]["logprob"].get<double>(), expected[i].logprob, 1e-4);
      EXPECT_EQ(got[i]["is_greedy"], expected[i].is_greedy);
      EXPECT_EQ(got[i]["tokens"], expected[i].num_tokens);
    } else {
      // lm-eval's hf model encodes a rolling text with the tokenizer's BOS and windows it after
      // BOS again: one more token scored (P(BOS | BOS)), so a lower total.
      EXPECT_EQ(got[i]["tokens"], expected[i].num_tokens + 1);
      EXPECT_LT(got[i]["logprob"].get<double>(), expected[i].logprob);
      ++rolling;
    }
  }
  EXPECT_EQ(rolling, 8);
  EXPECT_GE(generations, 4);
}

TEST_F(RequestRunTest, TheSameRequestsAgainComputeNothingAndTwoWorkersGiveTheSameBits) {
  // Another output on two workers: the same bytes.
  const auto two = testing::run_gpueval(request_args(*requests_, tmp_.file("two.jsonl"), tmp_.file("two"), "cpu:2"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(io::read_file(tmp_.file("two.jsonl")), *reference_);
  // The same command again: every result from the journal, no worker started.
  const auto again =
      testing::run_gpueval(request_args(*requests_, tmp_.file("again.jsonl"), tmp_.file("two"), "cpu:1"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err,
              HasSubstr(fmt::format("complete: {0} requests (0 computed, {0} from the journal)", lines_->size())));
  EXPECT_EQ(io::read_file(tmp_.file("again.jsonl")), *reference_);
}

TEST_F(RequestRunTest, AJournalRootGivesEachRequestListAFolderOfItsOwn) {
  std::vector<std::string> args = request_args(*requests_, tmp_.file("a.jsonl"), "", "cpu:1");
  args.erase(args.begin() + 9, args.begin() + 11);  // no --output
  args.insert(args.end(), {"--journal-root", tmp_.file("root")});
  ASSERT_EQ(testing::run_gpueval(args).exit_code, 0);
  ASSERT_EQ(testing::run_gpueval(args).exit_code, 0);
  EXPECT_EQ(entries(tmp_.file("root")), 1u);  // the same requests: the same folder
  std::vector<json> fewer(lines_->begin(), lines_->begin() + 10);
  args[6] = tmp_.write("fewer.jsonl", [&] {
    std::string t;
    for (const json& l : fewer) t += l.dump() + "\n";
    return t;
  }());
  const auto r = testing::run_gpueval(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(entries(tmp_.file("root")), 2u);
  EXPECT_EQ(read_results(tmp_.file("a.jsonl")).size(), 10u);
}

TEST_F(RequestRunTest, AKilledRunGoesOnOnAnotherWorkerCountComputingOnlyWhatIsMissing) {
  const std::string out = tmp_.file("killed");
  {
    // Two workers, one holding the batch of request 40 (so the run cannot end); killed with
    // SIGKILL, its whole process group, once two batches are in the journal.
    testing::AsyncRun run =
        testing::AsyncRun::start(request_args(*requests_, tmp_.file("killed.jsonl"), out, "cpu:2"), out,
                                 {{"GPUEVAL_FAULT", "hold:40"}, {"GPUEVAL_FAULT_ONCE", out + ".held"}});
    const json s = run.wait_status([](const json& st) { return st.value("batches_done", 0) >= 2; });
    ASSERT_FALSE(s.is_null()) << run.log();
    ASSERT_EQ(::kill(-run.child.pid(), SIGKILL), 0);
    run.child.wait();
  }
  EXPECT_FALSE(io::path_exists(tmp_.file("killed.jsonl")));  // no partial results file
  const auto r = testing::run_gpueval(request_args(*requests_, tmp_.file("killed.jsonl"), out, "cpu:1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(io::read_file(tmp_.file("killed.jsonl")), *reference_);
  // "[sched] journal ...: S of N requests already scored", then "complete: N requests (N - S computed, S ...)".
  const std::string marker = "requests already scored";
  const size_t at = r.err.find(marker);
  ASSERT_NE(at, std::string::npos) << r.err;
  const size_t colon = r.err.rfind(": ", at);
  const int64_t stored = std::stoll(r.err.substr(colon + 2));
  EXPECT_GE(stored, 1);
  EXPECT_LT(stored, static_cast<int64_t>(lines_->size()));
  EXPECT_THAT(r.err, HasSubstr(fmt::format("complete: {} requests ({} computed, {} from the journal)", lines_->size(),
                                           lines_->size() - stored, stored)));
}

TEST_F(RequestRunTest, ABadModelOrRequestFileFailsInOneLineBeforeAnyWorker) {
  const std::string requests = tmp_.write("bad.jsonl", R"({"type": "loglikelihood", "context": "a"})"
                                                       "\n");
  auto r = testing::run_gpueval(request_args(requests, tmp_.file("r.jsonl"), tmp_.file("o"), "cpu:1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.jsonl:1: missing"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("started worker")));
  EXPECT_FALSE(io::path_exists(tmp_.file("r.jsonl")));
  std::vector<std::string> args = request_args(*requests_, tmp_.file("r.jsonl"), tmp_.file("o"), "cpu:1");
  args[2] = tmp_.path();  // not a checkpoint
  r = testing::run_gpueval(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(tmp_.path()));
  const auto describe = testing::run_gpueval(
      {"requests", "--model", testing::source_dir() + "/models/stories260K", "--describe", "--max-length", "300"});
  ASSERT_EQ(describe.exit_code, 0) << describe.err;
  const json d = json::parse(describe.out);
  EXPECT_EQ(d["max_length"], 300);
  EXPECT_EQ(d["model_type"], "llama");
  EXPECT_EQ(d["add_bos"], true);
  EXPECT_EQ(d["bos_token"], "<s>");
  EXPECT_EQ(d["eos_token"], "</s>");
}

}  // namespace
}  // namespace gpueval
