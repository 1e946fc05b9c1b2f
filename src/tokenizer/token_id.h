// Reading a token id from tokenizer.json: an integer in [0, kMaxTokenId), checked before anything
// is sized by it. nlohmann's get<int32_t>() would convert 8.9e55 to an int (undefined behaviour,
// found by fuzz_tokenizer_json) and let an id near 2^31 size a vocabulary table of billions of
// entries. Private to src/tokenizer; stateless.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"

namespace gpueval {

// The bound on token ids, and so on vocabulary size (the same as config.json's vocab_size).
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// `what` names the id in messages ("token 'abc'", "added token 3").
inline int32_t token_id_from_json(const nlohmann::json& v, const std::string& where, const std::string& what) {
  if (!v.is_number_integer()) fail(where, "{} has id {}, which is not an integer", what, v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(kMaxTokenId)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxTokenId))
    fail(where, "{} has id {}, outside [0, {}) (the bound on vocabulary size)", what, v.dump(), kMaxTokenId);
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace gpueval
