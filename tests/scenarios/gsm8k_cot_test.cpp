// GSM8K chain-of-thought and sampled repeats: gsm8k_cot's 8-shot prompt from the exemplars its
// task file writes (byte-identical to lm-eval's: pretraining_tasks_test.cpp pins it against
// lm-eval's own requests), its OLMo-3-style variant (8 samples, pass@1..8 and maj@8) and lm-eval's
// self-consistency variant (read through `include:`), pass@k and maj@k computed by hand on given
// responses, the sampling settings a task file may and may not give, and a sampled run whose
// texts do not depend on the batch budget or the worker count.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "evaluation/run_inputs.h"
#include "gpueval/error.h"
#include "gpueval/metrics.h"
#include "gpueval/report.h"
#include "gpueval/task.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::ElementsAre;
using testing::error_of;
using ::testing::HasSubstr;

Task load(const std::string& name) {
  TaskLoadOptions options;
  options.data_roots["gsm8k"] = testing::shared_dir() + "/data/gsm8k";
  return Task::load(name, {testing::source_dir() + "/tasks"}, options);
}

std::vector<RequestResult> responses(const std::vector<std::string>& texts) { return testing::text_results(texts); }

std::vector<std::string> metric_names(const Task& task) {
  std::vector<std::string> names;
  for (const MetricSpec& m : task.metrics()) names.push_back(m.name);
  return names;
}

TEST(Gsm8kCotTest, OlmoVariantAsksEachQuestionEightTimesWithItsOwnSeeds) {
  GPUEVAL_REQUIRE_SHARED();
  const Task cot = load("gsm8k_cot");
  const Task olmo = load("gsm8k_cot_olmo3");
  EXPECT_EQ(cot.repeats(), 1);
  EXPECT_EQ(olmo.repeats(), 8);
  EXPECT_EQ(olmo.num_fewshot(), 8);
  EXPECT_THAT(metric_names(olmo), ElementsAre("exact_match", "pass@1", "pass@2", "pass@4", "pass@8", "maj@8"));
  const Document& doc = olmo.documents().at(0);
  const std::vector<Request> one = cot.requests(cot.documents().at(0));
  const std::vector<Request> eight = olmo.requests(doc);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(eight.size(), 8u);
  EXPECT_FALSE(one[0].sampled());
  for (size_t k = 0; k < eight.size(); ++k) {
    EXPECT_EQ(eight[k].choice, static_cast<int64_t>(k));  // the repeat, which seeds the sample
    EXPECT_EQ(eight[k].context, one[0].context);  // gsm8k_cot's prompt, read through include
    EXPECT_EQ(eight[k].stops, one[0].stops);
    EXPECT_EQ(eight[k].temperature, 0.6);
    EXPECT_EQ(eight[k].top_k, 0);
    EXPECT_EQ(eight[k].top_p, 1.0);
  }
  EXPECT_EQ(olmo.target(doc), "18");
}

// Eight responses to document 0 (gold 18), scored by hand. strict-match extracts
// 18, 16, 16, 18, 16, 20, [invalid], 18: c = 3 right of n = 8.
TEST(Gsm8kCotTest, PassAtKAndMajAtKByHand) {
  GPUEVAL_REQUIRE_SHARED();
  const Task olmo = load("gsm8k_cot_olmo3");
  const Document& doc = olmo.documents().at(0);
  const std::vector<RequestResult> results =
      responses({" 16 - 7 = 9 eggs, 9 * 2 = 18. The answer is 18.", " She sells 8. The answer is 16.",
                 " The answer is 16.", " 9 * $2 = $18. The answer is 18.", " The answer is 16.", " The answer is 20.",
                 " I do not know.", " The answer is 18."});
  const std::vector<DocMetrics> m = olmo.process_results_all(doc, results);
  ASSERT_EQ(m.size(), 2u);  // strict-match, flexible-extract
  const DocMetrics& strict = m[0];
  EXPECT_EQ(strict.at("exact_match").value, 1.0);  // the first sample is right
  EXPECT_DOUBLE_EQ(strict.at("pass@1").value, 3.0 / 8);  // c / n
  EXPECT_DOUBLE_EQ(strict.at("pass@2").value, 1 - 10.0 / 28);  // 1 - C(5,2)/C(8,2)
  EXPECT_DOUBLE_EQ(strict.at("pass@4").value, 1 - 5.0 / 70);  // 1 - C(5,4)/C(8,4)
  EXPECT_EQ(strict.at("pass@8").value, 1.0);
  EXPECT_EQ(strict.at("maj@8").value, 1.0);  // 18 and 16 three times each: the first seen, 18, wins
  // flexible-extract takes the last number: "18." "16." "16." "18." "16." "20." "[invalid]" "18.", the
  // final "." removed by regexes_to_ignore; the same counts.
  EXPECT_DOUBLE_EQ(m[1].at("pass@1").value, 3.0 / 8);
  // With 16 first the vote goes to 16, and exact_match (the first sample) is wrong.
  std::vector<RequestResult> swapped = results;
  std::swap(swapped[0], swapped[1]);
  const DocMetrics s = olmo.process_results(doc, swapped, 0);
  EXPECT_EQ(s.at("maj@8").value, 0.0);
  EXPECT_EQ(s.at("exact_match").value, 0.0);
  EXPECT_DOUBLE_EQ(s.at("pass@1").value, 3.0 / 8);
  // Results for fewer than the task's repeats are an error naming the document.
  EXPECT_THAT(error_of([&] { olmo.process_results(doc, responses({"a"}), 0); }),
              HasSubstr("1 results for the 8 repeats of document 0"));

  // results.json keys, and a samples line holding every repeat's response.
  DocRecord record;
  record.task = &olmo;
  record.doc = doc;
  record.requests = olmo.requests(doc);
  record.results = results;
  record.metrics = m;
  RunSummary summary;
  summary.model = "m";
  summary.limit = 1;
  const nlohmann::ordered_json json = results_json({&olmo}, {record}, summary);
  const nlohmann::ordered_json& r = json["results"]["gsm8k_cot_olmo3"];
  EXPECT_DOUBLE_EQ(r["pass@2,strict-match"].get<double>(), 1 - 10.0 / 28);
  EXPECT_EQ(r["maj@8,flexible-extract"].get<double>(), 1.0);
  EXPECT_EQ(json["higher_is_better"]["gsm8k_cot_olmo3"]["pass@8"], true);
  const nlohmann::ordered_json line = sample_json(record, 0);
  ASSERT_EQ(line["resps"].size(), 1u);  // lm-eval's one Instance per document
  EXPECT_EQ(line["resps"][0].size(), 8u);
  EXPECT_EQ(line["resps"][0][2], " The answer is 16.");
  EXPECT_EQ(line["filtered_resps"][0], nlohmann::ordered_json({"18", "16", "16", "18", "16", "20", "[invalid]", "18"}));
  EXPECT_EQ(line["arguments"].size(), 1u);
}

TEST(Gsm8kCotTest, SelfConsistencyIsLmEvalsThroughInclude) {
  GPUEVAL_REQUIRE_SHARED();
  const Task cot = load("gsm8k_cot");
  const Task sc = load("gsm8k_cot_self_consistency");
  EXPECT_EQ(sc.repeats(), 64);
  std::vector<std::string> filters;
  for (const FilterPipeline& f : sc.filters()) filters.push_back(f.name());
  EXPECT_THAT(filters, ElementsAre("score-first", "maj@64", "maj@8"));
  const std::vector<Request> requests = sc.requests(sc.documents().at(0));
  ASSERT_EQ(requests.size(), 64u);
  EXPECT_EQ(requests[0].context, cot.requests(cot.documents().at(0))[0].context);
  EXPECT_EQ(requests[0].stops, (std::vector<std::string>{"Q:", "\n\n"}));
  EXPECT_EQ(requests[0].temperature, 0.2);
  EXPECT_LT(requests[0].top_k, 0);  // unset: the checkpoint's, else transformers' 50
  EXPECT_LT(requests[0].top_p, 0);
  // maj@8 votes over the first 8 responses only.
  std::vector<std::string> texts(64, " The answer is 7.");
  for (size_t k = 0; k < 5; ++k) texts[k] = " The answer is 18.";
  const DocMetrics maj8 = sc.process_results(sc.documents().at(0), responses(texts), 2);
  const DocMetrics maj64 = sc.process_results(sc.documents().at(0), responses(texts), 1);
  EXPECT_EQ(maj8.at("exact_match").value, 1.0);
  EXPECT_EQ(maj64.at("exact_match").value, 0.0);
}

TEST(Gsm8kCotTest, UnsetSamplingSettingsComeFromTheCheckpoint) {
  testing::TempDir dir;
  Request greedy, unset, given;
  greedy.type = unset.type = given.type = RequestType::kGenerateUntil;
  unset.temperature = 0.2;
  unset.top_k = -1;
  unset.top_p = -1;
  given.temperature = 0.6;
  given.top_k = 0;
  given.top_p = 0.9;
  std::vector<Request> requests = {greedy, unset, given};
  resolve_sampling(requests, dir.path());  // no generation_config.json: transformers' defaults
  EXPECT_EQ(requests[0].top_k, 0);
  EXPECT_FALSE(requests[0].sampled());
  EXPECT_EQ(requests[1].top_k, 50);
  EXPECT_EQ(requests[1].top_p, 1.0);
  EXPECT_EQ(requests[1].temperature, 0.2);
  EXPECT_EQ(requests[2].top_k, 0);
  EXPECT_EQ(requests[2].top_p, 0.9);
  testing::write_text(dir.file("generation_config.json"),
                      R"({"do_sample": true, "temperature": 0.7, "top_k": 20, "top_p": null})");
  requests = {greedy, unset, given};
  unset.temperature = -1;
  requests.push_back(unset);
  resolve_sampling(requests, dir.path());
  EXPECT_EQ(requests[1].top_k, 20);
  EXPECT_EQ(requests[1].top_p, 1.0);  // null counts as unset
  EXPECT_EQ(requests[1].temperature, 0.2);
  EXPECT_EQ(requests[3].temperature, 0.7);
  EXPECT_EQ(requests[2].top_k, 0);  // what the task file says wins
  testing::write_text(dir.file("generation_config.json"), R"({"top_p": 1.5})");
  requests = {unset};
  EXPECT_THAT(error_of([&] { resolve_sampling(requests, dir.path()); }),
              HasSubstr(dir.file("generation_config.json") + ": top_p must be a number in (0, 1], not 1.5"));
}

TEST(Gsm8kCotTest, SettingsWithoutOneMeaningAreRefusedWithFileAndLine) {
  testing::TempDir dir;
  testing::write_text(dir.file("d.jsonl"), "{\"q\": \"x\", \"a\": \"y\"}\n");
  const std::string head =
      "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\n"
      "doc_to_text: \"{{q}}\"\ndoc_to_target: \"{{a}}\"\n";
  const std::string yaml = dir.file("t.yaml");
  auto load_error = [&](const std::string& text) {
    testing::write_text(yaml, text);
    return error_of([&] { Task::load(yaml, {}); });
  };
  EXPECT_THAT(load_error(head + "generation_kwargs:\n  temperature: 0.6\n"),
              HasSubstr(yaml + ":7: generation_kwargs.temperature 0.6 without do_sample: true"));
  EXPECT_THAT(load_error(head + "generation_kwargs:\n  do_sample: false\n  top_p: 0.9\n"),
              HasSubstr("generation_kwargs.top_p without do_sample: true"));
  EXPECT_THAT(load_error(head + "generation_kwargs:\n  do_sample: true\n  temperature: 0\n"),
              HasSubstr("do_sample true with temperature 0 (transformers refuses it)"));
  EXPECT_THAT(load_error(head + "generation_kwargs:\n  do_sample: true\n  top_k: -3\n"),
              HasSubstr("generation_kwargs.top_k must be an integer >= 0"));
  EXPECT_THAT(load_error(head + "generation_kwargs:\n  do_sample: true\n  min_p: 0.1\n"),
              HasSubstr("generation_kwargs.min_p is not supported yet"));
  EXPECT_THAT(load_error(head + "repeats: 0\n"), HasSubstr(yaml + ":6: repeats must be an integer from 1 to 1024"));
  EXPECT_THAT(load_error(head + "repeats: 4\nmetric_list:\n  - metric: pass_at_k\n    k: [1, 5]\n"),
              HasSubstr(yaml + ":8: pass_at_k: k 5 must be an integer from 1 to the task's repeats (4)"));
  EXPECT_THAT(load_error(head + "repeats: 4\nmetric_list:\n  - metric: maj_at_k\n    k: 2\n    ignore_cas: true\n"),
              HasSubstr(yaml + ":8: exact_match: unsupported option 'ignore_cas'"));
  EXPECT_THAT(
      load_error(head + "repeats: 4\nmetric_list:\n  - metric: pass_at_k\n    k: 2\n"
                        "filter_list:\n  - name: one\n    filter:\n      - function: take_first\n"),
      HasSubstr(yaml + ":8: metric pass@2 needs 2 responses, but filter 'one' leaves 1 of the task's 4 repeats"));
  EXPECT_THAT(load_error(head + "repeats: 4\nfilter_list:\n  - name: five\n    filter:\n"
                                "      - function: take_first_k\n        k: 5\n"),
              HasSubstr(yaml + ":8: filter 'five' keeps more responses than the task's repeats (4)"));
  EXPECT_THAT(load_error("task: c\ndataset_path: d.jsonl\noutput_type: multiple_choice\ndoc_to_text: q\n"
                         "doc_to_target: 0\ndoc_to_choice: [a]\nrepeats: 2\n"),
              HasSubstr(yaml + ":7: repeats 2 applies to generate_until tasks only"));
  // Few-shot samples written in the task file: they need no fewshot_path, and exclude one.
  testing::write_text(dir.file("s.jsonl"), "{\"q\": \"s\", \"a\": \"t\"}\n");
  EXPECT_THAT(load_error(head + "num_fewshot: 1\nfewshot_path: s.jsonl\nfewshot_config:\n  samples:\n"
                                "    - {q: a, a: b}\n"),
              HasSubstr("fewshot_config.samples and fewshot_path are both given"));
  EXPECT_THAT(load_error(head + "num_fewshot: 2\nfewshot_config:\n  sampler: first_n\n  samples:\n"
                                "    - {q: a, a: b}\n"),
              HasSubstr(yaml + ": num_fewshot 2 but only 1 documents to draw examples from"));
  EXPECT_THAT(load_error(head + "num_fewshot: 1\nfewshot_config:\n  samples:\n    - {q: a}\n"),
              HasSubstr(yaml + ":9: doc_to_target '{{a}}' references missing field 'a'"));
  // include: the included file's errors name it and its line; a missing one is named.
  EXPECT_THAT(load_error("include: nope.yaml\ntask: u\n"), HasSubstr(yaml + ":1: included task file"));
  testing::write_text(dir.file("base.yaml"), head + "generation_kwargs:\n  nope: 1\n");
  EXPECT_THAT(load_error("include: base.yaml\ntask: u\n"),
              HasSubstr(dir.file("base.yaml") + ":7: generation_kwargs.nope is not supported yet"));
  testing::write_text(yaml, "include: base.yaml\ntask: u\ngeneration_kwargs:\n  do_sample: false\n");
  EXPECT_EQ(Task::load(yaml, {}).name(), "u");
}

TEST(Gsm8kCotTest, FewShotSamplesInTheTaskFileMakeThePrompt) {
  testing::TempDir dir;
  testing::write_text(dir.file("d.jsonl"), "{\"q\": \"2+2?\", \"answer\": \"4\"}\n");
  testing::write_text(dir.file("t.yaml"),
                      "task: t\ndataset_path: d.jsonl\noutput_type: generate_until\ndoc_to_text: \"Q: {{q}}\\nA:\"\n"
                      "doc_to_target: \"{{answer if answer is defined else target}}\"\nnum_fewshot: 2\n"
                      "fewshot_config:\n  sampler: first_n\n  samples:\n    - {q: \"1+1?\", target: It is 2.}\n"
                      "    - {q: \"1+2?\", target: It is 3.}\n    - {q: unused, target: x}\n");
  const Task task = Task::load(dir.file("t.yaml"), {});
  EXPECT_EQ(task.requests(task.documents()[0]).at(0).context,
            "Q: 1+1?\nA: It is 2.\n\nQ: 1+2?\nA: It is 3.\n\nQ: 2+2?\nA:");
  EXPECT_EQ(task.target(task.documents()[0]), "4");
}

// A sampled run's texts are a function of (seed, task, document, repeat) alone: one worker with
// batches of one sequence, and two workers with the probed budget, write the same samples.
TEST(Gsm8kCotTest, SampledTextsDoNotDependOnBatchesOrWorkers) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  testing::write_text(dir.file("olmo_short.yaml"), "include: " + testing::source_dir() +
                                                       "/tasks/gsm8k/gsm8k_cot_olmo3.yaml\n"
                                                       "task: olmo_short\nrepeats: 4\n"
                                                       "generation_kwargs:\n  until: [\"Q:\"]\n  do_sample: true\n"
                                                       "  temperature: 0.9\n  max_gen_toks: 24\n"
                                                       "metric_list:\n  - metric: pass_at_k\n    k: [1, 4]\n"
                                                       "  - metric: maj_at_k\n    k: 4\n");
  testing::write_text(dir.file("run.yaml"), "model: " + testing::source_dir() + "/models/stories260K\ntasks: [" +
                                                dir.file("olmo_short.yaml") + "]\n");
  auto run = [&](const std::string& name, const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"run",
                                     "--limit",
                                     "3",
                                     "--data",
                                     "gsm8k=" + testing::shared_dir() + "/data/gsm8k",
                                     "--output",
                                     dir.file(name),
                                     dir.file("run.yaml")};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = testing::run_gpueval(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return io::read_file(dir.file(name + "/samples_olmo_short.jsonl"));
  };
  const std::string one = run("one", {"--gpus", "cpu:1", "--batch-size", "1"});
  const std::string two = run("two", {"--gpus", "cpu:2"});
  EXPECT_EQ(one, two);
  const auto first = nlohmann::json::parse(one.substr(0, one.find('\n')));
  ASSERT_EQ(first["resps"][0].size(), 4u);
  std::vector<std::string> texts;
  for (const auto& t : first["resps"][0]) texts.push_back(t.get<std::string>());
  std::sort(texts.begin(), texts.end());
  EXPECT_NE(texts.front(), texts.back()) << "four samples at temperature 0.9 were all equal";
  const nlohmann::json results = nlohmann::json::parse(io::read_file(dir.file("one/results.json")));
  EXPECT_TRUE(results["results"]["olmo_short"].contains("pass@4,strict-match")) << results.dump();
  EXPECT_TRUE(results["results"]["olmo_short"].contains("maj@4,flexible-extract"));
}

// A sharded run's generation batches are cut as the planning machine cut them (its worker count and
// memory, recorded in plan.json): shards with other worker counts than the plan's, and the merge
// (which plans on one CPU worker), accept the plan, and the merged samples are the one-machine run's.
TEST(Gsm8kCotTest, ShardsWithOtherWorkerCountsThanThePlanGiveTheOneMachineTexts) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  testing::write_text(dir.file("olmo_short.yaml"), "include: " + testing::source_dir() +
                                                       "/tasks/gsm8k/gsm8k_cot_olmo3.yaml\n"
                                                       "task: olmo_short\nrepeats: 2\n"
                                                       "generation_kwargs:\n  until: [\"Q:\"]\n  do_sample: true\n"
                                                       "  temperature: 0.9\n  max_gen_toks: 16\n"
                                                       "metric_list:\n  - metric: pass_at_k\n    k: [1, 2]\n");
  auto config = [&](const std::string& name) {
    const std::string path = dir.file(name + ".yaml");
    testing::write_text(
        path, "model: " + testing::source_dir() + "/models/stories260K\ntasks: [" + dir.file("olmo_short.yaml") +
                  "]\nlimit: 4\ndata:\n  gsm8k: " + testing::shared_dir() + "/data/gsm8k\noutput: " + dir.file(name) +
                  "\nhistory: " + dir.file("history.sqlite") + "\n");
    return path;
  };
  auto ok = [](const std::vector<std::string>& args) {
    const auto r = testing::run_gpueval(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  };
  ok({"run", "--gpus", "cpu:2", config("one")});
  ok({"plan", "--shards", "2", "--gpus", "cpu:2", config("sharded")});
  const nlohmann::json plan = nlohmann::json::parse(io::read_file(dir.file("sharded/plan.json")));
  EXPECT_EQ(plan["checkpoints"][0]["generation_workers"], 2) << plan.dump();
  ok({"run", dir.file("sharded"), "--shard", "0/2", "--gpus", "cpu:1"});
  ok({"run", dir.file("sharded"), "--shard", "1/2", "--gpus", "cpu:2"});
  ok({"merge", dir.file("sharded")});
  EXPECT_EQ(io::read_file(dir.file("sharded/samples_olmo_short.jsonl")),
            io::read_file(dir.file("one/samples_olmo_short.jsonl")));
}

}  // namespace
}  // namespace gpueval
