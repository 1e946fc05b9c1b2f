// JSON parsing for files we must not trust (safetensors headers, checkpoint indexes): keeps object
// keys in file order and rejects duplicate keys, which nlohmann would otherwise resolve silently
// by keeping one of them; and quoting of the strings such files contain, so an error message
// stays one readable line whatever the file holds. Private to src/. Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpueval {

// Parses `text`; on failure throws Error "<where>: <what> is not valid JSON: <detail>" or
// "<where>: <what> has duplicate key '<key>'".
nlohmann::ordered_json parse_strict_json(std::string_view text, const std::string& where, std::string_view what);

// `s` in single quotes for an error message: control characters, quotes and backslashes escaped,
// cut to 200 bytes with "..." so a hostile 100 MiB name cannot flood the log.
std::string quote_untrusted(std::string_view s);

}  // namespace gpueval
