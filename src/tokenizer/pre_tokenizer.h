// PreTokenizer is the `pre_tokenizer` stage of a tokenizer.json: it cuts the
// normalized text into the words the model tokenizes one at a time (and, for
// ByteLevel, maps their bytes to vocabulary characters). Supported: ByteLevel,
// Split, Metaspace, Digits, Whitespace, WhitespaceSplit, CharDelimiterSplit
// and Sequence; anything else is rejected at load time.
//
// The text travels as a list of TextSplit. A split already holding an added
// token is left alone by every stage, and empty splits are dropped, as in
// Hugging Face's PreTokenizedString. Immutable; safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

struct TextSplit {
  std::string text;
  // The added token this split is, or -1 for text the model still has to tokenize.
  int32_t token_id = -1;
  // Whether the split starts at the beginning of the caller's input, which
  // Metaspace's prepend_scheme "first" asks.
  bool at_input_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<TextSplit>& splits) const = 0;
};

// A null spec gives nullptr (the whole normalized text is one word).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);

}  // namespace gpueval
