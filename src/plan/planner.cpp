#include "plan/planner.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "common/wire_json.h"
#include "gpueval/error.h"
#include "model/decoder/scorer.h"
#include "plan/item_result.h"
#include "plan/packing.h"

namespace gpueval {

int64_t WorkItem::cost() const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (type == RequestType::kGenerateUntil) return n + max_tokens;
  return std::max<int64_t>(n - 1, 0);  // the last token is only a target, never an input
}

double Plan::padding_fraction() const {
  return padded_tokens > 0 ? 1.0 - static_cast<double>(row_tokens) / static_cast<double>(padded_tokens) : 0.0;
}

uint64_t request_seed(uint64_t run_seed, const std::string& task, int64_t doc_id, int64_t choice) {
  // FNV-1a over a fixed little-endian layout, then a splitmix64 finalizer so
  // that neighbouring doc_ids give unrelated seeds.
  uint64_t h = 0xcbf29ce484222325ull;
  auto byte = [&h](uint8_t b) {
    h ^= b;
    h *= 0x100000001b3ull;
  };
  auto word = [&byte](uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  };
  word(run_seed);
  word(task.size());
  for (char c : task) byte(static_cast<uint8_t>(c));
  word(static_cast<uint64_t>(doc_id));
  word(static_cast<uint64_t>(choice));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

namespace {

// Python's str.isspace(): Unicode White_Space plus the information separators
// U+001C..U+001F, which is what rstrip() in lm-evaluation-harness removes.
bool python_isspace(char32_t c) { return is_unicode_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

// Length in bytes of `text` without its trailing whitespace.
size_t rstrip_length(const std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = utf8_previous(text, end);
    size_t len = 0;
    if (!python_isspace(utf8_decode(text, start, &len))) break;
    end = start;
  }
  return end;
}

// The last context a tokenizing thread encoded: a task's requests for one document (its choices)
// come one after another with the same context, which is then encoded once for all of them.
struct ContextMemo {
  std::string context;  // the rstripped context
  std::vector<int32_t> tokens;
  bool valid = false;
};

// Tokenizes requests the way HFLM does; one per make_plan call, shared
// read-only by the tokenizing threads (each with its own ContextMemo).
class RequestEncoder {
 public:
  RequestEncoder(const Tokenizer& tokenizer, const PlanOptions& options)
      : tokenizer_(tokenizer), options_(options), bos_(tokenizer.bos_id()) {
    if (bos_)
      prefix_ = *bos_;
    else if (tokenizer.eos_id())
      prefix_ = *tokenizer.eos_id();
  }

  std::vector<WorkItem> items_for(const Request& r, ContextMemo& memo) const {
    if (utf8_invalid_offset(r.context) != r.context.size() ||
        utf8_invalid_offset(r.continuation) != r.continuation.size())
      throw Error("text is not valid UTF-8");
    switch (r.type) {
      case RequestType::kLoglikelihood: return {loglikelihood(r, memo)};
      case RequestType::kLoglikelihoodRolling: return rolling(r);
      case RequestType::kGenerateUntil: return {generate_until(r)};
    }
    throw Error("unknown request type");
  }

 private:
  int32_t prefix_token() const {
    if (!prefix_) throw Error(fmt::format("{}: the tokenizer has neither a BOS nor an EOS token", tokenizer_.origin()));
    return *prefix_;
  }

  std::vector<int32_t> encode(const std::string& text) const {
    return tokenizer_.encode(text, /*add_special_tokens=*/false);
  }

  // (BOS +) encode(text). A text whose own encoding already starts with BOS
  // (it begins with the BOS string) gets no second one, which is what
  // lm-evaluation-harness's has_bos_prefix check is for.
  std::vector<int32_t> encode_context(const std::string& text) const {
    std::vector<int32_t> body = encode(text);
    if (!options_.add_bos || !bos_ || (!body.empty() && body.front() == *bos_)) return body;
    body.insert(body.begin(), *bos_);
    return body;
  }

  WorkItem loglikelihood(const Request& r, ContextMemo& memo) const {
    std::vector<int32_t> context_enc, continuation_enc;
    if (r.context.empty()) {
      // The prefix token stands in for the missing context, unless the
      // continuation already starts with it.
      continuation_enc = encode(r.continuation);
      if (!continuation_enc.empty() && continuation_enc.front() == prefix_token()) {
        context_enc.push_back(continuation_enc.front());
        continuation_enc.erase(continuation_enc.begin());
      } else {
        context_enc.push_back(prefix_token());
      }
    } else {
      // _encode_pair: trailing whitespace of the context belongs to the
      // continuation, and the continuation is whatever encoding the whole
      // string adds after the context's tokens.
      const size_t keep = rstrip_length(r.context);
      const std::string context = r.context.substr(0, keep);
      const std::string continuation = r.context.substr(keep) + r.continuation;
      if (!memo.valid || memo.context != context) {
        memo.valid = false;  // stays so if encoding throws
        memo.tokens = encode_context(context);
        memo.context = context;
        memo.valid = true;
      }
      context_enc = memo.tokens;
      const std::vector<int32_t> whole = encode_context(context + continuation);
      if (whole.size() > context_enc.size()) continuation_enc.assign(whole.begin() + context_enc.size(), whole.end());
      // A context of only whitespace, without BOS, would leave nothing to condition on.
      if (context_enc.empty()) context_enc.push_back(prefix_token());
    }
    int64_t cont = static_cast<int64_t>(continuation_enc.size());
    if (cont > options_.max_length) {
      // No context fits: the continuation's last max_length tokens are scored, conditioned on
      // the one before them (lm-evaluation-harness 0.4.13 fails on such a request).
      ++long_continuations_;
      cont = options_.max_length;
    }
    WorkItem item = base_item(r);
    item.tokens = context_enc;
    item.tokens.insert(item.tokens.end(), continuation_enc.begin(), continuation_enc.end());
    // Left-truncate to max_length inputs plus the final target.
    const int64_t keep_tokens = options_.max_length + 1;
    if (static_cast<int64_t>(item.tokens.size()) > keep_tokens) {
      item.tokens.erase(item.tokens.begin(), item.tokens.end() - keep_tokens);
      ++truncated_;
    }
    item.first_target = static_cast<int64_t>(item.tokens.size()) - cont;
    return item;
  }

  std::vector<WorkItem> rolling(const Request& r) const {
    const std::vector<int32_t> tokens = r.as_hf ? encode_context(r.context) : encode(r.context);
    std::vector<ScoreRequest> windows = rolling_windows(tokens, prefix_token(), options_.max_length);
    if (windows.empty()) windows.push_back({{prefix_token()}, 1});  // an empty text: nothing to score, logprob 0
    if (windows.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw Error(fmt::format("{} rolling windows", windows.size()));
    std::vector<WorkItem> items;
    for (size_t k = 0; k < windows.size(); ++k) {
      WorkItem item = base_item(r);
      item.part = static_cast<int32_t>(k);
      item.parts = static_cast<int32_t>(windows.size());
      item.tokens = std::move(windows[k].tokens);
      item.first_target = windows[k].first_target;
      items.push_back(std::move(item));
    }
    return items;
  }

  WorkItem generate_until(const Request& r) const {
    if (r.max_tokens < 0) throw Error(fmt::format("max_tokens {} is negative", r.max_tokens));
    if (r.max_tokens >= options_.max_length)
      throw Error(fmt::format("max_tokens {} leaves no room for a prompt within max_length {}", r.max_tokens,
                              options_.max_length));
    WorkItem item = base_item(r);
    item.tokens = encode_context(r.context);
    if (item.tokens.empty()) item.tokens.push_back(prefix_token());  // generation needs something to start from
    const int64_t room = options_.max_length - r.max_tokens;
    if (static_cast<int64_t>(item.tokens.size()) > room) {
      item.tokens.erase(item.tokens.begin(), item.tokens.end() - room);
      ++truncated_;
    }
    item.stops = r.stops;
    item.max_tokens = r.max_tokens;
    item.seed = request_seed(options_.seed, r.task, r.doc_id, r.choice);
    if (r.sampled()) {
      if (r.temperature < 0 || r.top_k < 0 || r.top_p < 0)
        throw Error(fmt::format("request {}: sampling settings not resolved from the checkpoint", r.index));
      item.temperature = r.temperature;
      item.top_k = r.top_k;
      item.top_p = r.top_p;
    }
    return item;
  }

  static WorkItem base_item(const Request& r) {
    WorkItem item;
    item.request_index = r.index;
    item.type = r.type;
    item.template_stops = !r.as_hf;
    return item;
  }

  const Tokenizer& tokenizer_;
  const PlanOptions& options_;
  std::optional<int32_t> bos_;
  std::optional<int32_t> prefix_;  // BOS, else EOS

 public:
  mutable std::atomic<int64_t> truncated_{0};  // requests left-truncated to fit the context
  mutable std::atomic<int64_t> long_continuations_{0};  // of those, continuations longer than the context
};

// Work items of every request, in request order; errors name the request.
std::vector<std::vector<WorkItem>> encode_all(const std::vector<Request>& requests, const Tokenizer& tokenizer,
                                              const PlanOptions& options, int64_t* truncated,
                                              int64_t* long_continuations) {
  const RequestEncoder encoder(tokenizer, options);
  const size_t n = requests.size();
  std::vector<std::vector<WorkItem>> items(n);
  std::vector<std::exception_ptr> errors(n);
  // Threads take runs of consecutive requests, so that a document's choices mostly meet in one
  // thread's memo.
  constexpr size_t kRun = 32;
  std::atomic<size_t> next{0};
  auto work = [&] {
    ContextMemo memo;
    for (size_t start = next.fetch_add(kRun); start < n; start = next.fetch_add(kRun)) {
      for (size_t i = start; i < std::min(n, start + kRun); ++i) {
        try {
          items[i] = encoder.items_for(requests[i], memo);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    }
  };
  size_t threads = options.threads > 0 ? static_cast<size_t>(options.threads)
                                       : std::max<size_t>(1, std::thread::hardware_concurrency());
  threads = std::min(threads, std::max<size_t>(1, n / 64));  // small runs are not worth a thread
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < n; ++i) {
    if (!errors[i]) continue;
    const Request& r = requests[i];
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      throw Error(fmt::format("request {} ({} doc {} choice {}, {}): {}", r.index, r.task, r.doc_id, r.choice,
                              request_type_name(r.type), e.what()));
    }
  }
  *truncated = encoder.truncated_.load();
  *long_continuations = encoder.long_continuations_.load();
  return items;
}

bool request_order(const WorkItem& a, const WorkItem& b) {
  if (a.request_index != b.request_index) return a.request_index < b.request_index;
  return a.part < b.part;
}

// The unit the budget counts: a row of a packed forward (a context group's
// items) or one generate_until item.
struct Row {
  std::vector<WorkItem> items;
  int64_t cost = 0;  // padded width this row needs
};

bool longer_row_first(const Row& a, const Row& b) {
  if (a.cost != b.cost) return a.cost > b.cost;
  return request_order(a.items.front(), b.items.front());
}

// Cuts rows (sorted longest first) greedily under the budget; every batch gets `like`'s sharing fields.
// The budget counts sequences x the longest sequence. With share_contexts, the rows are first
// packed into sequences (SequenceFill, first fit over all the rows, so the shortest fill the room
// the longest leave) as wide as packed_sequence_width; the sequences, in the order they opened,
// are then cut, and each batch lists its items sequence by sequence, which is the order in which
// pack_rows' own first fit finds the same sequences again.
void cut_batches(std::vector<Row> rows, const PlanOptions& options, const Batch& like, std::vector<Batch>& out) {
  std::vector<std::vector<Row>> sequences;
  std::vector<int64_t> lengths;
  int64_t width = 0;
  if (like.share_contexts) {
    std::vector<int64_t> costs;
    for (const Row& row : rows) costs.push_back(row.cost);
    width = packed_sequence_width(costs, options.batch_tokens);
    SequenceFill fill(width);
    for (Row& row : rows) {
      const size_t s = fill.place(row.cost);
      if (s == sequences.size()) {
        sequences.emplace_back();
        lengths.push_back(0);
      }
      lengths[s] += row.cost;
      sequences[s].push_back(std::move(row));
    }
  } else {
    for (Row& row : rows) {
      lengths.push_back(row.cost);
      sequences.emplace_back().push_back(std::move(row));
    }
  }
  Batch current = like;
  if (like.share_contexts) current.sequence_width = width;
  int64_t count = 0, longest = 0;
  auto close = [&] {
    if (count == 0) return;
    out.push_back(std::move(current));
    current = like;
    if (like.share_contexts) current.sequence_width = width;
    count = 0;
  };
  for (size_t s = 0; s < sequences.size(); ++s) {
    if (count > 0) {
      const bool fits = (count + 1) * std::max(longest, lengths[s]) <= options.batch_tokens &&
                        (options.max_batch_size == 0 || count + 1 <= options.max_batch_size);
      if (!fits) close();
    }
    longest = count == 0 ? lengths[s] : std::max(longest, lengths[s]);
    ++count;
    for (Row& row : sequences[s])
      for (WorkItem& item : row.items) current.items.push_back(std::move(item));
  }
  close();
}

// Consecutive batches that stay together in the plan, ordered by their longest row (prefix
// included) so that the batch most likely to run out of memory comes first; a prefix's batches
// are one unit.
struct Unit {
  std::vector<Batch> batches;
  int64_t longest = 0;
  int64_t first_request = 0;
};

// Cuts `rows` into batches like `like`: one unit for all of them (a shared prefix), or a unit each.
void add_units(std::vector<Row> rows, const Batch& like, bool one_unit, const PlanOptions& options,
               std::vector<Unit>& units) {
  if (rows.empty()) return;
  std::sort(rows.begin(), rows.end(), longer_row_first);
  std::vector<Batch> batches;
  cut_batches(std::move(rows), options, like, batches);
  if (one_unit) {
    Unit u{std::move(batches), 0, 0};
    u.longest = u.batches.front().items.front().cost();  // the whole sequence, prefix included
    u.first_request = u.batches.front().items.front().request_index;
    units.push_back(std::move(u));
    return;
  }
  for (Batch& b : batches) {
    Unit u;
    u.longest = b.items.front().cost();
    u.first_request = b.items.front().request_index;
    u.batches.push_back(std::move(b));
    units.push_back(std::move(u));
  }
}

// The scoring items' units: with prefix reuse, one unit per shared prefix and loose rows for
// the contexts that share none; without, a row per context.
void add_scoring_units(const std::vector<WorkItem>& all_scoring, const PlanOptions& options, Plan& plan,
                       std::vector<Unit>& units) {
  // Past the RoPE length threshold an item runs alone (PlanOptions::rope_length_threshold): a row
  // and a batch that share nothing, each request type on its own as the loose rows below.
  std::vector<WorkItem> scoring;
  std::vector<Row> alone, alone_rolling;
  for (const WorkItem& item : all_scoring) {
    if (!options.rope_length_threshold || item.cost() <= *options.rope_length_threshold) {
      scoring.push_back(item);
      continue;
    }
    Row row;
    row.items.push_back(item);
    row.cost = item.cost();
    (item.type == RequestType::kLoglikelihoodRolling ? alone_rolling : alone).push_back(std::move(row));
  }
  add_units(std::move(alone), Batch{}, /*one_unit=*/false, options, units);
  add_units(std::move(alone_rolling), Batch{}, /*one_unit=*/false, options, units);
  const std::vector<ContextGroup> groups = group_by_context(scoring, options.group_continuations);
  std::vector<Row> loose;
  auto row_of = [&](const ContextGroup& g, size_t prefix) {
    Row row;
    for (size_t i : g.items) row.items.push_back(scoring[i]);
    row.cost = row_cost(g, scoring, prefix);
    return row;
  };
  if (options.prefix_reuse) {
    for (const PrefixCluster& c :
         find_shared_prefixes(groups, static_cast<size_t>(std::max<int64_t>(1, options.min_prefix_tokens)))) {
      if (c.prefix_length == 0) {
        for (size_t g : c.groups) loose.push_back(row_of(groups[g], 0));
        continue;
      }
      Batch like;
      like.share_contexts = options.group_continuations;
      const auto& context = groups[c.groups.front()].context;
      like.prefix.assign(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(c.prefix_length));
      like.prefix_id = plan.num_prefixes++;
      plan.prefix_tokens += static_cast<int64_t>(c.prefix_length);
      std::vector<Row> rows;
      for (size_t g : c.groups) rows.push_back(row_of(groups[g], c.prefix_length));
      add_units(std::move(rows), like, /*one_unit=*/true, options, units);
    }
  } else {
    for (const ContextGroup& g : groups) loose.push_back(row_of(g, 0));
  }
  // Loose rows are cut (and packed) by request type: rolling windows are long and many-targeted,
  // loglikelihood rows short, and one kind's plan does not depend on the other's.
  Batch loose_like;
  loose_like.share_contexts = options.group_continuations;
  std::vector<Row> rolling;
  for (auto it = loose.begin(); it != loose.end();) {
    if (it->items.front().type == RequestType::kLoglikelihoodRolling) {
      rolling.push_back(std::move(*it));
      it = loose.erase(it);
    } else {
      ++it;
    }
  }
  add_units(std::move(loose), loose_like, /*one_unit=*/false, options, units);
  add_units(std::move(rolling), loose_like, /*one_unit=*/false, options, units);
}

// The units in plan order become the plan's batches, numbered, with the plan's token counts.
void append_batches(std::vector<Unit> units, Plan& plan) {
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    if (a.longest != b.longest) return a.longest > b.longest;
    return a.first_request < b.first_request;
  });
  for (Unit& u : units) {
    for (Batch& b : u.batches) {
      b.id = static_cast<int64_t>(plan.batches.size());
      b.padded_tokens = batch_padded_tokens(b);
      plan.padded_tokens += b.padded_tokens;
      plan.batches.push_back(std::move(b));
    }
  }
  for (const Batch& b : plan.batches) {
    if (b.items.front().type == RequestType::kGenerateUntil) {
      for (const WorkItem& item : b.items) plan.row_tokens += item.cost();
    } else {
      for (const PackedRow& row : pack_rows(b)) plan.row_tokens += static_cast<int64_t>(row.tokens.size());
    }
  }
}

// generate_until items as PlanOptions describes: equal prompts together, clusters sharing a prefix
// in batches that carry it, each cluster one unit of batches of up to a worker's share.
void add_generation_units(const std::vector<WorkItem>& gen, const PlanOptions& options, Plan& plan,
                          std::vector<Unit>& units) {
  std::vector<ContextGroup> groups;  // equal prompts, in order of first appearance
  std::map<std::vector<int32_t>, size_t> index;
  for (size_t i = 0; i < gen.size(); ++i) {
    const auto [it, added] = index.emplace(gen[i].tokens, groups.size());
    if (added) groups.push_back(ContextGroup{gen[i].tokens, {}});
    groups[it->second].items.push_back(i);
  }
  const size_t min_prefix = static_cast<size_t>(std::max<int64_t>(1, options.min_prefix_tokens));
  std::vector<PrefixCluster> clusters;
  if (options.prefix_reuse) clusters = find_shared_prefixes(groups, min_prefix);
  PrefixCluster loose;  // the groups that share no prefix
  for (PrefixCluster& c : clusters) {
    for (size_t g : c.groups) {
      // At least one token after the prefix: the last prompt token's state picks the first new one.
      c.prefix_length = std::min(c.prefix_length, groups[g].context.size() - 1);
      // A long prompt's RoPE tables follow its own length (rope_length_threshold): no prefix.
      for (size_t i : groups[g].items)
        if (options.rope_length_threshold && gen[i].cost() > *options.rope_length_threshold) c.prefix_length = 0;
    }
    if (c.prefix_length < min_prefix) {
      loose.groups.insert(loose.groups.end(), c.groups.begin(), c.groups.end());
      c.groups.clear();
    }
  }
  if (!options.prefix_reuse)
    for (size_t g = 0; g < groups.size(); ++g) loose.groups.push_back(g);
  std::sort(loose.groups.begin(), loose.groups.end());
  if (!loose.groups.empty()) clusters.push_back(std::move(loose));
  for (const PrefixCluster& c : clusters) {
    if (c.groups.empty()) continue;
    Batch like;
    if (gen.front().template_stops) like.stop_ids = options.generation_stop_ids;
    const size_t p = c.prefix_length;
    if (p > 0) {
      const auto& context = groups[c.groups.front()].context;
      like.prefix.assign(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(p));
    }
    std::vector<WorkItem> items;
    for (size_t g : c.groups)
      for (size_t i : groups[g].items) items.push_back(gen[i]);
    // Longest first, then in request order (equal prompts, of equal cost, stay together).
    std::stable_sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) {
      if (a.cost() != b.cost()) return a.cost() > b.cost();
      return request_order(a, b);
    });
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t kv = options.generation_kv_positions > 0 ? options.generation_kv_positions : options.batch_tokens;
    const int64_t workers = std::max<int64_t>(1, options.workers);
    const int64_t share = std::max<int64_t>(1, (n + workers - 1) / workers);
    Unit unit;
    for (int64_t first = 0; first < n;) {
      // The batch's widest row is its first (longest first): its cache positions after the prefix.
      const int64_t widest = std::max<int64_t>(1, items[static_cast<size_t>(first)].cost() - static_cast<int64_t>(p));
      int64_t rows = std::max<int64_t>(1, std::min(options.generation_rows, kv / (2 * widest)));
      int64_t cap = std::max<int64_t>(1, std::min(PlanOptions::kGenerationItemsPerRow * rows, kv / widest));
      if (options.max_batch_size > 0) {
        rows = std::min(rows, options.max_batch_size);
        cap = std::min(cap, options.max_batch_size);
      }
      cap = std::min(cap, share);
      Batch b = like;
      b.items.assign(items.begin() + first, items.begin() + std::min(n, first + cap));
      b.max_rows = std::min<int64_t>(rows, static_cast<int64_t>(b.items.size()));
      first += static_cast<int64_t>(b.items.size());
      unit.batches.push_back(std::move(b));
    }
    // Each worker's share of the batches gets a prefix id of its own (the same tokens): the
    // dispatcher gives a batch whose prefix another worker holds to an idle worker only when that
    // saves tokens, which one long generation batch queued behind another never does, so without
    // this one worker would decode every share in turn while the others wait.
    if (p > 0) {
      const int64_t batches = static_cast<int64_t>(unit.batches.size());
      const int64_t ids = std::min(workers, batches);
      for (int64_t k = 0; k < batches; ++k)
        unit.batches[static_cast<size_t>(k)].prefix_id = plan.num_prefixes + k * ids / batches;
      plan.num_prefixes += ids;
      plan.prefix_tokens += ids * static_cast<int64_t>(p);
    }
    unit.longest = items.front().cost();
    unit.first_request = items.front().request_index;
    for (const WorkItem& item : items) unit.longest = std::max(unit.longest, item.cost());
    units.push_back(std::move(unit));
  }
}

// Batches for a plan's items (in any order): packing, prefix search, cutting and ordering.
void batch_items(std::vector<WorkItem> items, const PlanOptions& options, Plan& plan) {
  std::sort(items.begin(), items.end(), request_order);
  std::vector<WorkItem> scoring;
  // By temperature (a batch samples under one setting) and stops (lm-eval's requests stop as hf's).
  std::map<std::pair<double, bool>, std::vector<WorkItem>> generation;
  for (WorkItem& item : items) {
    if (item.type == RequestType::kGenerateUntil)
      generation[{item.temperature, item.template_stops}].push_back(std::move(item));
    else
      scoring.push_back(std::move(item));
  }
  std::vector<Unit> units;
  add_scoring_units(scoring, options, plan, units);
  for (auto& [setting, gen] : generation) add_generation_units(gen, options, plan, units);
  append_batches(std::move(units), plan);
}

// One document's loglikelihood requests with one continuation but different contexts (lm-eval's
// multiple input: Winogrande's options fill the blank in the context) become a family: they
// share a row over their common prefix, computed once.
void mark_families(const std::vector<Request>& requests, std::vector<std::vector<WorkItem>>& encoded) {
  std::map<std::pair<std::string, int64_t>, std::vector<size_t>> by_document;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].type == RequestType::kLoglikelihood)
      by_document[{requests[i].task, requests[i].doc_id}].push_back(i);
  }
  for (const auto& [doc, members] : by_document) {
    if (members.size() < 2) continue;
    bool same_continuation = true, different_contexts = false;
    int64_t first = requests[members.front()].index;
    for (const size_t i : members) {
      same_continuation = same_continuation && requests[i].continuation == requests[members.front()].continuation;
      different_contexts = different_contexts || requests[i].context != requests[members.front()].context;
      first = std::min(first, requests[i].index);
    }
    if (!same_continuation || !different_contexts) continue;
    for (const size_t i : members) {
      for (WorkItem& item : encoded[i]) item.family = first;
    }
  }
}

void check_options(const PlanOptions& options) {
  if (options.batch_tokens < 1)
    throw Error(fmt::format("plan: batch_tokens must be >= 1, got {}", options.batch_tokens));
  if (options.max_batch_size < 0)
    throw Error(fmt::format("plan: max_batch_size must be >= 0, got {}", options.max_batch_size));
  if (options.max_length < 1) throw Error(fmt::format("plan: max_length must be >= 1, got {}", options.max_length));
}

}  // namespace

int64_t packed_sequence_width(std::vector<int64_t> lengths, int64_t budget) {
  if (lengths.empty()) return 0;
  std::sort(lengths.begin(), lengths.end());
  const int64_t median = lengths[(lengths.size() - 1) / 2];
  const int64_t p90 = lengths[(lengths.size() - 1) * 9 / 10];
  return std::max<int64_t>(1, std::min(std::max(4 * median, p90), std::max<int64_t>(budget, 1)));
}

int64_t batch_padded_tokens(const Batch& batch) {
  if (batch.items.empty()) return 0;
  int64_t rows = 0, longest = 0;
  if (batch.items.front().type == RequestType::kGenerateUntil) {
    for (const WorkItem& item : batch.items) {
      ++rows;
      longest = std::max(longest, item.cost());
    }
  } else {
    for (const PackedRow& row : pack_rows(batch)) {
      ++rows;
      longest = std::max(longest, static_cast<int64_t>(row.tokens.size()));
    }
  }
  return rows * longest;
}

Batch generation_batch_subset(const Batch& batch, const std::vector<size_t>& positions) {
  Batch rest = batch;
  rest.items.clear();
  for (size_t k : positions) rest.items.push_back(batch.items.at(k));
  if (rest.max_rows > 0) rest.max_rows = std::min<int64_t>(rest.max_rows, static_cast<int64_t>(rest.items.size()));
  rest.padded_tokens = batch_padded_tokens(rest);
  return rest;
}

Plan make_plan(const std::vector<Request>& requests, const Tokenizer& tokenizer, const PlanOptions& options) {
  check_options(options);
  {
    std::vector<int64_t> indices;
    for (const Request& r : requests) indices.push_back(r.index);
    std::sort(indices.begin(), indices.end());
    auto dup = std::adjacent_find(indices.begin(), indices.end());
    if (dup != indices.end()) throw Error(fmt::format("plan: request index {} appears more than once", *dup));
    if (!indices.empty() && indices.front() < 0)
      throw Error(fmt::format("plan: request index {} is negative", indices.front()));
  }

  Plan plan;
  plan.num_requests = static_cast<int64_t>(requests.size());
  std::vector<WorkItem> items;
  std::vector<std::vector<WorkItem>> encoded =
      encode_all(requests, tokenizer, options, &plan.truncated_requests, &plan.long_continuations);
  mark_families(requests, encoded);
  for (auto& per_request : encoded) {
    for (WorkItem& item : per_request) {
      plan.total_tokens += item.cost();
      ++plan.num_items;
      items.push_back(std::move(item));
    }
  }
  batch_items(std::move(items), options, plan);
  return plan;
}

Plan rebatch(const Plan& plan, const PlanOptions& options) {
  check_options(options);
  Plan out;
  out.num_requests = plan.num_requests;
  out.num_items = plan.num_items;
  out.total_tokens = plan.total_tokens;
  out.truncated_requests = plan.truncated_requests;
  out.long_continuations = plan.long_continuations;
  std::vector<WorkItem> items;
  for (const Batch& b : plan.batches) items.insert(items.end(), b.items.begin(), b.items.end());
  batch_items(std::move(items), options, out);
  return out;
}

int64_t longest_item(const Plan& plan) {
  int64_t longest = 0;
  for (const Batch& b : plan.batches)
    for (const WorkItem& item : b.items) longest = std::max(longest, item.cost());
  return longest;
}

nlohmann::json to_json(const WorkItem& item) {
  nlohmann::json j = {{"request_index", item.request_index},
                      {"part", item.part},
                      {"parts", item.parts},
                      {"type", request_type_name(item.type)},
                      {"tokens", item.tokens}};
  if (item.type == RequestType::kGenerateUntil) {
    j["stops"] = item.stops;
    j["max_tokens"] = item.max_tokens;
    j["temperature"] = item.temperature;
    if (item.temperature > 0) {
      j["top_k"] = item.top_k;
      j["top_p"] = item.top_p;
    }
    j["seed"] = item.seed;
  } else {
    j["first_target"] = item.first_target;
    if (item.family >= 0) j["family"] = item.family;
  }
  return j;
}

namespace {

WorkItem work_item_from_json(const nlohmann::json& j, const std::string& path) {
  using namespace wire;
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  WorkItem item;
  read_item_place(j, path, item.request_index, item.part, item.parts);
  const std::string type = get_string(field(j, "type", path), path + ".type");
  try {
    item.type = parse_request_type(type);
  } catch (const Error& e) {
    fail(path + ".type", "{}", e.what());
  }
  item.tokens = get_token_ids(field(j, "tokens", path), path + ".tokens");
  const int64_t n = static_cast<int64_t>(item.tokens.size());
  if (item.type == RequestType::kGenerateUntil) {
    if (n == 0) fail(path + ".tokens", "a generate_until prompt needs at least one token");
    item.stops = get_strings(field(j, "stops", path), path + ".stops");
    item.max_tokens = get_int(field(j, "max_tokens", path), path + ".max_tokens", 0, kInt32Max);
    item.temperature = get_double(field(j, "temperature", path), path + ".temperature");
    if (item.temperature < 0) fail(path + ".temperature", "must be >= 0, got {}", item.temperature);
    if (j.contains("top_k")) item.top_k = get_int(j.at("top_k"), path + ".top_k", 0, kInt64Max);
    if (j.contains("top_p")) {
      item.top_p = get_double(j.at("top_p"), path + ".top_p");
      if (!(item.top_p > 0 && item.top_p <= 1)) fail(path + ".top_p", "must be in (0, 1], got {}", item.top_p);
    }
    item.seed = get_uint64(field(j, "seed", path), path + ".seed");
  } else {
    if (item.type == RequestType::kLoglikelihood && item.parts != 1)
      fail(path + ".parts", "a loglikelihood item has exactly one part, got {}", item.parts);
    if (n < 1) fail(path + ".tokens", "a scored item needs at least one token");
    item.first_target = get_int(field(j, "first_target", path), path + ".first_target", 1, n);
    if (j.contains("family")) item.family = get_int(j.at("family"), path + ".family", 0, kInt64Max);
  }
  return item;
}

}  // namespace

WorkItem work_item_from_json(const nlohmann::json& j) { return work_item_from_json(j, "work item"); }

nlohmann::json to_json(const Batch& batch) {
  nlohmann::json items = nlohmann::json::array();
  for (const WorkItem& item : batch.items) items.push_back(to_json(item));
  nlohmann::json j = {{"id", batch.id}, {"padded_tokens", batch.padded_tokens}, {"items", std::move(items)}};
  if (batch.share_contexts) j["share_contexts"] = true;
  if (batch.sequence_width > 0) j["sequence_width"] = batch.sequence_width;
  if (!batch.prefix.empty()) {
    j["prefix"] = batch.prefix;
    j["prefix_id"] = batch.prefix_id;
  }
  if (batch.max_rows > 0) j["max_rows"] = batch.max_rows;
  if (!batch.stop_ids.empty()) j["stop_ids"] = batch.stop_ids;
  return j;
}

Batch batch_from_json(const nlohmann::json& j) {
  using namespace wire;
  const std::string path = "batch";
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  require_object(j, path);
  Batch batch;
  batch.id = get_int(field(j, "id", path), path + ".id", 0, kInt64Max);
  batch.padded_tokens = get_int(field(j, "padded_tokens", path), path + ".padded_tokens", 0, kInt64Max);
  const nlohmann::json& items = array_field(j, "items", path);
  if (items.empty()) fail(path + ".items", "a batch has at least one item");
  for (size_t i = 0; i < items.size(); ++i)
    batch.items.push_back(work_item_from_json(items[i], fmt::format("{}.items[{}]", path, i)));
  const bool generate = batch.items.front().type == RequestType::kGenerateUntil;
  for (const WorkItem& item : batch.items)
    if ((item.type == RequestType::kGenerateUntil) != generate)
      fail(path + ".items", "generate_until items mixed with loglikelihood items");
  if (j.contains("share_contexts")) batch.share_contexts = get_bool(j.at("share_contexts"), path + ".share_contexts");
  if (j.contains("sequence_width")) {
    batch.sequence_width = get_int(j.at("sequence_width"), path + ".sequence_width", 1, kInt64Max);
    if (!batch.share_contexts) fail(path + ".sequence_width", "only a batch that shares contexts packs its rows");
  }
  if (j.contains("prefix")) {
    batch.prefix = get_token_ids(j.at("prefix"), path + ".prefix");
    batch.prefix_id = get_int(field(j, "prefix_id", path), path + ".prefix_id", 0, kInt64Max);
    if (generate) {
      for (const WorkItem& item : batch.items)
        if (item.tokens.size() <= batch.prefix.size() ||
            !std::equal(batch.prefix.begin(), batch.prefix.end(), item.tokens.begin()))
          fail(path + ".prefix", "a generate_until item does not start with the batch's prefix and go on past it");
    }
  }
  if (j.contains("max_rows")) {
    batch.max_rows = get_int(j.at("max_rows"), path + ".max_rows", 1, kInt64Max);
    if (!generate) fail(path + ".max_rows", "only a generate_until batch has max_rows");
  }
  if (j.contains("stop_ids")) {
    batch.stop_ids = get_token_ids(j.at("stop_ids"), path + ".stop_ids");
    if (!generate) fail(path + ".stop_ids", "only a generate_until batch has stop_ids");
  }
  // The padded size is derived data; a mismatch means the message was damaged or forged.
  int64_t expected = 0;
  try {
    expected = batch_padded_tokens(batch);
  } catch (const Error& e) {
    fail(path, "{}", e.what());
  }
  if (batch.padded_tokens != expected)
    fail(path + ".padded_tokens", "{} does not match the {} tokens its rows need", batch.padded_tokens, expected);
  return batch;
}

nlohmann::json to_json(const Plan& plan) {
  nlohmann::json batches = nlohmann::json::array();
  for (const Batch& b : plan.batches) batches.push_back(to_json(b));
  return {{"num_requests", plan.num_requests},
          {"num_items", plan.num_items},
          {"total_tokens", plan.total_tokens},
          {"padded_tokens", plan.padded_tokens},
          {"batches", std::move(batches)}};
}

}  // namespace gpueval
