// AddedVocabulary holds a tokenizer.json's `added_tokens` and does the first
// step of encoding: cutting the input on their contents before the normalizer
// and the model see it, as Hugging Face's AddedVocabulary does. Tokens with
// normalized=false are matched in the raw text; the remaining pieces are then
// normalized and searched for tokens with normalized=true (in their normalized
// spelling). Matching is leftmost-longest over all contents; single_word,
// lstrip and rstrip are honoured per token. A special token is one that
// decode(skip_special_tokens=true) drops.
//
// Immutable after construction; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/pre_tokenizer.h"

namespace gpueval {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  // normalizer (may be null) gives the spelling of normalized=true tokens; it
  // must be the one later passed to split().
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // The input cut into added-token splits and normalized text splits, with
  // empty pieces dropped. text must be valid UTF-8.
  std::vector<TextSplit> split(std::string_view text, const Normalizer* normalizer) const;

  std::optional<int32_t> token_to_id(std::string_view content) const;
  // The token's content, or nullptr when id is not an added token.
  const std::string* content(int32_t id) const;
  // What decode() feeds the decoder for id: the normalized spelling for a
  // normalized token (so e.g. a byte-level decoder can invert it), else the content.
  const std::string* decode_string(int32_t id) const;
  bool is_special(std::string_view token_string) const { return special_.count(std::string(token_string)) > 0; }
  // One past the largest added id (0 when there are none).
  int32_t id_limit() const { return id_limit_; }

 private:
  // A byte trie over token spellings, searched leftmost-longest.
  class Trie {
   public:
    void insert(std::string_view key, size_t token_index);
    bool empty() const { return terminal_.size() <= 1; }
    struct Match {
      size_t begin;
      size_t end;
      size_t token_index;
    };
    std::vector<Match> find_all(std::string_view text) const;

   private:
    std::unordered_map<uint64_t, int> edges_;  // (node << 8 | byte) -> child node
    std::vector<long> terminal_{-1};  // token index ending at node, or -1
  };

  // Hugging Face's find_matches: splits of sentence, each an added token or not.
  std::vector<TextSplit> cut(const TextSplit& whole, const Trie& trie) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_of_id_;
  std::unordered_map<std::string, int32_t> id_of_content_;
  std::unordered_map<int32_t, std::string> normalized_spelling_;
  std::unordered_set<std::string> special_;
  Trie raw_trie_;
  Trie normalized_trie_;
  int32_t id_limit_ = 0;
};

}  // namespace gpueval
