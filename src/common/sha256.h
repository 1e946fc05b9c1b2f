// SHA-256 (FIPS 180-4) of a byte string as lowercase hex: the doc/prompt/target hashes
// lm-evaluation-harness writes into samples files (hashlib.sha256(s.encode()).hexdigest()).
// On an x86-64 processor with the SHA extensions the blocks are compressed with them (about five
// times faster: a run's request keys hash every prompt); elsewhere in portable C++.
// Private to src/. Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace gpueval {

std::string sha256_hex(std::string_view bytes);

// The portable path alone, whatever the processor: the reference the tests hold the other to.
std::string sha256_hex_portable(std::string_view bytes);

}  // namespace gpueval
