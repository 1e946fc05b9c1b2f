// HfTokenizer runs a Hugging Face tokenizer.json the way the `tokenizers`
// library does for a single sequence: split on added tokens, normalize,
// pre-tokenize, BPE each word, then add the post-processor's special tokens;
// decode maps ids to vocabulary strings and runs the decoder chain.
//
// It owns every stage; all are immutable after construction except the BPE
// word cache, which is mutex-guarded, so the object is safe from many threads.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/tokenizer.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace gpueval {

class HfTokenizer final : public Tokenizer {
 public:
  // Throws gpueval::Error naming origin for anything malformed or unsupported.
  HfTokenizer(const nlohmann::json& spec, std::string origin, const nlohmann::json* config);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::string id_to_piece(int32_t id) const override;
  std::optional<int32_t> piece_to_id(std::string_view piece) const override;
  const std::string& origin() const override { return origin_; }

 private:
  void build(const nlohmann::json& spec, const nlohmann::json* config);
  std::optional<int32_t> find_special(const nlohmann::json* config, const char* key, bool leading) const;

  std::string origin_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedVocabulary> added_;
  PostProcessor post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace gpueval
