#include "model/decoder/generate.h"

#include <algorithm>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"
#include "model/kernels/row_invariant.h"

namespace gpueval {
namespace {

// logits: [V] float32 on CPU.
int32_t pick_token(const at::Tensor& logits, const Sampler& o, at::Generator& gen) {
  if (o.temperature <= 0) return static_cast<int32_t>(logits.argmax().item<int64_t>());
  at::Tensor scaled = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < scaled.size(0)) {
    at::Tensor kth = std::get<0>(scaled.topk(o.top_k)).min();
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = scaled.sort(/*dim=*/-1, /*descending=*/true);
    at::Tensor cumulative = at::softmax(sorted, -1).cumsum(-1);
    // Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    at::Tensor drop_sorted = (cumulative - at::softmax(sorted, -1)) >= o.top_p;
    at::Tensor drop = at::zeros_like(drop_sorted).scatter(0, order, drop_sorted);
    scaled = scaled.masked_fill(drop, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scaled, -1);
  return static_cast<int32_t>(at::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>());
}

// One prompt's prefill, shared by the prompts equal to it (a task's repeats): its keys and values
// after the prefix, in a cache of its own, and the logits of its last position.
struct Prefilled {
  std::shared_ptr<KVCache> cache;
  int64_t length = 0;  // its tokens after the prefix
  at::Tensor logits;  // [V] float32, CPU
};

// A prompt being prefilled, a chunk per step: its tokens after the prefix, and how many are in its cache.
struct Filling {
  std::vector<int32_t> suffix;
  std::shared_ptr<KVCache> cache;
  int64_t done = 0;
  int64_t chunk = 0;  // tokens per chunk: SamplingOptions::prefill_chunk, or all of them (see chunk_of)
};

// The running set: up to `slots` sequences decoded together, one cache row each. A finished
// sequence's row takes the next waiting prompt, whose prefill joins the decode steps a chunk at a
// time (DecoderModelImpl::forward_ragged), so the set stays full while prompts wait; with none
// waiting, the caller may hand over more (MorePrompts); once none comes, finished rows leave the
// cache (and come back if more prompts join later).
class Engine {
 public:
  Engine(const DecoderModelImpl& model, const SamplingOptions& o, const PrefixKV* prefix, const TokenCallback& on_token,
         const RowCheck& end_row, const RowDone& on_done, const MorePrompts& more)
      : model_(model),
        o_(o),
        prefix_(prefix),
        on_token_(on_token),
        end_row_(end_row),
        on_done_(on_done),
        more_(more),
        device_(model.options().device),
        p_(prefix ? prefix->length() : 0) {}

  std::vector<Generation> run(const std::vector<std::vector<int32_t>>& prompts) {
    if (!o_.seeds.empty() && o_.seeds.size() != prompts.size())
      throw Error(fmt::format("generate: {} seeds for {} prompts", o_.seeds.size(), prompts.size()));
    if (!o_.per_row.empty() && o_.per_row.size() != prompts.size())
      throw Error(fmt::format("generate: {} samplers for {} prompts", o_.per_row.size(), prompts.size()));
    if (o_.prefill_chunk <= 0) throw Error(fmt::format("generate: a prefill chunk of {} tokens", o_.prefill_chunk));
    if (prompts.empty()) return {};
    c10::InferenceMode guard;
    const Sampler common{o_.temperature, o_.top_k, o_.top_p};
    for (size_t i = 0; i < prompts.size(); ++i)
      add(JoiningPrompt{prompts[i], o_.seeds.empty() ? o_.seed : o_.seeds[i],
                        o_.per_row.empty() ? common : o_.per_row[i], o_.max_new_tokens});
    slots_ = o_.max_rows > 0 ? std::min<int64_t>(o_.max_rows, count()) : count();
    // Twice the widest row: the cache is compacted (rows moved to its start) at most once per
    // `widest` steps.
    cache_ = std::make_unique<KVCache>(model_.make_cache(slots_, 2 * widest_));
    slot_prompt_.assign(static_cast<size_t>(slots_), -1);
    slot_length_.assign(static_cast<size_t>(slots_), 0);
    slot_token_.assign(static_cast<size_t>(slots_), 0);
    slot_position_.assign(static_cast<size_t>(slots_), 0);
    while (true) {
      // Prompts take free rows in order, once prefilled; one that ends at its first token leaves its
      // row to the next.
      while (next_ < count()) {
        if (max_new_[next_] <= 0) {
          done(next_++);
          continue;
        }
        const auto free = std::find(slot_prompt_.begin(), slot_prompt_.end(), -1);
        if (free == slot_prompt_.end() || !prefilled_.count(suffix(next_))) break;
        start(static_cast<size_t>(free - slot_prompt_.begin()), next_++);
      }
      if (next_ == count() && more_ && rows_free() && join(more_())) continue;
      if (next_ == count()) shrink();
      fill();
      if (slot_prompt_.empty() && filling_.empty()) break;
      step();
    }
    return std::move(out_);
  }

 private:
  int64_t count() const { return static_cast<int64_t>(prompts_.size()); }

  // A new prompt's state; Error for one the model cannot generate from.
  void add(JoiningPrompt p) {
    const int64_t context = model_.config().max_position_embeddings;
    const int64_t n = static_cast<int64_t>(p.tokens.size());
    if (n <= p_)
      throw Error(fmt::format("generate: a prompt of {} tokens has none after the {}-token prefix{}", n, p_,
                              p.tokens.empty() ? " (no tokens, not even BOS)" : ""));
    if (n > context)
      throw Error(fmt::format("generate: prompt of {} tokens exceeds the model's context of {}", n, context));
    gens_.push_back(at::make_generator<at::CPUGeneratorImpl>(p.seed));
    samplers_.push_back(p.sampler);
    max_new_.push_back(std::min<int64_t>(p.max_new_tokens, context - n + 1));
    out_.emplace_back();
    prompts_.push_back(std::move(p.tokens));
    // A row's most positions in the cache: its prompt after the prefix and its new tokens.
    widest_ = std::max<int64_t>(widest_, n - p_ + max_new_.back());
    if (max_new_.back() > 0) ++uses_[suffix(count() - 1)];
  }

  bool rows_free() const {
    return static_cast<int64_t>(slot_prompt_.size()) < slots_ ||
           std::find(slot_prompt_.begin(), slot_prompt_.end(), -1) != slot_prompt_.end();
  }

  // Prompts handed over while rows are free join the run: the cache gets back the rows it shed,
  // and more positions if a new row is wider than it holds. False when none came.
  bool join(std::vector<JoiningPrompt> more) {
    if (more.empty()) return false;
    for (JoiningPrompt& p : more) add(std::move(p));
    const int64_t rows = std::max<int64_t>(slots_, static_cast<int64_t>(slot_prompt_.size()));
    if (static_cast<int64_t>(slot_prompt_.size()) == rows && 2 * widest_ <= cache_->capacity()) return true;
    auto grown = std::make_unique<KVCache>(model_.make_cache(rows, std::max<int64_t>(2 * widest_, cache_->capacity())));
    const int64_t length = slot_length_.empty() ? 0 : *std::max_element(slot_length_.begin(), slot_length_.end());
    grown->realign(std::vector<int64_t>(static_cast<size_t>(rows), 0), length);
    for (size_t s = 0; s < slot_prompt_.size(); ++s)
      if (slot_prompt_[s] >= 0)
        grown->place_row(static_cast<int64_t>(s), *cache_, static_cast<int64_t>(s), slot_length_[s]);
    cache_ = std::move(grown);
    slot_prompt_.resize(static_cast<size_t>(rows), -1);
    slot_length_.resize(static_cast<size_t>(rows), 0);
    slot_token_.resize(static_cast<size_t>(rows), 0);
    slot_position_.resize(static_cast<size_t>(rows), 0);
    return true;
  }

  std::vector<int32_t> suffix(int64_t i) const {
    return std::vector<int32_t>(prompts_[i].begin() + p_, prompts_[i].end());
  }

  // Prompt i's prefill chunk. A RoPE whose tables depend on the length (dynamic, longrope) takes a
  // prompt longer than its threshold whole, as transformers' one prefill call does.
  int64_t chunk_of(int64_t i) const {
    const std::optional<int64_t> threshold = model_.config().rope_length_threshold();
    if (threshold && static_cast<int64_t>(prompts_[i].size()) > *threshold)
      return static_cast<int64_t>(prompts_[i].size()) - p_;
    return o_.prefill_chunk;
  }

  // The prompts that will take the rows free now, next_ onwards, start their prefill (unless it is
  // done or under way, or an equal prompt's is).
  void fill() {
    int64_t rows = std::count(slot_prompt_.begin(), slot_prompt_.end(), -1);
    for (int64_t i = next_; i < count() && rows > 0; ++i) {
      if (max_new_[i] <= 0) continue;
      --rows;
      std::vector<int32_t> s = suffix(i);
      if (prefilled_.count(s) ||
          std::any_of(filling_.begin(), filling_.end(), [&](const Filling& f) { return f.suffix == s; }))
        continue;
      const int64_t n = static_cast<int64_t>(s.size());
      filling_.push_back(Filling{std::move(s), std::make_shared<KVCache>(model_.make_cache(1, n)), 0, chunk_of(i)});
    }
  }

  // Picks prompt i's next token from `logits`; false when the sequence ends with it.
  bool advance(int64_t i, const at::Tensor& logits) {
    const int32_t tok = pick_token(logits, samplers_[i], gens_[i]);
    if (on_token_) on_token_(static_cast<size_t>(i), tok);
    if (std::find(o_.stop_token_ids.begin(), o_.stop_token_ids.end(), tok) != o_.stop_token_ids.end()) {
      out_[i].stopped = true;
      return done(i);
    }
    out_[i].tokens.push_back(tok);
    if (end_row_ && end_row_(static_cast<size_t>(i), out_[i].tokens)) {
      out_[i].ended_by_check = true;
      return done(i);
    }
    return static_cast<int64_t>(out_[i].tokens.size()) < max_new_[i] || done(i);
  }

  // Prompt i's sequence has ended: the caller hears of it now. Always false.
  bool done(int64_t i) {
    if (on_done_) on_done_(static_cast<size_t>(i), out_[i]);
    return false;
  }

  // Prompt i's first token from its prefill; when the sequence goes on, it takes slot s.
  void start(size_t s, int64_t i) {
    const std::vector<int32_t> key = suffix(i);
    Prefilled& pf = prefilled_.at(key);
    const bool goes_on = advance(i, pf.logits);
    if (goes_on) {
      const int64_t n = pf.length;
      if (cache_->length() < n) cache_->realign(slot_length_, n);
      cache_->place_row(static_cast<int64_t>(s), *pf.cache, 0, n);
      slot_prompt_[s] = i;
      slot_length_[s] = n;
      slot_token_[s] = out_[i].tokens.back();
      slot_position_[s] = static_cast<int64_t>(prompts_[i].size());
    }
    if (--uses_.at(key) == 0) {
      uses_.erase(key);
      prefilled_.erase(key);
    }
  }

  // With no prompt waiting, rows without a sequence leave the cache.
  void shrink() {
    std::vector<int64_t> keep;
    for (size_t s = 0; s < slot_prompt_.size(); ++s)
      if (slot_prompt_[s] >= 0) keep.push_back(static_cast<int64_t>(s));
    if (keep.size() == slot_prompt_.size()) return;
    if (!keep.empty()) cache_->select_rows(at::tensor(keep, at::kLong).to(device_));
    auto pick = [&](std::vector<int64_t>& v) {
      std::vector<int64_t> kept;
      for (int64_t s : keep) kept.push_back(v[static_cast<size_t>(s)]);
      v = std::move(kept);
    };
    pick(slot_prompt_);
    pick(slot_length_);
    pick(slot_token_);
    pick(slot_position_);
  }

  // One forward: a token for every running sequence, and the next chunk of prompts being prefilled,
  // in order, up to prefill_chunk tokens of them while sequences decode (any number while none does;
  // always at least one). A chunk's bounds are the prompt's own, whatever joins it, so its keys and
  // logits never depend on the step it runs in.
  void step() {
    const int64_t n = static_cast<int64_t>(slot_prompt_.size());
    std::vector<uint8_t> running(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s) running[static_cast<size_t>(s)] = slot_prompt_[static_cast<size_t>(s)] >= 0;
    const bool decoding = std::find(running.begin(), running.end(), 1) != running.end();
    std::vector<ForwardGroup> groups;
    if (decoding) {
      if (cache_->length() + 1 > cache_->capacity())
        cache_->realign(slot_length_, *std::max_element(slot_length_.begin(), slot_length_.end()));
      groups.push_back(ForwardGroup{at::tensor(slot_token_, at::kLong).view({n, 1}).to(device_),
                                    at::tensor(slot_position_, at::kLong).view({n, 1}).to(device_),
                                    at::tensor(std::vector<int64_t>(running.begin(), running.end()), at::kLong)
                                        .to(at::kBool)
                                        .view({n, 1})
                                        .to(device_),
                                    cache_.get()});
    }
    std::vector<size_t> chunked;  // indices into filling_ of the chunks in this step
    int64_t tokens = 0;
    for (size_t f = 0; f < filling_.size(); ++f) {
      Filling& fl = filling_[f];
      const int64_t c = std::min<int64_t>(fl.chunk, static_cast<int64_t>(fl.suffix.size()) - fl.done);
      if (decoding && !chunked.empty() && tokens + c > o_.prefill_chunk) break;
      tokens += c;
      chunked.push_back(f);
      groups.push_back(ForwardGroup{
          at::tensor(std::vector<int64_t>(fl.suffix.begin() + fl.done, fl.suffix.begin() + fl.done + c), at::kLong)
              .view({1, c})
              .to(device_),
          at::arange(p_ + fl.done, p_ + fl.done + c, at::kLong).view({1, c}).to(device_),
          at::ones({1, c}, at::TensorOptions().dtype(at::kBool).device(device_)), fl.cache.get()});
      fl.done += c;
    }
    const std::vector<at::Tensor> hidden = model_.forward_ragged(groups, prefix_);
    // The LM head once for every row that needs logits: the decoding rows and each prompt whose prefill ends.
    std::vector<at::Tensor> rows;
    if (decoding) rows.push_back(hidden[0].select(1, 0));  // [n, D]
    std::vector<size_t> ended;
    for (size_t k = 0; k < chunked.size(); ++k) {
      const Filling& fl = filling_[chunked[k]];
      if (fl.done < static_cast<int64_t>(fl.suffix.size())) continue;
      const at::Tensor& h = hidden[(decoding ? 1 : 0) + k];
      rows.push_back(h.select(1, h.size(1) - 1));  // [1, D]
      ended.push_back(chunked[k]);
    }
    at::Tensor logits;
    if (!rows.empty()) logits = model_.logits(at::cat(rows, 0)).to(at::kFloat).to(at::kCPU);  // [rows, V]
    const int64_t first_ended = decoding ? n : 0;
    for (size_t k = 0; k < ended.size(); ++k) {
      Filling& fl = filling_[ended[k]];
      const int64_t length = static_cast<int64_t>(fl.suffix.size());
      Prefilled entry{std::move(fl.cache), length, logits[first_ended + static_cast<int64_t>(k)]};
      prefilled_.emplace(std::move(fl.suffix), std::move(entry));
    }
    for (auto it = ended.rbegin(); it != ended.rend(); ++it)
      filling_.erase(filling_.begin() + static_cast<std::ptrdiff_t>(*it));
    if (!decoding) return;
    for (int64_t s = 0; s < n; ++s) {
      const size_t k = static_cast<size_t>(s);
      const int64_t i = slot_prompt_[k];
      if (i < 0) continue;
      ++slot_length_[k];
      if (advance(i, logits[s])) {
        slot_token_[k] = out_[i].tokens.back();
        ++slot_position_[k];
      } else {
        slot_prompt_[k] = -1;
        slot_length_[k] = 0;
        cache_->clear_row(s);
      }
    }
  }

  const DecoderModelImpl& model_;
  const SamplingOptions& o_;
  const PrefixKV* prefix_;
  const TokenCallback& on_token_;
  const RowCheck& end_row_;
  const RowDone& on_done_;
  const MorePrompts& more_;
  const at::Device device_;
  const int64_t p_;
  std::vector<std::vector<int32_t>> prompts_;  // the caller's, then those that joined
  std::vector<Generation> out_;
  std::vector<at::Generator> gens_;
  std::vector<Sampler> samplers_;
  std::vector<int64_t> max_new_;
  int64_t widest_ = 1;  // the most cache positions a row needs
  int64_t slots_ = 0;  // rows in the running set
  std::map<std::vector<int32_t>, int64_t> uses_;  // per distinct suffix, its prompts not started yet
  std::map<std::vector<int32_t>, Prefilled> prefilled_;
  std::vector<Filling> filling_;  // in the order of their prompts
  int64_t next_ = 0;  // the first prompt not yet started
  std::unique_ptr<KVCache> cache_;
  // Per cache row: its prompt (-1: none), its positions in the cache, its next input token and position.
  std::vector<int64_t> slot_prompt_, slot_length_, slot_token_, slot_position_;
};

}  // namespace

std::vector<Generation> generate(const DecoderModelImpl& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingOptions& o, const TokenCallback& on_token, const RowCheck& end_row,
                                 const PrefixKV* prefix, const RowDone& on_done, const MorePrompts& more) {
  const RowInvariantProducts invariant;  // a row's tokens whatever shares its steps
  return Engine(model, o, prefix, on_token, end_row, on_done, more).run(prompts);
}

bool generation_rows_independent(const at::Device& device, at::ScalarType dtype) {
  const RowInvariantProducts invariant;
  return device.is_cpu() && dtype == at::kFloat && row_invariant_vector_code() && row_invariant_products_on();
}

bool generation_rows_independent(const DecoderModelImpl& model) {
  return generation_rows_independent(model.options().device, model.options().dtype);
}

}  // namespace gpueval
