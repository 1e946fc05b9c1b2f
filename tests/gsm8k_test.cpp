// GSM8K as lm-evaluation-harness defines it: the 5-shot prompt byte for byte (examples from
// test.jsonl itself when train.jsonl is missing, the asked document skipped), the stop
// strings, exact_match with gsm8k's regexes_to_ignore under both filters, and results.json /
// samples keyed by filter as lm-eval writes them.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "gpueval/file_io.h"
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

// Document 1 of test.jsonl, 5-shot: documents 0, 2, 3, 4, 5 as examples (doc_to_text + " " +
// the whole answer, joined by blank lines), then the question. Written out by hand.
const std::string kDoc1Prompt = std::string() +
    "Question: Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
    "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck "
    "egg. How much in dollars does she make every day at the farmers' market?\nAnswer: Janet sells 16 - 3 - 4 = "
    "<<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.\n#### 18\n\n"
    "Question: Josh decides to try flipping a house.  He buys a house for $80,000 and then puts in $50,000 in "
    "repairs.  This increased the value of the house by 150%.  How much profit did he make?\nAnswer: The cost of "
    "the house and repairs came out to 80,000+50,000=$<<80000+50000=130000>>130,000\nHe increased the value of "
    "the house by 80,000*1.5=<<80000*1.5=120000>>120,000\nSo the new value of the house is "
    "120,000+80,000=$<<120000+80000=200000>>200,000\nSo he made a profit of "
    "200,000-130,000=$<<200000-130000=70000>>70,000\n#### 70000\n\n"
    "Question: James decides to run 3 sprints 3 times a week.  He runs 60 meters each sprint.  How many total "
    "meters does he run a week?\nAnswer: He sprints 3*3=<<3*3=9>>9 times\nSo he runs 9*60=<<9*60=540>>540 "
    "meters\n#### 540\n\n"
    "Question: Every day, Wendi feeds each of her chickens three cups of mixed chicken feed, containing seeds, "
    "mealworms and vegetables to help keep them healthy.  She gives the chickens their feed in three separate "
    "meals. In the morning, she gives her flock of chickens 15 cups of feed.  In the afternoon, she gives her "
    "chickens another 25 cups of feed.  How many cups of feed does she need to give her chickens in the final "
    "meal of the day if the size of Wendi's flock is 20 chickens?\nAnswer: If each chicken eats 3 cups of feed "
    "per day, then for 20 chickens they would need 3*20=<<3*20=60>>60 cups of feed per day.\nIf she feeds the "
    "flock 15 cups of feed in the morning, and 25 cups in the afternoon, then the final meal would require "
    "60-15-25=<<60-15-25=20>>20 cups of chicken feed.\n#### 20\n\n"
    "Question: Kylar went to the store to buy glasses for his new apartment. One glass costs $5, but every "
    "second glass costs only 60% of the price. Kylar wants to buy 16 glasses. How much does he need to pay for "
    "them?\nAnswer: The discount price of one glass is 60/100 * 5 = $<<60/100*5=3>>3.\nIf every second glass is "
    "cheaper, that means Kylar is going to buy 16 / 2 = <<16/2=8>>8 cheaper glasses.\nSo for the cheaper "
    "glasses, Kylar is going to pay 8 * 3 = $<<8*3=24>>24.\nAnd for the regular-priced glasses, Kylar will pay "
    "8 * 5 = $<<8*5=40>>40.\nSo in total Kylar needs to pay 24 + 40 = $<<24+40=64>>64 for the glasses he wants "
    "to buy.\n#### 64\n\n"
    "Question: A robe takes 2 bolts of blue fiber and half that much white fiber.  How many bolts in total does "
    "it take?\nAnswer:";

TEST(Gsm8kTest, FiveShotPromptFromTheTestFileSkipsTheAskedDocument) {
  GPUEVAL_REQUIRE_SHARED();
  const Task task = load_gsm8k();
  EXPECT_EQ(task.num_fewshot(), 5);
  ASSERT_TRUE(task.fewshot_from_dataset());
  ASSERT_EQ(task.notes().size(), 1u);
  EXPECT_THAT(task.notes()[0], HasSubstr("come from the evaluated file"));
  const auto& docs = task.documents();
  ASSERT_EQ(docs.size(), 1319u);
  EXPECT_EQ(task.context(docs[1]), kDoc1Prompt);
  // From document 6 on, the examples are documents 0..4.
  const std::string later = task.context(docs[7]);
  EXPECT_EQ(later.rfind("Question: Janet’s ducks", 0), 0u);
  EXPECT_THAT(later, HasSubstr("#### 20\n\nQuestion: " + docs[7].fields["question"].get<std::string>() + "\nAnswer:"));
  EXPECT_EQ(later.find("Kylar"), std::string::npos);
  // Document 5 is among the candidates: its examples are 0..4 too, and Kylar comes only after them.
  const std::string fifth = task.context(docs[5]);
  EXPECT_GT(fifth.find("Kylar"), fifth.find("#### 20\n\nQuestion: Kylar"));
  EXPECT_NE(fifth.find("#### 20\n\nQuestion: Kylar"), std::string::npos);
}

TEST(Gsm8kTest, TrainFileIsUsedWhenPresent) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  const std::string test = io::read_file(testing::shared_dir() + "/data/gsm8k/test.jsonl");
  testing::write_text(dir.file("test.jsonl"), test);
  testing::write_text(dir.file("train.jsonl"), "{\"question\": \"Q1?\", \"answer\": \"A1\\n#### 1\"}\n"
                                               "{\"question\": \"Q2?\", \"answer\": \"#### 2\"}\n"
                                               "{\"question\": \"Q3?\", \"answer\": \"#### 3\"}\n"
                                               "{\"question\": \"Q4?\", \"answer\": \"#### 4\"}\n"
                                               "{\"question\": \"Q5?\", \"answer\": \"#### 5\"}\n");
  TaskLoadOptions options;
  options.data_roots["gsm8k"] = dir.path();
  const Task task = Task::load("gsm8k", {testing::source_dir() + "/tasks"}, options);
  EXPECT_FALSE(task.fewshot_from_dataset());
  EXPECT_TRUE(task.notes().empty());
  EXPECT_EQ(task.context(task.documents()[1]),
            "Question: Q1?\nAnswer: A1\n#### 1\n\nQuestion: Q2?\nAnswer: #### 2\n\nQuestion: Q3?\nAnswer: #### 3\n\n"
            "Question: Q4?\nAnswer: #### 4\n\nQuestion: Q5?\nAnswer: #### 5\n\nQuestion: A robe takes 2 bolts of "
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
  EXPECT_EQ(score(" It is $18", 1), 1.0);          // "$18" with "$" ignored
  EXPECT_EQ(score(" 18 eggs, 16 left", 1), 0.0);   // the last number counts
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
  const std::string head = "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\n"
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
                testing::write_text(dir.file("c.yaml"), "task: c\ndataset_path: d.jsonl\noutput_type: multiple_choice\n"
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
