// SentencePieceTokenizer wraps a SentencePiece `tokenizer.model` (Llama-2
// style) through the SentencePiece C++ library, so ids are the library's own.
// add_special_tokens adds BOS when tokenizer_config.json's add_bos_token is
// true or absent (the Llama default) and EOS when add_eos_token is true.
//
// The processor is only read after loading; SentencePiece's Encode/Decode are
// const, so one instance serves many threads.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "gpueval/tokenizer.h"

namespace gpueval {

// Throws gpueval::Error naming path when the model cannot be loaded.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path, const nlohmann::json* config);

}  // namespace gpueval
