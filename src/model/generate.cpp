#include "model/generate.h"

#include <algorithm>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"
#include "model/row_invariant.h"

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
// after the prefix (the last `length` positions of a row of a prefill batch's cache), and the
// logits of its last position.
struct Prefilled {
  std::shared_ptr<const KVCache> cache;
  int64_t row = 0;
  int64_t length = 0;
  at::Tensor logits;  // [V] float32, CPU
  int64_t uses = 0;   // prompts still to start from it
};

// The running set: up to `slots` sequences decoded together, one cache row each. A finished
// sequence's row takes the next waiting prompt (prefilled alone), so the set stays full while
// prompts wait; once none waits, finished rows leave the cache.
class Engine {
 public:
  Engine(const LlamaModelImpl& model, const std::vector<std::vector<int32_t>>& prompts, const SamplingOptions& o,
         const PrefixKV* prefix, const TokenCallback& on_token, const RowCheck& end_row, const RowDone& on_done)
      : model_(model), prompts_(prompts), o_(o), prefix_(prefix), on_token_(on_token), end_row_(end_row), on_done_(on_done),
        device_(model.options().device), p_(prefix ? prefix->length() : 0), out_(prompts.size()) {}

  std::vector<Generation> run() {
    const int64_t b = static_cast<int64_t>(prompts_.size());
    if (b == 0) return std::move(out_);
    check();
    c10::InferenceMode guard;
    const Sampler common{o_.temperature, o_.top_k, o_.top_p};
    int64_t widest = 1;  // a row's most positions in the cache: its prompt after the prefix and its new tokens
    for (int64_t i = 0; i < b; ++i) {
      gens_.push_back(at::make_generator<at::CPUGeneratorImpl>(o_.seeds.empty() ? o_.seed : o_.seeds[i]));
      samplers_.push_back(o_.per_row.empty() ? common : o_.per_row[i]);
      const int64_t n = static_cast<int64_t>(prompts_[i].size());
      max_new_.push_back(std::min<int64_t>(o_.max_new_tokens, model_.config().max_position_embeddings - n + 1));
      widest = std::max<int64_t>(widest, n - p_ + max_new_.back());
      ++uses_[suffix(i)];
    }
    const int64_t slots = o_.max_rows > 0 ? std::min<int64_t>(o_.max_rows, b) : b;
    // Twice the widest row: the cache is compacted (rows moved to its start) at most once per
    // `widest` steps.
    cache_ = std::make_unique<KVCache>(model_.make_cache(slots, 2 * widest));
    slot_prompt_.assign(static_cast<size_t>(slots), -1);
    slot_length_.assign(static_cast<size_t>(slots), 0);
    slot_token_.assign(static_cast<size_t>(slots), 0);
    slot_position_.assign(static_cast<size_t>(slots), 0);
    int64_t next = 0;
    while (true) {
      // Free rows take the next prompts, prefilled together; one that ends at its first token
      // leaves its row to the next.
      while (next < b) {
        std::vector<size_t> free;
        for (size_t s = 0; s < slot_prompt_.size(); ++s)
          if (slot_prompt_[s] < 0) free.push_back(s);
        if (free.empty()) break;
        const int64_t last = std::min<int64_t>(b, next + static_cast<int64_t>(free.size()));
        prefill(next, last);
        for (size_t k = 0; next < last; ++k) start(free[k], next++);
      }
      if (next == b) shrink();
      if (slot_prompt_.empty()) break;
      step();
    }
    return std::move(out_);
  }

 private:
  void check() const {
    const int64_t context = model_.config().max_position_embeddings;
    if (!o_.seeds.empty() && o_.seeds.size() != prompts_.size())
      throw Error(fmt::format("generate: {} seeds for {} prompts", o_.seeds.size(), prompts_.size()));
    if (!o_.per_row.empty() && o_.per_row.size() != prompts_.size())
      throw Error(fmt::format("generate: {} samplers for {} prompts", o_.per_row.size(), prompts_.size()));
    for (const auto& p : prompts_) {
      if (static_cast<int64_t>(p.size()) <= p_)
        throw Error(fmt::format("generate: a prompt of {} tokens has none after the {}-token prefix{}", p.size(), p_,
                                p.empty() ? " (no tokens, not even BOS)" : ""));
      if (static_cast<int64_t>(p.size()) > context)
        throw Error(fmt::format("generate: prompt of {} tokens exceeds the model's context of {}", p.size(), context));
    }
  }

  std::vector<int32_t> suffix(int64_t i) const {
    return std::vector<int32_t>(prompts_[i].begin() + p_, prompts_[i].end());
  }

  // The tokens after the prefix of prompts [first, last) that no earlier prompt shares, through the
  // model in one batch (left-padded: each row's keys end at the batch's last position).
  void prefill(int64_t first, int64_t last) {
    std::vector<std::vector<int32_t>> todo;
    for (int64_t i = first; i < last; ++i) {
      std::vector<int32_t> s = suffix(i);
      if (max_new_[i] > 0 && !prefilled_.count(s) && std::find(todo.begin(), todo.end(), s) == todo.end())
        todo.push_back(std::move(s));
    }
    if (todo.empty()) return;
    const int64_t b = static_cast<int64_t>(todo.size());
    int64_t longest = 0;
    for (const auto& s : todo) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
    at::Tensor tokens = at::zeros({b, longest}, at::kLong);
    at::Tensor positions = at::zeros({b, longest}, at::kLong);
    at::Tensor valid = at::zeros({b, longest}, at::kBool);
    auto tok = tokens.accessor<int64_t, 2>();
    auto pos = positions.accessor<int64_t, 2>();
    auto val = valid.accessor<bool, 2>();
    for (int64_t r = 0; r < b; ++r) {
      const auto& s = todo[static_cast<size_t>(r)];
      const int64_t n = static_cast<int64_t>(s.size()), pad = longest - n;
      for (int64_t j = 0; j < n; ++j) {
        tok[r][pad + j] = s[static_cast<size_t>(j)];
        pos[r][pad + j] = p_ + j;
        val[r][pad + j] = true;
      }
    }
    auto cache = std::make_shared<KVCache>(model_.make_cache(b, longest));
    at::Tensor hidden = model_.forward(tokens.to(device_), positions.to(device_), valid.to(device_), cache.get(), prefix_);
    at::Tensor logits = model_.logits(hidden.select(1, longest - 1)).to(at::kFloat).to(at::kCPU);  // [b, V]
    for (int64_t r = 0; r < b; ++r) {
      auto& s = todo[static_cast<size_t>(r)];
      Prefilled entry{cache, r, static_cast<int64_t>(s.size()), logits[r], uses_.at(s)};
      prefilled_.emplace(std::move(s), std::move(entry));
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
    if (max_new_[i] <= 0) {
      done(i);
      return;
    }
    const std::vector<int32_t> key = suffix(i);
    Prefilled& pf = prefilled_.at(key);
    const bool goes_on = advance(i, pf.logits);
    if (goes_on) {
      const int64_t n = pf.length;
      if (cache_->length() < n) cache_->realign(slot_length_, n);
      cache_->place_row(static_cast<int64_t>(s), *pf.cache, pf.row, n);
      slot_prompt_[s] = i;
      slot_length_[s] = n;
      slot_token_[s] = out_[i].tokens.back();
      slot_position_[s] = static_cast<int64_t>(prompts_[i].size());
    }
    if (--pf.uses == 0) prefilled_.erase(key);
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

  // One token for every running sequence.
  void step() {
    const int64_t n = static_cast<int64_t>(slot_prompt_.size());
    if (cache_->length() + 1 > cache_->capacity())
      cache_->realign(slot_length_, *std::max_element(slot_length_.begin(), slot_length_.end()));
    std::vector<uint8_t> running(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s) running[static_cast<size_t>(s)] = slot_prompt_[static_cast<size_t>(s)] >= 0;
    at::Tensor tokens = at::tensor(slot_token_, at::kLong).view({n, 1}).to(device_);
    at::Tensor positions = at::tensor(slot_position_, at::kLong).view({n, 1}).to(device_);
    at::Tensor valid = at::tensor(std::vector<int64_t>(running.begin(), running.end()), at::kLong)
                           .to(at::kBool).view({n, 1}).to(device_);
    at::Tensor hidden = model_.forward(tokens, positions, valid, cache_.get(), prefix_).select(1, 0);  // [n, D]
    at::Tensor logits = model_.logits(hidden).to(at::kFloat).to(at::kCPU);                            // [n, V]
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

  const LlamaModelImpl& model_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const SamplingOptions& o_;
  const PrefixKV* prefix_;
  const TokenCallback& on_token_;
  const RowCheck& end_row_;
  const RowDone& on_done_;
  const at::Device device_;
  const int64_t p_;
  std::vector<Generation> out_;
  std::vector<at::Generator> gens_;
  std::vector<Sampler> samplers_;
  std::vector<int64_t> max_new_;
  std::map<std::vector<int32_t>, int64_t> uses_;
  std::map<std::vector<int32_t>, Prefilled> prefilled_;
  std::unique_ptr<KVCache> cache_;
  // Per cache row: its prompt (-1: none), its positions in the cache, its next input token and position.
  std::vector<int64_t> slot_prompt_, slot_length_, slot_token_, slot_position_;
};

}  // namespace

std::vector<Generation> generate(const LlamaModelImpl& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingOptions& o, const TokenCallback& on_token, const RowCheck& end_row,
                                 const PrefixKV* prefix, const RowDone& on_done) {
  const RowInvariantProducts invariant;  // a row's tokens whatever shares its steps
  return Engine(model, prompts, o, prefix, on_token, end_row, on_done).run();
}

bool generation_rows_independent(const at::Device& device, at::ScalarType dtype) {
  const RowInvariantProducts invariant;
  return device.is_cpu() && dtype == at::kFloat && row_invariant_vector_code() && row_invariant_products_on();
}

bool generation_rows_independent(const LlamaModelImpl& model) {
  return generation_rows_independent(model.options().device, model.options().dtype);
}

}  // namespace gpueval
