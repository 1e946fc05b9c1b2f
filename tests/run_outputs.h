// What a `gpueval run` of the demo tasks wrote, read back for end-to-end tests.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_io.h"

namespace gpueval::testing {

// Every per-document line of each demo task's samples file, keyed by task ("" when absent).
inline std::map<std::string, std::string> samples_of(const std::string& out) {
  std::map<std::string, std::string> files;
  for (const char* task : {"demo_choice", "demo_perplexity"}) {
    const std::string path = out + "/samples_" + task + ".jsonl";
    files[task] = io::path_exists(path) ? io::read_file(path) : "";
  }
  return files;
}

inline nlohmann::json results_of(const std::string& out) {
  return nlohmann::json::parse(io::read_file(out + "/results.json"));
}

// What a run wrote that other runs of the same config must equal byte for byte: the samples files
// and results.json's "results".
struct ReferenceOutputs {
  std::map<std::string, std::string> samples;
  std::string results;
};
inline ReferenceOutputs reference_outputs(const std::string& out) {
  return ReferenceOutputs{samples_of(out), results_of(out)["results"].dump()};
}

// report.md's table of scores (the tasks', then the groups'), without the lines around it: what
// a run or merge prints on stdout before "full report: <out>/report.md".
inline std::string scores_table_of(const std::string& out) {
  const std::string md = io::read_file(out + "/report.md");
  const size_t start = md.find("| Task |");
  if (start == std::string::npos) return "";
  const size_t end = md.find("\n## ", start);
  return md.substr(start, end == std::string::npos ? std::string::npos : end + 1 - start);
}

}  // namespace gpueval::testing
