#include "run/executor.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "model/decoder/generate.h"
#include "model/decoder/logprob_gather.h"
#include "model/kernels/row_invariant.h"
#include "model/decoder/scorer.h"
#include "plan/packing.h"
#include "run/device_memory.h"

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

// Runs rows [begin, end) of a packed batch; an out-of-memory error splits the range in two.
class RowRunner {
 public:
  RowRunner(const DecoderModelImpl& model, const Batch& batch, const std::vector<PackedRow>& rows,
            const PrefixKV* prefix, const ExecutionOptions& options, ExecutionStats& stats,
            std::vector<ItemResult>& out)
      : model_(model), batch_(batch), rows_(rows), prefix_(prefix), options_(options), stats_(stats), out_(out) {}

  void run(size_t begin, size_t end) {
    try {
      forward(begin, end);
    } catch (const c10::OutOfMemoryError& e) {
      release_cached_memory(model_.options().device);
      if (end - begin == 1) {
        // A packed sequence of several parts runs as its parts, each a row of its own.
        const std::vector<PackedRow> parts = split_parts(rows_[begin]);
        if (parts.size() > 1) {
          ++stats_.oom_splits;
          RowRunner(model_, batch_, parts, prefix_, options_, stats_, out_).run(0, parts.size());
          return;
        }
        throw Error(fmt::format("batch {}: a single row of {} tokens does not fit in memory: {}", batch_.id,
                                rows_[begin].tokens.size(), first_line(e.what())));
      }
      ++stats_.oom_splits;
      const size_t mid = begin + (end - begin) / 2;
      run(begin, mid);
      run(mid, end);
    }
  }

 private:
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  void forward(size_t begin, size_t end) {
    const int64_t b = static_cast<int64_t>(end - begin);
    int64_t t = 0;
    for (size_t r = begin; r < end; ++r) t = std::max<int64_t>(t, static_cast<int64_t>(rows_[r].tokens.size()));
    if (options_.before_forward) options_.before_forward(b, t);
    const int64_t pad_position = prefix_ ? prefix_->length() : 0;
    at::Tensor tokens = at::zeros({b, t}, at::kLong);
    at::Tensor positions = at::full({b, t}, pad_position, at::kLong);
    at::Tensor valid = at::zeros({b, t}, at::kBool);
    at::Tensor segments = at::zeros({b, t}, at::kLong);
    auto tok = tokens.accessor<int64_t, 2>();
    auto pos = positions.accessor<int64_t, 2>();
    auto val = valid.accessor<bool, 2>();
    auto seg = segments.accessor<int64_t, 2>();
    std::vector<int64_t> flat, targets;
    std::vector<std::vector<int64_t>> row_columns(static_cast<size_t>(b));
    std::vector<std::pair<int64_t, int64_t>> picks;  // per target: its row and its place among the row's columns
    int64_t picked_width = 0;
    int64_t real = 0;
    for (int64_t i = 0; i < b; ++i) {
      const PackedRow& row = rows_[begin + static_cast<size_t>(i)];
      for (size_t j = 0; j < row.tokens.size(); ++j) {
        const int32_t id = row.tokens[j];
        if (id < 0 || id >= model_.config().vocab_size)
          throw Error(fmt::format("batch {}: token id {} outside the vocabulary [0, {})", batch_.id, id,
                                  model_.config().vocab_size));
        tok[i][static_cast<int64_t>(j)] = id;
        pos[i][static_cast<int64_t>(j)] = row.positions[j];
        val[i][static_cast<int64_t>(j)] = true;
        seg[i][static_cast<int64_t>(j)] = row.segments[j];
      }
      real += static_cast<int64_t>(row.tokens.size());
      // The row's distinct target columns (a context's one-token continuations share its last one).
      std::map<int64_t, int64_t> index_of;
      for (const PackedRow::Target& target : row.targets) {
        const auto [it, added] = index_of.emplace(target.column, static_cast<int64_t>(row_columns[i].size()));
        if (added) row_columns[i].push_back(target.column);
        flat.push_back(i * t + target.column);
        picks.emplace_back(i, it->second);
        targets.push_back(target.token);
      }
      picked_width = std::max<int64_t>(picked_width, static_cast<int64_t>(row_columns[i].size()));
    }
    const at::Device device = model_.options().device;
    at::Tensor picked;
    if (picked_width > 0 && 2 * picked_width <= t) {
      // Few positions score: the last layer runs at those alone (forward_packed's columns).
      at::Tensor columns = at::zeros({b, picked_width}, at::kLong);
      auto col = columns.accessor<int64_t, 2>();
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < picked_width; ++j) {
          const std::vector<int64_t>& cs = row_columns[static_cast<size_t>(i)];
          col[i][j] = cs.empty() ? 0 : cs[std::min<size_t>(static_cast<size_t>(j), cs.size() - 1)];
        }
      std::vector<int64_t> order;
      for (const auto& [i, j] : picks) order.push_back(i * picked_width + j);
      at::Tensor hidden = model_.forward_packed(tokens.to(device), positions.to(device), valid.to(device),
                                                segments.to(device), prefix_, columns.to(device));  // [B, T', D]
      picked =
          hidden.reshape({b * picked_width, hidden.size(2)}).index_select(0, at::tensor(order, at::kLong).to(device));
    } else {
      at::Tensor hidden = model_.forward_packed(tokens.to(device), positions.to(device), valid.to(device),
                                                segments.to(device), prefix_);  // [B, T, D]
      picked = hidden.reshape({b * t, hidden.size(2)}).index_select(0, at::tensor(flat, at::kLong).to(device));
    }
    TargetScores scores = target_logprobs(model_, picked, at::tensor(targets, at::kLong).to(device));
    at::Tensor lp = scores.logprobs.to(at::kCPU).contiguous();
    at::Tensor gr = scores.is_greedy.to(at::kCPU).contiguous();
    const float* lps = lp.data_ptr<float>();
    const bool* grs = gr.data_ptr<bool>();
    // Each item's targets in token order, summed in double as ScoreResult::sum does.
    size_t k = 0;
    for (size_t r = begin; r < end; ++r) {
      for (const PackedRow::Target& target : rows_[r].targets) {
        ItemResult& res = out_[target.item];
        res.logprob += static_cast<double>(lps[k]);
        res.is_greedy = res.is_greedy && grs[k];
        res.num_tokens += 1;
        ++k;
      }
    }
    stats_.tokens_computed += real;
  }

  const DecoderModelImpl& model_;
  const Batch& batch_;
  const std::vector<PackedRow>& rows_;
  const PrefixKV* prefix_;
  const ExecutionOptions& options_;
  ExecutionStats& stats_;
  std::vector<ItemResult>& out_;
};

// The keys and values of the batch's prefix (null without one): the worker's prefix cache's copy,
// or computed for this batch alone; what had to be computed counts in `stats`.
std::shared_ptr<const PrefixKV> batch_prefix(const DecoderModelImpl& model, const Batch& batch,
                                             const ExecutionOptions& options, ExecutionStats& stats) {
  if (batch.prefix.empty()) return nullptr;
  int64_t computed = 0;
  std::shared_ptr<const PrefixKV> prefix;
  if (options.prefixes) {
    prefix = options.prefixes->get(model, batch.prefix, &computed);
  } else {
    prefix = std::make_shared<const PrefixKV>(model.prefill(batch.prefix));
    computed = static_cast<int64_t>(batch.prefix.size());
  }
  stats.prefix_tokens += computed;
  stats.tokens_computed += computed;
  return prefix;
}

std::vector<ItemResult> score_items(const DecoderModelImpl& model, const Batch& batch, const ExecutionOptions& options,
                                    ExecutionStats& stats) {
  c10::InferenceMode guard;
  std::vector<ItemResult> out;
  for (const WorkItem& item : batch.items) {
    out.push_back(result_for(item));
    out.back().is_greedy = true;  // and-ed over the targets; an item with none (an empty rolling text) scores log 1 = 0
  }
  const std::vector<PackedRow> rows = pack_rows(batch);
  if (rows.empty()) return out;
  const std::shared_ptr<const PrefixKV> prefix = batch_prefix(model, batch, options, stats);
  RowRunner(model, batch, rows, prefix.get(), options, stats, out).run(0, rows.size());
  return out;
}

// Decides, after every generated token, whether a row is done: its own token
// limit, or its decoded text containing one of its stop strings. A row ends on
// its own text only, so its result never depends on its batch mates.
class StopWatch {
 public:
  explicit StopWatch(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // The next row generates `item` (which must outlive the watch).
  void add(const WorkItem& item) {
    size_t longest = 0;
    for (const std::string& s : item.stops) longest = std::max(longest, s.size());
    rows_.push_back(&item);
    // A stop of n bytes spans at most n tokens, plus one on each side for a
    // split UTF-8 sequence or a stripped leading space.
    tail_tokens_.push_back(longest == 0 ? 0 : longest + 2);
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
  std::vector<const WorkItem*> rows_;
  std::vector<size_t> tail_tokens_;
};

// Generation batches through one generate(): the first, then each that `next` hands over while rows
// are free (GenerationNext), its sequences joining the running set. Each batch's results go to
// `done` as soon as its last sequence has ended, with its stats (its prefix's tokens if computed
// for it, each distinct prompt's own tokens once, and the generated tokens).
class GenerationStream {
 public:
  GenerationStream(const DecoderModelImpl& model, const Tokenizer& tokenizer, const ExecutionOptions& options,
                   const GenerationNext& next, const GenerationDone& done)
      : model_(model), tokenizer_(tokenizer), options_(options), next_(next), done_(done), stop_watch_(tokenizer) {}

  void run(const Batch& first) {
    if (std::none_of(first.items.begin(), first.items.end(),
                     [](const WorkItem& item) { return item.max_tokens > 0; })) {
      take(first, {});
      return;
    }
    // The batch's prefix (a task's few-shot examples): computed once per worker, as a scoring one, with
    // the row-invariant products generate() decodes with (the prefix cache keeps the two apart).
    const RowInvariantProducts invariant;
    ExecutionStats first_stats;
    prefix_ = batch_prefix(model_, first, options_, first_stats);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<JoiningPrompt> firsts = take(first, first_stats);
    SamplingOptions o;
    o.max_new_tokens = 0;
    for (JoiningPrompt& p : firsts) {
      o.seeds.push_back(p.seed);
      o.per_row.push_back(p.sampler);
      o.max_new_tokens = std::max(o.max_new_tokens, p.max_new_tokens);
      prompts.push_back(std::move(p.tokens));
    }
    o.stop_token_ids = model_.config().eos_token_ids;
    if (tokenizer_.eos_id() &&
        std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), *tokenizer_.eos_id()) == o.stop_token_ids.end())
      o.stop_token_ids.push_back(*tokenizer_.eos_id());
    for (int32_t id : first.stop_ids)
      if (std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), id) == o.stop_token_ids.end())
        o.stop_token_ids.push_back(id);
    o.max_rows = first.max_rows;
    const bool independent = generation_rows_independent(model_);
    MorePrompts more;
    if (next_ && independent)
      more = [&]() -> std::vector<JoiningPrompt> {
        while (std::optional<Batch> b = next_()) {
          if (b->prefix != first.prefix || b->stop_ids != first.stop_ids)
            throw Error(fmt::format("batch {} joins batch {}'s generation with another prefix or other stop tokens",
                                    b->id, first.id));
          ExecutionStats prefix_stats;
          batch_prefix(model_, *b, options_, prefix_stats);  // its worker holds it: a cache hit
          std::vector<JoiningPrompt> joining = take(*b, prefix_stats);
          if (!joining.empty()) return joining;
        }
        return {};
      };
    RowDone on_done = [&](size_t k, const Generation& g) { ended(k, g, independent); };
    generate(model_, prompts, o, nullptr, std::cref(stop_watch_), prefix_.get(), on_done, more);
  }

 private:
  struct Stream {
    Batch batch;
    std::vector<ItemResult> out;
    size_t open = 0;  // items whose sequence has not ended
    ExecutionStats stats;
  };

  // Batch `b` joins: its items' results, and a prompt per item that generates. A batch with none
  // to generate is done at once.
  std::vector<JoiningPrompt> take(const Batch& b, const ExecutionStats& stats) {
    Stream& st = batches_.emplace_back(Stream{b, {}, 0, stats});
    std::vector<JoiningPrompt> prompts;
    for (const WorkItem& item : st.batch.items) {
      st.out.push_back(result_for(item));
      if (item.max_tokens <= 0) continue;
      stop_watch_.add(item);
      rows_.emplace_back(batches_.size() - 1, st.out.size() - 1);
      prompts.push_back(
          JoiningPrompt{item.tokens, item.seed, Sampler{item.temperature, item.top_k, item.top_p}, item.max_tokens});
      ++st.open;
    }
    if (st.open == 0) finish(st);
    return prompts;
  }

  void ended(size_t row, const Generation& g, bool independent) {
    const auto [k, at] = rows_[row];
    Stream& st = batches_[k];
    ItemResult& r = st.out[at];
    r.num_tokens = static_cast<int64_t>(g.tokens.size());
    // Decoded on its own, as lm-evaluation-harness decodes the continuation.
    r.text = cut_at_stops(tokenizer_.decode(g.tokens, /*skip_special_tokens=*/true), st.batch.items[at].stops);
    if (options_.on_item_done && independent) options_.on_item_done(r);
    if (--st.open == 0) finish(st);
  }

  void finish(Stream& st) {
    // Each distinct prompt's tokens after the prefix are computed once.
    std::set<std::vector<int32_t>> prompts;
    for (const WorkItem& item : st.batch.items) prompts.insert(item.tokens);
    for (const auto& p : prompts) st.stats.tokens_computed += static_cast<int64_t>(p.size() - st.batch.prefix.size());
    for (const ItemResult& r : st.out) st.stats.tokens_computed += r.num_tokens;
    done_(st.batch, std::move(st.out), st.stats);
  }

  const DecoderModelImpl& model_;
  const Tokenizer& tokenizer_;
  const ExecutionOptions& options_;
  const GenerationNext& next_;
  const GenerationDone& done_;
  StopWatch stop_watch_;
  std::shared_ptr<const PrefixKV> prefix_;
  std::deque<Stream> batches_;  // in the order they joined (a deque: rows keep their addresses)
  std::vector<std::pair<size_t, size_t>> rows_;  // per generate() prompt: its batch and item
};

std::vector<ItemResult> generate_items(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& batch,
                                       const ExecutionOptions& options, ExecutionStats& stats) {
  std::vector<ItemResult> out;
  const GenerationDone done = [&](const Batch&, std::vector<ItemResult> items, const ExecutionStats& s) {
    out = std::move(items);
    stats.add(s);
  };
  GenerationStream(model, tokenizer, options, nullptr, done).run(batch);
  return out;
}

// Generation with the same out-of-memory handling as scoring: rows are
// independent (own seed, own stop), so halves give the same results.
std::vector<ItemResult> generate_split(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& batch,
                                       const ExecutionOptions& options, ExecutionStats& stats) {
  try {
    int64_t width = 0;
    for (const WorkItem& item : batch.items) width = std::max(width, item.cost());
    if (options.before_forward) options.before_forward(static_cast<int64_t>(batch.items.size()), width);
    return generate_items(model, tokenizer, batch, options, stats);
  } catch (const c10::OutOfMemoryError& e) {
    release_cached_memory(model.options().device);
    if (batch.items.size() == 1)
      throw Error(fmt::format("batch {}: a single generation of {} tokens does not fit in memory", batch.id,
                              batch.items.front().cost()));
    ++stats.oom_splits;
    Batch half = batch;
    half.max_rows =
        std::max<int64_t>(1, (batch.max_rows > 0 ? batch.max_rows : static_cast<int64_t>(batch.items.size())) / 2);
    const auto mid = batch.items.begin() + static_cast<std::ptrdiff_t>(batch.items.size() / 2);
    half.items.assign(batch.items.begin(), mid);
    std::vector<ItemResult> out = generate_split(model, tokenizer, half, options, stats);
    half.items.assign(mid, batch.items.end());
    std::vector<ItemResult> rest = generate_split(model, tokenizer, half, options, stats);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
  }
}

void check_batch(const Batch& batch) {
  const bool generate = batch.items.front().type == RequestType::kGenerateUntil;
  for (const WorkItem& item : batch.items)
    if ((item.type == RequestType::kGenerateUntil) != generate)
      throw Error(fmt::format("batch {}: generate_until items mixed with loglikelihood items", batch.id));
}

}  // namespace

std::vector<ItemResult> execute_batch(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& batch,
                                      const ExecutionOptions& options, ExecutionStats* stats) {
  if (batch.items.empty()) return {};
  check_batch(batch);
  const bool generate = batch.items.front().type == RequestType::kGenerateUntil;
  ExecutionStats local;
  ExecutionStats& s = stats ? *stats : local;
  return generate ? generate_split(model, tokenizer, batch, options, s) : score_items(model, batch, options, s);
}

void execute_generation(const DecoderModelImpl& model, const Tokenizer& tokenizer, const Batch& first,
                        const ExecutionOptions& options, const GenerationNext& next, const GenerationDone& done) {
  if (first.items.empty() || first.items.front().type != RequestType::kGenerateUntil)
    throw Error(fmt::format("batch {}: execute_generation needs a generate_until batch", first.id));
  check_batch(first);
  std::vector<int64_t> answered;  // the batches whose results went to `done`
  std::vector<Batch> joined{first};
  const GenerationNext take = [&]() -> std::optional<Batch> {
    std::optional<Batch> b = next ? next() : std::nullopt;
    if (b) {
      if (b->items.empty() || b->items.front().type != RequestType::kGenerateUntil)
        throw Error(fmt::format("batch {} joins a generation but is no generate_until batch", b->id));
      check_batch(*b);
      joined.push_back(*b);
    }
    return b;
  };
  const GenerationDone report = [&](const Batch& b, std::vector<ItemResult> items, const ExecutionStats& stats) {
    answered.push_back(b.id);
    done(b, std::move(items), stats);
  };
  try {
    GenerationStream(model, tokenizer, options, take, report).run(first);
  } catch (const c10::OutOfMemoryError&) {
    release_cached_memory(model.options().device);
    // Every batch not answered runs again on its own, split as far as it must be: rows are
    // independent, so its results are the ones it would have given here.
    int64_t splits = 1;
    for (const Batch& b : joined) {
      if (std::find(answered.begin(), answered.end(), b.id) != answered.end()) continue;
      ExecutionStats stats;
      stats.oom_splits = std::exchange(splits, 0);
      std::vector<ItemResult> items = generate_split(model, tokenizer, b, options, stats);
      done(b, std::move(items), stats);
    }
  }
}

nlohmann::json ExecutionStats::to_json() const {
  return {{"tokens_computed", tokens_computed}, {"prefix_tokens", prefix_tokens}, {"oom_splits", oom_splits}};
}

void ExecutionStats::add(const ExecutionStats& other) {
  tokens_computed += other.tokens_computed;
  prefix_tokens += other.prefix_tokens;
  oom_splits += other.oom_splits;
}

}  // namespace gpueval
