// Amounts of memory written the way configs and flags write them: "6GiB", "512MiB", "2GB",
// "1048576" (bytes). One parser, so every flag and config key takes the same units.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gpueval {

// The bytes of `text` when it is a number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB,
// TB); std::nullopt when it does not start with a positive number (a bare number counts as bytes).
// Throws Error("<where>: ...") for an unknown unit (its message lists the units, then `other_forms`,
// e.g. ", or a share such as 0.5") or an amount outside [min_bytes, 9e18].
std::optional<int64_t> parse_byte_amount(const std::string& text, int64_t min_bytes, const std::string& where,
                                         const std::string& other_forms = "");

// An amount as such text: "2GiB", "1536MiB", "100B" (the largest unit that divides it).
std::string byte_amount_str(int64_t bytes);

}  // namespace gpueval
