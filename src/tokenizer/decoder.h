// Decoder is the `decoder` stage of a tokenizer.json: it turns the vocabulary
// strings of a token sequence back into text. Like Hugging Face's decode_chain
// each step maps a list of strings to a list of strings and the caller joins
// the final list. Supported: ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace and Sequence; anything else is rejected at load time.
// Immutable; safe from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// A null spec gives nullptr; the tokenizer then joins tokens with spaces.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where);

}  // namespace gpueval
