// The planner against lm-evaluation-harness's request semantics (pair
// encoding, BOS, truncation, rolling windows, generation prompts) on the real
// stories260K tokenizer, and the plan's own invariants: every request exactly
// once, the budget, longest first, determinism, and the batch wire format.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <type_traits>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "gpueval/model.h"
#include "plan/packing.h"
#include "plan/planner.h"
#include "test_util.h"

namespace gpueval {
namespace {

// The plan is a function of the requests, the tokenizer and the options and of
// nothing else: there is no worker count to pass, and no call that shards or
// merges plans. Workers take whole batches from one plan.
static_assert(
    std::is_same_v<decltype(&make_plan), Plan (*)(const std::vector<Request>&, const Tokenizer&, const PlanOptions&)>);

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = load_tokenizer(testing::source_dir() + "/models/stories260K");
  return *tok;
}

std::vector<int32_t> encode(const std::string& text) { return tokenizer().encode(text, false); }
int32_t bos() { return *tokenizer().bos_id(); }

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Request loglikelihood(int64_t index, std::string context, std::string continuation) {
  Request r;
  r.index = index;
  r.task = "t";
  r.doc_id = index;
  r.type = RequestType::kLoglikelihood;
  r.context = std::move(context);
  r.continuation = std::move(continuation);
  return r;
}

Request rolling(int64_t index, std::string text) {
  Request r;
  r.index = index;
  r.task = "wiki";
  r.doc_id = index;
  r.type = RequestType::kLoglikelihoodRolling;
  r.context = std::move(text);
  return r;
}

Request generation(int64_t index, std::string context, std::vector<std::string> stops, int64_t max_tokens) {
  Request r;
  r.index = index;
  r.task = "gen";
  r.doc_id = index;
  r.type = RequestType::kGenerateUntil;
  r.context = std::move(context);
  r.stops = std::move(stops);
  r.max_tokens = max_tokens;
  return r;
}

PlanOptions options(int64_t batch_tokens = 1 << 20, int64_t max_length = 512) {
  PlanOptions o;
  o.batch_tokens = batch_tokens;
  o.max_length = max_length;
  return o;
}

// The only item of a one-request plan.
WorkItem only_item(const Request& r, const PlanOptions& o = options()) {
  Plan plan = make_plan({r}, tokenizer(), o);
  EXPECT_EQ(plan.batches.size(), 1u);
  EXPECT_EQ(plan.batches.at(0).items.size(), 1u);
  return plan.batches.at(0).items.at(0);
}

std::vector<int32_t> targets(const WorkItem& item) {
  return std::vector<int32_t>(item.tokens.begin() + item.first_target, item.tokens.end());
}

const std::string kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
    "One day, she saw a big, red ball in the park. She ran to the ball and kicked it very high. "
    "The ball flew over the trees and landed in a pond. Lily was sad, but a kind duck brought it back. ";

std::string long_text(int repeats) {
  std::string s;
  for (int i = 0; i < repeats; ++i) s += kStory;
  return s;
}

TEST(Planner, ContinuationIsWhatTheWholeEncodingAddsAfterTheContext) {
  WorkItem item = only_item(loglikelihood(0, "Once upon a time", " there was a cat"));
  const auto whole = concat({bos()}, encode("Once upon a time there was a cat"));
  const auto context = concat({bos()}, encode("Once upon a time"));
  EXPECT_EQ(item.tokens, whole);
  EXPECT_EQ(item.first_target, static_cast<int64_t>(context.size()));
  EXPECT_EQ(item.type, RequestType::kLoglikelihood);
  EXPECT_EQ(item.cost(), static_cast<int64_t>(whole.size()) - 1);
}

TEST(Planner, TrailingWhitespaceOfTheContextMovesToTheContinuation) {
  const WorkItem moved = only_item(loglikelihood(0, "Once upon a time ", "there"));
  const WorkItem plain = only_item(loglikelihood(0, "Once upon a time", " there"));
  EXPECT_EQ(moved.tokens, plain.tokens);
  EXPECT_EQ(moved.first_target, plain.first_target);
  // Newlines, tabs and Python's other whitespace (here U+00A0 and U+001F) move too.
  const WorkItem many = only_item(loglikelihood(0, "Question:\n\t \xC2\xA0\x1F", "Yes"));
  const WorkItem ref = only_item(loglikelihood(0, "Question:", "\n\t \xC2\xA0\x1FYes"));
  EXPECT_EQ(many.tokens, ref.tokens);
  EXPECT_EQ(many.first_target, ref.first_target);
  EXPECT_EQ(many.first_target, 1 + static_cast<int64_t>(encode("Question:").size()));
  // Without the rule the split would differ: the context's own encoding ends in a space token.
  EXPECT_NE(concat({bos()}, encode("Once upon a time ")).size(), static_cast<size_t>(moved.first_target));
}

TEST(Planner, BosStartsContextsOnlyWhenAsked) {
  PlanOptions no_bos = options();
  no_bos.add_bos = false;
  const WorkItem with = only_item(loglikelihood(0, "The dog", " ran"));
  const WorkItem without = only_item(loglikelihood(0, "The dog", " ran"), no_bos);
  EXPECT_EQ(with.tokens.front(), bos());
  EXPECT_EQ(without.tokens, encode("The dog ran"));
  EXPECT_EQ(with.first_target, without.first_target + 1);
  EXPECT_EQ(targets(with), targets(without));
}

TEST(Planner, EmptyContextIsThePrefixTokenWhateverAddBosSays) {
  PlanOptions no_bos = options();
  no_bos.add_bos = false;
  for (const PlanOptions& o : {options(), no_bos}) {
    const WorkItem item = only_item(loglikelihood(0, "", "Lily ran home."), o);
    EXPECT_EQ(item.tokens, concat({bos()}, encode("Lily ran home.")));
    EXPECT_EQ(item.first_target, 1);
  }
}

TEST(Planner, LongInputsAreLeftTruncatedToMaxLengthPlusTheLastTarget) {
  std::string context = long_text(3);
  context.pop_back();  // no trailing space, so the pair splits where the strings do
  const std::string continuation = " The end.";
  const int64_t max_length = 64;
  const WorkItem item = only_item(loglikelihood(0, context, continuation), options(1 << 20, max_length));
  const auto whole = concat({bos()}, encode(context + continuation));
  const size_t cont = whole.size() - 1 - encode(context).size();
  ASSERT_GT(whole.size(), static_cast<size_t>(max_length + 1));
  EXPECT_EQ(item.tokens, std::vector<int32_t>(whole.end() - (max_length + 1), whole.end()));
  EXPECT_EQ(item.first_target, max_length + 1 - static_cast<int64_t>(cont));
  EXPECT_EQ(item.cost(), max_length);
  // The plan counts what it truncated, so the run can say so.
  const Plan plan = make_plan({loglikelihood(0, context, continuation), loglikelihood(1, "Hi", " there")}, tokenizer(),
                              options(1 << 20, max_length));
  EXPECT_EQ(plan.truncated_requests, 1);
  EXPECT_EQ(rebatch(plan, options(10, max_length)).truncated_requests, 1);
  // A continuation longer than the context window (where lm-evaluation-harness 0.4.13 fails):
  // its last max_length tokens are scored, after the one before them, and the plan counts it.
  const Plan cut = make_plan({loglikelihood(7, "Hi", long_text(1)), loglikelihood(8, "Hi", " there")}, tokenizer(),
                             options(1 << 20, 8));
  EXPECT_EQ(cut.long_continuations, 1);
  EXPECT_EQ(cut.truncated_requests, 1);
  const auto cont_tokens = concat({bos()}, encode("Hi" + long_text(1)));
  for (const Batch& b : cut.batches) {
    for (const WorkItem& item : b.items) {
      if (item.request_index != 7) continue;
      EXPECT_EQ(item.tokens, std::vector<int32_t>(cont_tokens.end() - 9, cont_tokens.end()));
      EXPECT_EQ(item.first_target, 1);
    }
  }
}

TEST(Planner, RollingWindowsCoverTheTextExactlyOnce) {
  const std::string text = long_text(4);
  const std::vector<int32_t> tokens = encode(text);
  const int64_t max_length = 50;
  ASSERT_GT(tokens.size(), static_cast<size_t>(3 * max_length));
  Plan plan = make_plan({rolling(3, text)}, tokenizer(), options(1 << 20, max_length));
  std::map<int32_t, WorkItem> parts;
  for (const Batch& b : plan.batches)
    for (const WorkItem& item : b.items) EXPECT_TRUE(parts.emplace(item.part, item).second) << item.part;
  const int32_t n = parts.begin()->second.parts;
  ASSERT_EQ(parts.size(), static_cast<size_t>(n));
  EXPECT_EQ(n, static_cast<int32_t>((tokens.size() + max_length - 1) / max_length));
  std::vector<int32_t> predicted;
  for (const auto& [k, item] : parts) {
    EXPECT_EQ(item.request_index, 3);
    EXPECT_EQ(item.parts, n);
    EXPECT_EQ(item.type, RequestType::kLoglikelihoodRolling);
    EXPECT_LE(item.cost(), max_length);
    // Every window after the first carries a full context of max_length inputs.
    if (k > 0) EXPECT_EQ(item.cost(), max_length);
    const auto t = targets(item);
    predicted.insert(predicted.end(), t.begin(), t.end());
  }
  EXPECT_EQ(parts.at(0).tokens.front(), bos());
  EXPECT_EQ(parts.at(0).first_target, 1);
  EXPECT_EQ(predicted, tokens);
}

TEST(Planner, EmptyRollingTextIsOneItemWithNothingToScore) {
  const WorkItem item = only_item(rolling(0, ""));
  EXPECT_EQ(item.tokens, std::vector<int32_t>{bos()});
  EXPECT_EQ(item.first_target, 1);
  EXPECT_EQ(item.parts, 1);
}

TEST(Planner, GenerationPromptLeavesRoomForMaxTokens) {
  const WorkItem item = only_item(generation(5, "Once upon a time", {"\n", "."}, 32));
  EXPECT_EQ(item.tokens, concat({bos()}, encode("Once upon a time")));
  EXPECT_EQ(item.stops, (std::vector<std::string>{"\n", "."}));
  EXPECT_EQ(item.max_tokens, 32);
  EXPECT_EQ(item.temperature, 0.0);
  EXPECT_EQ(item.cost(), static_cast<int64_t>(item.tokens.size()) + 32);
  EXPECT_EQ(item.seed, request_seed(1234, "gen", 5, 0));

  const WorkItem cut = only_item(generation(5, long_text(2), {}, 40), options(1 << 20, 100));
  const auto full = concat({bos()}, encode(long_text(2)));
  EXPECT_EQ(cut.tokens, std::vector<int32_t>(full.end() - 60, full.end()));
  EXPECT_EQ(cut.cost(), 100);
  EXPECT_THROW(make_plan({generation(1, "x", {}, 100)}, tokenizer(), options(1 << 20, 100)), Error);
}

TEST(Planner, LmEvalsRequestsAreEncodedAndStoppedAsItsHfModelDoes) {
  // Rolling: the text encoded with the tokenizer's BOS (stories260K adds it) after the window's own.
  Request text = rolling(0, "Once upon a time");
  Request hf = text;
  hf.as_hf = true;
  EXPECT_EQ(only_item(text).tokens, concat({bos()}, encode("Once upon a time")));
  EXPECT_EQ(only_item(hf).tokens, concat({bos(), bos()}, encode("Once upon a time")));  // P(BOS | BOS) first
  // Generation: a chat template's end of turn stops gpueval's own, not lm-eval's (hf stops at until and EOS).
  PlanOptions o = options();
  o.generation_stop_ids = {7};
  Request own = generation(1, "Once upon a time", {"."}, 8), theirs = generation(2, "Once upon a time", {"."}, 8);
  theirs.as_hf = true;
  const Plan plan = make_plan({own, theirs}, tokenizer(), o);
  ASSERT_EQ(plan.batches.size(), 2u);  // never one batch: stops are a batch's
  for (const Batch& b : plan.batches) {
    ASSERT_EQ(b.items.size(), 1u);
    EXPECT_EQ(b.stop_ids, b.items[0].request_index == 1 ? std::vector<int32_t>{7} : std::vector<int32_t>{});
  }
}

TEST(Planner, SeedsDependOnTheRequestAndTheRunSeedOnly) {
  EXPECT_EQ(request_seed(1, "gsm8k", 3, 0), request_seed(1, "gsm8k", 3, 0));
  std::set<uint64_t> seen;
  for (uint64_t run : {1ull, 2ull})
    for (const char* task : {"gsm8k", "gsm8k_cot", "gsm8"})
      for (int64_t doc : {0, 1, 2, 300})
        for (int64_t choice : {0, 1}) seen.insert(request_seed(run, task, doc, choice));
  EXPECT_EQ(seen.size(), 2u * 3u * 4u * 2u);
  PlanOptions other = options();
  other.seed = 99;
  EXPECT_EQ(only_item(generation(4, "Hi", {}, 8), other).seed, request_seed(99, "gen", 4, 0));
}

// A mixed run: short and long loglikelihood requests, rolling texts of one or
// several windows, and generations.
std::vector<Request> mixed_requests() {
  std::vector<Request> rs;
  std::mt19937 rng(7);
  const std::vector<std::string> words = {"Lily", " saw",   " a",   " big", " dog",  ".",  " The", " sun",
                                          " was", " happy", " and", " ran", " home", "\n", " cat", " played"};
  auto sentence = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += words[rng() % words.size()];
    return s;
  };
  for (int i = 0; i < 60; ++i) {
    const int64_t index = static_cast<int64_t>(rs.size());
    switch (i % 6) {
      case 0: rs.push_back(rolling(index, sentence(5 + static_cast<int>(rng() % 300)))); break;
      case 1: rs.push_back(generation(index, sentence(3 + static_cast<int>(rng() % 40)), {"."}, 8 + i)); break;
      default: rs.push_back(loglikelihood(index, sentence(1 + static_cast<int>(rng() % 60)), sentence(1 + i % 4)));
    }
  }
  return rs;
}

TEST(Planner, EveryRequestAppearsExactlyOnceWithAllItsParts) {
  const auto requests = mixed_requests();
  for (int64_t budget : {1, 100, 700, 5000, 1 << 30})
    for (bool reuse : {true, false}) {
      PlanOptions o = options(budget, 64);
      o.prefix_reuse = o.group_continuations = reuse;
      Plan plan = make_plan(requests, tokenizer(), o);
      std::map<int64_t, std::set<int32_t>> seen;
      std::map<int64_t, int32_t> parts;
      int64_t items = 0, total = 0, padded = 0;
      for (size_t i = 0; i < plan.batches.size(); ++i) {
        const Batch& b = plan.batches[i];
        EXPECT_EQ(b.id, static_cast<int64_t>(i));
        padded += b.padded_tokens;
        for (const WorkItem& item : b.items) {
          EXPECT_TRUE(seen[item.request_index].insert(item.part).second) << item.request_index;
          parts[item.request_index] = item.parts;
          ++items;
          total += item.cost();
        }
      }
      ASSERT_EQ(seen.size(), requests.size()) << "budget " << budget;
      for (const auto& [index, got] : seen) {
        EXPECT_EQ(got.size(), static_cast<size_t>(parts[index])) << index;
        EXPECT_EQ(*got.rbegin(), parts[index] - 1);
      }
      EXPECT_EQ(plan.num_requests, static_cast<int64_t>(requests.size()));
      EXPECT_EQ(plan.num_items, items);
      EXPECT_EQ(plan.total_tokens, total);
      EXPECT_EQ(plan.padded_tokens, padded);
      EXPECT_GE(plan.padding_fraction(), 0.0);
      EXPECT_LT(plan.padding_fraction(), 1.0);
      if (budget == 1 && !reuse) EXPECT_EQ(plan.batches.size(), static_cast<size_t>(items));
    }
}

// MMLU-like: per subject a few-shot prefix, then a question, with four one-token answers.
std::vector<Request> fewshot_requests(int subjects, int docs) {
  std::vector<Request> rs;
  const char* names[] = {"animals", "toys", "food"};
  for (int s = 0; s < subjects; ++s) {
    std::string fewshot = std::string("The following are questions about ") + names[s] + ".\n\n";
    for (int e = 0; e < 3; ++e)
      fewshot += fmt::format("Question {} about {}: what did Lily see in the park?\nAnswer: B\n\n", e, names[s]);
    for (int d = 0; d < docs; ++d) {
      for (const char* letter : {" A", " B", " C", " D"}) {
        Request r =
            loglikelihood(static_cast<int64_t>(rs.size()),
                          fewshot + fmt::format("Why was Tom {} happy on day {}?\nAnswer:", names[s], d), letter);
        r.task = names[s];
        r.doc_id = d;
        rs.push_back(std::move(r));
      }
    }
  }
  return rs;
}

TEST(Planner, PrefixReuseComputesFewShotPrefixesAndSharedContextsOnce) {
  const auto requests = fewshot_requests(3, 7);
  PlanOptions o = options(200, 512);
  const Plan plan = make_plan(requests, tokenizer(), o);
  EXPECT_EQ(plan.num_prefixes, 3);
  std::set<int64_t> finished_prefixes;
  int64_t last_prefix = -1, rows = 0;
  for (const Batch& b : plan.batches) {
    EXPECT_TRUE(b.share_contexts);
    ASSERT_FALSE(b.prefix.empty());
    // A prefix's batches are consecutive: the worker that holds it keeps going.
    if (b.prefix_id != last_prefix) {
      EXPECT_TRUE(finished_prefixes.insert(b.prefix_id).second) << "prefix " << b.prefix_id << " comes back";
      last_prefix = b.prefix_id;
    }
    std::set<int64_t> docs;
    for (const WorkItem& item : b.items) {
      ASSERT_GT(item.tokens.size(), b.prefix.size());
      EXPECT_TRUE(std::equal(b.prefix.begin(), b.prefix.end(), item.tokens.begin()));
      docs.insert(item.request_index / 4);
    }
    // The four answers of a question share one row (and so one batch).
    EXPECT_EQ(b.items.size(), 4 * docs.size());
    // One row per question, packed into sequences side by side: count the parts.
    const auto packed = pack_rows(b);
    int64_t parts = 0;
    for (const PackedRow& r : packed) parts += 1 + r.segments.back() / kSegmentsPerPart;
    EXPECT_EQ(parts, static_cast<int64_t>(docs.size()));
    EXPECT_LE(packed.size(), docs.size());
    rows += parts;
    int64_t longest = 0;
    for (const PackedRow& r : packed) longest = std::max<int64_t>(longest, static_cast<int64_t>(r.tokens.size()));
    EXPECT_EQ(b.padded_tokens, static_cast<int64_t>(packed.size()) * longest);
    if (packed.size() > 1) EXPECT_LE(b.padded_tokens, o.batch_tokens);
  }
  EXPECT_EQ(rows, 3 * 7);
  // Every token is computed once: at least 3x fewer than one row per request (here ~10x).
  EXPECT_LT(3 * (plan.row_tokens + plan.prefix_tokens), plan.total_tokens);
  // Off: nothing is shared and every request's every token is computed.
  o.prefix_reuse = o.group_continuations = false;
  const Plan off = make_plan(requests, tokenizer(), o);
  EXPECT_EQ(off.num_prefixes, 0);
  EXPECT_EQ(off.prefix_tokens, 0);
  EXPECT_EQ(off.row_tokens, off.total_tokens);
  EXPECT_EQ(off.total_tokens, plan.total_tokens);
  for (const Batch& b : off.batches) {
    EXPECT_FALSE(b.share_contexts);
    EXPECT_TRUE(b.prefix.empty());
    EXPECT_EQ(b.prefix_id, -1);
  }
}

TEST(Planner, PrefixReuseOffStillGroupsAContextsContinuationsAsLmEvalDoes) {
  const auto requests = fewshot_requests(3, 7);
  PlanOptions o = options(200, 512);
  o.prefix_reuse = false;
  const Plan plan = make_plan(requests, tokenizer(), o);
  EXPECT_EQ(plan.num_prefixes, 0);
  EXPECT_EQ(plan.prefix_tokens, 0);
  for (const Batch& b : plan.batches) {
    EXPECT_TRUE(b.share_contexts);
    EXPECT_TRUE(b.prefix.empty());
  }
  // Each question's context once for its answers: never more than HFLM computes, which runs one
  // forward per distinct context + continuation[:-1] (so once per question for one-token answers).
  std::set<std::vector<int32_t>> hflm_inputs;
  int64_t hflm_tokens = 0;
  for (const Batch& b : plan.batches)
    for (const WorkItem& item : b.items)
      if (hflm_inputs.insert({item.tokens.begin(), item.tokens.end() - 1}).second)
        hflm_tokens += static_cast<int64_t>(item.tokens.size()) - 1;
  EXPECT_LE(plan.row_tokens, hflm_tokens);
  EXPECT_LT(3 * plan.row_tokens, plan.total_tokens);
  // Prefix reuse on and grouping off: the few-shot prefixes once, but each answer its own row.
  o.prefix_reuse = true;
  o.group_continuations = false;
  const Plan ungrouped = make_plan(requests, tokenizer(), o);
  EXPECT_EQ(ungrouped.num_prefixes, 3);
  for (const Batch& b : ungrouped.batches) {
    EXPECT_FALSE(b.share_contexts);
    EXPECT_EQ(pack_rows(b).size(), b.items.size());
  }
  EXPECT_GT(ungrouped.row_tokens, 0);
}

TEST(Planner, RebatchEqualsAPlanMadeWithTheNewBudget) {
  auto requests = fewshot_requests(2, 5);
  for (Request r : mixed_requests()) {
    r.index = static_cast<int64_t>(requests.size());
    requests.push_back(std::move(r));
  }
  for (bool reuse : {true, false}) {
    PlanOptions small = options(100, 64), large = options(5000, 64);
    small.prefix_reuse = large.prefix_reuse = small.group_continuations = large.group_continuations = reuse;
    large.max_batch_size = 3;
    const Plan plan = make_plan(requests, tokenizer(), small);
    EXPECT_EQ(to_json(rebatch(plan, large)).dump(), to_json(make_plan(requests, tokenizer(), large)).dump());
    EXPECT_EQ(to_json(rebatch(rebatch(plan, large), small)).dump(), to_json(plan).dump());
    EXPECT_EQ(longest_item(plan), 64);  // the left-truncated request
  }
}

TEST(Planner, BatchesRespectTheBudgetAndNeverMixGenerationWithScoring) {
  const auto requests = mixed_requests();
  for (int64_t max_batch_size : {0, 3}) {
    PlanOptions o = options(600, 64);
    o.prefix_reuse = o.group_continuations = false;  // one row per item
    o.max_batch_size = max_batch_size;
    Plan plan = make_plan(requests, tokenizer(), o);
    for (const Batch& b : plan.batches) {
      int64_t longest = 0;
      for (const WorkItem& item : b.items) longest = std::max(longest, item.cost());
      EXPECT_EQ(b.padded_tokens, static_cast<int64_t>(b.items.size()) * longest);
      if (b.items.size() > 1) EXPECT_LE(b.padded_tokens, o.batch_tokens);
      if (max_batch_size > 0) EXPECT_LE(b.items.size(), static_cast<size_t>(max_batch_size));
      const bool generate = b.items.front().type == RequestType::kGenerateUntil;
      for (const WorkItem& item : b.items) EXPECT_EQ(item.type == RequestType::kGenerateUntil, generate);
    }
  }
}

bool before(const WorkItem& a, const WorkItem& b) {
  if (a.cost() != b.cost()) return a.cost() > b.cost();
  if (a.request_index != b.request_index) return a.request_index < b.request_index;
  return a.part < b.part;
}

TEST(Planner, LongestFirstAndCutGreedily) {
  const auto requests = mixed_requests();
  PlanOptions o = options(900, 64);
  o.prefix_reuse = o.group_continuations = false;  // one row per item
  Plan plan = make_plan(requests, tokenizer(), o);
  ASSERT_GT(plan.batches.size(), 3u);
  for (size_t i = 0; i < plan.batches.size(); ++i) {
    const auto& items = plan.batches[i].items;
    for (size_t k = 1; k < items.size(); ++k) EXPECT_TRUE(before(items[k - 1], items[k]));
    if (i > 0) EXPECT_TRUE(before(plan.batches[i - 1].items.front(), items.front()));
  }
  // Greedy: within one request type (each is cut on its own), the item that opened each batch
  // would not have fit the one before it.
  for (RequestType type :
       {RequestType::kLoglikelihood, RequestType::kLoglikelihoodRolling, RequestType::kGenerateUntil}) {
    const Batch* previous = nullptr;
    for (const Batch& b : plan.batches) {
      if (b.items.front().type != type) continue;
      if (previous) {
        const int64_t count = static_cast<int64_t>(previous->items.size()) + 1;
        EXPECT_GT(count * previous->items.front().cost(), o.batch_tokens) << "batch " << b.id;
      }
      previous = &b;
    }
  }
}

TEST(Planner, SamePlanWhateverTheThreadsOrTheRequestOrder) {
  auto requests = mixed_requests();
  PlanOptions one = options(800, 64), many = one;
  one.threads = 1;
  many.threads = 4;
  const std::string a = to_json(make_plan(requests, tokenizer(), one)).dump();
  const std::string b = to_json(make_plan(requests, tokenizer(), one)).dump();
  EXPECT_EQ(a, b);
  // 60 requests stay on one thread; enough of them spread over four.
  std::vector<Request> big;
  for (int copy = 0; copy < 5; ++copy)
    for (Request r : requests) {
      r.index = static_cast<int64_t>(big.size());
      big.push_back(r);
    }
  EXPECT_EQ(to_json(make_plan(big, tokenizer(), one)).dump(), to_json(make_plan(big, tokenizer(), many)).dump());
  std::shuffle(requests.begin(), requests.end(), std::mt19937(3));
  EXPECT_EQ(to_json(make_plan(requests, tokenizer(), one)).dump(), a);
}

TEST(Planner, RejectsBadOptionsAndDuplicateRequests) {
  const std::vector<Request> one = {loglikelihood(0, "a", " b")};
  EXPECT_THROW(make_plan(one, tokenizer(), options(0)), Error);
  EXPECT_THROW(make_plan(one, tokenizer(), options(10, 0)), Error);
  PlanOptions neg = options();
  neg.max_batch_size = -1;
  EXPECT_THROW(make_plan(one, tokenizer(), neg), Error);
  EXPECT_THAT(
      [] {
        make_plan({loglikelihood(4, "a", " b"), loglikelihood(4, "c", " d")}, tokenizer(), options());
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("request index 4")));
  EXPECT_TRUE(make_plan({}, tokenizer(), options()).batches.empty());
}

TEST(Planner, BatchJsonRoundTrips) {
  auto requests = fewshot_requests(2, 3);
  for (Request r : mixed_requests()) {
    r.index = static_cast<int64_t>(requests.size());
    requests.push_back(std::move(r));
  }
  Plan plan = make_plan(requests, tokenizer(), options(700, 512));
  EXPECT_GT(plan.num_prefixes, 0);
  // The largest seed must survive both encodings exactly.
  for (Batch& b : plan.batches)
    for (WorkItem& item : b.items)
      if (item.type == RequestType::kGenerateUntil) item.seed = ~0ull - static_cast<uint64_t>(item.request_index);
  for (const Batch& b : plan.batches) {
    const nlohmann::json j = to_json(b);
    const Batch text = batch_from_json(nlohmann::json::parse(j.dump()));
    const Batch cbor = batch_from_json(nlohmann::json::from_cbor(nlohmann::json::to_cbor(j)));
    EXPECT_EQ(to_json(text), j);
    EXPECT_EQ(to_json(cbor), j);
    for (size_t k = 0; k < b.items.size(); ++k) EXPECT_EQ(cbor.items[k].seed, b.items[k].seed);
  }
}

TEST(Planner, MalformedBatchJsonIsAnError) {
  Plan plan = make_plan({loglikelihood(0, "The dog", " ran"), generation(1, "Hi", {"."}, 4)}, tokenizer(), options(1));
  ASSERT_EQ(plan.batches.size(), 2u);
  const nlohmann::json good_ll =
      to_json(plan.batches[0].items[0].type == RequestType::kLoglikelihood ? plan.batches[0] : plan.batches[1]);
  const nlohmann::json good_gen =
      to_json(plan.batches[0].items[0].type == RequestType::kGenerateUntil ? plan.batches[0] : plan.batches[1]);
  EXPECT_NO_THROW(batch_from_json(good_ll));
  EXPECT_NO_THROW(batch_from_json(good_gen));
  struct Case {
    const char* name;
    const nlohmann::json* base;
    std::function<void(nlohmann::json&)> damage;
  };
  const std::vector<Case> cases = {
      {"not an object", &good_ll, [](nlohmann::json& j) { j = nlohmann::json::array(); }},
      {"no id", &good_ll, [](nlohmann::json& j) { j.erase("id"); }},
      {"negative id", &good_ll, [](nlohmann::json& j) { j["id"] = -1; }},
      {"items not an array", &good_ll, [](nlohmann::json& j) { j["items"] = "x"; }},
      {"no items", &good_ll, [](nlohmann::json& j) { j["items"] = nlohmann::json::array(); }},
      {"padded_tokens wrong", &good_ll,
       [](nlohmann::json& j) { j["padded_tokens"] = j["padded_tokens"].get<int64_t>() + 1; }},
      {"item not an object", &good_ll, [](nlohmann::json& j) { j["items"][0] = 3; }},
      {"unknown type", &good_ll, [](nlohmann::json& j) { j["items"][0]["type"] = "loglikelihood_sideways"; }},
      {"token negative", &good_ll, [](nlohmann::json& j) { j["items"][0]["tokens"][1] = -5; }},
      {"token fractional", &good_ll, [](nlohmann::json& j) { j["items"][0]["tokens"][1] = 2.5; }},
      {"token too large", &good_ll, [](nlohmann::json& j) { j["items"][0]["tokens"][1] = 1ll << 40; }},
      {"tokens not an array", &good_ll, [](nlohmann::json& j) { j["items"][0]["tokens"] = "abc"; }},
      {"first_target zero", &good_ll, [](nlohmann::json& j) { j["items"][0]["first_target"] = 0; }},
      {"first_target past end", &good_ll, [](nlohmann::json& j) { j["items"][0]["first_target"] = 1000; }},
      {"no first_target", &good_ll, [](nlohmann::json& j) { j["items"][0].erase("first_target"); }},
      {"part beyond parts", &good_ll, [](nlohmann::json& j) { j["items"][0]["part"] = 1; }},
      {"zero parts", &good_ll, [](nlohmann::json& j) { j["items"][0]["parts"] = 0; }},
      {"request_index a string", &good_ll, [](nlohmann::json& j) { j["items"][0]["request_index"] = "0"; }},
      {"huge request_index", &good_ll, [](nlohmann::json& j) { j["items"][0]["request_index"] = ~0ull; }},
      {"negative seed", &good_gen, [](nlohmann::json& j) { j["items"][0]["seed"] = -1; }},
      {"no stops", &good_gen, [](nlohmann::json& j) { j["items"][0].erase("stops"); }},
      {"stop not a string", &good_gen, [](nlohmann::json& j) { j["items"][0]["stops"][0] = 1; }},
      {"negative temperature", &good_gen, [](nlohmann::json& j) { j["items"][0]["temperature"] = -0.5; }},
      {"negative max_tokens", &good_gen, [](nlohmann::json& j) { j["items"][0]["max_tokens"] = -1; }},
      {"empty prompt", &good_gen,
       [](nlohmann::json& j) {
         j["items"][0]["tokens"] = nlohmann::json::array();
         j["padded_tokens"] = j["items"][0]["max_tokens"];
       }},
  };
  for (const Case& c : cases) {
    nlohmann::json j = *c.base;
    c.damage(j);
    EXPECT_THAT([&] { batch_from_json(j); }, ::testing::ThrowsMessage<Error>(::testing::StartsWith("batch"))) << c.name;
  }
  // A batch with a shared prefix: items that do not extend it, or a prefix without its id.
  const Plan shared = make_plan(fewshot_requests(1, 2), tokenizer(), options(1000, 512));
  ASSERT_EQ(shared.batches.size(), 1u);
  const nlohmann::json good = to_json(shared.batches[0]);
  EXPECT_NO_THROW(batch_from_json(good));
  nlohmann::json j = good;
  j["prefix"][2] = j["prefix"][2].get<int>() + 1;
  EXPECT_THAT([&] { batch_from_json(j); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("does not extend the batch's")));
  j = good;
  j.erase("prefix_id");
  EXPECT_THAT([&] { batch_from_json(j); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("prefix_id")));
  j = good;
  j.erase("share_contexts");  // the rows, and so the padded size, change; and only shared rows are packed
  EXPECT_THAT([&] { batch_from_json(j); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("sequence_width")));
  j.erase("sequence_width");
  EXPECT_THAT([&] { batch_from_json(j); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("padded_tokens")));
  j = good;
  ASSERT_TRUE(j.contains("sequence_width"));
  j["sequence_width"] = 0;
  EXPECT_THAT([&] { batch_from_json(j); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("batch.sequence_width")));
}

// Questions of many lengths after a shared prefix (MMLU's shape): packing short rows into
// sequences about twice the longest row brings padding down, and every batch stays in budget.
TEST(Planner, PackedRowsKeepPaddingLowAndBatchesInBudget) {
  std::vector<Request> rs;
  std::string fewshot = "The following are questions about animals.\n\n";
  for (int e = 0; e < 3; ++e) fewshot += "Question: what did Lily see in the park?\nAnswer: B\n\n";
  for (int d = 0; d < 60; ++d) {
    std::string question = "Why was Tom";
    for (int w = 0; w < 1 + (d * 37) % 23; ++w) question += " very";
    for (const char* letter : {" A", " B", " C", " D"}) {
      Request r = loglikelihood(static_cast<int64_t>(rs.size()), fewshot + question + " happy?\nAnswer:", letter);
      r.doc_id = d;
      rs.push_back(std::move(r));
    }
  }
  const Plan plan = make_plan(rs, tokenizer(), options(256, 512));
  ASSERT_EQ(plan.num_prefixes, 1);
  int64_t unpacked = 0;  // what one row per sequence would pad to: rows x the longest row, per batch
  for (const Batch& b : plan.batches) {
    const auto rows = pack_rows(b);
    if (rows.size() > 1) EXPECT_LE(b.padded_tokens, 256) << b.id;
    const std::vector<ContextGroup> groups = group_by_context(b.items, true);
    int64_t longest = 0;
    for (const ContextGroup& g : groups) longest = std::max(longest, row_cost(g, b.items, b.prefix.size()));
    unpacked += static_cast<int64_t>(groups.size()) * longest;
  }
  const double unpacked_padding = 1.0 - static_cast<double>(plan.row_tokens) / static_cast<double>(unpacked);
  EXPECT_LT(plan.padding_fraction(), 0.08) << "unpacked " << unpacked_padding;
  EXPECT_LT(plan.padding_fraction(), unpacked_padding / 2);
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

// dynamic / longrope RoPE (PlanOptions::rope_length_threshold): an item with more inputs than the
// threshold runs in a row of its own with no prefix, no shared context and no packing; the others
// share as before.
TEST(Planner, ItemsPastTheRopeLengthThresholdRunAlone) {
  std::vector<Request> requests = fewshot_requests(2, 4);
  const size_t regular = requests.size();
  // Two longer questions after subject 0's few-shot examples, four answers each.
  for (int d = 0; d < 2; ++d) {
    const std::string context = requests[0].context.substr(0, requests[0].context.rfind("Why was")) + kStory +
                                fmt::format("Why was Tom {} sad?\nAnswer:", d);
    for (const char* letter : {" A", " B", " C", " D"}) {
      Request r = loglikelihood(static_cast<int64_t>(requests.size()), context, letter);
      r.task = "animals";
      r.doc_id = 100 + d;
      requests.push_back(std::move(r));
    }
  }
  PlanOptions o = options(400, 512);
  const Plan before = make_plan(requests, tokenizer(), o);
  int64_t threshold = 0;
  for (const Batch& b : before.batches)
    for (const WorkItem& item : b.items)
      if (static_cast<size_t>(item.request_index) < regular) threshold = std::max(threshold, item.cost());
  o.rope_length_threshold = threshold;
  const Plan plan = make_plan(requests, tokenizer(), o);
  EXPECT_EQ(plan.num_items, before.num_items);
  size_t alone = 0, shared_regular = 0;
  for (const Batch& b : plan.batches) {
    for (const WorkItem& item : b.items) {
      if (item.cost() <= threshold) {
        if (!b.prefix.empty()) ++shared_regular;
        continue;
      }
      ++alone;
      EXPECT_GE(static_cast<size_t>(item.request_index), regular);
      EXPECT_FALSE(b.share_contexts);
      EXPECT_TRUE(b.prefix.empty());
      EXPECT_EQ(b.prefix_id, -1);
    }
    if (b.share_contexts || !b.prefix.empty()) continue;
    // Each row of a batch that shares nothing is one item, positions 0 .. inputs - 1.
    const std::vector<PackedRow> rows = pack_rows(b);
    ASSERT_EQ(rows.size(), b.items.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(static_cast<int64_t>(rows[i].tokens.size()), b.items[i].cost());
      EXPECT_EQ(rows[i].positions.back() + 1, b.items[i].cost());
    }
  }
  EXPECT_EQ(alone, 8u);  // the two long questions' four answers each
  EXPECT_EQ(shared_regular, regular);  // the rest still share their few-shot prefixes
  // Without the threshold the long questions share subject 0's prefix like the others.
  size_t long_with_prefix = 0;
  for (const Batch& b : before.batches)
    for (const WorkItem& item : b.items)
      if (static_cast<size_t>(item.request_index) >= regular && !b.prefix.empty()) ++long_with_prefix;
  EXPECT_EQ(long_with_prefix, 8u);
  // rebatch keeps the rule (it re-plans the same items under the same options).
  const Plan again = rebatch(plan, o);
  EXPECT_EQ(to_json(again), to_json(plan));
}

}  // namespace
}  // namespace gpueval

namespace gpueval {
namespace {

// generate_until prompts with a common few-shot head: batches carry it as their prefix (computed
// once per worker), each prompt going past it; a task's repeats (equal prompts) sit side by side;
// the items are shared out among the workers, and a batch decodes up to generation_rows at once.
TEST(Planner, GenerationBatchesShareTheFewShotPrefixAndTheWorkers) {
  const std::string head =
      "Once upon a time there was a little girl named Lily. She loved to play outside in the sun. "
      "One day she saw a big red ball in the park and ran to get it. ";
  std::vector<Request> requests;
  for (int64_t i = 0; i < 12; ++i) {
    Request r = generation(i, head + "Question " + std::to_string(i / 3) + ": what did she do?", {"\n"}, 20);
    r.doc_id = i / 3;
    r.choice = i % 3;  // three repeats of each of four prompts
    requests.push_back(r);
  }
  requests.push_back(generation(12, "A different story altogether.", {"\n"}, 20));
  for (int64_t workers : {1, 2, 4}) {
    PlanOptions o = options(1 << 20, 512);
    o.workers = workers;
    o.generation_rows = 4;
    const Plan plan = make_plan(requests, tokenizer(), o);
    std::set<int64_t> seen;
    int64_t with_prefix = 0;
    for (const Batch& b : plan.batches) {
      EXPECT_GE(b.max_rows, 1);
      EXPECT_LE(b.max_rows, 4);
      EXPECT_LE(static_cast<int64_t>(b.items.size()), PlanOptions::kGenerationItemsPerRow * 4);
      for (const WorkItem& item : b.items) {
        seen.insert(item.request_index);
        ASSERT_GT(item.tokens.size(), b.prefix.size());
        EXPECT_TRUE(std::equal(b.prefix.begin(), b.prefix.end(), item.tokens.begin()));
      }
      if (!b.prefix.empty()) {
        ++with_prefix;
        EXPECT_GE(b.prefix.size(), encode(head).size() - 2) << "the head is the prefix";
        // Equal prompts adjacent: a repeat follows its first copy.
        for (size_t k = 1; k < b.items.size(); ++k)
          if (b.items[k].tokens == b.items[k - 1].tokens)
            EXPECT_EQ(b.items[k].request_index, b.items[k - 1].request_index + 1);
      }
      const Batch back = batch_from_json(to_json(b));
      EXPECT_EQ(back.max_rows, b.max_rows);
      EXPECT_EQ(back.prefix, b.prefix);
    }
    EXPECT_EQ(seen.size(), requests.size());
    // The 12 prompts with the head: 12 items shared among the workers, a batch each.
    EXPECT_EQ(with_prefix, workers) << "workers " << workers;
  }
  // A generation batch whose items do not start with its prefix is refused.
  PlanOptions o = options();
  Plan plan = make_plan(requests, tokenizer(), o);
  for (Batch& b : plan.batches) {
    if (b.prefix.empty()) continue;
    nlohmann::json j = to_json(b);
    j["prefix"][0] = 1 + j["prefix"][0].get<int>();
    EXPECT_THROW(batch_from_json(j), Error);
  }
}

}  // namespace
}  // namespace gpueval
