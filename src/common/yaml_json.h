// YAML nodes as JSON values, typed the way PyYAML (which lm-evaluation-harness loads task
// files with) types plain scalars under its YAML 1.1 rules: null/~/empty -> null;
// true/false/yes/no/on/off in their three spellings -> bool; decimal, 0x hex and 0-prefixed
// octal integers -> int; numbers with a '.' (optionally an exponent), .inf and .nan -> float;
// anything else, and every quoted scalar, -> string. Mapping order is kept. Private to src/.
// Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace gpueval {

// Throws Error "<file>:<line>: ..." for tags it does not understand (e.g. !function) and
// for duplicate mapping keys.
nlohmann::ordered_json yaml_to_json(const YAML::Node& node, const std::string& file);

// Parses the first YAML document of `text`, read from `file`, as YAML::Load does (a null node for
// empty text). Throws Error "<file>: not valid UTF-8 (byte N)", "<file>:<line>: character U+000E
// is not allowed in YAML" (control characters, as PyYAML refuses them) or "<file>:<line>: invalid
// YAML at column <c>: <yaml-cpp's message, quoted on one line>".
YAML::Node parse_yaml(std::string_view text, const std::string& file);

// The 1-based line of a "---" that starts a second document after content, or 0 if there is none.
// (yaml-cpp 0.7's LoadAll never returns on some malformed input, such as ",0": found by
// fuzz_task_yaml; so documents are counted here instead.)
size_t yaml_second_document_line(std::string_view text);

// "<file>:<line>" of a node (1-based line).
std::string yaml_where(const std::string& file, const YAML::Node& node);

}  // namespace gpueval
