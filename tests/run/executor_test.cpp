// The executor on the real stories260K model: results must not depend on how
// the plan cut the work into batches, rolling windows must add up to the
// whole-text score, generation must stop at stop strings, and the item
// results must fold into exactly one result per request.
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "gpueval/error.h"
#include "model/decoder/scorer.h"
#include "plan/planner.h"
#include "run/executor.h"
#include "test_util.h"

namespace gpueval {
namespace {

const DecoderModelImpl& model() { return testing::stories260k_model(); }
const Tokenizer& tokenizer() { return testing::stories260k_tokenizer(); }

Request make_request(int64_t index, RequestType type, std::string context, std::string continuation = "") {
  Request r;
  r.index = index;
  r.task = "t";
  r.doc_id = index;
  r.type = type;
  r.context = std::move(context);
  r.continuation = std::move(continuation);
  return r;
}

Request generation(int64_t index, std::string context, std::vector<std::string> stops, int64_t max_tokens) {
  Request r = make_request(index, RequestType::kGenerateUntil, std::move(context));
  r.stops = std::move(stops);
  r.max_tokens = max_tokens;
  return r;
}

const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
    "One day, she saw a big, red ball in the park. She ran to the ball and kicked it very high. ";

std::string long_text(int repeats) {
  std::string s;
  for (int i = 0; i < repeats; ++i) s += kStory;
  return s;
}

PlanOptions options(int64_t batch_tokens) {
  PlanOptions o;
  o.batch_tokens = batch_tokens;
  o.max_length = model().config().max_position_embeddings;
  return o;
}

// Runs every batch of a plan, the way a worker would: the batch arrives as
// JSON and the item results leave as JSON.
std::vector<RequestResult> run(const Plan& plan) {
  std::vector<ItemResult> items;
  for (const Batch& b : plan.batches) {
    const Batch received = batch_from_json(nlohmann::json::parse(to_json(b).dump()));
    for (const ItemResult& r : execute_batch(model(), tokenizer(), received))
      items.push_back(item_result_from_json(nlohmann::json::parse(to_json(r).dump())));
  }
  return combine_items(items);
}

std::vector<Request> mixed_requests() {
  using T = RequestType;
  std::vector<Request> rs;
  auto add = [&rs](Request r) {
    r.index = static_cast<int64_t>(rs.size());
    rs.push_back(std::move(r));
  };
  add(make_request(0, T::kLoglikelihood, "Once upon a time", " there was a dog"));
  add(make_request(0, T::kLoglikelihood, "Once upon a time ", "there was a cat"));
  add(make_request(0, T::kLoglikelihood, "", "Lily was happy."));
  add(make_request(0, T::kLoglikelihood, "Lily saw a", " big"));
  add(make_request(0, T::kLoglikelihood, "Lily saw a", " red ball in the park"));
  add(make_request(0, T::kLoglikelihood, long_text(10), "She was happy."));  // left-truncated
  add(make_request(0, T::kLoglikelihoodRolling, "The cat sat on the mat. It was warm."));
  add(make_request(0, T::kLoglikelihoodRolling, long_text(9)));  // two windows
  add(make_request(0, T::kLoglikelihoodRolling, ""));
  add(generation(0, "Once upon a time", {"."}, 24));
  add(generation(0, "Lily and Tom went to the park", {"\n", " park"}, 16));
  add(generation(0, "The dog", {}, 10));
  return rs;
}

TEST(Executor, ResultsDoNotDependOnTheBatching) {
  const auto requests = mixed_requests();
  const Plan alone = make_plan(requests, tokenizer(), options(1));
  const Plan together = make_plan(requests, tokenizer(), options(1 << 30));
  ASSERT_GT(alone.batches.size(), together.batches.size() + 5);
  EXPECT_LE(together.batches.size(), 3u);  // one loglikelihood batch, one of rolling windows, one generation batch
  std::map<int64_t, std::vector<int64_t>> costs;  // request -> cost of each part
  for (const Batch& batch : alone.batches)
    for (const WorkItem& item : batch.items) costs[item.request_index].push_back(item.cost());
  EXPECT_EQ(costs[5], std::vector<int64_t>{options(1).max_length});  // left-truncated to the context
  EXPECT_EQ(costs[7].size(), 2u);  // two rolling windows
  const auto a = run(alone), b = run(together);
  ASSERT_EQ(a.size(), requests.size());
  ASSERT_EQ(b.size(), requests.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(b[i].index, static_cast<int64_t>(i));
    // float32 rounding with other batch shapes: within 1e-5 per scored token.
    EXPECT_NEAR(a[i].logprob, b[i].logprob, 1e-5 * std::max<int64_t>(1, a[i].num_tokens)) << "request " << i;
    EXPECT_EQ(a[i].is_greedy, b[i].is_greedy) << "request " << i;
    EXPECT_EQ(a[i].num_tokens, b[i].num_tokens) << "request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << "request " << i;
  }
  // The numbers are real ones: scored requests have negative logprobs, generations have text.
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].type == RequestType::kGenerateUntil) {
      EXPECT_FALSE(a[i].text.empty()) << i;
    } else if (!requests[i].context.empty() || !requests[i].continuation.empty()) {
      EXPECT_LT(a[i].logprob, 0.0) << i;
      EXPECT_GT(a[i].num_tokens, 0) << i;
    }
  }
  EXPECT_EQ(a[8].logprob, 0.0);  // the empty rolling text
  EXPECT_EQ(a[8].num_tokens, 0);
}

TEST(Executor, RollingScoreEqualsStepwiseScoringOfTheWholeText) {
  const std::string text = "Lily and Tom played with a big red ball. They were very happy.";
  const Plan plan =
      make_plan({make_request(0, RequestType::kLoglikelihoodRolling, text)}, tokenizer(), options(1 << 20));
  const auto results = run(plan);
  ASSERT_EQ(results.size(), 1u);
  ScoreRequest whole;
  whole.tokens.push_back(*tokenizer().bos_id());
  const auto body = tokenizer().encode(text, false);
  whole.tokens.insert(whole.tokens.end(), body.begin(), body.end());
  const ScoreResult ref = score_stepwise(model(), whole);
  EXPECT_NEAR(results[0].logprob, ref.sum(), 1e-4);
  EXPECT_EQ(results[0].num_tokens, static_cast<int64_t>(body.size()));
  EXPECT_EQ(results[0].is_greedy, ref.all_greedy());
}

TEST(Executor, RollingWindowsAddUpToTheirStepwiseScores) {
  const std::string text = long_text(16);
  const auto tokens = tokenizer().encode(text, false);
  const int64_t max_length = model().config().max_position_embeddings;
  ASSERT_GT(static_cast<int64_t>(tokens.size()), 2 * max_length);
  const auto windows = rolling_windows(tokens, *tokenizer().bos_id(), max_length);
  double expected = 0;
  for (const ScoreRequest& w : windows) expected += score_stepwise(model(), w).sum();
  const auto results =
      run(make_plan({make_request(0, RequestType::kLoglikelihoodRolling, text)}, tokenizer(), options(1 << 20)));
  EXPECT_NEAR(results.at(0).logprob, expected, 1e-3);
  EXPECT_EQ(results.at(0).num_tokens, static_cast<int64_t>(tokens.size()));
}

// lm-evaluation-harness style loglikelihoods that llama2.c's own forward and
// tokenizer computed for HellaSwag and MMLU prompts (shared/refs).
TEST(Executor, LoglikelihoodsMatchTheLlama2cReference) {
  GPUEVAL_REQUIRE_SHARED();
  std::ifstream in(testing::shared_dir() + "/refs/stories260K_loglikelihood.json");
  ASSERT_TRUE(in) << "missing refs/stories260K_loglikelihood.json";
  const nlohmann::json ref = nlohmann::json::parse(in);
  std::vector<Request> requests;
  std::vector<nlohmann::json> expected;
  for (const auto& doc : ref.at("items")) {
    for (const auto& choice : doc.at("choices")) {
      requests.push_back(make_request(static_cast<int64_t>(requests.size()), RequestType::kLoglikelihood,
                                      doc.at("context").get<std::string>(),
                                      choice.at("continuation").get<std::string>()));
      expected.push_back(choice);
    }
  }
  ASSERT_GT(requests.size(), 20u);
  const Plan plan = make_plan(requests, tokenizer(), options(8192));
  // The planner's continuation tokens are the reference's.
  for (const Batch& b : plan.batches)
    for (const WorkItem& item : b.items) {
      const auto& e = expected[item.request_index];
      EXPECT_EQ(std::vector<int32_t>(item.tokens.begin() + item.first_target, item.tokens.end()),
                e.at("cont_ids").get<std::vector<int32_t>>())
          << requests[item.request_index].context;
      EXPECT_EQ(static_cast<int64_t>(item.tokens.size()), e.at("n_whole_tokens").get<int64_t>());
    }
  const auto results = run(plan);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_NEAR(results[i].logprob, expected[i].at("sum_logprob").get<double>(), 1e-4) << requests[i].context;
    EXPECT_EQ(results[i].is_greedy, expected[i].at("is_greedy").get<bool>()) << requests[i].context;
  }
}

TEST(Executor, GenerationStopsAtTheFirstStopStringAndDropsIt) {
  const std::string prompt = "Once upon a time";
  const auto free_run = run(make_plan({generation(0, prompt, {}, 60)}, tokenizer(), options(1 << 20)));
  const std::string text = free_run.at(0).text;
  ASSERT_EQ(free_run.at(0).num_tokens, 60) << text;
  ASSERT_GT(text.size(), 40u);
  // A stop string the model will produce about halfway through, seen there for the first time.
  size_t at = text.size() / 2;
  std::string stop;
  for (; at + 4 <= text.size(); ++at) {
    stop = text.substr(at, 4);
    if (text.find(stop) == at) break;
  }
  ASSERT_LT(at + 4, text.size());
  const auto stopped =
      run(make_plan({generation(0, prompt, {"never-appears", stop}, 60)}, tokenizer(), options(1 << 20)));
  EXPECT_EQ(stopped.at(0).text, text.substr(0, at));
  EXPECT_EQ(stopped.at(0).text.find(stop), std::string::npos);
  EXPECT_LT(stopped.at(0).num_tokens, 60);  // generation ended early, not just the text
  EXPECT_EQ(cut_at_stops(text, {stop}), text.substr(0, at));
}

TEST(Executor, StopStringsAreAppliedInTurnAsLmEvalDoes) {
  EXPECT_EQ(cut_at_stops("abc. def\nghi", {"\n", "."}), "abc");
  EXPECT_EQ(cut_at_stops("abc", {""}), "abc");
  EXPECT_EQ(cut_at_stops("xabcx", {"bc", "ab"}), "xa");  // "ab" no longer occurs once "bc" has cut
  EXPECT_EQ(cut_at_stops("", {"a"}), "");
}

TEST(Executor, GenerationDoesNotDependOnBatchMates) {
  const Plan plan = make_plan({generation(0, "Once upon a time", {"."}, 30), generation(1, "The dog", {"\n"}, 12),
                               generation(2, "Lily saw a big", {}, 20)},
                              tokenizer(), options(1 << 20));
  ASSERT_EQ(plan.batches.size(), 1u);
  for (double temperature : {0.0, 0.9}) {
    Batch together = plan.batches[0];
    for (WorkItem& item : together.items) item.temperature = temperature;
    const auto all = execute_batch(model(), tokenizer(), together);
    ASSERT_EQ(all.size(), 3u);
    for (size_t k = 0; k < together.items.size(); ++k) {
      Batch alone = together;
      alone.items = {together.items[k]};
      const auto one = execute_batch(model(), tokenizer(), alone);
      EXPECT_EQ(one.at(0).text, all[k].text) << "temperature " << temperature << " item " << k;
      EXPECT_EQ(one.at(0).num_tokens, all[k].num_tokens);
      EXPECT_LE(all[k].num_tokens, together.items[k].max_tokens);
    }
  }
}

// Generation batches back to back through one running set (a worker's look-ahead): each batch that
// joins gives the results it gives alone, reported as its last sequence ends; a batch with nothing
// to generate is done as it joins; one with another prefix is refused.
TEST(Executor, BatchesThatJoinARunningGenerationGiveWhatTheyGiveAlone) {
  std::vector<Request> requests;
  const char* openings[] = {"Once upon a time", "The dog", "Lily saw a big", "Tom and Sue", "One day", "The sun"};
  for (int64_t i = 0; i < 12; ++i) {
    Request r = generation(i, std::string("A story. ") + openings[i % 6], {".", "\n"}, 8 + 3 * (i % 5));
    r.temperature = i % 3 == 0 ? 0.0 : 0.9;
    requests.push_back(std::move(r));
  }
  PlanOptions o = options(1 << 20);
  o.max_batch_size = 3;
  const Plan plan = make_plan(requests, tokenizer(), o);
  ASSERT_GE(plan.batches.size(), 4u);
  std::map<int64_t, std::vector<ItemResult>> alone;
  for (const Batch& b : plan.batches) alone[b.id] = execute_batch(model(), tokenizer(), b);

  Batch empty = plan.batches[1];
  for (WorkItem& item : empty.items) item.max_tokens = 0;
  empty.id = 1000;
  alone[empty.id] = execute_batch(model(), tokenizer(), empty);

  std::vector<Batch> more(plan.batches.begin() + 1, plan.batches.end());
  more.insert(more.begin() + 1, empty);
  size_t handed = 0;
  std::vector<int64_t> done_order;
  std::map<int64_t, std::vector<ItemResult>> joined;
  int64_t items_ahead = 0;
  ExecutionOptions exec;
  exec.on_item_done = [&](const ItemResult&) { ++items_ahead; };
  execute_generation(
      model(), tokenizer(), plan.batches[0], exec,
      [&]() -> std::optional<Batch> {
        if (handed == more.size()) return std::nullopt;
        return more[handed++];
      },
      [&](const Batch& b, std::vector<ItemResult> items, const ExecutionStats& stats) {
        done_order.push_back(b.id);
        // A batch with nothing to generate is done as it joins, before the next is asked for.
        if (b.id == empty.id) EXPECT_EQ(handed, 2u);
        EXPECT_GT(stats.tokens_computed, 0) << b.id;
        joined[b.id] = std::move(items);
      });
  EXPECT_EQ(handed, more.size());
  ASSERT_EQ(joined.size(), alone.size());
  for (const auto& [id, items] : alone) {
    ASSERT_EQ(joined[id].size(), items.size()) << "batch " << id;
    for (size_t k = 0; k < items.size(); ++k) {
      EXPECT_EQ(joined[id][k].text, items[k].text) << "batch " << id << " item " << k;
      EXPECT_EQ(joined[id][k].num_tokens, items[k].num_tokens);
      EXPECT_EQ(joined[id][k].request_index, items[k].request_index);
    }
  }
  EXPECT_EQ(done_order.size(), alone.size());
  EXPECT_EQ(items_ahead, 12);

  // Another prefix cannot join.
  Batch other = plan.batches[1];
  other.prefix = {1, 2, 3};
  bool asked = false;
  EXPECT_THROW(execute_generation(
                   model(), tokenizer(), plan.batches[0], {},
                   [&]() -> std::optional<Batch> {
                     if (asked) return std::nullopt;
                     asked = true;
                     return other;
                   },
                   [](const Batch&, std::vector<ItemResult>, const ExecutionStats&) {}),
               Error);
}

// A batch's stop_ids (a chat template's end of turn) end a sequence as EOS does: the token is not
// returned and the text is what came before it; they survive the trip to the worker.
TEST(Executor, AGenerationBatchsStopIdsEndItsSequences) {
  const Plan plan = make_plan({generation(0, "Once upon a time", {}, 24)}, tokenizer(), options(1 << 20));
  ASSERT_EQ(plan.batches.size(), 1u);
  const ItemResult whole = execute_batch(model(), tokenizer(), plan.batches[0]).at(0);
  ASSERT_EQ(whole.num_tokens, 24);
  const std::vector<int32_t> ids = tokenizer().encode(whole.text, false);
  ASSERT_GE(ids.size(), 4u);
  Batch stopping = plan.batches[0];
  stopping.stop_ids = {ids[3]};
  stopping = batch_from_json(nlohmann::json::parse(to_json(stopping).dump()));
  ASSERT_EQ(stopping.stop_ids, std::vector<int32_t>{ids[3]});
  const ItemResult cut = execute_batch(model(), tokenizer(), stopping).at(0);
  EXPECT_LT(cut.num_tokens, whole.num_tokens);
  EXPECT_EQ(whole.text.rfind(cut.text, 0), 0u) << "'" << cut.text << "' begins '" << whole.text << "'";
  EXPECT_LT(cut.text.size(), whole.text.size());
  nlohmann::json scoring =
      to_json(make_plan({make_request(0, RequestType::kLoglikelihood, "A", " b")}, tokenizer(), options(1 << 20))
                  .batches.at(0));
  scoring["stop_ids"] = {5};
  EXPECT_THROW(batch_from_json(scoring), Error);
}

TEST(Executor, RejectsBatchesThatMixKinds) {
  const Plan plan = make_plan({make_request(0, RequestType::kLoglikelihood, "A", " b"), generation(1, "A", {}, 3)},
                              tokenizer(), options(1 << 20));
  ASSERT_EQ(plan.batches.size(), 2u);
  Batch mixed = plan.batches[0];
  mixed.items.push_back(plan.batches[1].items[0]);
  EXPECT_THROW(execute_batch(model(), tokenizer(), mixed), Error);
}

// Rows of one batch sample with their own settings and seeds: greedy, temperature alone, top-k
// and top-p rows side by side give what each gives alone, and a repeat (another seed) differs.
TEST(Executor, RowsSampleWithTheirOwnSettings) {
  const Plan plan = make_plan({generation(0, "Once upon a time", {}, 24), generation(1, "Once upon a time", {}, 24),
                               generation(2, "Once upon a time", {}, 24), generation(3, "Once upon a time", {}, 24),
                               generation(4, "Once upon a time", {}, 24)},
                              tokenizer(), options(1 << 20));
  ASSERT_EQ(plan.batches.size(), 1u);
  Batch together = plan.batches[0];
  ASSERT_EQ(together.items.size(), 5u);
  const struct {
    double temperature;
    int64_t top_k;
    double top_p;
    uint64_t seed;
  } rows[] = {{0.0, 0, 1.0, 1}, {1.0, 0, 1.0, 1}, {1.0, 0, 1.0, 2}, {0.8, 5, 1.0, 1}, {1.2, 0, 0.5, 1}};
  for (size_t k = 0; k < 5; ++k) {
    together.items[k].temperature = rows[k].temperature;
    together.items[k].top_k = rows[k].top_k;
    together.items[k].top_p = rows[k].top_p;
    together.items[k].seed = rows[k].seed;
  }
  const auto all = execute_batch(model(), tokenizer(), together);
  for (size_t k = 0; k < 5; ++k) {
    Batch alone = together;
    alone.items = {together.items[k]};
    EXPECT_EQ(execute_batch(model(), tokenizer(), alone).at(0).text, all[k].text) << "row " << k;
  }
  EXPECT_NE(all[1].text, all[2].text);  // same settings, another seed
  EXPECT_NE(all[0].text, all[1].text);  // greedy against sampled
}

ItemResult item(int64_t request, int32_t part, int32_t parts, double logprob, bool greedy = true) {
  ItemResult r;
  r.request_index = request;
  r.part = part;
  r.parts = parts;
  r.logprob = logprob;
  r.is_greedy = greedy;
  r.num_tokens = 10 + part;
  return r;
}

TEST(Executor, CombineSumsWindowsInPartOrder) {
  std::vector<ItemResult> items = {item(7, 2, 3, -3.25), item(2, 0, 1, -1.5, false), item(7, 0, 3, -1e-9),
                                   item(7, 1, 3, 1e9, false)};
  items[1].text = "answer";
  const auto results = combine_items(items);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].index, 2);
  EXPECT_EQ(results[0].logprob, -1.5);
  EXPECT_FALSE(results[0].is_greedy);
  EXPECT_EQ(results[0].text, "answer");
  EXPECT_EQ(results[1].index, 7);
  EXPECT_EQ(results[1].logprob, ((-1e-9) + 1e9) + -3.25);  // part order, whatever the arrival order
  EXPECT_FALSE(results[1].is_greedy);
  EXPECT_EQ(results[1].num_tokens, 10 + 11 + 12);
  std::reverse(items.begin(), items.end());
  EXPECT_EQ(combine_items(items)[1].logprob, results[1].logprob);
}

TEST(Executor, CombineRejectsMissingOrDuplicateParts) {
  using ::testing::HasSubstr;
  using ::testing::ThrowsMessage;
  EXPECT_THAT(
      [] {
        combine_items({item(1, 0, 3, 0), item(1, 2, 3, 0)});
      },
      ThrowsMessage<Error>(HasSubstr("part 1 of 3 is missing")));
  EXPECT_THAT(
      [] {
        combine_items({item(1, 0, 3, 0), item(1, 1, 3, 0)});
      },
      ThrowsMessage<Error>(HasSubstr("part 2 of 3 is missing")));
  EXPECT_THAT(
      [] {
        combine_items({item(1, 0, 2, 0), item(1, 1, 2, 0), item(1, 1, 2, 0)});
      },
      ThrowsMessage<Error>(HasSubstr("appears twice")));
  EXPECT_THAT([] { combine_items({item(1, 0, 2, 0), item(1, 1, 3, 0)}); }, ThrowsMessage<Error>(HasSubstr("disagree")));
  EXPECT_THAT([] { combine_items({item(1, 4, 2, 0)}); }, ThrowsMessage<Error>(HasSubstr("outside")));
  EXPECT_TRUE(combine_items({}).empty());
}

TEST(Executor, ItemResultJsonRoundTrips) {
  ItemResult r = item(12, 1, 2, -123.456789012345678, false);
  r.text = "line\nwith \"quotes\" and \xE2\x9C\x93";
  for (double logprob : {r.logprob, -std::numeric_limits<double>::infinity(), 0.0}) {
    r.logprob = logprob;
    const ItemResult back = item_result_from_json(nlohmann::json::parse(to_json(r).dump()));
    EXPECT_EQ(back.request_index, r.request_index);
    EXPECT_EQ(back.part, r.part);
    EXPECT_EQ(back.parts, r.parts);
    EXPECT_EQ(back.logprob, r.logprob);  // bit for bit
    EXPECT_EQ(back.is_greedy, r.is_greedy);
    EXPECT_EQ(back.num_tokens, r.num_tokens);
    EXPECT_EQ(back.text, r.text);
  }
  const nlohmann::json good = to_json(item(1, 0, 1, -2));
  for (const char* key : {"request_index", "part", "parts", "logprob", "is_greedy", "num_tokens", "text"}) {
    nlohmann::json j = good;
    j.erase(key);
    EXPECT_THROW(item_result_from_json(j), Error) << key;
    j = good;
    j[key] = nlohmann::json::array();
    EXPECT_THROW(item_result_from_json(j), Error) << key;
  }
  nlohmann::json j = good;
  j["part"] = 1;  // past parts
  EXPECT_THROW(item_result_from_json(j), Error);
  j = good;
  j["logprob"] = "-infinity";
  EXPECT_THROW(item_result_from_json(j), Error);
  EXPECT_THROW(item_result_from_json(nlohmann::json("x")), Error);
}

}  // namespace
}  // namespace gpueval
