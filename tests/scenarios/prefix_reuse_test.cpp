// Prefix reuse and out-of-memory splitting give the results of plain batches:
// on the real stories260K model, through the executor (as a worker runs it,
// batches travelling as JSON, one PrefixCache across batches) and through the
// CLI on MMLU.
#include <algorithm>
#include <cstdlib>
#include <map>

#include <c10/util/Exception.h>
#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "common/file_io.h"
#include "gpueval/error.h"
#include "plan/packing.h"
#include "plan/planner.h"
#include "run/executor.h"
#include "run/prefix_cache.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;

std::string model_dir() { return testing::source_dir() + "/models/stories260K"; }
const DecoderModelImpl& model() { return testing::stories260k_model(); }
const Tokenizer& tokenizer() { return testing::stories260k_tokenizer(); }

// Two "subjects": a few-shot prefix, then questions with one-token letters and multi-token answers.
std::vector<Request> requests() {
  std::vector<Request> rs;
  const char* topics[] = {"the park", "the sea"};
  for (const char* topic : topics) {
    std::string fewshot = fmt::format("Stories about {}.\n\n", topic);
    for (int e = 0; e < 3; ++e)
      fewshot += fmt::format("Lily went to {} with Tom. What did they find there?\nAnswer: a red ball\n\n", topic);
    for (int d = 0; d < 6; ++d) {
      const std::string context = fewshot + fmt::format("Tom saw {} dogs at {}. What did he do?\nAnswer:", d, topic);
      for (const char* answer : {" A", " B", " C", " D", " he ran home", " he played with them all day"}) {
        Request r;
        r.index = static_cast<int64_t>(rs.size());
        r.task = topic;
        r.doc_id = d;
        r.type = RequestType::kLoglikelihood;
        r.context = context;
        r.continuation = answer;
        rs.push_back(std::move(r));
      }
    }
  }
  return rs;
}

PlanOptions options(bool reuse, int64_t batch_tokens) {
  PlanOptions o;
  o.batch_tokens = batch_tokens;
  o.max_length = model().config().max_position_embeddings;
  o.prefix_reuse = o.group_continuations = reuse;
  return o;
}

// Runs a plan as one worker would: batches arrive as JSON, one prefix cache for the run.
std::vector<RequestResult> run(const Plan& plan, ExecutionStats& stats, PrefixCache& cache,
                               const ExecutionOptions& base = {}) {
  ExecutionOptions o = base;
  o.prefixes = &cache;
  std::vector<ItemResult> items;
  for (const Batch& b : plan.batches) {
    const Batch received = batch_from_json(nlohmann::json::parse(to_json(b).dump()));
    for (const ItemResult& r : execute_batch(model(), tokenizer(), received, o, &stats)) items.push_back(r);
  }
  return combine_items(items);
}

// `tolerance` per scored token: a request's logprob is a sum over its tokens.
void expect_same(const std::vector<RequestResult>& a, const std::vector<RequestResult>& b, double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_NEAR(a[i].logprob, b[i].logprob, tolerance * static_cast<double>(std::max<int64_t>(1, a[i].num_tokens)))
        << "request " << i;
    EXPECT_EQ(a[i].is_greedy, b[i].is_greedy) << "request " << i;
    EXPECT_EQ(a[i].num_tokens, b[i].num_tokens) << "request " << i;
  }
}

TEST(PrefixReuse, GivesTheResultsOfPlainBatchesWithFarFewerTokens) {
  const auto rs = requests();
  const Plan off = make_plan(rs, tokenizer(), options(false, 2048));
  const Plan on = make_plan(rs, tokenizer(), options(true, 64));  // several batches per prefix
  ASSERT_EQ(on.num_prefixes, 2);
  ASSERT_GT(on.batches.size(), 2u);
  ExecutionStats off_stats, on_stats;
  PrefixCache off_cache, on_cache;
  const auto a = run(off, off_stats, off_cache);
  const auto b = run(on, on_stats, on_cache);
  expect_same(a, b, 1e-5);
  for (const RequestResult& r : a) EXPECT_LT(r.logprob, 0.0);
  // Off computes every request's every input token; on, each prefix once and each context once.
  EXPECT_EQ(off_stats.tokens_computed, off.total_tokens);
  EXPECT_EQ(off_stats.prefix_tokens, 0);
  EXPECT_EQ(on_stats.prefix_tokens, on.prefix_tokens);
  EXPECT_EQ(on_stats.tokens_computed, on.row_tokens + on.prefix_tokens);
  EXPECT_LT(3 * on_stats.tokens_computed, off_stats.tokens_computed);
  EXPECT_EQ(on_cache.misses(), 2);
  EXPECT_EQ(on_cache.hits(), static_cast<int64_t>(on.batches.size()) - 2);
  // Without a cache every batch computes its prefix, with the same results.
  ExecutionStats plain_stats;
  std::vector<ItemResult> items;
  for (const Batch& batch : on.batches)
    for (const ItemResult& r : execute_batch(model(), tokenizer(), batch, {}, &plain_stats)) items.push_back(r);
  expect_same(combine_items(items), b, 0.0);
  EXPECT_GT(plain_stats.prefix_tokens, on_stats.prefix_tokens);
}

// Runs a plan on stories260K loaded in float64, one PrefixCache for the run.
std::vector<RequestResult> run_float64(const Plan& plan) {
  LoadOptions o;
  o.dtype = at::kDouble;
  static const DecoderModel* m64 = new DecoderModel(load_model(model_dir(), o));
  std::vector<ItemResult> items;
  PrefixCache cache;
  ExecutionOptions eo;
  eo.prefixes = &cache;
  for (const Batch& b : plan.batches)
    for (const ItemResult& r : execute_batch(**m64, tokenizer(), b, eo)) items.push_back(r);
  return combine_items(items);
}

// The float32 differences above are rounding: in float64 the two paths agree to the last bits.
TEST(PrefixReuse, IsExactInFloat64) {
  const auto rs = requests();
  const auto off = run_float64(make_plan(rs, tokenizer(), options(false, 2048)));
  const auto on = run_float64(make_plan(rs, tokenizer(), options(true, 64)));
  expect_same(off, on, 1e-12);
}

// Questions of very different lengths after one prefix: short rows are packed side by side into
// sequences (parts), and each part sees only itself and the prefix, as its own row would.
TEST(PrefixReuse, PackedRowsGiveTheResultsOfOneRowPerRequest) {
  std::vector<Request> rs;
  std::string fewshot = "Stories about the park.\n\n";
  for (int e = 0; e < 3; ++e)
    fewshot += "Lily went to the park with Tom. What did they find there?\nAnswer: a ball\n\n";
  for (int d = 0; d < 12; ++d) {
    std::string question = "Tom saw";
    for (int w = 0; w < (d % 4 == 0 ? 30 : 2 + d); ++w) question += " a dog";
    for (const char* answer : {" A", " B", " he ran home"}) {
      Request r;
      r.index = static_cast<int64_t>(rs.size());
      r.task = "park";
      r.doc_id = d;
      r.type = RequestType::kLoglikelihood;
      r.context = fewshot + question + ". What did he do?\nAnswer:";
      r.continuation = answer;
      rs.push_back(std::move(r));
    }
  }
  const Plan on = make_plan(rs, tokenizer(), options(true, 512));
  ASSERT_EQ(on.num_prefixes, 1);
  int64_t packed = 0;  // sequences holding more than one row
  for (const Batch& b : on.batches) {
    EXPECT_GT(b.sequence_width, 0);
    for (const PackedRow& row : pack_rows(b))
      packed += std::any_of(row.segments.begin(), row.segments.end(), [](int64_t s) { return s >= kSegmentsPerPart; });
  }
  EXPECT_GT(packed, 0);
  const Plan off = make_plan(rs, tokenizer(), options(false, 2048));
  ExecutionStats on_stats, off_stats;
  PrefixCache on_cache, off_cache;
  expect_same(run(off, off_stats, off_cache), run(on, on_stats, on_cache), 1e-5);
  // In float64 the packed forward is the plain one to the last bits.
  expect_same(run_float64(off), run_float64(on), 1e-12);
}

// Throws as a full GPU would when a forward holds more than `limit` padded tokens.
ExecutionOptions out_of_memory_above(int64_t limit, int64_t* forwards) {
  ExecutionOptions o;
  o.before_forward = [limit, forwards](int64_t rows, int64_t width) {
    ++*forwards;
    TORCH_CHECK_WITH(OutOfMemoryError, rows * width <= limit, "test: out of memory");
  };
  return o;
}

TEST(PrefixReuse, AnOutOfMemoryBatchIsSplitAndGivesTheSameResults) {
  const auto rs = requests();
  for (bool reuse : {true, false}) {
    const Plan plan = make_plan(rs, tokenizer(), options(reuse, 1 << 20));  // one batch per prefix (or one in all)
    int64_t widest = 0;
    for (const Batch& b : plan.batches)
      for (const PackedRow& sequence : pack_rows(b))
        for (const PackedRow& row : split_parts(sequence))  // a sequence that does not fit runs as its parts
          widest = std::max<int64_t>(widest, static_cast<int64_t>(row.tokens.size()));
    ExecutionStats whole_stats, split_stats;
    PrefixCache c1, c2;
    const auto whole = run(plan, whole_stats, c1);
    int64_t forwards = 0;
    // Two of the widest rows fit, whole batches (and packed sequences) do not.
    const auto split = run(plan, split_stats, c2, out_of_memory_above(2 * widest, &forwards));
    expect_same(whole, split, 1e-4);
    EXPECT_EQ(whole_stats.oom_splits, 0);
    EXPECT_GT(split_stats.oom_splits, 2) << "reuse " << reuse;
    EXPECT_GT(forwards, static_cast<int64_t>(plan.batches.size()) + split_stats.oom_splits);
    EXPECT_EQ(split_stats.tokens_computed, whole_stats.tokens_computed);  // failed forwards are not counted
  }
}

TEST(PrefixReuse, ARowThatDoesNotFitAloneIsAnError) {
  const Plan plan = make_plan(requests(), tokenizer(), options(true, 1 << 20));
  int64_t forwards = 0;
  const ExecutionOptions o = out_of_memory_above(1, &forwards);
  EXPECT_THAT(testing::error_of([&] { execute_batch(model(), tokenizer(), plan.batches[0], o); }),
              HasSubstr("does not fit in memory"));
}

TEST(PrefixReuse, GenerationIsSplitToo) {
  std::vector<Request> rs;
  for (const char* prompt : {"Once upon a time", "Lily and Tom went to the park", "The dog", "One day, a cat"}) {
    Request r;
    r.index = static_cast<int64_t>(rs.size());
    r.task = "g";
    r.doc_id = r.index;
    r.type = RequestType::kGenerateUntil;
    r.context = prompt;
    r.stops = {"."};
    r.max_tokens = 12;
    rs.push_back(std::move(r));
  }
  const Plan plan = make_plan(rs, tokenizer(), options(true, 1 << 20));
  ASSERT_EQ(plan.batches.size(), 1u);
  ExecutionStats whole_stats, split_stats;
  const auto whole = execute_batch(model(), tokenizer(), plan.batches[0], {}, &whole_stats);
  int64_t forwards = 0;
  const auto split =
      execute_batch(model(), tokenizer(), plan.batches[0], out_of_memory_above(30, &forwards), &split_stats);
  ASSERT_EQ(whole.size(), split.size());
  size_t with_text = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(whole[i].text, split[i].text) << i;
    with_text += whole[i].text.empty() ? 0 : 1;
  }
  EXPECT_GE(with_text, 2u);
  EXPECT_GT(split_stats.oom_splits, 0);
}

TEST(PrefixCacheTest, KeepsTheMostRecentlyUsedPrefixes) {
  PrefixCache cache(2);
  int64_t computed = 0;
  const std::vector<int32_t> a = {1, 300, 301}, b = {1, 302}, c = {1, 303, 304, 305};
  auto first = cache.get(model(), a, &computed);
  EXPECT_EQ(computed, 3);
  EXPECT_EQ(first->length(), 3);
  EXPECT_EQ(cache.get(model(), a, &computed).get(), first.get());  // a hit: same storage, nothing computed
  EXPECT_EQ(computed, 3);
  cache.get(model(), b, &computed);
  cache.get(model(), a, &computed);  // a is the most recent again
  cache.get(model(), c, &computed);  // evicts b
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(computed, 3 + 2 + 4);
  cache.get(model(), a, &computed);
  EXPECT_EQ(computed, 9);
  cache.get(model(), b, &computed);
  EXPECT_EQ(computed, 11);
  EXPECT_EQ(cache.hits(), 3);
  EXPECT_EQ(cache.misses(), 4);
}

// ---- Through the CLI: MMLU with reuse on and off, and an injected OOM. ----

struct RunOutput {
  nlohmann::json results;
  std::map<std::string, double> loglikelihoods;  // "doc/choice" -> value
};

RunOutput run_mmlu(const testing::TempDir& dir, const std::string& name, const std::vector<std::string>& extra) {
  const std::vector<std::string> args = testing::mmlu_anatomy_run_args("cpu:2", dir.file(name), extra);
  const auto r = testing::run_gpueval(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  RunOutput out;
  out.results = nlohmann::json::parse(io::read_file(dir.file(name + "/results.json")));
  std::string line;
  std::istringstream samples(io::read_file(dir.file(name + "/samples_mmlu_anatomy.jsonl")));
  while (std::getline(samples, line)) {
    const nlohmann::json s = nlohmann::json::parse(line);
    for (size_t c = 0; c < s["resps"].size(); ++c)
      out.loglikelihoods[fmt::format("{}/{}", s["doc_id"].get<int64_t>(), c)] =
          std::stod(s["resps"][c][0][0].get<std::string>());
  }
  return out;
}

TEST(PrefixReuseCli, MmluScoresEqualWithReuseOnAndOff) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  const RunOutput on = run_mmlu(dir, "on", {"--prefix-reuse", "on"});
  const RunOutput off = run_mmlu(dir, "off", {"--prefix-reuse", "off", "--group-continuations", "off"});
  const RunOutput grouped = run_mmlu(dir, "grouped", {"--prefix-reuse", "off"});
  ASSERT_EQ(on.loglikelihoods.size(), 12u * 4);
  ASSERT_EQ(off.loglikelihoods.size(), on.loglikelihoods.size());
  // The same function computed in other shapes: float32 sums in other orders (the products' kernels
  // depend on their row counts), a few units in the sixth digit; a reuse error is of order 0.1.
  const auto tolerance = [](double value) { return 1e-5 * std::max(1.0, std::abs(value)); };
  for (const auto& [key, value] : on.loglikelihoods)
    EXPECT_NEAR(value, off.loglikelihoods.at(key), tolerance(value)) << key;
  EXPECT_EQ(on.results["results"]["mmlu_anatomy"]["acc,none"], off.results["results"]["mmlu_anatomy"]["acc,none"]);
  const auto& b_on = on.results["batching"];
  const auto& b_off = off.results["batching"];
  EXPECT_TRUE(b_on["prefix_reuse"].get<bool>());
  EXPECT_FALSE(b_off["prefix_reuse"].get<bool>());
  EXPECT_TRUE(b_on["group_continuations"].get<bool>());
  EXPECT_FALSE(b_off["group_continuations"].get<bool>());
  EXPECT_EQ(b_on["tokens_requested"], b_off["tokens_requested"]);
  EXPECT_EQ(b_off["tokens_computed"], b_off["tokens_requested"]);
  // Prefix reuse alone off: each question once for its four one-token answers, as lm-eval's HFLM
  // computes it, and the same scores.
  const auto& b_grouped = grouped.results["batching"];
  EXPECT_FALSE(b_grouped["prefix_reuse"].get<bool>());
  EXPECT_TRUE(b_grouped["group_continuations"].get<bool>());
  EXPECT_EQ(b_grouped["shared_prefixes"].get<int64_t>(), 0);
  // (At least a quarter: an answer of two tokens in this tokenizer adds a one-token branch.)
  EXPECT_GE(4 * b_grouped["tokens_computed"].get<int64_t>(), b_grouped["tokens_requested"].get<int64_t>());
  EXPECT_LT(3 * b_grouped["tokens_computed"].get<int64_t>(), b_grouped["tokens_requested"].get<int64_t>());
  for (const auto& [key, value] : on.loglikelihoods)
    EXPECT_NEAR(value, grouped.loglikelihoods.at(key), tolerance(value)) << key;
  EXPECT_THAT(io::read_file(dir.file("grouped/report.md")), HasSubstr("(prefix reuse off, continuations grouped)"));
  EXPECT_THAT(io::read_file(dir.file("off/report.md")), HasSubstr("(prefix reuse off, continuations not grouped)"));
  EXPECT_GE(b_on["shared_prefixes"].get<int64_t>(), 1);
  // The 1-shot prefix is computed once per worker (two here), the question once for its four answers.
  EXPECT_LT(3 * b_on["tokens_computed"].get<int64_t>(), b_off["tokens_computed"].get<int64_t>());
  EXPECT_GE(b_on["padding_fraction"].get<double>(), 0.0);
  EXPECT_THAT(io::read_file(dir.file("on/report.md")), HasSubstr("(prefix reuse on, continuations grouped)"));
}

TEST(PrefixReuseCli, AnInjectedOutOfMemoryErrorSplitsTheBatchAndTheRunCompletes) {
  GPUEVAL_REQUIRE_SHARED();
  testing::TempDir dir;
  // A fixed budget above the injected limit: the probe's own pick may be under it on a fast CPU.
  const RunOutput plain = run_mmlu(dir, "plain", {"--batch-tokens", "1024"});
  ::setenv("GPUEVAL_FAULT", "oom:400", 1);
  const RunOutput split = run_mmlu(dir, "split", {"--batch-tokens", "1024"});
  ::unsetenv("GPUEVAL_FAULT");
  EXPECT_GT(split.results["batching"]["oom_splits"].get<int64_t>(), 0);
  EXPECT_EQ(plain.results["batching"]["oom_splits"].get<int64_t>(), 0);
  ASSERT_EQ(split.loglikelihoods.size(), plain.loglikelihoods.size());
  for (const auto& [key, value] : plain.loglikelihoods) EXPECT_NEAR(value, split.loglikelihoods.at(key), 1e-4) << key;
  EXPECT_EQ(split.results["results"]["mmlu_anatomy"]["acc,none"], plain.results["results"]["mmlu_anatomy"]["acc,none"]);
  EXPECT_TRUE(split.results["incomplete"].empty());
}

}  // namespace
}  // namespace gpueval
