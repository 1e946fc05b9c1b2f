#include "gpueval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/python_format.h"
#include "common/file_io.h"
#include "gpueval/error.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RequestResult result(double logprob, bool greedy) {
  RequestResult r;
  r.logprob = logprob;
  r.is_greedy = greedy;
  return r;
}

// Two small tasks, a multiple-choice one and a rolling-loglikelihood one, and one DocRecord
// per document with made-up model results.
class ReportFixture {
 public:
  ReportFixture() {
    quiz_.emplace(Task::load(
        testing::write_quiz_task(dir_,
                                 "{\"question\": \"Sky?\", \"choices\": [\"blue\", \"gr\\u00e9en\"], \"label\": 0}\n"
                                 "{\"question\": \"Grass?\", \"choices\": [\"green\", \"red\"], \"label\": 0}\n"
                                 "{\"question\": \"Sun?\", \"choices\": [\"hot\", \"cold\"], \"label\": 1}\n"),
        {}));
    testing::write_story_task(dir_, "{\"text\": \"One day.\"}\n{\"text\": \"The end of it all.\"}\n",
                              "metadata:\n  version: 2.0\n");
    story_.emplace(Task::load("story", {dir_.path()}));

    const std::vector<std::vector<RequestResult>> quiz_results = {{result(-0.5, true), result(-2.25, false)},
                                                                  {result(-3.0, false), result(-1.0, true)},
                                                                  {result(-1.25, false), result(-1.0, false)}};
    for (size_t i = 0; i < 3; ++i) add(*quiz_, quiz_->documents()[i], quiz_results[i]);
    add(*story_, story_->documents()[0], {result(-7.125, false)});
    add(*story_, story_->documents()[1], {result(-20.5, false)});

    summary_.model = "models/stories260K";
    summary_.config = {{"batch_size", "auto"}, {"device", "cpu"}};
    summary_.wall_seconds = 12.5;
    summary_.incomplete = {"batch 7 (quiz doc 3) quarantined after 3 worker crashes"};
  }

  std::vector<const Task*> tasks() const { return {&*quiz_, &*story_}; }
  std::vector<DocRecord>& records() { return records_; }
  RunSummary& summary() { return summary_; }
  std::string out(const std::string& name) const { return dir_.file(name); }

 private:
  void add(const Task& task, const Document& doc, std::vector<RequestResult> results) {
    records_.push_back(testing::scored_record(task, doc, std::move(results)));
  }

  testing::TempDir dir_;
  std::optional<Task> quiz_, story_;
  std::vector<DocRecord> records_;
  RunSummary summary_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const std::vector<std::string> kFiles = {"results.json", "samples_quiz.jsonl", "samples_story.jsonl", "report.md",
                                         "report.html"};

TEST(ReportTest, FilesAreByteIdenticalAcrossWritesAndRecordOrder) {
  ReportFixture f;
  write_reports(f.out("a"), f.tasks(), f.records(), f.summary());
  std::vector<DocRecord> shuffled = f.records();
  std::reverse(shuffled.begin(), shuffled.end());
  std::swap(shuffled[0], shuffled[3]);
  write_reports(f.out("b"), f.tasks(), shuffled, f.summary());
  for (const std::string& name : kFiles) {
    const std::string a = io::read_file(f.out("a/" + name));
    EXPECT_FALSE(a.empty()) << name;
    EXPECT_EQ(a, io::read_file(f.out("b/" + name))) << name;
  }
  // Rewriting replaces the files with the same bytes.
  const std::string before = io::read_file(f.out("a/results.json"));
  write_reports(f.out("a"), f.tasks(), f.records(), f.summary());
  EXPECT_EQ(io::read_file(f.out("a/results.json")), before);
}

TEST(ReportTest, ResultsJsonHasLmEvalsLayout) {
  ReportFixture f;
  write_reports(f.out("r"), f.tasks(), f.records(), f.summary());
  const std::string text = io::read_file(f.out("r/results.json"));
  EXPECT_EQ(
      text.rfind(
          "{\n  \"results\": {\n    \"quiz\": {\n      \"alias\": \"quiz\",\n      \"acc,none\": 0.6666666666666666,\n",
          0),
      0u)
      << text.substr(0, 200);
  EXPECT_NE(text.back(), '\n');  // json.dumps output as lm-eval writes it

  const auto j = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better",
                                "n-samples", "config", "task_hashes", "model_name", "total_evaluation_time_seconds",
                                "chance", "incomplete"));
  // gpueval's chance levels: two choices per quiz document; none for a perplexity.
  EXPECT_EQ(j["chance"], (nlohmann::ordered_json{{"quiz", {{"acc,none", 0.5}, {"acc_norm,none", 0.5}}}}));
  std::vector<std::string> quiz_keys;
  for (const auto& [key, value] : j["results"]["quiz"].items()) quiz_keys.push_back(key);
  EXPECT_THAT(quiz_keys, ElementsAre("alias", "acc,none", "acc_stderr,none", "acc_norm,none", "acc_norm_stderr,none"));
  // acc over [1, 0, 1]: mean 2/3, sample sd sqrt(1/3), stderr sqrt(1/3)/sqrt(3) = 1/3.
  EXPECT_EQ(j["results"]["quiz"]["acc,none"].get<double>(), 2.0 / 3.0);
  EXPECT_NEAR(j["results"]["quiz"]["acc_stderr,none"].get<double>(), 1.0 / 3.0, 1e-15);
  EXPECT_EQ(j["results"]["quiz"]["acc_norm,none"].get<double>(), 2.0 / 3.0);
  // Pooled over both stories: 27.625 nats over 7 words and 26 bytes; no stderr, as in lm-eval.
  const auto& story = j["results"]["story"];
  EXPECT_DOUBLE_EQ(story["word_perplexity,none"].get<double>(), std::exp(27.625 / 7));
  EXPECT_DOUBLE_EQ(story["byte_perplexity,none"].get<double>(), std::exp(27.625 / 26));
  EXPECT_DOUBLE_EQ(story["bits_per_byte,none"].get<double>(), 27.625 / 26 / std::log(2.0));
  EXPECT_EQ(story["word_perplexity_stderr,none"], "N/A");

  EXPECT_EQ(j["group_subtasks"],
            (nlohmann::ordered_json{{"story", nlohmann::json::array()}, {"quiz", nlohmann::json::array()}}));
  EXPECT_EQ(j["versions"]["quiz"], nullptr);
  EXPECT_EQ(j["versions"]["story"], 2.0);
  EXPECT_EQ(j["n-shot"]["quiz"], 0);
  EXPECT_EQ(j["higher_is_better"]["quiz"], (nlohmann::ordered_json{{"acc", true}, {"acc_norm", true}}));
  EXPECT_EQ(j["higher_is_better"]["story"]["bits_per_byte"], false);
  EXPECT_EQ(j["n-samples"]["quiz"], (nlohmann::ordered_json{{"original", 3}, {"effective", 3}}));
  EXPECT_EQ(j["configs"]["quiz"]["output_type"], "multiple_choice");
  EXPECT_EQ(j["configs"]["quiz"]["dataset_path"], "quiz.jsonl");
  EXPECT_EQ(j["config"]["model"], "models/stories260K");
  EXPECT_EQ(j["config"]["batch_size"], "auto");
  EXPECT_EQ(j["config"]["limit"], nullptr);
  EXPECT_EQ(j["config"]["bootstrap_iters"], 100000);
  EXPECT_EQ(j["total_evaluation_time_seconds"], "12.5");
  EXPECT_EQ(j["incomplete"].size(), 1u);
  EXPECT_EQ(j["task_hashes"]["quiz"].get<std::string>().size(), 64u);

  RunSummary limited = f.summary();
  limited.limit = 2;
  limited.date = 1700000000.25;
  const auto k = results_json(f.tasks(), f.records(), limited);
  EXPECT_EQ(k["n-samples"]["quiz"]["effective"], 2);
  EXPECT_EQ(k["config"]["limit"], 2);
  EXPECT_EQ(k["date"], 1700000000.25);
}

TEST(ReportTest, SamplesLinesAreLmEvalsAndParseBack) {
  ReportFixture f;
  write_reports(f.out("s"), f.tasks(), f.records(), f.summary());
  const auto quiz = lines_of(io::read_file(f.out("s/samples_quiz.jsonl")));
  ASSERT_EQ(quiz.size(), 3u);
  // Written by lm-eval's own logging code for the same document, requests and results.
  EXPECT_EQ(quiz[0],
            "{\"doc_id\": 0, \"doc\": {\"choices\": [\"blue\", \"gr\xc3\xa9"
            "en\"], \"label\": 0, \"question\": \"Sky?\"}, "
            "\"target\": \"0\", \"arguments\": {\"gen_args_0\": {\"arg_0\": \"Q: Sky?\\nA:\", \"arg_1\": \" blue\"}, "
            "\"gen_args_1\": {\"arg_0\": \"Q: Sky?\\nA:\", \"arg_1\": \" gr\xc3\xa9"
            "en\"}}, "
            "\"resps\": [[[\"-0.5\", \"True\"]], [[\"-2.25\", \"False\"]]], "
            "\"filtered_resps\": [[\"-0.5\", \"True\"], [\"-2.25\", \"False\"]], \"filter\": \"none\", "
            "\"metrics\": [\"acc\", \"acc_norm\"], "
            "\"doc_hash\": \"c1563053410f2c45d3909e9be498cdd2492fd41a4c361a6b00e12711f527e27e\", "
            "\"prompt_hash\": \"ffafca0772cf41a3bf6df5d6dab3797a70ec18d5d8e77d3aaac949e026931416\", "
            "\"target_hash\": \"5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9\", "
            "\"acc\": 1.0, \"acc_norm\": 1.0}");
  for (size_t i = 0; i < quiz.size(); ++i) {
    const auto j = nlohmann::json::parse(quiz[i]);
    EXPECT_EQ(j["doc_id"], i);
    const DocRecord& record = f.records()[i];
    ASSERT_EQ(j["resps"].size(), record.results.size());
    for (size_t c = 0; c < record.results.size(); ++c) {
      EXPECT_EQ(std::stod(j["resps"][c][0][0].get<std::string>()), record.results[c].logprob);
      EXPECT_EQ(j["filtered_resps"][c][1], record.results[c].is_greedy ? "True" : "False");
      EXPECT_EQ(j["arguments"]["gen_args_" + std::to_string(c)]["arg_1"], record.requests[c].continuation);
    }
    EXPECT_EQ(j["acc"].get<double>(), record.metrics[0].at("acc").value);
  }
  const auto story = lines_of(io::read_file(f.out("s/samples_story.jsonl")));
  ASSERT_EQ(story.size(), 2u);
  EXPECT_EQ(story[0],
            "{\"doc_id\": 0, \"doc\": {\"text\": \"One day.\"}, \"target\": \"One day.\", "
            "\"arguments\": {\"gen_args_0\": {\"arg_0\": \"One day.\"}}, \"resps\": [[\"-7.125\"]], "
            "\"filtered_resps\": [\"-7.125\"], \"filter\": \"none\", "
            "\"metrics\": [\"word_perplexity\", \"byte_perplexity\", \"bits_per_byte\"], "
            "\"doc_hash\": \"58a8a9cf99764c24c257fbeec0934fb02461878de4e2cf382dba963fa6964076\", "
            "\"prompt_hash\": \"d26b4b2053bce65cad5be39a955f3710401c9ee165075f26505cdf2c5a04f6a9\", "
            "\"target_hash\": \"d26b4b2053bce65cad5be39a955f3710401c9ee165075f26505cdf2c5a04f6a9\", "
            "\"word_perplexity\": [-7.125, 2], \"byte_perplexity\": [-7.125, 8], \"bits_per_byte\": [-7.125, 8]}");
  EXPECT_EQ(nlohmann::json::parse(story[1])["word_perplexity"], nlohmann::json::array({-20.5, 5}));
}

TEST(ReportTest, MarkdownShowsEveryMetricAndTheIncompleteWork) {
  ReportFixture f;
  const std::string md = report_markdown(f.tasks(), f.records(), f.summary());
  EXPECT_THAT(md, HasSubstr("| quiz | N/A | none | 0 | acc | ↑ | 0.6667 | ± | 0.3333 | 3 |\n"));
  EXPECT_THAT(md, HasSubstr("| quiz | N/A | none | 0 | acc_norm | ↑ | 0.6667 | ± | 0.3333 | 3 |\n"));
  EXPECT_THAT(md, HasSubstr("| story | 2.0 | none | 0 | bits_per_byte | ↓ | 1.5329 | ± | N/A | 2 |\n"));
  EXPECT_THAT(md, HasSubstr("## Incomplete (1)"));
  EXPECT_THAT(md, HasSubstr("- batch 7 (quiz doc 3) quarantined after 3 worker crashes\n"));
  f.summary().incomplete.clear();
  EXPECT_THAT(report_markdown(f.tasks(), f.records(), f.summary()), ::testing::Not(HasSubstr("Incomplete")));
}

TEST(ReportTest, RejectsInconsistentRecords) {
  ReportFixture f;
  std::vector<DocRecord> twice = f.records();
  twice.push_back(f.records()[1]);
  EXPECT_THROW(write_reports(f.out("x"), f.tasks(), twice, f.summary()), Error);
  std::vector<DocRecord> short_results = f.records();
  short_results[0].results.pop_back();
  EXPECT_THROW(write_reports(f.out("x"), f.tasks(), short_results, f.summary()), Error);
  EXPECT_THROW(write_reports(f.out("x"), {f.tasks()[0]}, f.records(), f.summary()), Error);
}

TEST(ReportPythonFormatTest, FloatsPrintAsPythonsRepr) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.1, "0.1"},          {1.0, "1.0"},
      {1e-05, "1e-05"},      {0.0001, "0.0001"},
      {1e16, "1e+16"},       {1e15, "1000000000000000.0"},
      {-0.0, "-0.0"},        {1.5e-300, "1.5e-300"},
      {2.5e300, "2.5e+300"}, {1.0 / 3, "0.3333333333333333"},
      {100.0, "100.0"},      {12345678901234567890.0, "1.2345678901234567e+19"},
      {5e-324, "5e-324"},    {123456789.123, "123456789.123"}};
  for (const auto& [x, text] : cases) {
    EXPECT_EQ(py::float_repr(x), text);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), x);  // round trip, subnormals included
  }
  EXPECT_EQ(py::float_repr(std::nan("")), "nan");
  EXPECT_EQ(py::json_dumps(nlohmann::json(-INFINITY)), "-Infinity");
}

TEST(ReportPythonFormatTest, StrReprAndJsonDumps) {
  const auto value = nlohmann::ordered_json::parse(R"(["a", "it's", 1, 2.5, true, null, {"k": [1]}])");
  EXPECT_EQ(py::str(value), "['a', \"it's\", 1, 2.5, True, None, {'k': [1]}]");
  EXPECT_EQ(py::repr(nlohmann::json("it's \"q\"\t\x01\xc3\xa9\xc2\xa0")), "'it\\'s \"q\"\\t\\x01\xc3\xa9\\xa0'");
  const auto doc = nlohmann::json::parse(R"({"z": null, "choices": ["a", "é"], "context": "Hi \"x\"\n", "n": 0.5})");
  EXPECT_EQ(py::json_dumps(doc, 2),
            "{\n  \"choices\": [\n    \"a\",\n    \"\xc3\xa9\"\n  ],\n  \"context\": \"Hi \\\"x\\\"\\n\",\n"
            "  \"n\": 0.5,\n  \"z\": null\n}");
  EXPECT_EQ(py::json_dumps(doc),
            "{\"choices\": [\"a\", \"\xc3\xa9\"], \"context\": \"Hi \\\"x\\\"\\n\", \"n\": 0.5, \"z\": null}");
  EXPECT_EQ(py::json_dumps(nlohmann::json::object(), 2), "{}");
  EXPECT_EQ(py::json_dumps(nlohmann::json("\x1f\x7f")), "\"\\u001f\x7f\"");
}

}  // namespace
}  // namespace gpueval
