#include "common/unicode_text.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include "common/utf8.h"
#include "gpueval/error.h"

namespace gpueval {

namespace {

// The root locale: case mapping without any language's tailoring.
constexpr const char* kRootLocale = "";

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

void check(UErrorCode status, const char* call) {
  // ICU fails here only on a broken installation or memory exhaustion.
  if (U_FAILURE(status)) fail("ICU", "{} failed: {}", call, u_errorName(status));
}

// Code points to UTF-16; a lone surrogate stays one lone unit.
std::u16string to_utf16(const std::u32string& text) {
  std::u16string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x10000) {
      out += static_cast<char16_t>(c);
    } else {
      out += static_cast<char16_t>(U16_LEAD(c));
      out += static_cast<char16_t>(U16_TRAIL(c));
    }
  }
  return out;
}

std::u32string to_utf32(const std::u16string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char16_t unit = text[i];
    if (U16_IS_LEAD(unit) && i + 1 < text.size() && U16_IS_TRAIL(text[i + 1])) {
      out += static_cast<char32_t>(U16_GET_SUPPLEMENTARY(unit, text[i + 1]));
      ++i;
    } else {
      out += static_cast<char32_t>(unit);
    }
  }
  return out;
}

std::u16string utf8_to_utf16(std::string_view text) {
  std::u32string code_points;
  code_points.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    code_points += utf8_decode(text, pos, &length);
    pos += length;
  }
  return to_utf16(code_points);
}

std::string utf16_to_utf8(const std::u16string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : to_utf32(text)) utf8_append(out, c);
  return out;
}

// Runs an ICU string function of the usual (dest, capacity, src, length, status)
// shape, growing the output once when ICU says how long it must be.
template <typename Call>
std::u16string icu_transform(const std::u16string& source, const char* name, Call call) {
  std::u16string out(source.size() + source.size() / 2 + 8, u'\0');
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = call(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                        reinterpret_cast<const UChar*>(source.data()), static_cast<int32_t>(source.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    out.assign(static_cast<size_t>(length), u'\0');
    status = U_ZERO_ERROR;
    length = call(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                  reinterpret_cast<const UChar*>(source.data()), static_cast<int32_t>(source.size()), &status);
  }
  check(status, name);
  out.resize(static_cast<size_t>(length));
  return out;
}

const UNormalizer2* normalizer_for(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = nullptr;
  switch (form) {
    case NormalForm::kNfc: normalizer = unorm2_getNFCInstance(&status); break;
    case NormalForm::kNfd: normalizer = unorm2_getNFDInstance(&status); break;
    case NormalForm::kNfkc: normalizer = unorm2_getNFKCInstance(&status); break;
    case NormalForm::kNfkd: normalizer = unorm2_getNFKDInstance(&status); break;
  }
  check(status, "unorm2_get*Instance");
  return normalizer;
}

std::u16string lower16(const std::u16string& text) {
  return icu_transform(text, "u_strToLower",
                       [](UChar* dest, int32_t capacity, const UChar* src, int32_t length, UErrorCode* status) {
                         return u_strToLower(dest, capacity, src, length, kRootLocale, status);
                       });
}

std::u16string upper16(const std::u16string& text) {
  return icu_transform(text, "u_strToUpper",
                       [](UChar* dest, int32_t capacity, const UChar* src, int32_t length, UErrorCode* status) {
                         return u_strToUpper(dest, capacity, src, length, kRootLocale, status);
                       });
}

}  // namespace

std::string unicode_normalize(std::string_view text, NormalForm form) {
  // ASCII is unchanged by every form; most prompts are ASCII.
  if (is_ascii(text)) return std::string(text);
  const UNormalizer2* normalizer = normalizer_for(form);
  return utf16_to_utf8(
      icu_transform(utf8_to_utf16(text), "unorm2_normalize",
                    [normalizer](UChar* dest, int32_t capacity, const UChar* src, int32_t length, UErrorCode* status) {
                      return unorm2_normalize(normalizer, src, length, dest, capacity, status);
                    }));
}

std::string unicode_lower_each(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const char32_t c = utf8_decode(text, pos, &length);
    pos += length;
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
      continue;
    }
    // One code point at a time, so no context (Final_Sigma) applies.
    for (const char32_t mapped : to_utf32(lower16(to_utf16(std::u32string(1, c))))) utf8_append(out, mapped);
  }
  return out;
}

std::u32string python_lower(const std::u32string& text) { return to_utf32(lower16(to_utf16(text))); }

std::u32string python_upper(const std::u32string& text) { return to_utf32(upper16(to_utf16(text))); }

bool is_nonspacing_mark(char32_t code_point) {
  return u_charType(static_cast<UChar32>(code_point)) == U_NON_SPACING_MARK;
}

bool is_other_category(char32_t code_point) {
  switch (u_charType(static_cast<UChar32>(code_point))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_UNASSIGNED:
    case U_PRIVATE_USE_CHAR: return true;
    default: return false;
  }
}

}  // namespace gpueval
