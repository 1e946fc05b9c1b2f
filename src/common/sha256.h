// SHA-256 (FIPS 180-4) of a byte string as lowercase hex: the doc/prompt/target hashes
// lm-evaluation-harness writes into samples files (hashlib.sha256(s.encode()).hexdigest()).
// Private to src/. Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace gpueval {

std::string sha256_hex(std::string_view bytes);

}  // namespace gpueval
