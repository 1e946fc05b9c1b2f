#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "common/unicode_regex.h"
#include "common/utf8.h"
#include "tokenizer/normalizer.h"

namespace gpueval {

namespace {

// Rust's regex \w, which decides whether a single_word token touches a word.
bool is_word_char_at(std::string_view text, size_t pos) {
  static const UnicodeRegex word("\\w", "added_tokens");
  return word.matches_at(text, pos);
}

bool ends_with_word(std::string_view text) {
  return !text.empty() && is_word_char_at(text, utf8_previous(text, text.size()));
}

bool starts_with_word(std::string_view text) { return !text.empty() && is_word_char_at(text, 0); }

// Start of the whitespace run that ends text.
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = utf8_previous(text, end);
    size_t length = 0;
    if (!is_unicode_whitespace(utf8_decode(text, start, &length))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts text.
size_t leading_space_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    if (!is_unicode_whitespace(utf8_decode(text, pos, &length))) break;
    pos += length;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, size_t token_index) {
  int node = 0;
  for (unsigned char byte : key) {
    const uint64_t edge = (static_cast<uint64_t>(node) << 8) | byte;
    auto it = edges_.find(edge);
    if (it == edges_.end()) {
      const int child = static_cast<int>(terminal_.size());
      terminal_.push_back(-1);
      it = edges_.emplace(edge, child).first;
    }
    node = it->second;
  }
  terminal_[node] = static_cast<long>(token_index);
}

std::vector<AddedVocabulary::Trie::Match> AddedVocabulary::Trie::find_all(std::string_view text) const {
  std::vector<Match> matches;
  if (empty()) return matches;
  for (size_t pos = 0; pos < text.size();) {
    int node = 0;
    long best = -1;
    size_t best_end = pos;
    for (size_t k = pos; k < text.size(); ++k) {
      const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) {
        best = terminal_[node];
        best_end = k + 1;
      }
    }
    if (best >= 0) {
      matches.push_back({pos, best_end, static_cast<size_t>(best)});
      pos = best_end;
    } else {
      ++pos;
    }
  }
  return matches;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    // Hugging Face ignores tokens with empty content.
    if (token.content.empty()) continue;
    index_of_id_[token.id] = i;
    id_of_content_[token.content] = token.id;
    id_limit_ = std::max(id_limit_, token.id + 1);
    if (token.special) special_.insert(token.content);
    if (!token.normalized) {
      raw_trie_.insert(token.content, i);
      continue;
    }
    std::string spelling = token.content;
    if (normalizer != nullptr) normalizer->normalize(spelling);
    if (spelling != token.content) normalized_spelling_[token.id] = spelling;
    normalized_trie_.insert(spelling, i);
  }
}

std::vector<TextSplit> AddedVocabulary::cut(const TextSplit& whole, const Trie& trie) const {
  const std::string_view sentence = whole.text;
  std::vector<TextSplit> splits;
  const auto emit = [&](size_t begin, size_t end, int32_t id) {
    if (begin < end) {
      splits.push_back({whole.text.substr(begin, end - begin), id, whole.at_input_start && begin == 0});
    }
  };
  size_t done = 0;  // end of the last accepted match
  for (const Trie::Match& match : trie.find_all(sentence)) {
    const AddedToken& token = tokens_[match.token_index];
    size_t begin = match.begin, end = match.end;
    if (begin < done) continue;  // swallowed by the previous token's rstrip
    if (token.single_word) {
      const bool space_before = begin == 0 || !ends_with_word(sentence.substr(0, begin));
      const bool space_after = end == sentence.size() || !starts_with_word(sentence.substr(end));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) begin = std::max(trailing_space_start(sentence.substr(0, begin)), done);
    if (token.rstrip) end += leading_space_length(sentence.substr(end));
    emit(done, begin, -1);
    emit(begin, end, token.id);
    done = end;
  }
  emit(done, sentence.size(), -1);
  return splits;
}

std::vector<TextSplit> AddedVocabulary::split(std::string_view text, const Normalizer* normalizer) const {
  std::vector<TextSplit> raw = cut({std::string(text), -1, true}, raw_trie_);
  std::vector<TextSplit> result;
  result.reserve(raw.size());
  for (TextSplit& split : raw) {
    if (split.token_id >= 0) {
      result.push_back(std::move(split));
      continue;
    }
    if (normalizer != nullptr) normalizer->normalize(split.text);
    for (TextSplit& piece : cut(split, normalized_trie_)) result.push_back(std::move(piece));
  }
  return result;
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = id_of_content_.find(std::string(content));
  if (it == id_of_content_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::content(int32_t id) const {
  const auto it = index_of_id_.find(id);
  return it == index_of_id_.end() ? nullptr : &tokens_[it->second].content;
}

const std::string* AddedVocabulary::decode_string(int32_t id) const {
  const auto normalized = normalized_spelling_.find(id);
  if (normalized != normalized_spelling_.end()) return &normalized->second;
  return content(id);
}

}  // namespace gpueval
