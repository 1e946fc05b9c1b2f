// GSM8K as lm-evaluation-harness defines it: the 5-shot prompt byte for byte (examples drawn by
// lm-eval's default sampler; from test.jsonl itself when train.jsonl is missing, the asked
// document skipped), the stop
// strings, exact_match with gsm8k's regexes_to_ignore under both filters, and results.json /
// samples keyed by filter as lm-eval writes them.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "gpueval/metrics.h"
#include "gpueval/report.h"
#include "gpueval/task.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Task load_gsm8k() {
  TaskLoadOptions options;
  options.data_roots["gsm8k"] = testing::shared_dir() + "/data/gsm8k";
  return Task::load("gsm8k", {testing::source_dir() + "/tasks"}, options);
}

RequestResult generated(const std::string& text) {
  RequestResult r;
  r.text = text;
  return r;
}

using testing::error_of;

// Document 1 of test.jsonl, 5-shot, the examples from test.jsonl itself as lm-eval's default
// sampler draws them when fewshot_split is the test split: the second call of
// random.Random(1234).sample(docs, 6), the asked document dropped, the first five kept
// (documents 171, 201, 726, 484, 35), each doc_to_text + " " + the whole answer, joined by
// blank lines, then the question. Printed by lm-eval 0.4.13's ContextSampler over the same file.
const std::string kDoc1Prompt =
    std::string() +
    "Question: Jake is walking through the Museum of Entomology. He sees 80 spiders with 8 legs each, 90 "
    "insects with 6 legs each, and 3 rare mutant invertebrates with 10 legs each. How many legs does Jake "
    "see total?\nAnswer: First find the total number of spider legs: 80 spiders * 8 legs/spider = <<80*8=640>>640 "
    "legs\nThen find the total number of insect legs: 90 spiders * 6 legs/spider = <<90*6=540>>540 legs\n"
    "Then find the total number of mutant invertebrate legs: 3 mutants * 10 legs/mutant = <<3*10=30>>30 legs\n"
    "Then add the number of each kind of leg to find the total he saw: 640 legs + 540 legs + 30 legs = <<640+540+30=1210>>1210 "
    "legs\n#### 1210\n\nQuestion: John wins an award at work.  The award has a 1 time monetary reward of "
    "$5000 and a 5% raise in salary.  If he makes 2000 a week, every week of the year and he got the award "
    "on the first day of the year how much money did he make that year?\nAnswer: He makes 2000*52=$<<2000*52=104000>>104,000 "
    "a year\nSo the raise is worth .05*104,000=$<<.05*104000=5200>>5200\nSo he makes 104,000+5200=$<<104000+5200=109200>>109,200 "
    "from his salary\nSo in total he made 109,200+5,000=$<<109200+5000=114200>>114,200\n#### 114,200\n\nQuestion: "
    "Topher, the green giant, wears enormous shoes.  The length of one of his shoes is 10 inches longer than "
    "9 times the length of one of Bobby’s shoes.  If the length of one of Topher’s shoes is 8-feet and 4-inches, "
    "how long, in inches, is one of Bobby’s shoes?\nAnswer: Since Topher’s shoe is 8 feet and 4 inches long, "
    "then it is (8 * 12) + 4 = <<8*12+4=100>>100 inches long.\nIf we let the length of one of Bobby’s shoes, "
    "in inches, be x.\nThen the length of Topher’s shoe is represented by the equation, 9*x + 10 = 100.\n"
    "Subtracting 10 from each side of the equation, the expression simplifies to 9x = 90\nSolving for x, "
    "the length of one of Bobby’s shoes is x = <<10=10>>10\n#### 10\n\nQuestion: Stetson made a bet with "
    "Alec that he would give up $10 for each orange he eats. While at the farm, Stetson ate 2/5 of the oranges "
    "they picked. If they picked 60 oranges, calculate the total amount of money Stetson gave up?\nAnswer: "
    "If they picked 60 oranges and Stetson ate 2/5 of them, he ate 2/5*60 = <<60*2/5=24>>24 oranges.\nIf "
    "he gave $10 for every orange he ate, then he gave up $10*24 = $<<10*24=240>>240\n#### 240\n\nQuestion: "
    "Mike plays ping pong for 40 minutes.  In the first 20 minutes, he scores 4 points.  In the second 20 "
    "minutes, he scores 25% more points.  How many total points did he score?\nAnswer: He scored 4*.25=<<4*.25=1>>1 "
    "point more in the second 20 minutes\nSo he scored 4+1=<<4+1=5>>5 points in the second 20 minutes\nSo "
    "in total, he scored 4+5=<<4+5=9>>9 points in the 40 minutes\n#### 9\n\nQuestion: A robe takes 2 bolts "
    "of blue fiber and half that much white fiber.  How many bolts in total does it take?\nAnswer:";

TEST(Gsm8kTest, FiveShotPromptFromTheTestFileSkipsTheAskedDocument) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_gsm8k();
  EXPECT_EQ(task.num_fewshot(), 5);
  EXPECT_EQ(task.fewshot_sampler(), "default");
  ASSERT_TRUE(task.fewshot_from_dataset());
  ASSERT_EQ(task.notes().size(), 1u);
  EXPECT_THAT(task.notes()[0], HasSubstr("come from the evaluated file"));
  const auto& docs = task.documents();
  ASSERT_EQ(docs.size(), 1319u);
  EXPECT_EQ(task.context(docs[1]), kDoc1Prompt);
  // lm-eval's draws for the first twelve documents (ContextSampler, seed 1234, eval_doc = the
  // document), as lm-eval printed them.
  const std::vector<std::vector<size_t>> expected = {
      {902, 239, 15, 185, 1192},  {171, 201, 726, 484, 35},    {32, 708, 1276, 991, 1261}, {304, 186, 374, 234, 29},
      {996, 511, 132, 1108, 954}, {1231, 182, 1054, 1185, 94}, {1139, 129, 619, 985, 727}, {510, 409, 928, 1085, 39},
      {144, 11, 683, 294, 968},   {342, 110, 156, 1203, 1016}, {154, 1141, 440, 295, 55},  {227, 1084, 289, 625, 930}};
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(task.fewshot_indices(docs[i]), expected[i]) << "document " << i;
  for (const Document& doc : docs) {
    for (const size_t k : task.fewshot_indices(doc)) ASSERT_NE(docs[k].fields, doc.fields) << "document " << doc.doc_id;
  }
}

TEST(Gsm8kTest, TrainFileIsUsedWhenPresent) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  const std::string test = io::read_file(testing::shared_dir() + "/data/gsm8k/test.jsonl");
  testing::write_text(dir.file("test.jsonl"), test);
  testing::write_text(dir.file("train.jsonl"),
                      "{\"question\": \"Q1?\", \"answer\": \"A1\\n#### 1\"}\n"
                      "{\"question\": \"Q2?\", \"answer\": \"#### 2\"}\n"
                      "{\"question\": \"Q3?\", \"answer\": \"#### 3\"}\n"
                      "{\"question\": \"Q4?\", \"answer\": \"#### 4\"}\n"
                      "{\"question\": \"Q5?\", \"answer\": \"#### 5\"}\n");
  TaskLoadOptions options;
  options.data_roots["gsm8k"] = dir.path();
  const Task task = Task::load("gsm8k", {testing::source_dir() + "/tasks"}, options);
  EXPECT_FALSE(task.fewshot_from_dataset());
  EXPECT_TRUE(task.notes().empty());
  // Document 1 gets the second random.Random(1234).sample(train, 5): [0, 4, 1, 3, 2] (python3).
  EXPECT_EQ(task.context(task.documents()[1]),
            "Question: Q1?\nAnswer: A1\n#### 1\n\nQuestion: Q5?\nAnswer: #### 5\n\nQuestion: Q2?\nAnswer: #### 2\n\n"
            "Question: Q4?\nAnswer: #### 4\n\nQuestion: Q3?\nAnswer: #### 3\n\nQuestion: A robe takes 2 bolts of "
            "blue fiber and half that much white fiber.  How many bolts in total does it take?\nAnswer:");
}

TEST(Gsm8kTest, RequestsStopAtLmEvalsStrings) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_gsm8k();
  const std::vector<Request> requests = task.requests(task.documents()[0]);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].type, RequestType::kGenerateUntil);
  EXPECT_THAT(requests[0].stops, ElementsAre("Question:", "</s>", "<|im_end|>"));
  EXPECT_EQ(requests[0].max_tokens, 256);
  ASSERT_EQ(task.filters().size(), 2u);
  EXPECT_EQ(task.filters()[0].name(), "strict-match");
  EXPECT_EQ(task.filters()[1].name(), "flexible-extract");
}

TEST(Gsm8kTest, ExactMatchUnderBothFilters) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_gsm8k();
  const Document& janet = task.documents()[0];  // target "...\n#### 18"
  auto score = [&](const std::string& text, size_t filter) {
    return task.process_results(janet, {generated(text)}, filter).at("exact_match").value;
  };
  EXPECT_EQ(score(" She makes $18.\n#### 18", 0), 1.0);
  EXPECT_EQ(score(" She makes $18.\n#### 18", 1), 1.0);
  EXPECT_EQ(score(" The answer is 18.", 0), 0.0);  // strict: "[invalid]"
  EXPECT_EQ(score(" The answer is 18.", 1), 1.0);  // flexible: "18." with the trailing "." ignored
  EXPECT_EQ(score(" It is $18", 1), 1.0);  // "$18" with "$" ignored
  EXPECT_EQ(score(" 18 eggs, 16 left", 1), 0.0);  // the last number counts
  EXPECT_EQ(score(" #### 17", 0), 0.0);
  // The metric alone, with gsm8k's options.
  const nlohmann::json& kwargs = task.metrics().at(0).kwargs;
  EXPECT_EQ(exact_match("1,234", "so... #### 1234", kwargs), 1.0);
  EXPECT_EQ(exact_match("18.", "x\n#### 18", kwargs), 1.0);
  EXPECT_EQ(exact_match("[invalid]", "#### 18", kwargs), 0.0);
  EXPECT_EQ(exact_match("-5", "#### -5", kwargs), 1.0);
}

TEST(Gsm8kTest, ResultsAndSamplesAreKeyedByFilter) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_gsm8k();
  const std::vector<std::string> texts = {" 9 * 2 = 18\n#### 18", " It takes 3 bolts.", " no idea"};
  std::vector<DocRecord> records;
  for (size_t i = 0; i < texts.size(); ++i) {
    DocRecord r;
    r.task = &task;
    r.doc = task.documents()[i];
    r.requests = task.requests(r.doc);
    r.results = {generated(texts[i])};
    r.metrics = task.process_results_all(r.doc, r.results);
    records.push_back(std::move(r));
  }
  RunSummary summary;
  summary.model = "m";
  summary.limit = 3;
  const nlohmann::ordered_json results = results_json({&task}, records, summary);
  const nlohmann::ordered_json& r = results["results"]["gsm8k"];
  std::vector<std::string> keys;
  for (const auto& [key, value] : r.items()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("alias", "exact_match,strict-match", "exact_match_stderr,strict-match",
                                "exact_match,flexible-extract", "exact_match_stderr,flexible-extract"));
  EXPECT_DOUBLE_EQ(r["exact_match,strict-match"].get<double>(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(r["exact_match,flexible-extract"].get<double>(), 2.0 / 3);
  EXPECT_EQ(results["configs"]["gsm8k"]["filter_list"][1]["name"], "flexible-extract");
  EXPECT_EQ(results["n-shot"]["gsm8k"], 5);
  EXPECT_EQ(results["higher_is_better"]["gsm8k"], nlohmann::ordered_json({{"exact_match", true}}));

  const nlohmann::ordered_json strict = sample_json(records[1], 0);
  EXPECT_EQ(strict["filter"], "strict-match");
  EXPECT_EQ(strict["resps"], nlohmann::ordered_json::array({nlohmann::ordered_json::array({" It takes 3 bolts."})}));
  EXPECT_EQ(strict["filtered_resps"], nlohmann::ordered_json::array({"[invalid]"}));
  EXPECT_EQ(strict["exact_match"], 0.0);
  const nlohmann::ordered_json flexible = sample_json(records[1], 1);
  EXPECT_EQ(flexible["filter"], "flexible-extract");
  EXPECT_EQ(flexible["filtered_resps"], nlohmann::ordered_json::array({"3"}));
  EXPECT_EQ(flexible["exact_match"], 1.0);
  EXPECT_EQ(flexible["metrics"], nlohmann::ordered_json::array({"exact_match"}));

  testing::TempDir dir;
  write_reports(dir.path(), {&task}, records, summary);
  const std::string samples = io::read_file(dir.file("samples_gsm8k.jsonl"));
  std::vector<std::string> filters;
  for (size_t pos = 0; pos < samples.size();) {
    const size_t end = samples.find('\n', pos);
    const auto line = nlohmann::json::parse(samples.substr(pos, end - pos));
    filters.push_back(line["filter"].get<std::string>() + ":" + std::to_string(line["doc_id"].get<int64_t>()));
    pos = end + 1;
  }
  EXPECT_THAT(filters, ElementsAre("strict-match:0", "strict-match:1", "strict-match:2", "flexible-extract:0",
                                   "flexible-extract:1", "flexible-extract:2"));
  const std::string report = io::read_file(dir.file("report.md"));
  EXPECT_THAT(report, HasSubstr("| gsm8k | 3.0 | strict-match | 5 | exact_match | ↑ | 0.3333 |"));
  EXPECT_THAT(report, HasSubstr("| gsm8k | 3.0 | flexible-extract | 5 | exact_match | ↑ | 0.6667 |"));
  EXPECT_THAT(report, HasSubstr("## Notes"));
  const std::string html = io::read_file(dir.file("report.html"));
  EXPECT_THAT(html, HasSubstr("exact_match (flexible-extract)"));
}

// A real run with the shipped model: both filters in results.json, two samples lines per
// document, the prompt's stop strings applied to what the model wrote.
TEST(Gsm8kTest, TinyRunWritesBothFilters) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  testing::write_text(dir.file("run.yaml"), "model: " + testing::source_dir() + "/models/stories260K\n" +
                                                "tasks: [gsm8k]\noutput: " + dir.file("out") + "\n");
  const auto r = testing::run_gpueval({"run", "--gpus", "cpu:1", "--limit", "2", "--data",
                                       "gsm8k=" + testing::shared_dir() + "/data/gsm8k", dir.file("run.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("note: gsm8k: the 5 few-shot examples come from the evaluated file"));
  const nlohmann::ordered_json results = nlohmann::ordered_json::parse(io::read_file(dir.file("out/results.json")));
  const auto& g = results["results"]["gsm8k"];
  for (const char* key : {"exact_match,strict-match", "exact_match_stderr,strict-match", "exact_match,flexible-extract",
                          "exact_match_stderr,flexible-extract"}) {
    EXPECT_TRUE(g.contains(key)) << key << " in " << g.dump();
  }
  EXPECT_EQ(results["n-samples"]["gsm8k"]["effective"], 2);
  const std::string samples = io::read_file(dir.file("out/samples_gsm8k.jsonl"));
  EXPECT_EQ(std::count(samples.begin(), samples.end(), '\n'), 4);
  const auto first = nlohmann::json::parse(samples.substr(0, samples.find('\n')));
  const std::string text = first["resps"][0][0].get<std::string>();
  EXPECT_EQ(text.find("Question:"), std::string::npos);
  EXPECT_EQ(first["arguments"]["gen_args_0"]["arg_1"]["until"], nlohmann::json({"Question:", "</s>", "<|im_end|>"}));
}

TEST(Gsm8kTest, BadFilterListInATaskFileNamesFileAndLine) {
  testing::TempDir dir;
  testing::write_text(dir.file("d.jsonl"), "{\"q\": \"x\", \"a\": \"y\"}\n");
  const std::string head =
      "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\n"
      "doc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\n";
  auto load_error = [&](const std::string& yaml) {
    const std::string path = dir.file("t.yaml");
    testing::write_text(path, yaml);
    return error_of([&] { Task::load(path, {}); });
  };
  const std::string yaml = dir.file("t.yaml");
  EXPECT_THAT(load_error(head + "filter_list:\n  - name: x\n    filter:\n      - function: nope\n"),
              HasSubstr(yaml + ":9: unknown filter function 'nope'"));
  EXPECT_THAT(load_error(head + "filter_list:\n  - name: x\n    filter:\n      - function: regex\n"
                                "        regex_pattern: \"[0-9\"\n      - function: take_first\n"),
              HasSubstr(yaml + ":9: bad regex '[0-9'"));
  EXPECT_THAT(error_of([&] {
                testing::write_text(dir.file("c.yaml"),
                                    "task: c\ndataset_path: d.jsonl\noutput_type: multiple_choice\n"
                                    "doc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a]\n"
                                    "filter_list:\n  - name: x\n    filter:\n"
                                    "      - function: take_first\n");
                Task::load(dir.file("c.yaml"), {});
              }),
              HasSubstr(dir.file("c.yaml") + ":8: filter_list applies to generate_until tasks only"));
  // A task without filter_list has lm-eval's implicit "none".
  testing::write_text(dir.file("t.yaml"), head);
  const Task plain = Task::load(dir.file("t.yaml"), {});
  ASSERT_EQ(plain.filters().size(), 1u);
  EXPECT_EQ(plain.filters()[0].name(), "none");
  EXPECT_EQ(plain.process_results(plain.documents()[0], {generated("y")}).at("exact_match").value, 1.0);
}

}  // namespace
}  // namespace gpueval
