// Fixture helpers shared by the tokenizer tests: where the shared data lives,
// reading the reference vectors in shared/refs, and a scratch directory that
// removes itself.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace gpueval::testing {

// shared_dir() comes from test_util.h (one definition for the whole test binary).
inline bool have_shared_data() { return std::filesystem::exists(shared_dir() + "/refs"); }
inline std::string tokenizer_data(const std::string& relative) { return shared_dir() + "/data/tokenizers/" + relative; }

// One line of shared/refs/tokenizer_vectors_<name>.jsonl.
struct ReferenceVector {
  int index = 0;
  std::string text;
  std::vector<int32_t> ids;
  std::vector<int32_t> ids_add_special;
  std::optional<std::string> decoded;
  std::optional<bool> roundtrip;
};

inline std::vector<ReferenceVector> read_vectors(const std::string& name) {
  const std::string path = shared_dir() + "/refs/tokenizer_vectors_" + name + ".jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<ReferenceVector> vectors;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    ReferenceVector v;
    v.index = row.at("i").get<int>();
    v.text = row.at("text").get<std::string>();
    v.ids = row.at("ids").get<std::vector<int32_t>>();
    v.ids_add_special = row.at("ids_add_special").get<std::vector<int32_t>>();
    if (row.contains("decoded")) v.decoded = row.at("decoded").get<std::string>();
    if (row.contains("roundtrip")) v.roundtrip = row.at("roundtrip").get<bool>();
    vectors.push_back(std::move(v));
  }
  return vectors;
}

// The text as a JSON string literal, so failures show control characters.
inline std::string quoted(const std::string& text) { return nlohmann::json(text).dump(); }

}  // namespace gpueval::testing
