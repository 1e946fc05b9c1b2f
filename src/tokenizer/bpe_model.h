// BpeModel is the `model` of a tokenizer.json of type "BPE": a vocabulary
// (string -> id), a ranked list of merges, and the options that say what to
// do with characters outside the vocabulary (byte_fallback to <0xNN> tokens,
// unk_token with fuse_unk), whether a word found whole in the vocabulary skips
// merging (ignore_merges, used by Llama-3), and the subword affixes
// (continuing_subword_prefix, end_of_word_suffix).
//
// tokenize() follows Hugging Face's merge order exactly: the pair with the
// lowest merge rank goes first, the leftmost one among equal ranks, using a
// priority queue so a word of n characters costs O(n log n).
//
// A SentencePiece-style vocabulary (Llama's, Mistral's) comes without a
// pre-tokenizer, so a whole normalized text is one word. When no merge can join
// a symbol ending in another character to one starting with the word mark U+2581
// (checked on the merges at load), no merge crosses such a boundary, and the
// word is merged piece by piece ("▁the", "▁▁cat", ...) with the same ids as
// merged whole; each piece then goes through the word cache, which makes a
// long prompt cost about a lookup per word instead of a heap over all its
// characters.
//
// Immutable after construction except for a word cache, which a shared mutex
// guards; every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

class BpeModel {
 public:
  // spec is the "model" object of tokenizer.json; where names the file in errors.
  BpeModel(const nlohmann::json& spec, const std::string& where);

  // Appends the ids of one pre-tokenized word; an empty word adds nothing.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for an id the vocabulary does not have.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }
  // Whether tokenize() merges a word piece by piece between word marks (first paragraph).
  bool splits_at_word_marks() const { return split_at_word_marks_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  std::vector<int32_t> merge_word(std::string_view word) const;
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;  // indexed by id
  std::vector<bool> has_token_;  // ids may have gaps
  std::unordered_map<uint64_t, Merge> merges_;
  std::string where_;
  std::optional<std::string> unk_token_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool split_at_word_marks_ = false;  // see the first paragraph
  int32_t byte_ids_[256];  // id of <0xNN>, or -1

  // Words already merged; bounded like Hugging Face's cache.
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace gpueval
