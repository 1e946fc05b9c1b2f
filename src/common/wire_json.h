// Field access for the JSON (or CBOR) messages that cross process boundaries:
// batches going to a worker and results coming back. A message from a pipe is
// untrusted, so every field is checked for presence, type and range, and a
// failure is one Error line naming the message and the field path
// ("batch: items[3].tokens[2]: expected an integer in [0, 2147483647]").
// nlohmann's own accessors would instead convert 2.5 to 2 or wrap a huge
// unsigned into a negative number. The same typed access serves the keys of a model's
// configuration files (config.json), where a key may be absent or null and then has a default,
// and the messages name the key ("m/config.json: key 'vocab_size' must be >= 1, got -5").
// Private to src/. Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpueval::wire {

// `path` is the field's full name for messages, e.g. "batch: items[3]".
const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& path);
const nlohmann::json& array_field(const nlohmann::json& object, const char* key, const std::string& path);

int64_t get_int(const nlohmann::json& value, const std::string& path, int64_t min, int64_t max);
uint64_t get_uint64(const nlohmann::json& value, const std::string& path);
double get_double(const nlohmann::json& value, const std::string& path);  // finite
bool get_bool(const nlohmann::json& value, const std::string& path);
std::string get_string(const nlohmann::json& value, const std::string& path);
std::vector<int32_t> get_token_ids(const nlohmann::json& value, const std::string& path);  // ids >= 0
std::vector<std::string> get_strings(const nlohmann::json& value, const std::string& path);

// A key of a configuration object: absent or null gives `fallback` (for get_int, none is an Error
// "<where>: missing required key '<key>'"); a value of another type, or an integer out of range,
// is an Error naming `where` and the key.
int64_t get_int(const nlohmann::json& object, const std::string& where, const char* key,
                std::optional<int64_t> fallback, int64_t min, int64_t max);
double get_double(const nlohmann::json& object, const std::string& where, const char* key, double fallback);
bool get_bool(const nlohmann::json& object, const std::string& where, const char* key, bool fallback);

// Throws unless `value` is an object.
void require_object(const nlohmann::json& value, const std::string& path);

}  // namespace gpueval::wire
