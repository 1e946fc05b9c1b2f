// Normalizer is the `normalizer` stage of a tokenizer.json: it rewrites a
// piece of input text before pre-tokenization. Supported: the Unicode forms
// NFC, NFD, NFKC and NFKD, Lowercase, StripAccents and BertNormalizer (through
// ICU: common/unicode_text.h), Prepend, Replace (a string or a regex), Strip,
// ByteLevel and Sequence of them; anything else (Precompiled, Nmt, ...) is
// rejected at load time with a one-line error naming the file and the type.
//
// Offsets back into the original text are not tracked: gpueval needs ids,
// not alignments. Immutable after construction; safe from any thread.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// spec is the JSON object; where names the file for errors. A null spec
// gives nullptr (no normalization).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace gpueval
