// Tokenizer turns text into model token ids and back. Two implementations sit
// behind it: Hugging Face `tokenizer.json` files (BPE models, byte-level or
// SentencePiece-style with byte fallback, with added/special tokens) and
// SentencePiece `tokenizer.model` files through the SentencePiece library.
// load_tokenizer() picks one from a path and returns an owned instance.
//
// A Tokenizer is immutable after loading; every method is const and may be
// called from many threads at once (internal caches are guarded by a mutex).
// Invalid input (a malformed file, text that is not UTF-8, an unknown id)
// raises gpueval::Error with a one-line message naming the tokenizer file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special_tokens adds what the tokenizer adds by default (BOS for
  // Llama-2/Mistral, nothing for GPT-2 and this Llama-3 revision).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  // Ids outside the vocabulary are skipped, as Hugging Face does.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;
  // One past the largest id, added tokens included: the embedding table size.
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // The raw vocabulary string (e.g. "Ġworld", "▁Hello", "<0x0A>"); throws on an unknown id.
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual std::optional<int32_t> piece_to_id(std::string_view piece) const = 0;
  // The file the tokenizer was loaded from, for messages.
  virtual const std::string& origin() const = 0;
};

// file_or_dir: a tokenizer.json, a tokenizer.model, or a directory holding one
// of them (tokenizer.json preferred). Reads tokenizer_config.json beside it
// when present: bos_token/eos_token for both kinds, add_bos_token/add_eos_token
// for tokenizer.model (a tokenizer.json's own post_processor decides what
// encode() adds, as in the Hugging Face `tokenizers` library).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& file_or_dir);

// Builds a tokenizer from an already parsed tokenizer.json document. origin
// names it in error messages; config is the optional tokenizer_config.json.
std::unique_ptr<Tokenizer> load_tokenizer_json(const nlohmann::json& tokenizer_json, const std::string& origin,
                                               const nlohmann::json* config = nullptr);

}  // namespace gpueval
