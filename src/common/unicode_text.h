// Unicode text transforms that need the Unicode Character Database: the four
// normalization forms, case mapping (full, as Python's str and Rust's char do
// it), and the general-category tests tokenizer normalizers ask.
//
// All of it goes through ICU (Debian's libicu-dev), not hand-written tables.
// ICU rather than utf8proc because utf8proc maps case one code point to one
// code point only, while Python's str.lower()/upper() and Rust's
// char::to_lowercase() (the `tokenizers` Lowercase normalizer) use the full
// mappings of SpecialCasing.txt ('ß'.upper() == 'SS', 'İ'.lower() == 'i̇'),
// and Python's lower() turns a word-final 'Σ' into 'ς', which ICU's root-locale
// lowercasing does by the same Unicode rule. The root locale is passed
// explicitly, so the process locale (a Turkish one, say) never changes a result.
//
// Strings are UTF-8 and must be valid unless a function says otherwise.
// Stateless (ICU's normalizer instances are process-wide singletons); safe
// from any thread.
#pragma once

#include <string>
#include <string_view>

namespace gpueval {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// unicodedata.normalize(form, text).
std::string unicode_normalize(std::string_view text, NormalForm form);

// Every code point replaced by its full lowercase mapping on its own, without
// context (Rust's char::to_lowercase, which `tokenizers`' Lowercase applies
// one character at a time: 'Σ' always becomes 'σ').
std::string unicode_lower_each(std::string_view text);

// Python's str.lower() and str.upper(): full mappings, and lower() with the
// Final_Sigma context. text is a string of code points that may hold lone
// surrogates (python_str keeps undecodable bytes as U+DC80..U+DCFF); they pass
// through unchanged.
std::u32string python_lower(const std::u32string& text);
std::u32string python_upper(const std::u32string& text);

// General category Mn (nonspacing mark): what StripAccents removes.
bool is_nonspacing_mark(char32_t code_point);

// General category Cc, Cf, Cn or Co: what BertNormalizer's clean_text treats as
// a control character (tab, newline and carriage return excepted by the caller).
bool is_other_category(char32_t code_point);

}  // namespace gpueval
