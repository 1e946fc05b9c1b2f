#include "tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace gpueval {

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> char_of_byte;
  std::array<int, 0x144> byte_of_char;  // indexed by code point; every table character is below U+0144

  ByteLevelTables() {
    byte_of_char.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next_extra++;
      utf8_append(char_of_byte[b], cp);
      byte_of_char[cp] = b;
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables instance;
  return instance;
}

}  // namespace

std::string byte_level_encode(std::string_view text) {
  const ByteLevelTables& t = tables();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += t.char_of_byte[static_cast<unsigned char>(c)];
  return out;
}

int byte_level_byte(char32_t code_point) {
  const ByteLevelTables& t = tables();
  return code_point < t.byte_of_char.size() ? t.byte_of_char[code_point] : -1;
}

}  // namespace gpueval
