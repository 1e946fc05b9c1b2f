// The report files of gpueval/report.h rendered from a run's scores as the aggregator gives them
// (aggregate/aggregator.h's Scores): report/ renders, it does not score. gpueval/report.h's forms
// that take documents score them first (score_run) and come here. Stateless and thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "aggregate/aggregator.h"
#include "gpueval/report.h"

namespace gpueval {

// Writes results.json, samples_<task>.jsonl, report.md and report.html of `scores` into
// output_dir (created if missing), as gpueval/report.h's write_reports does; returns report.md's
// table of scores.
std::string write_reports(const std::string& output_dir, const Scores& scores, const RunSummary& summary);

// The pieces write_reports() writes.
nlohmann::ordered_json results_json(const Scores& scores, const RunSummary& summary);
std::string report_markdown(const Scores& scores, const RunSummary& summary);

}  // namespace gpueval
