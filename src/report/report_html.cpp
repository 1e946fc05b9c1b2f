#include "report/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/strings.h"
#include "gpueval/error.h"
#include "report/chart.h"
#include "report/html_style.h"

namespace gpueval {
namespace {

using html::code_points;
using html::kCharWidth;
using Json = nlohmann::ordered_json;

// Scores that are means of 0/1 outcomes, so every task shares one 0-1 axis; a task's primary
// metric is the first of these it has, as lm-eval's tables lead with acc.
const char* const kChartMetrics[] = {"acc", "exact_match", "acc_norm", "acc_bytes"};

struct Metric {
  std::string name;  // "acc"
  std::string filter;  // "none", "strict-match"
  std::optional<double> value;  // nullopt where results.json has no number
  std::string value_text;
  std::optional<double> stderr;
  std::string stderr_text = "N/A";
};

// One line of results.json's "results" or "groups".
struct Entry {
  std::string name;
  std::string label;  // the alias without lm-eval's leading " - " indentation
  bool group = false;
  std::vector<Metric> metrics;
  std::string suite_metric;  // a group's suite score (its direction is under "higher_is_better")
};

std::string number_text(const Json& v) {
  if (v.is_number()) return fmt::format("{:.4f}", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "N/A";
  return v.dump();
}

std::optional<double> finite(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  const double x = v.get<double>();
  if (!std::isfinite(x)) return std::nullopt;
  return x;
}

std::string trim_alias(const std::string& alias) {
  size_t i = 0;
  while (i < alias.size() && (alias[i] == ' ' || alias[i] == '-')) ++i;
  return i == alias.size() ? alias : alias.substr(i);
}

// "acc,none" -> metric acc, filter none; "acc_stderr,none" -> the stderr of acc.
Entry parse_entry(const std::string& name, const Json& j, bool group) {
  Entry e;
  e.name = name;
  e.group = group;
  e.label = name;
  if (!j.is_object()) return e;
  if (const auto it = j.find("alias"); it != j.end() && it->is_string()) e.label = trim_alias(it->get<std::string>());
  for (const auto& [key, value] : j.items()) {
    const size_t comma = key.rfind(',');
    if (comma == std::string::npos) continue;
    const std::string metric = key.substr(0, comma), filter = key.substr(comma + 1);
    static const std::string kStderr = "_stderr";
    if (metric.size() > kStderr.size() &&
        metric.compare(metric.size() - kStderr.size(), kStderr.size(), kStderr) == 0) {
      continue;
    }
    Metric m;
    m.name = metric;
    m.filter = filter;
    m.value = finite(value);
    m.value_text = number_text(value);
    if (const auto se = j.find(metric + kStderr + "," + filter); se != j.end()) {
      m.stderr = finite(*se);
      m.stderr_text = number_text(*se);
    }
    e.metrics.push_back(std::move(m));
  }
  return e;
}

const Metric* primary_metric(const Entry& e) {
  for (const char* name : kChartMetrics) {
    for (const Metric& m : e.metrics) {
      if (m.name == name && m.value) return &m;
    }
  }
  // A suite score (task_group.h) is a mean of accuracy-type scores: charted when it reads as one.
  for (const Metric& m : e.metrics) {
    if (!e.suite_metric.empty() && m.name == e.suite_metric && m.value && *m.value >= 0 && *m.value <= 1) return &m;
  }
  return nullptr;
}

std::string metric_label(const Metric& m) { return m.filter == "none" ? m.name : m.name + " (" + m.filter + ")"; }

const Json* find_path(const Json& j, const std::string& a, const std::string& b) {
  const auto x = j.find(a);
  if (x == j.end() || !x->is_object()) return nullptr;
  const auto y = x->find(b);
  return y == x->end() ? nullptr : &*y;
}

std::string scalar_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "null";
  return v.dump();
}

std::string wall_time_text(const Json& v) {
  double s = 0;
  if (v.is_number()) {
    s = v.get<double>();
  } else if (v.is_string()) {
    char* end = nullptr;
    const std::string text = v.get<std::string>();
    s = std::strtod(text.c_str(), &end);
    if (end == text.c_str()) return text;
  } else {
    return "";
  }
  if (!std::isfinite(s) || s < 0) return fmt::format("{} s", s);
  const auto whole = static_cast<int64_t>(s);
  return fmt::format("{:.1f} s ({}:{:02}:{:02})", s, whole / 3600, whole / 60 % 60, whole % 60);
}

std::string date_text(const Json& v) {
  const std::optional<double> d = finite(v);
  if (!d) return "";
  const auto t = static_cast<std::time_t>(std::floor(*d));
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return "";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

constexpr double kRowHeight = 22, kBarHeight = 14, kBarArea = 480, kAxisHeight = 26, kGroupGap = 12;

// The bar chart of every entry with a chart metric: groups first, then tasks, each part sorted
// by score (highest first, ties by name).
std::string chart_svg(const std::vector<const Entry*>& groups, const std::vector<const Entry*>& tasks) {
  auto sorted = [](std::vector<const Entry*> v) {
    std::stable_sort(v.begin(), v.end(), [](const Entry* a, const Entry* b) {
      const double x = *primary_metric(*a)->value, y = *primary_metric(*b)->value;
      return x != y ? x > y : a->name < b->name;
    });
    return v;
  };
  const std::vector<const Entry*> g = sorted(groups), t = sorted(tasks);
  std::set<std::string> metric_names;
  size_t label_chars = 4;
  for (const auto* part : {&g, &t}) {
    for (const Entry* e : *part) {
      metric_names.insert(metric_label(*primary_metric(*e)));
      label_chars = std::max(label_chars, code_points(e->label));
    }
  }
  const bool mixed = metric_names.size() > 1;
  size_t value_chars = 15;  // "0.6667 ± 0.0123"
  if (mixed) {
    for (const std::string& m : metric_names) value_chars = std::max(value_chars, 16 + code_points(m));
  }
  const double label_w = std::ceil(static_cast<double>(label_chars) * kCharWidth) + 16;
  const double value_w = std::ceil(static_cast<double>(value_chars) * kCharWidth) + 24;
  const double x0 = label_w;
  const double gap = (!g.empty() && !t.empty()) ? kGroupGap : 0;
  const double height = kAxisHeight + static_cast<double>(g.size() + t.size()) * kRowHeight + gap + 8;
  const double width = label_w + kBarArea + value_w;

  const chart::Scale x_of{0, 1, x0, x0 + kBarArea};
  chart::Svg svg(2, "class=\"bars\"", width, height, "bar chart of scores per task");
  for (int i = 0; i <= 4; ++i) {
    const double x = x_of(i / 4.0);
    svg.line("grid", x, kAxisHeight - 6, x, height - 4)
        .text("axis", x, kAxisHeight - 10, " text-anchor=\"middle\"",
              i == 0   ? "0"
              : i == 4 ? "1"
                       : fmt::format("{:.2f}", i / 4.0))
        .raw("\n");
  }
  double y = kAxisHeight;
  auto row = [&](const Entry& e) {
    const Metric& m = *primary_metric(e);
    const double v = *m.value;
    const double cy = y + kRowHeight / 2;
    const std::string tip = fmt::format("{}{} ({}): {} {} ± {}", e.group ? "group " : "", e.label, e.name,
                                        metric_label(m), m.value_text, m.stderr_text);
    svg.text(e.group ? "group" : "", x0 - 8, cy, " text-anchor=\"end\" dominant-baseline=\"middle\"", e.label)
        .rect(e.group ? "bar group" : "bar", x0, cy - kBarHeight / 2, std::clamp(v, 0.0, 1.0) * kBarArea, kBarHeight,
              chart::Svg::attr("data-task", e.name), tip);
    if (m.stderr && *m.stderr > 0) {
      const double lo = x_of(std::clamp(v - *m.stderr, 0.0, 1.0)), hi = x_of(std::clamp(v + *m.stderr, 0.0, 1.0));
      svg.path("err", fmt::format("M{0} {2}H{1}M{0} {3}V{4}M{1} {3}V{4}", svg.num(lo), svg.num(hi), svg.num(cy),
                                  svg.num(cy - 4), svg.num(cy + 4)));
    }
    std::string value = m.value_text + (m.stderr ? " ± " + m.stderr_text : "");
    if (mixed) value = metric_label(m) + " " + value;
    svg.text("", x0 + kBarArea + 10, cy, " dominant-baseline=\"middle\"", value).raw("\n");
    y += kRowHeight;
  };
  for (const Entry* e : g) row(*e);
  y += gap;
  for (const Entry* e : t) row(*e);
  return svg.finish();
}

std::string metrics_table(const std::vector<Entry>& entries, const Json& results, const MetricCounts& counts) {
  std::string out =
      "<table class=\"results\">\n<tr><th>Task</th><th>Version</th><th>n-shot</th><th>Metric</th><th></th>"
      "<th>Value</th><th></th><th>Stderr</th><th>n</th></tr>\n";
  for (const Entry& e : entries) {
    const Json* version = find_path(results, "versions", e.name);
    const Json* shots = find_path(results, "n-shot", e.name);
    const Json* effective = nullptr;
    if (const Json* n = find_path(results, "n-samples", e.name); n && n->is_object()) {
      if (const auto it = n->find("effective"); it != n->end()) effective = &*it;
    }
    std::string task = html_escape(e.label);
    if (e.label != e.name) task += "<span class=\"name\">" + html_escape(e.name) + "</span>";
    if (e.group) task = "group: " + task;
    // The task's cells span all of its metric rows.
    const std::string tr = e.group ? "<tr class=\"group\">" : "<tr>";
    const std::string span = e.metrics.size() > 1 ? fmt::format(" rowspan=\"{}\"", e.metrics.size()) : "";
    std::string head =
        fmt::format("{}<td{}>{}</td><td class=\"num\"{}>{}</td><td class=\"num\"{}>{}</td>", tr, span, task, span,
                    version ? html_escape(version->is_null() ? "N/A" : scalar_text(*version)) : "", span,
                    shots ? html_escape(scalar_text(*shots)) : "");
    if (e.metrics.empty()) {
      out += head + "<td>(no documents)</td><td></td><td></td><td></td><td></td><td class=\"num\">0</td></tr>\n";
    }
    for (const Metric& m : e.metrics) {
      std::string arrow;
      if (const Json* hib = find_path(results, "higher_is_better", e.name); hib && hib->is_object()) {
        if (const auto it = hib->find(m.name); it != hib->end() && it->is_boolean()) {
          arrow = it->get<bool>() ? "↑" : "↓";
        }
      }
      std::string n;
      const auto task_counts = counts.find(e.name);
      if (task_counts != counts.end() && task_counts->second.count(m.name)) {
        n = std::to_string(task_counts->second.at(m.name));
      } else if (effective) {
        n = html_escape(scalar_text(*effective));
      }
      out += head + fmt::format(
                        "<td>{}</td><td>{}</td><td class=\"num\">{}</td><td>±</td><td class=\"num\">{}</td>"
                        "<td class=\"num\">{}</td></tr>\n",
                        html_escape(metric_label(m)), arrow, html_escape(m.value_text), html_escape(m.stderr_text), n);
      head = tr;
    }
  }
  return out + "</table>\n";
}

// The page's head tables: model, date, wall time, task counts, the folded run configuration, and
// the warning that lists incomplete work.
std::string meta_html(const Json& results, const std::string& model, size_t n_groups, size_t n_tasks) {
  std::string out;
  out += "<table class=\"meta\">\n";
  auto meta_row = [&](const std::string& key, const std::string& value) {
    if (!value.empty()) out += "<tr><td>" + html_escape(key) + "</td><td>" + value + "</td></tr>\n";
  };
  meta_row("model", "<code>" + html_escape(model) + "</code>");
  if (const auto it = results.find("date"); it != results.end()) meta_row("date", html_escape(date_text(*it)));
  if (const auto it = results.find("total_evaluation_time_seconds"); it != results.end()) {
    meta_row("wall time", html_escape(wall_time_text(*it)));
  }
  auto count = [](size_t n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); };
  meta_row("tasks", count(n_tasks, "task") + (n_groups == 0 ? "" : ", " + count(n_groups, "group")));
  out += "</table>\n";
  // The full run configuration is long; folded so that the scores stay near the top.
  if (const auto it = results.find("config"); it != results.end() && it->is_object() && it->size() > 1) {
    out += "<details><summary>run configuration</summary>\n<table class=\"meta\">\n";
    for (const auto& [key, value] : it->items()) {
      if (key != "model") meta_row(key, "<code>" + html_escape(scalar_text(value)) + "</code>");
    }
    out += "</table>\n</details>\n";
  }

  if (const auto it = results.find("incomplete"); it != results.end() && it->is_array() && !it->empty()) {
    out += fmt::format(
        "<section class=\"warn\" id=\"incomplete\">\n<h2>&#9888; Incomplete ({})</h2>\n<p>These were not scored; the "
        "metrics below leave them out.</p>\n<ul>\n",
        it->size());
    for (const Json& item : *it) out += "<li>" + html_escape(scalar_text(item)) + "</li>\n";
    out += "</ul>\n</section>\n";
  }
  return out;
}

}  // namespace

std::string report_html(const nlohmann::ordered_json& results, const MetricCounts& counts) {
  if (!results.is_object() || !results.contains("results") || !results["results"].is_object()) {
    fail("report_html", "no \"results\" object in the input");
  }
  std::vector<Entry> groups, tasks;
  std::set<std::string> group_names;
  if (const auto it = results.find("groups"); it != results.end() && it->is_object()) {
    for (const auto& [name, value] : it->items()) {
      groups.push_back(parse_entry(name, value, true));
      group_names.insert(name);
      // Only a suite score puts a group under "higher_is_better"; one that is higher-is-better is charted.
      if (const Json* hib = find_path(results, "higher_is_better", name); hib && hib->is_object()) {
        for (const auto& [metric, up] : hib->items()) {
          if (up == true && groups.back().suite_metric.empty()) groups.back().suite_metric = metric;
        }
      }
    }
  }
  // lm-eval repeats each group's line in "results"; those rows belong to the groups.
  for (const auto& [name, value] : results["results"].items()) {
    if (!group_names.count(name)) tasks.push_back(parse_entry(name, value, false));
  }

  std::string model;
  if (const Json* m = find_path(results, "config", "model"); m && m->is_string()) model = m->get<std::string>();
  if (model.empty() && results.contains("model_name") && results["model_name"].is_string()) {
    model = results["model_name"].get<std::string>();
  }

  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>gpueval: " + html_escape(model.empty() ? "results" : model) + "</title>\n";
  out += std::string("<style>") + html::kStyle + "</style>\n</head>\n<body>\n<h1>gpueval results</h1>\n";

  out += meta_html(results, model, groups.size(), tasks.size());

  std::vector<const Entry*> chart_groups, chart_tasks;
  std::vector<std::string> uncharted;
  for (const Entry& e : groups) {
    if (primary_metric(e)) chart_groups.push_back(&e);
  }
  for (const Entry& e : tasks) {
    if (primary_metric(e)) {
      chart_tasks.push_back(&e);
    } else {
      uncharted.push_back(e.label);
    }
  }
  out += "<h2>Scores</h2>\n";
  if (chart_groups.empty() && chart_tasks.empty()) {
    out += "<p class=\"note\">No task has an accuracy-type metric to chart; the values are in the table.</p>\n";
  } else {
    out +=
        "<p class=\"note\">Each task's accuracy (acc; else exact_match, acc_norm or acc_bytes; a suite group's score), highest first; "
        "whiskers span &#177;1 standard error.";
    if (!chart_groups.empty()) {
      out +=
          "<span class=\"legend\"><span style=\"background:#e8871e\"></span>group"
          "<span style=\"background:#4c78a8\"></span>task</span>";
    }
    out += "</p>\n<div class=\"chart\">\n" + chart_svg(chart_groups, chart_tasks) + "</div>\n";
  }
  if (!uncharted.empty()) {
    std::string names;
    for (const std::string& n : uncharted)
      names += (names.empty() ? "" : ", ") + ("<code>" + html_escape(n) + "</code>");
    out +=
        "<p class=\"note\">Not charted (perplexity-type metrics: unbounded, lower is better, and on different "
        "scales per task; see the table): " +
        names + ".</p>\n";
  }

  if (!groups.empty()) out += "<h2>Groups</h2>\n" + metrics_table(groups, results, counts);
  out += "<h2>Tasks</h2>\n" + metrics_table(tasks, results, counts);
  out += "</body>\n</html>\n";
  return out;
}

void write_report_html(const std::string& results_path, const std::string& out_path) {
  nlohmann::ordered_json results;
  try {
    results = nlohmann::ordered_json::parse(io::read_file(results_path));
  } catch (const nlohmann::json::exception& e) {
    fail(results_path, "not JSON: {}", e.what());
  }
  std::string out = out_path;
  if (out.empty()) {
    const size_t slash = results_path.rfind('/');
    out = (slash == std::string::npos ? std::string() : results_path.substr(0, slash + 1)) + "report.html";
  }
  std::string html;
  try {
    html = report_html(results);
  } catch (const Error& e) {
    fail(results_path, "{}", e.what());
  }
  io::write_file_atomic(out, html);
}

}  // namespace gpueval
