// The GPT-2 byte-to-character table that byte-level BPE tokenizers use: every
// byte value gets a printable code point (printable ASCII and most of Latin-1
// map to themselves, the other 68 bytes to U+0100..U+0143), so any byte string
// becomes a string of vocabulary characters and back. Tables are built once
// at first use (thread-safe static initialisation) and read-only after.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gpueval {

// Each byte of text replaced by the UTF-8 of its table character.
std::string byte_level_encode(std::string_view text);

// The byte a table character stands for, or -1 when it is not in the table.
int byte_level_byte(char32_t code_point);

}  // namespace gpueval
