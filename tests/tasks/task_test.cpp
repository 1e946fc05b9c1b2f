#include "gpueval/task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "gpueval/error.h"
#include "tasks/dataset_bounds.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A task file and its data in a temporary directory; load() writes and loads task.yaml.
class TaskDir : public testing::TempDir {
 public:
  Task load(const std::string& yaml) const { return Task::load(write("task.yaml", yaml), {}); }
};

using testing::error_of;

const char* kChoiceYaml =
    "task: quiz\n"
    "dataset_path: quiz.jsonl\n"
    "output_type: multiple_choice\n"
    "doc_to_text: \"Q: {{question}}\\nA:\"\n"
    "doc_to_choice: \"{{choices}}\"\n"
    "doc_to_target: \"{{label}}\"\n"
    "metric_list:\n"
    "  - acc_norm\n"
    "  - acc\n";

TEST(TaskTest, LoadsTheDemoTaskByName) {
  const Task task = Task::load("demo_choice", {"/nonexistent", testing::source_dir() + "/tasks"});
  EXPECT_EQ(task.name(), "demo_choice");
  EXPECT_EQ(task.output_type(), OutputType::kMultipleChoice);
  ASSERT_EQ(task.documents().size(), 60u);
  for (size_t i = 0; i < task.documents().size(); ++i) EXPECT_EQ(task.documents()[i].doc_id, static_cast<int64_t>(i));
  ASSERT_EQ(task.metrics().size(), 2u);
  EXPECT_EQ(task.metrics()[0].name, "acc");
  EXPECT_EQ(task.metrics()[1].name, "acc_norm");
  EXPECT_EQ(task.version(), 1.0);

  const std::vector<Request> requests = task.requests(task.documents()[0]);
  ASSERT_EQ(requests.size(), 4u);
  const std::vector<std::string> continuations = {" shoes", " the moon", " a tree", " water"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(requests[i].index, 0);
    EXPECT_EQ(requests[i].task, "demo_choice");
    EXPECT_EQ(requests[i].doc_id, 0);
    EXPECT_EQ(requests[i].choice, static_cast<int64_t>(i));
    EXPECT_EQ(requests[i].type, RequestType::kLoglikelihood);
    EXPECT_EQ(requests[i].context, "Lily was very thirsty, so she drank a glass of");
    EXPECT_EQ(requests[i].continuation, continuations[i]);
  }
  EXPECT_EQ(task.target(task.documents()[0]), 3);
}

TEST(TaskTest, LoadsTheDemoPerplexityTask) {
  const Task task = Task::load(testing::source_dir() + "/tasks/demo_perplexity.yaml", {});
  ASSERT_EQ(task.documents().size(), 20u);
  const std::vector<Request> requests = task.requests(task.documents()[1]);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].type, RequestType::kLoglikelihoodRolling);
  EXPECT_EQ(requests[0].context, task.documents()[1].fields["text"].get<std::string>());
  ASSERT_EQ(task.metrics().size(), 3u);
  EXPECT_EQ(task.metrics()[2].name, "bits_per_byte");
  EXPECT_EQ(task.metrics()[2].aggregation, Aggregation::kBitsPerByte);
  EXPECT_FALSE(task.metrics()[2].higher_is_better);
}

TEST(TaskTest, MultipleChoiceRequestsAndConfig) {
  TaskDir dir;
  dir.write("quiz.jsonl",
            "{\"question\": \"What is red?\", \"choices\": [\"a fire truck\", \"grass\"], \"label\": 0}\n"
            "\n"
            "{\"question\": \"Sky?\", \"choices\": [\"green\", \"blue\", \"r\\u00e9d\"], \"label\": 1}\n");
  const Task task = dir.load(std::string(kChoiceYaml) + "description: \"Answer.\\n\\n\"\n");
  ASSERT_EQ(task.documents().size(), 2u);
  EXPECT_EQ(task.location(task.documents()[1]), dir.path() + "/quiz.jsonl:3");
  const auto requests = task.requests(task.documents()[1]);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[2].context, "Answer.\n\nQ: Sky?\nA:");
  EXPECT_EQ(requests[2].continuation,
            " r\xc3\xa9"
            "d");
  EXPECT_THAT(task.choices(task.documents()[1]), ElementsAre("green", "blue",
                                                             "r\xc3\xa9"
                                                             "d"));

  // lm-eval's TaskConfig order, defaults filled in, shorthand metrics spelled out, and the
  // metrics in the order lm-eval computes them.
  std::vector<std::string> keys;
  for (const auto& [key, value] : task.ordered_config().items()) keys.push_back(key);
  EXPECT_THAT(keys, ElementsAre("task", "dataset_path", "doc_to_text", "doc_to_target", "unsafe_code", "doc_to_choice",
                                "description", "target_delimiter", "fewshot_delimiter", "num_fewshot", "metric_list",
                                "output_type", "repeats", "should_decontaminate"));
  EXPECT_EQ(task.config()["metric_list"][0],
            (nlohmann::json{{"metric", "acc_norm"}, {"aggregation", "mean"}, {"higher_is_better", true}}));
  EXPECT_EQ(task.config()["target_delimiter"], " ");
  EXPECT_EQ(task.config()["num_fewshot"], 0);
  EXPECT_EQ(task.metrics()[0].name, "acc");
  EXPECT_TRUE(task.version().is_null());
}

TEST(TaskTest, LoglikelihoodRollingAndGenerateRequests) {
  TaskDir dir;
  dir.write("d.jsonl", "{\"q\": \"2+2=\", \"a\": \" 4\", \"text\": \"One day.\\nThe end.\"}\n");
  const Task ll = dir.load(
      "task: ll\ndataset_path: d.jsonl\noutput_type: loglikelihood\n"
      "doc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\n");
  auto r = ll.requests(ll.documents()[0]);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].context, "2+2=");
  EXPECT_EQ(r[0].continuation, " 4");  // lm-eval adds no target_delimiter here
  EXPECT_EQ(ll.metrics().size(), 2u);  // perplexity, acc by default

  const Task rolling = dir.load(
      "task: r\ndataset_path: d.jsonl\noutput_type: loglikelihood_rolling\n"
      "doc_to_text: \"{{text}}\"\nmetric_list: [bits_per_byte]\n");
  r = rolling.requests(rolling.documents()[0]);
  EXPECT_EQ(r[0].type, RequestType::kLoglikelihoodRolling);
  EXPECT_EQ(r[0].context, "One day.\nThe end.");

  const Task gen = dir.load(
      "task: g\ndataset_path: d.jsonl\noutput_type: generate_until\n"
      "doc_to_text: \"Q: {{q}}\"\ndoc_to_target: \"{{a}}\"\n"
      "generation_kwargs:\n  until: [\"\\n\", \".\"]\n  max_gen_toks: 32\n  do_sample: false\n");
  r = gen.requests(gen.documents()[0]);
  EXPECT_EQ(r[0].type, RequestType::kGenerateUntil);
  EXPECT_EQ(r[0].context, "Q: 2+2=");
  EXPECT_THAT(r[0].stops, ElementsAre("\n", "."));
  EXPECT_EQ(r[0].max_tokens, 32);

  const Task defaults = dir.load("task: g\ndataset_path: d.jsonl\ndoc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\n");
  EXPECT_EQ(defaults.output_type(), OutputType::kGenerateUntil);  // lm-eval's default
  r = defaults.requests(defaults.documents()[0]);
  EXPECT_THAT(r[0].stops, ElementsAre("\n\n"));
  EXPECT_EQ(r[0].max_tokens, 256);
  EXPECT_EQ(defaults.config()["generation_kwargs"],
            (nlohmann::json{{"until", {"\n\n"}}, {"do_sample", false}, {"temperature", 0}}));
}

TEST(TaskTest, TemplatesRenderFieldsAsPythonWould) {
  TaskDir dir;
  dir.write("d.jsonl",
            "{\"a\": {\"b\": \"deep\", \"n\": [10, 20, 30]}, \"i\": 7, \"f\": 0.5, \"e\": 1e-05, \"t\": true, "
            "\"z\": null, \"l\": [\"x\", \"it's\", 2], \"s\": \"s\", \"label\": \"yes\"}\n");
  const Task task = dir.load(
      "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\n"
      "doc_to_text: \"{{a.b}}|{{ a.n.1 }}|{{a['n'][0]}}|{{a.n[-1]}}|{{i}}|{{f}}|{{e}}|{{t}}|{{z}}|{{l}}|{ x }|\\n\"\n"
      "doc_to_target: label\n");
  EXPECT_EQ(task.context(task.documents()[0]), "deep|20|10|30|7|0.5|1e-05|True|None|['x', \"it's\", 2]|{ x }|\n");
  EXPECT_EQ(task.target(task.documents()[0]), "yes");  // a bare field name reads the field
}

TEST(TaskTest, TargetsFollowLmEvalsRules) {
  TaskDir dir;
  dir.write("quiz.jsonl",
            "{\"question\": \"q\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": \"2\"}\n"
            "{\"question\": \"q\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": \"y\"}\n"
            "{\"question\": \"q\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": [0, 2]}\n");
  const Task task = dir.load(kChoiceYaml);
  EXPECT_EQ(task.target(task.documents()[0]), 2);  // digits become an index when there are choices
  EXPECT_EQ(task.target(task.documents()[1]), "y");
  EXPECT_EQ(task.target(task.documents()[2]), nlohmann::json::array({0, 2}));
}

TEST(TaskTest, BuildRequestsNumbersTasksDocumentsAndChoices) {
  TaskDir dir;
  dir.write("quiz.jsonl",
            "{\"question\": \"1\", \"choices\": [\"a\", \"b\"], \"label\": 0}\n"
            "{\"question\": \"2\", \"choices\": [\"a\", \"b\", \"c\"], \"label\": 0}\n"
            "{\"question\": \"3\", \"choices\": [\"a\", \"b\"], \"label\": 0}\n");
  dir.write("d.jsonl", "{\"text\": \"x\"}\n{\"text\": \"y\"}\n{\"text\": \"z\"}\n");
  const Task quiz = dir.load(kChoiceYaml);
  const Task rolling = dir.load(
      "task: r\ndataset_path: d.jsonl\noutput_type: loglikelihood_rolling\n"
      "doc_to_target: \"{{text}}\"\n");
  const auto all = build_requests({&quiz, &rolling});
  EXPECT_EQ(all.size(), 10u);
  const auto limited = build_requests({&quiz, &rolling}, 2);
  ASSERT_EQ(limited.size(), 7u);
  std::vector<std::tuple<int64_t, std::string, int64_t, int64_t>> seen;
  for (const Request& r : limited) seen.emplace_back(r.index, r.task, r.doc_id, r.choice);
  EXPECT_THAT(seen, ElementsAre(std::make_tuple(0, "quiz", 0, 0), std::make_tuple(1, "quiz", 0, 1),
                                std::make_tuple(2, "quiz", 1, 0), std::make_tuple(3, "quiz", 1, 1),
                                std::make_tuple(4, "quiz", 1, 2), std::make_tuple(5, "r", 0, 0),
                                std::make_tuple(6, "r", 1, 0)));
}

RequestResult ll(double logprob, bool greedy = false) {
  RequestResult r;
  r.logprob = logprob;
  r.is_greedy = greedy;
  return r;
}

TEST(TaskTest, MultipleChoiceMetricsByHand) {
  TaskDir dir;
  dir.write("quiz.jsonl",
            "{\"question\": \"q\", \"choices\": [\"a\", \"bbbb\"], \"label\": 1}\n"
            "{\"question\": \"q\", \"choices\": [\"\\u00e9\", \"ab\"], \"label\": 1}\n"
            "{\"question\": \"q\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": 1}\n"
            "{\"question\": \"q\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": [0, 1]}\n");
  const Task task = dir.load(std::string(kChoiceYaml) + "  - acc_bytes\n  - exact_match\n");
  const auto& docs = task.documents();

  // acc picks "a" (-2 > -3); acc_norm divides by characters: -2/1 < -3/4, so it picks "bbbb".
  DocMetrics m = task.process_results(docs[0], {ll(-2), ll(-3, true)});
  EXPECT_EQ(m.at("acc").value, 0.0);
  EXPECT_EQ(m.at("acc_norm").value, 1.0);
  EXPECT_EQ(m.at("acc_bytes").value, 1.0);
  EXPECT_EQ(m.at("exact_match").value, 1.0);  // the gold continuation was greedy

  // "é" is one character but two bytes: acc_norm -1.5/1 < -2.5/2 picks "ab";
  // acc_bytes -1.5/2 > -2.5/2 picks "é".
  m = task.process_results(docs[1], {ll(-1.5), ll(-2.5)});
  EXPECT_EQ(m.at("acc").value, 0.0);
  EXPECT_EQ(m.at("acc_norm").value, 1.0);
  EXPECT_EQ(m.at("acc_bytes").value, 0.0);
  EXPECT_EQ(m.at("exact_match").value, 0.0);

  // Ties go to the first maximum, as numpy.argmax does.
  m = task.process_results(docs[2], {ll(-1), ll(-1), ll(-5)});
  EXPECT_EQ(m.at("acc").value, 0.0);
  m = task.process_results(docs[2], {ll(-5), ll(-1), ll(-1)});
  EXPECT_EQ(m.at("acc").value, 1.0);

  // Several gold answers: right if the prediction is any of them.
  m = task.process_results(docs[3], {ll(-1), ll(-3), ll(-2)});
  EXPECT_EQ(m.at("acc").value, 1.0);
  m = task.process_results(docs[3], {ll(-3), ll(-3), ll(-2)});
  EXPECT_EQ(m.at("acc").value, 0.0);

  EXPECT_THAT(error_of([&] { task.process_results(docs[0], {ll(-1)}); }),
              HasSubstr("quiz.jsonl:1: 1 results for the 2 choices"));
}

TEST(TaskTest, RollingAndLoglikelihoodAndGenerateMetrics) {
  TaskDir dir;
  dir.write("d.jsonl", "{\"text\": \" Hi  there\\u00a0you\\n\", \"a\": \"Four.\"}\n");
  const Task rolling = dir.load(
      "task: r\ndataset_path: d.jsonl\noutput_type: loglikelihood_rolling\n"
      "doc_to_target: \"{{text}}\"\n");
  // re.split(r"\s+", " Hi  there\u00a0you\n") = ['', 'Hi', 'there', 'you', '']; 16 UTF-8 bytes.
  DocMetrics m = rolling.process_results(rolling.documents()[0], {ll(-12.5)});
  EXPECT_EQ(m.at("word_perplexity"), MetricValue::weighted(-12.5, 5));
  EXPECT_EQ(m.at("byte_perplexity"), MetricValue::weighted(-12.5, 16));
  EXPECT_EQ(m.at("bits_per_byte"), MetricValue::weighted(-12.5, 16));

  const Task loglikelihood = dir.load(
      "task: l\ndataset_path: d.jsonl\noutput_type: loglikelihood\n"
      "doc_to_text: \"\"\ndoc_to_target: \"{{a}}\"\n");
  m = loglikelihood.process_results(loglikelihood.documents()[0], {ll(-0.25, true)});
  EXPECT_EQ(m.at("perplexity"), MetricValue::scalar(-0.25));
  EXPECT_EQ(m.at("acc"), MetricValue::scalar(1.0));

  const Task gen = dir.load(
      "task: g\ndataset_path: d.jsonl\ndoc_to_text: \"\"\ndoc_to_target: \"{{a}}\"\n"
      "metric_list:\n  - metric: exact_match\n    ignore_case: true\n"
      "    ignore_punctuation: true\n");
  RequestResult out;
  out.text = "four";
  EXPECT_EQ(gen.process_results(gen.documents()[0], {out}).at("exact_match").value, 1.0);
  out.text = "five";
  EXPECT_EQ(gen.process_results(gen.documents()[0], {out}).at("exact_match").value, 0.0);
}

// Every bad input is one line that names the file and, where there is one, the line.
void expect_one_line(const std::string& message) { EXPECT_THAT(message, Not(HasSubstr("\n"))); }

TEST(TaskTest, DatasetErrorsNameFileAndLine) {
  TaskDir dir;
  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": [\"a\"], \"label\": 0}\n\n{\"question\": \"q\",\n");
  std::string e = error_of([&] { dir.load(kChoiceYaml); });
  EXPECT_THAT(e, HasSubstr(dir.path() + "/quiz.jsonl:3: the line is not valid JSON"));
  expect_one_line(e);

  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": [\"a\"], \"label\": 0}\n[1, 2]\n");
  e = error_of([&] { dir.load(kChoiceYaml); });
  EXPECT_THAT(e, HasSubstr("quiz.jsonl:2: expected a JSON object, got array"));
  expect_one_line(e);

  dir.write("quiz.jsonl",
            "{\"question\": \"q\", \"choices\": [\"a\"], \"label\": 0}\n{\"choices\": [\"a\"], \"label\": 0}\n");
  e = error_of([&] { dir.load(kChoiceYaml); });
  EXPECT_THAT(e, HasSubstr("quiz.jsonl:2: doc_to_text 'Q: {{question}}\\x0aA:' references missing field 'question'"));
  expect_one_line(e);

  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": [\"a\", \"b\"], \"label\": 2}\n");
  e = error_of([&] { dir.load(kChoiceYaml); });
  EXPECT_THAT(e, HasSubstr("quiz.jsonl:1: label 2 is outside the 2 choices"));

  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": [\"a\", \"b\"], \"label\": \"c\"}\n");
  EXPECT_THAT(error_of([&] { dir.load(kChoiceYaml); }),
              HasSubstr("quiz.jsonl:1: target 'c' is not one of the choices"));

  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": \"ab\", \"label\": 0}\n");
  EXPECT_THAT(error_of([&] { dir.load(kChoiceYaml); }),
              HasSubstr("quiz.jsonl:1: doc_to_choice gives 'ab', not a list"));

  dir.write("quiz.jsonl", "{\"question\": \"q\", \"question\": \"r\", \"choices\": [\"a\"], \"label\": 0}\n");
  EXPECT_THAT(error_of([&] { dir.load(kChoiceYaml); }),
              HasSubstr("quiz.jsonl:1: the line has duplicate key 'question'"));

  dir.write("quiz.jsonl", "\n  \n");
  EXPECT_THAT(error_of([&] { dir.load(kChoiceYaml); }), HasSubstr("quiz.jsonl: no documents"));

  // A line past the bound on one document is refused before it is parsed.
  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": [\"a\"], \"label\": 0}\n{\"question\": \"" +
                              std::string(kMaxDocumentBytes, 'q') + "\"}\n");
  e = error_of([&] { dir.load(kChoiceYaml); });
  EXPECT_THAT(e, HasSubstr("quiz.jsonl:2: the line is 67108880 bytes, past the bound of 67108864 (64 MiB) that "
                           "gpueval accepts for one document"));
  expect_one_line(e);
}

TEST(TaskTest, DefinitionErrorsNameFileAndLine) {
  TaskDir dir;
  dir.write("quiz.jsonl", "{\"question\": \"q\", \"choices\": [\"a\"], \"label\": 0}\n");
  const std::string yaml = dir.path() + "/task.yaml";
  auto load_error = [&](const std::string& text) {
    const std::string e = error_of([&] { dir.load(text); });
    expect_one_line(e);
    return e;
  };
  EXPECT_THAT(load_error("task: quiz\ndataset_path: quiz.jsonl\noutput_type: multiple_choise\n"),
              HasSubstr(yaml + ":3: unknown output_type 'multiple_choise'"));
  EXPECT_THAT(
      load_error(std::string(kChoiceYaml) + "  - f1\n"),
      HasSubstr(yaml +
                ":10: unknown metric 'f1' (known for multiple_choice: acc, acc_norm, acc_bytes, exact_match, bpb)"));
  EXPECT_THAT(load_error("task: q\ndataset_path: quiz.jsonl\noutput_type: loglikelihood_rolling\n"
                         "doc_to_target: \"{{question}}\"\nmetric_list:\n  - metric: acc\n"),
              HasSubstr(yaml + ":6: metric 'acc' does not apply to loglikelihood_rolling tasks"));
  EXPECT_THAT(
      load_error("task: quiz\ndataset_path: nope.jsonl\noutput_type: multiple_choice\n"),
      HasSubstr(yaml + ":2: dataset_path 'nope.jsonl' not found (" + dir.path() + "/nope.jsonl does not exist)"));
  EXPECT_THAT(load_error("task: quiz\noutput_type: multiple_choice\n"),
              HasSubstr(yaml + ": missing required key 'dataset_path'"));
  EXPECT_THAT(load_error("task: quiz\ndataset_path: quiz.jsonl\noutput_type: multiple_choice\n"
                         "doc_to_text: \"{{question}}\"\ndoc_to_target: \"{{label}}\"\n"),
              HasSubstr(yaml + ": missing required key 'doc_to_choice'"));
  EXPECT_THAT(load_error(std::string(kChoiceYaml) + "doc_to_txt: x\n"),
              HasSubstr(yaml + ":10: unknown key 'doc_to_txt'"));
  EXPECT_THAT(load_error(std::string(kChoiceYaml) + "gen_prefix: x\n"),
              HasSubstr(yaml + ":10: key 'gen_prefix' is not supported yet"));
  EXPECT_THAT(load_error(std::string(kChoiceYaml) + "filter_list: []\n"),
              HasSubstr(yaml + ":10: filter_list applies to generate_until tasks only"));
  EXPECT_THAT(
      load_error(std::string(kChoiceYaml) + "num_fewshot: 5\n"),
      HasSubstr(
          yaml +
          ":10: num_fewshot 5 needs fewshot_path or fewshot_config.samples (the documents to draw examples from)"));
  EXPECT_THAT(
      load_error(std::string(kChoiceYaml) + "fewshot_config:\n  sampler: balanced\n"),
      HasSubstr(yaml + ":11: fewshot_config: unknown sampler 'balanced' (lm-eval's samplers: default, first_n)"));
  EXPECT_THAT(load_error(std::string(kChoiceYaml) + "task: again\n"), HasSubstr(yaml + ":10: duplicate key 'task'"));
  EXPECT_THAT(load_error("task: [unclosed\n"), HasSubstr(yaml + ":2: invalid YAML"));
  EXPECT_THAT(load_error("task: q\ndataset_path: quiz.jsonl\ndoc_to_text: \"{{ question | title }}\"\n"),
              HasSubstr(yaml + ":3: doc_to_text '{{ question | title }}': the filter 'title' is not supported"));
  EXPECT_THAT(
      load_error("task: q\ndataset_path: quiz.jsonl\ndoc_to_text: \"{% for x in y %}{{x}}{% endfor %}\"\n"),
      HasSubstr(yaml +
                ":3: doc_to_text '{% for x in y %}{{x}}{% endfor %}': a '{% for %}' statement is not supported"));
  EXPECT_THAT(load_error("task: q\ndataset_path: quiz.jsonl\ndoc_to_text: \"{{question\"\n"),
              HasSubstr("'{{' without a closing '}}'"));
  EXPECT_THAT(load_error("task: q\ndataset_path: quiz.jsonl\ndoc_to_text: !function utils.doc_to_text\n"
                         "doc_to_target: x\n"),
              HasSubstr(yaml + ":3: doc_to_text: !function utils.doc_to_text: gpueval runs no Python; its built-in "
                               "functions are copa.doc_to_text, copa.doc_to_target"));
  EXPECT_THAT(error_of([&] { Task::load("missing_task", {dir.path()}); }),
              HasSubstr("task 'missing_task': no missing_task.yaml in " + dir.path()));
  dir.write("other.yaml", kChoiceYaml);
  EXPECT_THAT(error_of([&] { Task::load("other", {dir.path()}); }), HasSubstr("defines task 'quiz', not 'other'"));
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

// dataset_kind: text makes a whole file one document, scored in rolling windows.
TEST(TaskTest, TextFileIsOneRollingDocument) {
  const Task task = Task::load("demo_perplexity_text", {testing::source_dir() + "/tasks"});
  ASSERT_EQ(task.documents().size(), 1u);
  const std::string text = io::read_file(testing::source_dir() + "/tasks/demo_perplexity_text.txt");
  EXPECT_EQ(task.documents()[0].fields.at("text"), text);
  const std::vector<Request> requests = task.requests(task.documents()[0]);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].type, RequestType::kLoglikelihoodRolling);
  EXPECT_EQ(requests[0].context, text);

  testing::TempDir dir;
  testing::write_text(dir.file("t.yaml"),
                      "task: t\ndataset_path: c.txt\ndataset_kind: text\n"
                      "output_type: loglikelihood_rolling\ndoc_to_target: \"{{text}}\"\n");
  testing::write_text(dir.file("c.txt"), "fine\nstill fine\nbad \xff byte\n");
  EXPECT_THAT(error_of([&] { Task::load(dir.file("t.yaml"), {}); }),
              HasSubstr(dir.file("c.txt") + ":3: not UTF-8 text (invalid byte at offset 20)"));
  testing::write_text(dir.file("c.txt"), " \n\n");
  EXPECT_THAT(error_of([&] { Task::load(dir.file("t.yaml"), {}); }), HasSubstr("c.txt: no documents"));
}

}  // namespace
}  // namespace gpueval
