#include "tokenizer/llama2c_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/strict_json.h"
#include "common/utf8.h"
#include "gpueval/error.h"

namespace gpueval {

namespace {

constexpr int32_t kUnkId = 0;
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kFirstByteId = 3;  // <0x00>; llama2.c's byte fallback adds 3 to the byte
constexpr std::string_view kSpacePiece = "\u2581";

struct Llama2cToken {
  std::string piece;
  float score;
};

std::vector<Llama2cToken> read_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: {}", std::strerror(errno));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "cannot read: {}", std::strerror(errno));

  size_t pos = 0;
  const auto read_raw = [&](void* out, size_t size, const char* what, size_t index) {
    if (data.size() - pos < size) fail(path, "file ends inside the {} of token {}", what, index);
    std::memcpy(out, data.data() + pos, size);
    pos += size;
  };
  int32_t max_token_length = 0;
  read_raw(&max_token_length, sizeof(max_token_length), "header", 0);
  if (max_token_length <= 0) fail(path, "bad max_token_length {}", max_token_length);

  std::vector<Llama2cToken> tokens;
  while (pos < data.size()) {
    const size_t index = tokens.size();
    Llama2cToken token;
    int32_t length = 0;
    read_raw(&token.score, sizeof(token.score), "score", index);
    read_raw(&length, sizeof(length), "length", index);
    // In 64 bits: max_token_length * 4 overflowed int32 for a header near INT32_MAX (fuzz_llama2c_tokenizer).
    if (length < 0 || length > int64_t{max_token_length} * 4 || static_cast<size_t>(length) > data.size() - pos) {
      fail(path, "token {} has bad length {}", index, length);
    }
    token.piece = data.substr(pos, length);
    pos += length;
    if (utf8_invalid_offset(token.piece) != token.piece.size()) fail(path, "token {} is not valid UTF-8", index);
    tokens.push_back(std::move(token));
  }
  if (tokens.size() < static_cast<size_t>(kFirstByteId + 256)) {
    fail(path, "has {} tokens, fewer than the 259 specials and byte tokens llama2.c expects", tokens.size());
  }
  // llama2.c's byte fallback assumes these ids without looking; so do we.
  for (int b = 0; b < 256; ++b) {
    const std::string expected = fmt::format("<0x{:02X}>", b);
    if (tokens[kFirstByteId + b].piece != expected) {
      fail(path, "token {} is {}, expected byte token '{}'", kFirstByteId + b,
           quote_untrusted(tokens[kFirstByteId + b].piece), expected);
    }
  }
  return tokens;
}

// The vocabulary spelling: llama2.c writes a space as ' ', Hugging Face as '▁';
// the BOS/EOS pieces "\n<s>\n" / "\n</s>\n" get their usual names.
std::string hf_piece(const Llama2cToken& token, int32_t id) {
  if (id == kUnkId) return "<unk>";
  if (id == kBosId) return "<s>";
  if (id == kEosId) return "</s>";
  std::string out;
  for (char c : token.piece) {
    if (c == ' ') {
      out.append(kSpacePiece);
    } else {
      out += c;
    }
  }
  return out;
}

// llama2.c merges any adjacent pair whose concatenation is a vocabulary piece, best score first
// and leftmost among equals. A BPE merge list expresses that when it holds every such split of
// every piece, ordered by the score of the piece it makes. BOS/EOS are left out: their llama2.c
// spelling is not their name, and no concatenation of real text makes them.
nlohmann::json merge_list(const std::vector<Llama2cToken>& tokens,
                          const std::unordered_map<std::string, int32_t>& id_of_piece,
                          const std::vector<std::string>& names) {
  struct Candidate {
    float score;
    int32_t id;
    size_t split;
    int32_t left;
    int32_t right;
  };
  const int32_t count = static_cast<int32_t>(tokens.size());
  std::vector<Candidate> candidates;
  const auto usable = [&](const std::string& piece) -> int32_t {
    const auto it = id_of_piece.find(piece);
    if (it == id_of_piece.end() || it->second == kBosId || it->second == kEosId) return -1;
    return it->second;
  };
  for (int32_t id = 0; id < count; ++id) {
    const std::string& piece = tokens[id].piece;
    if (id == kBosId || id == kEosId || id_of_piece.at(piece) != id) continue;
    for (size_t split = utf8_sequence_length(piece, 0); split < piece.size();
         split += utf8_sequence_length(piece, split)) {
      const int32_t left = usable(piece.substr(0, split));
      const int32_t right = usable(piece.substr(split));
      if (left >= 0 && right >= 0) candidates.push_back({tokens[id].score, id, split, left, right});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  nlohmann::json merges = nlohmann::json::array();
  for (const Candidate& c : candidates) merges.push_back({names[c.left], names[c.right]});
  return merges;
}

// The tokenizer.json around llama2.c's vocabulary and merges.
nlohmann::json tokenizer_json(nlohmann::json vocab, nlohmann::json merges) {
  nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      // No added tokens: Hugging Face would cut "<s>"/"</s>" out of the text,
      // while llama2.c (like SentencePiece) spells them out. BOS still comes
      // from the post-processor below.
      {"added_tokens", nlohmann::json::array()},
      // llama2.c prepends a space token to non-empty text and reads spaces as pieces.
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", kSpacePiece}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpacePiece}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {kBosId}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", kSpacePiece}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}},
  };
  return tokenizer;
}

}  // namespace

nlohmann::json llama2c_tokenizer_to_json(const std::string& tokenizer_bin_path) {
  const std::vector<Llama2cToken> tokens = read_tokens(tokenizer_bin_path);
  const int32_t count = static_cast<int32_t>(tokens.size());
  // llama2.c looks pieces up by their own spelling; a repeated spelling
  // resolves to one id, and we keep the first.
  std::unordered_map<std::string, int32_t> id_of_piece;
  std::vector<std::string> names(count);
  nlohmann::json vocab = nlohmann::json::object();
  for (int32_t id = 0; id < count; ++id) {
    names[id] = hf_piece(tokens[id], id);
    if (!id_of_piece.emplace(tokens[id].piece, id).second) continue;
    if (vocab.contains(names[id])) continue;
    vocab[names[id]] = id;
  }

  return tokenizer_json(std::move(vocab), merge_list(tokens, id_of_piece, names));
}

nlohmann::json llama2c_tokenizer_config() {
  return {{"add_bos_token", true},
          {"add_eos_token", false},
          {"bos_token", "<s>"},
          {"eos_token", "</s>"},
          {"unk_token", "<unk>"}};
}

}  // namespace gpueval
