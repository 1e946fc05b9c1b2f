#include "gpueval/executor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "gpueval/generate.h"
#include "gpueval/scorer.h"
#include "wire_json.h"

namespace gpueval {

std::string cut_at_stops(std::string text, const std::vector<std::string>& stops) {
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    const size_t at = text.find(stop);
    if (at != std::string::npos) text.resize(at);
  }
  return text;
}

namespace {

ItemResult result_for(const WorkItem& item) {
  ItemResult r;
  r.request_index = item.request_index;
  r.part = item.part;
  r.parts = item.parts;
  return r;
}

std::vector<ItemResult> score_items(const LlamaModelImpl& model, const Batch& batch) {
  std::vector<ItemResult> out;
  std::vector<ScoreRequest> requests;
  std::vector<size_t> scored;  // out index of each request
  for (const WorkItem& item : batch.items) {
    out.push_back(result_for(item));
    if (item.first_target < 1 || item.first_target > static_cast<int64_t>(item.tokens.size()))
      throw Error(fmt::format("batch {}: request {} part {}: first_target {} outside [1, {}]", batch.id,
                              item.request_index, item.part, item.first_target, item.tokens.size()));
    // An item with nothing to predict (an empty rolling text) scores log 1 = 0 without the model.
    if (item.first_target == static_cast<int64_t>(item.tokens.size())) {
      out.back().is_greedy = true;
      continue;
    }
    requests.push_back({item.tokens, item.first_target});
    scored.push_back(out.size() - 1);
  }
  std::vector<ScoreResult> scores = score_batch(model, requests);
  for (size_t k = 0; k < scores.size(); ++k) {
    ItemResult& r = out[scored[k]];
    r.logprob = scores[k].sum();
    r.is_greedy = scores[k].all_greedy();
    r.num_tokens = static_cast<int64_t>(scores[k].logprobs.size());
  }
  return out;
}

// Decides, after every generated token, whether a row is done: its own token
// limit, or its decoded text containing one of its stop strings. A row ends on
// its own text only, so its result never depends on its batch mates.
class StopWatch {
 public:
  StopWatch(const Tokenizer& tokenizer, const std::vector<const WorkItem*>& rows) : tokenizer_(tokenizer), rows_(rows) {
    for (const WorkItem* item : rows) {
      size_t longest = 0;
      for (const std::string& s : item->stops) longest = std::max(longest, s.size());
      // A stop of n bytes spans at most n tokens, plus one on each side for a
      // split UTF-8 sequence or a stripped leading space.
      tail_tokens_.push_back(longest == 0 ? 0 : longest + 2);
    }
  }

  bool operator()(size_t row, const std::vector<int32_t>& tokens) const {
    const WorkItem& item = *rows_[row];
    if (static_cast<int64_t>(tokens.size()) >= item.max_tokens) return true;
    const size_t tail = tail_tokens_[row];
    if (tail == 0) return false;
    // Decoding only the tail keeps a step cheap; it is a filter, and the
    // whole text must confirm, so a row never ends on a tail-only artefact.
    const std::vector<int32_t> last(tokens.end() - static_cast<std::ptrdiff_t>(std::min(tail, tokens.size())),
                                    tokens.end());
    return contains_stop(item, tokenizer_.decode(last, /*skip_special_tokens=*/true)) &&
           contains_stop(item, tokenizer_.decode(tokens, /*skip_special_tokens=*/true));
  }

 private:
  static bool contains_stop(const WorkItem& item, const std::string& text) {
    for (const std::string& s : item.stops)
      if (!s.empty() && text.find(s) != std::string::npos) return true;
    return false;
  }

  const Tokenizer& tokenizer_;
  const std::vector<const WorkItem*>& rows_;
  std::vector<size_t> tail_tokens_;
};

std::vector<ItemResult> generate_items(const LlamaModelImpl& model, const Tokenizer& tokenizer, const Batch& batch) {
  std::vector<ItemResult> out;
  std::vector<const WorkItem*> rows;  // items that generate at least one token
  std::vector<size_t> row_out;
  const double temperature = batch.items.front().temperature;
  for (const WorkItem& item : batch.items) {
    if (item.temperature != temperature)
      throw Error(fmt::format("batch {}: generate_until items with temperatures {} and {}", batch.id, temperature,
                              item.temperature));
    out.push_back(result_for(item));
    if (item.max_tokens <= 0) continue;
    rows.push_back(&item);
    row_out.push_back(out.size() - 1);
  }
  if (rows.empty()) return out;

  std::vector<std::vector<int32_t>> prompts;
  SamplingOptions o;
  o.max_new_tokens = 0;
  o.temperature = temperature;
  for (const WorkItem* item : rows) {
    prompts.push_back(item->tokens);
    o.seeds.push_back(item->seed);
    o.max_new_tokens = std::max(o.max_new_tokens, item->max_tokens);
  }
  o.stop_token_ids = model.config().eos_token_ids;
  if (tokenizer.eos_id() &&
      std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), *tokenizer.eos_id()) == o.stop_token_ids.end())
    o.stop_token_ids.push_back(*tokenizer.eos_id());

  const StopWatch stop_watch(tokenizer, rows);
  std::vector<Generation> gens = generate(model, prompts, o, nullptr, std::cref(stop_watch));
  for (size_t k = 0; k < rows.size(); ++k) {
    ItemResult& r = out[row_out[k]];
    r.num_tokens = static_cast<int64_t>(gens[k].tokens.size());
    // Decoded on its own, as lm-evaluation-harness decodes the continuation.
    r.text = cut_at_stops(tokenizer.decode(gens[k].tokens, /*skip_special_tokens=*/true), rows[k]->stops);
  }
  return out;
}

}  // namespace

std::vector<ItemResult> execute_batch(const LlamaModelImpl& model, const Tokenizer& tokenizer, const Batch& batch) {
  if (batch.items.empty()) return {};
  const bool generate = batch.items.front().type == RequestType::kGenerateUntil;
  for (const WorkItem& item : batch.items)
    if ((item.type == RequestType::kGenerateUntil) != generate)
      throw Error(fmt::format("batch {}: generate_until items mixed with loglikelihood items", batch.id));
  return generate ? generate_items(model, tokenizer, batch) : score_items(model, batch);
}

std::vector<RequestResult> combine_items(const std::vector<ItemResult>& items) {
  std::map<int64_t, std::vector<const ItemResult*>> by_request;
  for (const ItemResult& r : items) by_request[r.request_index].push_back(&r);
  std::vector<RequestResult> out;
  out.reserve(by_request.size());
  for (auto& [index, parts] : by_request) {
    const int32_t count = parts.front()->parts;
    for (const ItemResult* p : parts) {
      if (p->parts != count)
        throw Error(fmt::format("request {}: parts disagree on their count ({} and {})", index, count, p->parts));
      if (p->part < 0 || p->part >= count)
        throw Error(fmt::format("request {}: part {} outside [0, {})", index, p->part, count));
    }
    std::sort(parts.begin(), parts.end(), [](const ItemResult* a, const ItemResult* b) { return a->part < b->part; });
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k > 0 && parts[k]->part == parts[k - 1]->part)
        throw Error(fmt::format("request {}: part {} of {} appears twice", index, parts[k]->part, count));
      if (parts[k]->part != static_cast<int32_t>(k))
        throw Error(fmt::format("request {}: part {} of {} is missing", index, k, count));
    }
    if (static_cast<int64_t>(parts.size()) != count)
      throw Error(fmt::format("request {}: part {} of {} is missing", index, parts.size(), count));
    RequestResult r;
    r.index = index;
    r.is_greedy = true;
    for (const ItemResult* p : parts) {
      r.logprob += p->logprob;
      r.num_tokens += p->num_tokens;
      r.is_greedy = r.is_greedy && p->is_greedy;
    }
    if (count == 1) r.text = parts.front()->text;
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// JSON has no infinities; a -inf logprob (a token the model gives probability 0) travels as a string.
nlohmann::json number_or_name(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from(const nlohmann::json& j, const std::string& path) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return wire::get_double(j, path);
}

}  // namespace

nlohmann::json to_json(const ItemResult& r) {
  return {{"request_index", r.request_index}, {"part", r.part},
          {"parts", r.parts},                 {"logprob", number_or_name(r.logprob)},
          {"is_greedy", r.is_greedy},         {"num_tokens", r.num_tokens},
          {"text", r.text}};
}

ItemResult item_result_from_json(const nlohmann::json& j) {
  using namespace wire;
  const std::string path = "item result";
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  require_object(j, path);
  ItemResult r;
  r.request_index = get_int(field(j, "request_index", path), path + ".request_index", 0, kInt64Max);
  r.parts = static_cast<int32_t>(get_int(field(j, "parts", path), path + ".parts", 1, kInt32Max));
  r.part = static_cast<int32_t>(get_int(field(j, "part", path), path + ".part", 0, r.parts - 1));
  r.logprob = number_from(field(j, "logprob", path), path + ".logprob");
  r.is_greedy = get_bool(field(j, "is_greedy", path), path + ".is_greedy");
  r.num_tokens = get_int(field(j, "num_tokens", path), path + ".num_tokens", 0, kInt64Max);
  r.text = get_string(field(j, "text", path), path + ".text");
  return r;
}

}  // namespace gpueval
