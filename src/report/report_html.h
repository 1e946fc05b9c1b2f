// report.html: a self-contained page a person opens in a browser after a run, offline. It is
// rendered from results.json's own data alone (so it can be regenerated from a results.json
// later): a header with the model, date, wall time and run configuration; a warning listing the
// incomplete or quarantined work, if any; a table of every task and metric with value, stderr
// and n (the content of report.md, plus lm-eval "groups" when results.json has them); and a
// horizontal bar chart in inline SVG of each task's accuracy-type score, one bar per row with
// stderr whiskers, sorted, groups drawn apart from tasks. Perplexity-type metrics (unbounded,
// lower is better, on scales that differ per task) are shown in the table only, so the chart
// keeps one 0-1 axis. The page has no scripts and no external references: inline CSS and SVG
// only. Every string from the input is HTML-escaped. The output is a function of the input alone
// (same input, same bytes; the date is printed in UTC). Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace gpueval {

// Documents that contributed to each metric: task -> metric -> n. results.json does not hold
// these; where a task or metric is missing, the page shows n-samples "effective" instead.
using MetricCounts = std::map<std::string, std::map<std::string, int64_t>>;

// The page for one results.json (the object results_json() returns or one read from disk).
// Throws Error when `results` is not an object with a "results" object.
std::string report_html(const nlohmann::ordered_json& results, const MetricCounts& counts = {});

// `gpueval report`: reads results.json at `results_path` and writes the page to `out_path`
// atomically (default: report.html beside results.json). n comes from n-samples, as the file
// holds no per-metric counts. Throws Error on an unreadable or malformed file.
void write_report_html(const std::string& results_path, const std::string& out_path = "");

}  // namespace gpueval
