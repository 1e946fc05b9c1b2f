#include "tokenizer/bpe_model.h"

#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/strict_json.h"
#include "common/strings.h"
#include "common/utf8.h"
#include "gpueval/error.h"
#include "tokenizer/token_id.h"

namespace gpueval {

namespace {

// Hugging Face caches at most 10,000 words, each shorter than kMaxCachedWordBytes. Pieces between
// word marks (bpe_model.h) are many more distinct words in a large task set (a few ten thousand
// in MMLU), so the cache holds more: at most ~100 bytes each, ~13 MiB when full.
constexpr size_t kCacheCapacity = 1 << 17;
constexpr size_t kMaxCachedWordBytes = 256;

// SentencePiece's word mark, U+2581 in UTF-8.
constexpr std::string_view kWordMark = "\xE2\x96\x81";

struct Symbol {
  int32_t id;
  int prev;
  int next;
  size_t length;  // bytes of the word it covers; 0 once merged into its left neighbour
};

struct QueuedMerge {
  int32_t rank;
  int pos;
  int32_t new_id;
};

// Orders the queue so the top is the lowest rank, then the leftmost position.
struct LaterMerge {
  bool operator()(const QueuedMerge& a, const QueuedMerge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

std::optional<std::string> optional_string(const nlohmann::json& spec, const char* key) {
  if (!spec.contains(key) || spec.at(key).is_null()) return std::nullopt;
  return spec.at(key).get<std::string>();
}

// Applies the merges to a word's symbols, lowest rank first and leftmost first among equals, as
// Hugging Face's word merge does; merged-away symbols are left with length 0. `lookup(left,
// right)` is the merge of that pair, or null.
template <typename Lookup>
void apply_merges(std::vector<Symbol>& symbols, const Lookup& lookup) {
  std::priority_queue<QueuedMerge, std::vector<QueuedMerge>, LaterMerge> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto* m = lookup(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& current = symbols[top.pos];
    if (current.length == 0 || current.next < 0) continue;
    const Symbol right = symbols[current.next];
    // The entry is stale when either side has changed since it was queued.
    const auto* still = lookup(current.id, right.id);
    if (still == nullptr || still->new_id != top.new_id) continue;

    current.id = top.new_id;
    current.length += right.length;
    symbols[current.next].length = 0;
    current.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;

    if (current.prev >= 0) {
      if (const auto* m = lookup(symbols[current.prev].id, current.id)) {
        queue.push({m->rank, current.prev, m->new_id});
      }
    }
    if (current.next >= 0) {
      if (const auto* m = lookup(current.id, symbols[current.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& spec, const std::string& where) {
  if (spec.contains("dropout") && !spec.at("dropout").is_null() && spec.at("dropout").get<double>() > 0.0) {
    fail(where, "BPE dropout is not supported (it makes encoding random)");
  }
  const nlohmann::json& vocab = spec.at("vocab");
  if (!vocab.is_object()) fail(where, "model.vocab must be an object of token -> id");
  vocab_.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    const int32_t id = token_id_from_json(id_json, where, "token " + quote_untrusted(token));
    vocab_.emplace(token, static_cast<int32_t>(id));
    if (static_cast<size_t>(id) >= tokens_.size()) {
      tokens_.resize(id + 1);
      has_token_.resize(id + 1, false);
    }
    tokens_[id] = token;
    has_token_[id] = true;
  }

  continuing_subword_prefix_ = optional_string(spec, "continuing_subword_prefix").value_or("");
  end_of_word_suffix_ = optional_string(spec, "end_of_word_suffix").value_or("");
  fuse_unk_ = spec.value("fuse_unk", false);
  byte_fallback_ = spec.value("byte_fallback", false);
  ignore_merges_ = spec.value("ignore_merges", false);
  where_ = where;
  if (auto unk = optional_string(spec, "unk_token")) {
    // Like Hugging Face, a missing unk token only matters once a word needs it.
    unk_token_ = *unk;
    unk_id_ = token_to_id(*unk);
  }
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(fmt::format("<0x{:02X}>", b)).value_or(-1);

  const nlohmann::json& merges = spec.at("merges");
  if (!merges.is_array()) fail(where, "model.merges must be an array");
  merges_.reserve(merges.size());
  bool crossing_merge = false;  // a merge of a left token not ending in the word mark with a right one starting with it
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {
      // The legacy form "a b" holds exactly one space.
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail(where, "merge {} '{}' is not two tokens separated by one space", rank, line);
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      fail(where, "merge {} is neither \"a b\" nor [\"a\", \"b\"]: {}", rank, merge.dump());
    }
    const auto left_id = token_to_id(left);
    const auto right_id = token_to_id(right);
    if (!left_id || !right_id) {
      fail(where, "merge {} uses '{}', which is not in the vocabulary", rank, left_id ? right : left);
    }
    // The right token carries the continuing-subword prefix, the merged one does not.
    const size_t skip = right.compare(0, continuing_subword_prefix_.size(), continuing_subword_prefix_) == 0
                            ? continuing_subword_prefix_.size()
                            : 0;
    const std::string merged = left + right.substr(skip);
    const auto new_id = token_to_id(merged);
    if (!new_id) fail(where, "merge {} makes '{}', which is not in the vocabulary", rank, merged);
    // A repeated pair keeps its last rank, as in Hugging Face's merge map.
    merges_[pair_key(*left_id, *right_id)] = Merge{static_cast<int32_t>(rank), *new_id};
    if (starts_with(right, kWordMark) && !ends_with(left, kWordMark)) crossing_merge = true;
  }
  // A word splits before each mark that follows another character when no merge joins across
  // such a boundary: symbols start as single characters, and a merge could only build one that
  // spans the boundary from a left symbol ending in that character (whose token is not "...▁";
  // byte and unk tokens are "<0xNN>" and unk_token, which must not end in the mark either) and a
  // right one starting with the mark. The mark must be a token of its own, so that a run of
  // unknown characters (fused into one unk) always ends at it. Affixes and ignore_merges depend on
  // the whole word, so they keep it whole.
  split_at_word_marks_ = !crossing_merge && token_to_id(kWordMark).has_value() && continuing_subword_prefix_.empty() &&
                         end_of_word_suffix_.empty() && !ignore_merges_ &&
                         !(unk_token_ && ends_with(*unk_token_, kWordMark));
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int32_t id, size_t length) {
    const int index = static_cast<int>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, length});
  };

  // A run of unknown characters waiting to become an unk symbol (0 = none).
  size_t unk_length = 0;
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    size_t length = utf8_sequence_length(word, pos);
    if (length == 0) length = 1;
    const bool first = pos == 0, last = pos + length == word.size();
    piece.assign(word.substr(pos, length));
    if (!first) piece.insert(0, continuing_subword_prefix_);
    if (last) piece += end_of_word_suffix_;
    pos += length;

    if (const auto id = token_to_id(piece)) {
      if (unk_length > 0) add(*unk_id_, unk_length);
      unk_length = 0;
      add(*id, length);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : piece) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // Hugging Face does not flush a pending unk here, so it lands after these bytes.
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_token_) {
      if (!unk_id_) fail(where_, "unk_token '{}' is not in the vocabulary", *unk_token_);
      if (unk_length > 0 && fuse_unk_) {
        unk_length += length;
      } else {
        if (unk_length > 0) add(*unk_id_, unk_length);
        unk_length = length;
      }
    }
  }
  if (unk_length > 0) add(*unk_id_, unk_length);

  apply_merges(symbols, [&](int32_t left, int32_t right) -> const Merge* {
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  });
  std::vector<int32_t> ids;
  for (const Symbol& s : symbols) {
    if (s.length != 0) ids.push_back(s.id);
  }
  return ids;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      ids.push_back(*id);
      return;
    }
  }
  std::vector<std::string_view> pieces;
  if (split_at_word_marks_) {
    // Pieces end before each mark that follows another character: "▁a▁▁b" is "▁a" and "▁▁b".
    size_t start = 0;
    for (size_t at = word.find(kWordMark, 1); at != std::string_view::npos; at = word.find(kWordMark, at + 1)) {
      if (at >= kWordMark.size() && word.substr(at - kWordMark.size(), kWordMark.size()) == kWordMark) continue;
      pieces.push_back(word.substr(start, at - start));
      start = at;
    }
    pieces.push_back(word.substr(start));
  } else {
    pieces.push_back(word);
  }
  // The cache is read under one shared lock for the whole word, and what it lacked is added
  // under one exclusive lock after, so that threads encoding at once rarely wait on each other.
  std::vector<std::pair<std::string, std::vector<int32_t>>> merged_here;
  {
    std::shared_lock lock(cache_mutex_);
    const bool room = cache_.size() < kCacheCapacity;
    std::string key;
    for (std::string_view piece : pieces) {
      const bool cacheable = piece.size() < kMaxCachedWordBytes;
      if (cacheable) {
        key.assign(piece);
        const auto it = cache_.find(key);
        if (it != cache_.end()) {
          ids.insert(ids.end(), it->second.begin(), it->second.end());
          continue;
        }
      }
      std::vector<int32_t> merged = merge_word(piece);
      ids.insert(ids.end(), merged.begin(), merged.end());
      if (cacheable && room) merged_here.emplace_back(key, std::move(merged));
    }
  }
  if (merged_here.empty()) return;
  std::unique_lock lock(cache_mutex_);
  for (auto& [key, merged] : merged_here) {
    if (cache_.size() >= kCacheCapacity) break;
    cache_.emplace(std::move(key), std::move(merged));
  }
}

}  // namespace gpueval
