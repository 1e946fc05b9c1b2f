#include "common/wire_json.h"

#include <cmath>
#include <limits>

#include "gpueval/error.h"

namespace gpueval::wire {
namespace {

// The integer `value` holds when int64_t can hold it; nullopt for any other value.
std::optional<int64_t> as_int64(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

// The value of `key`, or nullptr when it is absent or null.
const nlohmann::json* key_value(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

void require_object(const nlohmann::json& value, const std::string& path) {
  if (!value.is_object()) fail(path, "expected an object, got {}", value.type_name());
}

const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& path) {
  require_object(object, path);
  auto it = object.find(key);
  if (it == object.end()) fail(path, "missing field '{}'", key);
  return *it;
}

const nlohmann::json& array_field(const nlohmann::json& object, const char* key, const std::string& path) {
  const nlohmann::json& value = field(object, key, path);
  if (!value.is_array()) fail(path + "." + key, "expected an array, got {}", value.type_name());
  return value;
}

int64_t get_int(const nlohmann::json& value, const std::string& path, int64_t min, int64_t max) {
  const std::optional<int64_t> v = as_int64(value);
  if (!v || *v < min || *v > max) fail(path, "expected an integer in [{}, {}], got {}", min, max, value.dump());
  return *v;
}

int64_t get_int(const nlohmann::json& object, const std::string& where, const char* key,
                std::optional<int64_t> fallback, int64_t min, int64_t max) {
  const nlohmann::json* value = key_value(object, key);
  if (!value) {
    if (!fallback) fail(where, "missing required key '{}'", key);
    return *fallback;
  }
  if (!value->is_number_integer()) fail(where, "key '{}' must be an integer, got {}", key, value->dump());
  const std::optional<int64_t> v = as_int64(*value);
  if (!v || *v > max) fail(where, "key '{}' is {}, past the bound of {} that gpueval accepts", key, value->dump(), max);
  if (*v < min) fail(where, "key '{}' must be >= {}, got {}", key, min, *v);
  return *v;
}

double get_double(const nlohmann::json& object, const std::string& where, const char* key, double fallback) {
  const nlohmann::json* value = key_value(object, key);
  if (!value) return fallback;
  if (!value->is_number()) fail(where, "key '{}' must be a number, got {}", key, value->dump());
  return value->get<double>();
}

bool get_bool(const nlohmann::json& object, const std::string& where, const char* key, bool fallback) {
  const nlohmann::json* value = key_value(object, key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail(where, "key '{}' must be true or false, got {}", key, value->dump());
  return value->get<bool>();
}

uint64_t get_uint64(const nlohmann::json& value, const std::string& path) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  fail(path, "expected an unsigned 64-bit integer, got {}", value.dump());
}

double get_double(const nlohmann::json& value, const std::string& path) {
  if (!value.is_number()) fail(path, "expected a number, got {}", value.type_name());
  const double v = value.get<double>();
  if (!std::isfinite(v)) fail(path, "expected a finite number");
  return v;
}

bool get_bool(const nlohmann::json& value, const std::string& path) {
  if (!value.is_boolean()) fail(path, "expected a boolean, got {}", value.type_name());
  return value.get<bool>();
}

std::string get_string(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) fail(path, "expected a string, got {}", value.type_name());
  return value.get<std::string>();
}

std::vector<int32_t> get_token_ids(const nlohmann::json& value, const std::string& path) {
  if (!value.is_array()) fail(path, "expected an array of token ids, got {}", value.type_name());
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i)
    ids.push_back(static_cast<int32_t>(
        get_int(value[i], fmt::format("{}[{}]", path, i), 0, std::numeric_limits<int32_t>::max())));
  return ids;
}

std::vector<std::string> get_strings(const nlohmann::json& value, const std::string& path) {
  if (!value.is_array()) fail(path, "expected an array of strings, got {}", value.type_name());
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) out.push_back(get_string(value[i], fmt::format("{}[{}]", path, i)));
  return out;
}

}  // namespace gpueval::wire
