// Converts a llama2.c tokenizer file (tokenizer.bin, tok512.bin) into a
// Hugging Face tokenizer.json document that, run through load_tokenizer_json(),
// gives the ids of llama2.c's encode(text, bos, eos=0).
//
// File layout (little-endian): int32 max_token_length, then per token
// float32 score, int32 byte length, bytes. Ids 0/1/2 are <unk>, "\n<s>\n",
// "\n</s>\n"; ids 3..258 are the byte tokens <0x00>..<0xFF>; a piece spells a
// space as a literal ' '. The vocabulary size is not stored: tokens are read
// until the file ends.
//
// The one known difference: llama2.c treats a literal U+2581 '▁' in the input
// as an ordinary character (byte fallback), while the converted tokenizer
// reads it as a space, because its vocabulary spells spaces as '▁'.
//
// Pure functions of the file; safe to call from any thread.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gpueval {

// Throws gpueval::Error naming the file when it is missing or malformed.
nlohmann::json llama2c_tokenizer_to_json(const std::string& tokenizer_bin_path);

// The tokenizer_config.json that goes with it: BOS added by default, <s>/</s>.
nlohmann::json llama2c_tokenizer_config();

}  // namespace gpueval
