// Field access for the JSON (or CBOR) messages that cross process boundaries:
// batches going to a worker and results coming back. A message from a pipe is
// untrusted, so every field is checked for presence, type and range, and a
// failure is one Error line naming the message and the field path
// ("batch: items[3].tokens[2]: expected an integer in [0, 2147483647]").
// nlohmann's own accessors would instead convert 2.5 to 2 or wrap a huge
// unsigned into a negative number. Private to src/. Stateless and thread-safe.
#pragma once

#include <cstdint>
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

// Throws unless `value` is an object.
void require_object(const nlohmann::json& value, const std::string& path);

}  // namespace gpueval::wire
