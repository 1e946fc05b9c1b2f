// SHA-256 against FIPS 180-4's examples and Python's hashlib, on both compression paths: the
// SHA-extension one (where the processor has it) must give the portable one's digest for every
// length around the block and padding boundaries.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace gpueval {
namespace {

TEST(Sha256, KnownDigests) {
  const std::pair<std::string, std::string> known[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const auto& [text, digest] : known) {
    EXPECT_EQ(sha256_hex(text), digest) << text.size() << " bytes";
    EXPECT_EQ(sha256_hex_portable(text), digest) << text.size() << " bytes";
  }
}

TEST(Sha256, EveryLengthAgreesWithThePortablePath) {
  std::mt19937 random(17);
  std::string text;
  for (size_t n = 0; n <= 1100; ++n) {
    EXPECT_EQ(sha256_hex(text), sha256_hex_portable(text)) << n << " bytes";
    text += static_cast<char>(random() & 0xFF);
  }
}

}  // namespace
}  // namespace gpueval
