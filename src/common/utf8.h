// UTF-8 helpers for the tokenizers: walking code points, validating input and
// turning arbitrary bytes back into text the way Rust's
// String::from_utf8_lossy does (one U+FFFD per maximal invalid subpart), which
// Hugging Face decoders rely on. Stateless; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpueval {

// Byte length of the valid UTF-8 sequence at text[pos], or 0 when the bytes
// there are not one.
size_t utf8_sequence_length(std::string_view text, size_t pos);

// Offset of the first invalid byte, or text.size() when all of it is valid.
size_t utf8_invalid_offset(std::string_view text);

// Code point of the (valid) sequence at text[pos]; *length receives its size.
char32_t utf8_decode(std::string_view text, size_t pos, size_t* length);

// Start of the code point that ends just before text[end] (end > 0, valid text).
size_t utf8_previous(std::string_view text, size_t end);

void utf8_append(std::string& out, char32_t code_point);

// Invalid sequences become U+FFFD, one per maximal subpart.
std::string utf8_from_bytes_lossy(std::string_view bytes);

// Unicode White_Space, the set Rust's char::is_whitespace and oniguruma's \s use.
bool is_unicode_whitespace(char32_t code_point);

}  // namespace gpueval
