// YAML nodes as JSON values, typed the way PyYAML (which lm-evaluation-harness loads task
// files with) types plain scalars under its YAML 1.1 rules: null/~/empty -> null;
// true/false/yes/no/on/off in their three spellings -> bool; decimal, 0x hex and 0-prefixed
// octal integers -> int; numbers with a '.' (optionally an exponent), .inf and .nan -> float;
// anything else, and every quoted scalar, -> string. Mapping order is kept. Private to src/.
// Stateless and thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace gpueval {

// Throws Error "<file>:<line>: ..." for tags it does not understand (e.g. !function) and
// for duplicate mapping keys.
nlohmann::ordered_json yaml_to_json(const YAML::Node& node, const std::string& file);

// "<file>:<line>" of a node (1-based line).
std::string yaml_where(const std::string& file, const YAML::Node& node);

}  // namespace gpueval
