#include "report/trend_report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/strings.h"
#include "gpueval/error.h"
#include "report/chart.h"
#include "report/html_style.h"
#include "report/markdown.h"
#include "report/report_html.h"

namespace gpueval {
namespace {

// How many flipped doc_ids a report lists each way for the latest change.
constexpr size_t kMaxFlipsListed = 20;

using RowKey = std::tuple<std::string, std::string, std::string>;  // task, metric, filter

RowKey key_of(const ScoreRow& r) { return {r.task, r.metric, r.filter}; }
RowKey key_of(const Comparison& c) { return {c.task, c.metric, c.filter}; }

// A column of the trend: one task's primary metric.
struct Column {
  ScoreRow first;  // the task's primary row where it first appears (names, direction)
  RowKey key;
};

std::vector<Column> columns_of(const std::vector<ScoredCheckpoint>& trend) {
  std::vector<Column> out;
  std::set<std::string> seen;
  for (const ScoredCheckpoint& sc : trend) {
    for (const ScoreRow& r : primary_scores(sc)) {
      if (seen.insert(r.task).second) out.push_back(Column{r, key_of(r)});
    }
  }
  return out;
}

// The order reports show columns in: groups first, the widest (most documents) first, so a
// suite comes before the groups under it and mmlu before its categories; then the tasks, each
// in first-seen order.
std::vector<Column> display_columns(const std::vector<ScoredCheckpoint>& trend) {
  std::vector<Column> columns = columns_of(trend);
  std::stable_partition(columns.begin(), columns.end(), [](const Column& c) { return c.first.is_group; });
  const auto groups_end =
      std::find_if(columns.begin(), columns.end(), [](const Column& c) { return !c.first.is_group; });
  std::stable_sort(columns.begin(), groups_end, [](const Column& a, const Column& b) { return a.first.n > b.first.n; });
  return columns;
}

// The columns a reader sees first: those at the top level of the run (a suite, groups and tasks
// named in the config), and any whose group is not in the trend.
bool is_top_level(const Column& c, const std::vector<Column>& columns) {
  return c.first.parent.empty() || std::none_of(columns.begin(), columns.end(), [&](const Column& g) {
           return g.first.is_group && g.first.task == c.first.parent;
         });
}

std::vector<Column> top_level(const std::vector<Column>& columns) {
  std::vector<Column> out;
  for (const Column& c : columns)
    if (is_top_level(c, columns)) out.push_back(c);
  return out;
}

std::vector<Column> members_of(const std::vector<Column>& columns, const std::string& group) {
  std::vector<Column> out;
  for (const Column& c : columns)
    if (c.first.parent == group && c.first.task != group) out.push_back(c);
  return out;
}

// The groups that have members, each before the groups under it (depth first from the top
// level), so a suite's section comes before its categories'.
std::vector<Column> groups_with_members(const std::vector<Column>& columns) {
  std::vector<Column> out;
  std::set<std::string> seen;
  std::function<void(const Column&)> visit = [&](const Column& g) {
    if (!g.first.is_group || !seen.insert(g.first.task).second) return;
    const std::vector<Column> members = members_of(columns, g.first.task);
    if (members.empty()) return;
    out.push_back(g);
    for (const Column& m : members) visit(m);
  };
  for (const Column& c : top_level(columns)) visit(c);
  return out;
}

const ScoreRow* find_row(const ScoredCheckpoint& sc, const RowKey& key) {
  for (const ScoreRow& r : sc.scores) {
    if (key_of(r) == key) return &r;
  }
  return nullptr;
}

const Comparison* find_comparison(const CheckpointStep& step, const RowKey& key) {
  for (const Comparison& c : step.comparisons) {
    if (key_of(c) == key) return &c;
  }
  return nullptr;
}

std::string metric_label(const std::string& metric, const std::string& filter) {
  return filter == "none" ? metric : metric + " (" + filter + ")";
}

std::string value_text(double v) { return fmt::format("{:.4f}", v); }
std::string delta_text(double d) { return d == 0 ? std::string("±0") : fmt::format("{:+.4f}", d); }
std::string p_text(double p) { return p >= 0.001 ? fmt::format("{:.3f}", p) : fmt::format("{:.1e}", p); }
std::string value_with_stderr(const ScoreRow& r) {
  return value_text(r.value) + (r.stderr_value ? " ± " + value_text(*r.stderr_value) : "");
}

std::string utc_text(double t) {
  if (!std::isfinite(t) || t <= 0) return "";
  const auto s = static_cast<std::time_t>(std::floor(t));
  std::tm tm{};
  if (!gmtime_r(&s, &tm)) return "";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// A checkpoint's training step for the tables, "—" when it has none.
std::string step_text(const CheckpointInfo& c) { return c.step ? std::to_string(*c.step) : "—"; }

// Which order the trend is in (History::trend's rule), said once above the checkpoints table.
std::string order_text(const std::vector<ScoredCheckpoint>& trend) {
  const auto without = std::count_if(trend.begin(), trend.end(),
                                     [](const ScoredCheckpoint& c) { return !c.checkpoint.step.has_value(); });
  if (without == 0) return "In training-step order (trainer_state.json's global_step, or the step in each name).";
  return fmt::format("In the order they were written: {} of {} checkpoints have no training step.", without,
                     trend.size());
}

std::string id_list(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < kMaxFlipsListed; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > kMaxFlipsListed) out += fmt::format(" and {} more", ids.size() - kMaxFlipsListed);
  return out;
}

std::string regression_text(const Regression& g) {
  return fmt::format("{}{} {}: {} → {} ({} → {}), {:.2f} {} worse", g.is_group ? "group " : "", g.task,
                     metric_label(g.metric, g.filter), value_text(g.before), value_text(g.after), g.previous, g.current,
                     g.drop_points, g.in_points ? "points" : "units");
}

// The newest step in which this column's documents were paired, if any.
const Comparison* latest_flips(const std::vector<CheckpointStep>& steps, const RowKey& key) {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const Comparison* c = find_comparison(*it, key);
    if (c) return c->paired > 0 ? c : nullptr;
  }
  return nullptr;
}

// ---- HTML chart ----

const char* const kTrendStyle = R"(
svg .band{fill:#4c78a8;fill-opacity:.18;stroke:none}svg .line{fill:none;stroke:#4c78a8;stroke-width:2}
svg .pt{fill:#4c78a8;stroke:#fff;stroke-width:1}svg.group .band{fill:#e8871e}svg.group .line{stroke:#e8871e}
svg.group .pt{fill:#e8871e}svg .pt.regressed{fill:#c0392b}section.task{margin:28px 0 36px}
.flips{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
td.p-low{background:#fdecea;font-weight:600}
svg .chance{stroke:#6b6b6b;stroke-width:1.5;stroke-dasharray:6 4}svg .chance-label{fill:#6b6b6b;font-size:11px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(236px,1fr));gap:8px;margin:8px 0 16px}
.card{border:1px solid #e3e6ec;border-radius:6px;padding:5px 8px 2px}.card.group{border-color:#f0c28a;background:#fffaf3}
.card a{font-weight:600;color:#1d2433;text-decoration:none;word-break:break-all}.card .v{font-size:15px;font-variant-numeric:tabular-nums}
.d.good{color:#1a7f37}.d.bad{color:#c0392b}.d.flat{color:#5b6475}.sig{font-weight:600;color:#a3520b}
svg.mini .mband{fill:#4c78a8;fill-opacity:.18;stroke:none}svg.mini .mline{fill:none;stroke:#4c78a8;stroke-width:1.5}
svg.mini .mpt{fill:#4c78a8}svg.mini.group .mband{fill:#e8871e}svg.mini.group .mline{stroke:#e8871e}
svg.mini.group .mpt{fill:#e8871e}svg.mini .mpt.regressed{fill:#c0392b}svg.mini .axis{font-size:10px}
svg.mini{width:100%;height:auto;display:block}svg.mini .mchance{stroke:#6b6b6b;stroke-width:1;stroke-dasharray:4 3}details.members>summary{font-size:15px;font-weight:600;color:#1d2433}
)";

constexpr size_t kMaxLabelChars = 40;

// A chart's frame: the full chart of a task's section, or a small multiple of the grids (no
// x labels, the y axis labelled at its ends, its own classes so each kind is styled apart).
struct ChartLayout {
  double plot_h, left, right, top, inset;
  bool mini;
  std::string cls(const char* name) const { return mini ? std::string("m") + name : std::string(name); }
};
const ChartLayout kFullChart{200, 70, 24, 14, 20, false};
const ChartLayout kMiniChart{64, 44, 8, 7, 8, true};
constexpr double kMiniPlotWidth = 176;

struct Point {
  size_t index;  // checkpoint position on the x axis
  double value;
  std::optional<double> stderr;
  std::string tip;
};

// The metrics whose values span decades between checkpoints (a random model's millions, a
// trained one's tens): charted on a log10 axis.
bool is_perplexity(const std::string& metric) {
  return metric == "perplexity" || metric == "word_perplexity" || metric == "byte_perplexity";
}

// The column's chance level: the newest checkpoint's that has one.
std::optional<double> chance_level(const std::vector<ScoredCheckpoint>& trend, const RowKey& key) {
  for (auto it = trend.rbegin(); it != trend.rend(); ++it) {
    const ScoreRow* r = find_row(*it, key);
    if (r && r->chance && std::isfinite(*r->chance)) return r->chance;
  }
  return std::nullopt;
}

// The y axis of a chart of `points` (not empty): from lo to hi in ticks of step, covering every
// value +- stderr and the chance level, kept inside [0, 1] when every value is.
std::tuple<double, double, double> value_axis(const std::vector<Point>& points, std::optional<double> chance) {
  bool unit = true;
  double lo = INFINITY, hi = -INFINITY;
  for (const Point& p : points) {
    unit = unit && p.value >= 0 && p.value <= 1;
    const double s = p.stderr.value_or(0);
    lo = std::min(lo, p.value - s);
    hi = std::max(hi, p.value + s);
  }
  if (chance) {
    unit = unit && *chance >= 0 && *chance <= 1;
    lo = std::min(lo, *chance);
    hi = std::max(hi, *chance);
  }
  if (unit) {
    lo = std::max(lo, 0.0);
    hi = std::min(hi, 1.0);
  }
  if (hi - lo < 1e-12) {
    const double pad = std::max(std::fabs(hi) * 0.05, 0.01);
    lo -= pad;
    hi += pad;
  }
  const double step = chart::nice_step(hi - lo);
  lo = std::floor(lo / step + 1e-9) * step;
  hi = std::ceil(hi / step - 1e-9) * step;
  if (unit) {
    lo = std::max(lo, 0.0);
    hi = std::min(hi, 1.0);
  }
  return {lo, hi, step};
}

std::string chart_svg(const std::vector<ScoredCheckpoint>& trend, const Column& col, bool regressed,
                      const ChartLayout& layout = kFullChart) {
  const double plot_h = layout.plot_h, left = layout.left, right = layout.right, top = layout.top, inset = layout.inset;
  std::vector<Point> points;
  for (size_t i = 0; i < trend.size(); ++i) {
    const ScoreRow* r = find_row(trend[i], col.key);
    if (!r || !std::isfinite(r->value)) continue;
    std::optional<double> se;
    if (r->stderr_value && std::isfinite(*r->stderr_value)) se = *r->stderr_value;
    points.push_back(Point{i, r->value, se, trend[i].checkpoint.name + ": " + value_with_stderr(*r)});
  }
  if (points.empty()) return "<p class=\"note\">No finite value to chart.</p>\n";

  const std::optional<double> chance = chance_level(trend, col.key);
  const bool log_axis = is_perplexity(col.first.metric) &&
                        std::all_of(points.begin(), points.end(), [](const Point& p) { return p.value > 0; });

  size_t label_chars = 4;
  for (const ScoredCheckpoint& sc : trend) label_chars = std::max(label_chars, html::code_points(sc.checkpoint.name));
  label_chars = std::min(label_chars, kMaxLabelChars);
  const double plot_w =
      layout.mini ? kMiniPlotWidth : std::clamp(72.0 * static_cast<double>(trend.size()), 360.0, 960.0);
  const double bottom =
      layout.mini ? top : std::ceil(static_cast<double>(label_chars) * html::kCharWidth * 0.5) + 24;  // labels at -30°
  const double width = left + plot_w + right, height = top + plot_h + bottom;
  const chart::Scale x_scale{0, static_cast<double>(trend.size() - 1), left + inset, left + plot_w - inset};
  auto x_of = [&](size_t i) { return trend.size() == 1 ? left + plot_w / 2 : x_scale(static_cast<double>(i)); };

  // The y axis: linear in nice steps, or for a perplexity log10 with a tick per decade (every
  // few decades when there are more than ten).
  std::function<double(double)> y_of;
  std::vector<std::pair<double, std::string>> ticks;  // value, label
  if (log_axis) {
    double lo = INFINITY, hi = -INFINITY;
    for (const Point& p : points) {
      const double s = p.stderr.value_or(0);
      lo = std::min(lo, p.value - s > 0 ? p.value - s : p.value);
      hi = std::max(hi, p.value + s);
    }
    const auto [a, z] = chart::decade_range(lo, hi);
    const int every = std::max(1, (z - a + 9) / 10);
    const int b = a + (z - a + every - 1) / every * every;  // the top of the axis is a tick too
    const double d0 = std::pow(10.0, a), d1 = std::pow(10.0, b);
    const chart::LogScale y_scale{d0, d1, top + plot_h, top};
    y_of = [y_scale, d0, d1](double v) { return y_scale(std::clamp(v, d0, d1)); };
    for (int k = a; k <= b; k += every) ticks.emplace_back(std::pow(10.0, k), chart::decade_label(k));
  } else {
    double lo, hi, step;
    std::tie(lo, hi, step) = value_axis(points, chance);
    const chart::Scale y_scale{hi, lo, top, top + plot_h};
    y_of = [y_scale, lo, hi](double v) { return y_scale(std::clamp(v, lo, hi)); };
    const int count = static_cast<int>(std::lround((hi - lo) / step));
    for (int t = 0; t <= count; ++t) {
      const double v = lo + step * t;
      ticks.emplace_back(v, fmt::format("{:.4g}", std::fabs(v) < step * 1e-9 ? 0.0 : v));
    }
  }

  const std::string name = (col.first.is_group ? "group " : "") + col.first.task;
  const std::string svg_class = layout.mini ? "mini" : "trend";
  chart::Svg svg(2, "class=\"" + svg_class + (col.first.is_group ? " group\"" : "\""), width, height,
                 metric_label(col.first.metric, col.first.filter) + " of " + name + " per checkpoint" +
                     (log_axis ? " (log scale)" : ""));
  for (size_t t = 0; t < ticks.size(); ++t) {
    const double y = y_of(ticks[t].first);
    svg.line("grid", left, y, left + plot_w, y);
    if (!layout.mini || t == 0 || t + 1 == ticks.size())
      svg.text("axis", left - (layout.mini ? 3 : 6), y, " text-anchor=\"end\" dominant-baseline=\"middle\"",
               ticks[t].second);
    svg.raw("\n");
  }
  for (size_t i = 0; i < trend.size() && !layout.mini; ++i) {
    const double x = x_of(i);
    svg.line("grid", x, top, x, top + plot_h)
        .rotated_text("axis", x + 4, top + plot_h + 14, -30, " text-anchor=\"end\"", trend[i].checkpoint.name)
        .raw("\n");
  }
  if (chance && !log_axis) {
    const double y = y_of(*chance);
    svg.line(layout.cls("chance"), left, y, left + plot_w, y, "chance level " + value_text(*chance));
    if (!layout.mini)
      svg.text("chance-label", left + plot_w - 4, y - 4, " text-anchor=\"end\"", "chance " + value_text(*chance));
    svg.raw("\n");
  }
  std::vector<chart::Point> upper, lower, values;
  bool any_stderr = false;
  for (const Point& p : points) {
    any_stderr = any_stderr || (p.stderr && *p.stderr > 0);
    upper.emplace_back(x_of(p.index), y_of(p.value + p.stderr.value_or(0)));
    lower.emplace_back(x_of(p.index), y_of(p.value - p.stderr.value_or(0)));
    values.emplace_back(x_of(p.index), y_of(p.value));
  }
  if (any_stderr) svg.band(layout.cls("band"), upper, lower).raw("\n");
  if (points.size() > 1) svg.path(layout.cls("line"), values).raw("\n");
  for (size_t k = 0; k < points.size(); ++k) {
    const Point& p = points[k];
    const bool last_regressed = regressed && k + 1 == points.size() && p.index + 1 == trend.size();
    svg.circle(layout.cls(last_regressed ? "pt regressed" : "pt"), values[k].first, values[k].second,
               layout.mini ? 2.5 : 4, "", p.tip)
        .raw("\n");
  }
  return svg.finish();
}

// A card's number: four decimals as in the tables, or four significant digits past 10^5 (a random
// model's perplexity), so the card stays one line.
std::string card_number(double v, bool signed_change) {
  if (std::isfinite(v) && std::fabs(v) >= 1e5) return fmt::format(signed_change ? "{:+.4g}" : "{:.4g}", v);
  return signed_change ? delta_text(v) : value_text(v);
}

std::string anchor_of(const Column& col) { return (col.first.is_group ? "group-" : "task-") + col.first.task; }

// A small multiple: the name (a link to its section), metric and direction, the newest value with
// the latest change (green when better, red when worse) and its p, and the small chart.
std::string card_html(const TrendData& data, const Column& col, bool regressed) {
  const ScoreRow* last = find_row(data.trend.back(), col.key);
  const ScoreRow* before = data.trend.size() > 1 ? find_row(data.trend[data.trend.size() - 2], col.key) : nullptr;
  std::string change;
  if (last && before) {
    const double d = last->value - before->value;
    const bool better = col.first.higher_is_better ? d > 0 : d < 0;
    change = fmt::format(" <span class=\"d {}\">{}</span>",
                         d == 0   ? "flat"
                         : better ? "good"
                                  : "bad",
                         card_number(d, true));
  }
  const Comparison* cmp = data.steps.empty() ? nullptr : find_comparison(data.steps.back(), col.key);
  if (cmp && cmp->p_value)
    change +=
        fmt::format(" <span class=\"note{}\">p {}</span>", *cmp->p_value < 0.05 ? " sig" : "", p_text(*cmp->p_value));
  return fmt::format(
      "<div class=\"card{}\"><a href=\"#{}\">{}</a> <span class=\"note\">{} {}</span>\n<div class=\"v\">{}{}</div>\n{}</div>\n",
      col.first.is_group ? " group" : "", html_escape(anchor_of(col)), html_escape(col.first.task),
      html_escape(metric_label(col.first.metric, col.first.filter)), col.first.higher_is_better ? "&#8593;" : "&#8595;",
      last ? card_number(last->value, false) : "&#8211;", change, chart_svg(data.trend, col, regressed, kMiniChart));
}

// The columns whose latest change is more than noise: an exact McNemar p below 0.05, or a change
// beyond two standard errors of the difference; most significant first, at most `cap`.
std::vector<Column> moved_columns(const TrendData& data, const std::vector<Column>& columns, size_t cap) {
  std::vector<std::pair<double, Column>> moved;  // two-sided p, column
  if (data.trend.size() < 2) return {};
  for (const Column& c : columns) {
    const ScoreRow* last = find_row(data.trend.back(), c.key);
    const ScoreRow* before = find_row(data.trend[data.trend.size() - 2], c.key);
    if (!last || !before || !std::isfinite(last->value) || !std::isfinite(before->value)) continue;
    const Comparison* cmp = data.steps.empty() ? nullptr : find_comparison(data.steps.back(), c.key);
    std::optional<double> p;
    if (cmp && cmp->p_value) {
      p = *cmp->p_value;
    } else if (last->stderr_value && before->stderr_value) {
      const double se = std::hypot(*last->stderr_value, *before->stderr_value);
      if (se > 0 && std::isfinite(se)) p = std::erfc(std::fabs(last->value - before->value) / se / std::sqrt(2.0));
    }
    if (p && *p < 0.05) moved.emplace_back(*p, c);
  }
  std::stable_sort(moved.begin(), moved.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Column> out;
  for (size_t i = 0; i < moved.size() && i < cap; ++i) out.push_back(moved[i].second);
  return out;
}

std::string comparison_table_html(const std::vector<CheckpointStep>& steps, const RowKey& key) {
  std::string rows;
  for (const CheckpointStep& step : steps) {
    const Comparison* c = find_comparison(step, key);
    if (!c) continue;
    const bool flips = c->paired > 0;
    const bool low = c->p_value && *c->p_value < 0.05;
    rows += fmt::format(
        "<tr><td>{} → {}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num{}\">{}</td></tr>\n",
        html_escape(c->previous), html_escape(c->current), value_text(c->before), value_text(c->after),
        delta_text(c->delta), flips ? std::to_string(c->paired) : "", flips ? std::to_string(c->b) : "",
        flips ? std::to_string(c->c) : "", low ? " p-low" : "", c->p_value ? p_text(*c->p_value) : "");
  }
  if (rows.empty()) return "";
  return "<table class=\"changes\">\n<tr><th>change</th><th>before</th><th>after</th><th>Δ</th><th>paired</th>"
         "<th>b: right→wrong</th><th>c: wrong→right</th><th>McNemar p</th></tr>\n" +
         rows + "</table>\n";
}

}  // namespace

std::vector<std::string> trend_tasks(const std::vector<ScoredCheckpoint>& trend) {
  std::vector<std::string> out;
  for (const Column& c : columns_of(trend)) out.push_back(c.first.task);
  return out;
}

TrendData load_trend(const History& history, const std::string& config_fingerprint,
                     std::optional<double> regression_points) {
  TrendData data;
  data.config_fingerprint = config_fingerprint;
  data.config = history.config_of(config_fingerprint);
  data.trend = history.trend(config_fingerprint);
  std::vector<std::vector<SampleRow>> samples;
  for (const ScoredCheckpoint& sc : data.trend) {
    samples.push_back(history.samples(sc.checkpoint.fingerprint, config_fingerprint));
  }
  data.steps = compare_trend(data.trend, samples);
  data.regression_points = regression_points;
  if (regression_points) data.regressions = find_regressions(data.trend, *regression_points);
  return data;
}

namespace {

// One row per checkpoint, oldest first; per column its value ± stderr, the change from the row
// above and (with steps) that change's McNemar p.
std::string checkpoint_rows_table(const std::vector<ScoredCheckpoint>& trend, const std::vector<CheckpointStep>* steps,
                                  const std::vector<Column>& columns) {
  std::string head = "| checkpoint |", rule = "|---|";
  for (const Column& c : columns) {
    head +=
        fmt::format(" {}{} {} {} | Δ |", c.first.is_group ? "group " : "", markdown_cell(c.first.task),
                    markdown_cell(metric_label(c.first.metric, c.first.filter)), c.first.higher_is_better ? "↑" : "↓");
    rule += "---:|---:|";
    if (steps) {
      head += " p |";
      rule += "---:|";
    }
  }
  std::string out = head + "\n" + rule + "\n";
  for (size_t i = 0; i < trend.size(); ++i) {
    const ScoredCheckpoint& sc = trend[i];
    out += "| " + markdown_cell(sc.checkpoint.name) + (sc.state == "complete" ? "" : " (" + sc.state + ")") + " |";
    for (const Column& c : columns) {
      const ScoreRow* r = find_row(sc, c.key);
      const ScoreRow* before = i > 0 ? find_row(trend[i - 1], c.key) : nullptr;
      out += " " + (r ? value_with_stderr(*r) : std::string("–")) + " |";
      out += " " + (r && before ? delta_text(r->value - before->value) : std::string()) + " |";
      if (steps) {
        const Comparison* cmp = i > 0 && i - 1 < steps->size() ? find_comparison((*steps)[i - 1], c.key) : nullptr;
        out += " " + (cmp && cmp->p_value ? p_text(*cmp->p_value) : std::string()) + " |";
      }
    }
    out += "\n";
  }
  return out;
}

// A group's members, one row each: its value at every checkpoint, then the latest change and
// (with steps) its McNemar p. Wide suites stay readable: a row per task, not three columns.
std::string member_rows_table(const std::vector<ScoredCheckpoint>& trend, const std::vector<CheckpointStep>* steps,
                              const std::vector<Column>& members) {
  std::string out = "| task | metric |", rule = "|---|---|";
  for (const ScoredCheckpoint& sc : trend) {
    out += " " + markdown_cell(sc.checkpoint.name) + " |";
    rule += "---:|";
  }
  out += " Δ |";
  rule += "---:|";
  if (steps) {
    out += " p |";
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (const Column& c : members) {
    out +=
        fmt::format("| {}{} | {} {} |", c.first.is_group ? "group " : "", markdown_cell(c.first.task),
                    markdown_cell(metric_label(c.first.metric, c.first.filter)), c.first.higher_is_better ? "↑" : "↓");
    for (const ScoredCheckpoint& sc : trend) {
      const ScoreRow* r = find_row(sc, c.key);
      out += " " + (r ? value_text(r->value) : std::string("–")) + " |";
    }
    const ScoreRow* last = find_row(trend.back(), c.key);
    const ScoreRow* before = trend.size() > 1 ? find_row(trend[trend.size() - 2], c.key) : nullptr;
    out += " " + (last && before ? delta_text(last->value - before->value) : std::string()) + " |";
    if (steps) {
      const Comparison* cmp = steps->empty() ? nullptr : find_comparison(steps->back(), c.key);
      out += " " + (cmp && cmp->p_value ? p_text(*cmp->p_value) : std::string()) + " |";
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string trend_table(const std::vector<ScoredCheckpoint>& trend, const std::vector<CheckpointStep>* steps,
                        const std::string& task) {
  // Groups (a suite score first) before tasks, as report.html shows them.
  std::vector<Column> columns = display_columns(trend);
  if (!task.empty()) {
    columns.erase(std::remove_if(columns.begin(), columns.end(), [&](const Column& c) { return c.first.task != task; }),
                  columns.end());
    return checkpoint_rows_table(trend, steps, columns);
  }
  // The top level in the table; each group's members in a section of their own.
  std::string out = checkpoint_rows_table(trend, steps, top_level(columns));
  if (trend.empty()) return out;
  for (const Column& g : groups_with_members(columns)) {
    const std::vector<Column> members = members_of(columns, g.first.task);
    out += fmt::format("\n### {}{}: its {} member{}\n\n", g.first.is_group ? "group " : "", markdown_cell(g.first.task),
                       members.size(), members.size() == 1 ? "" : "s");
    out += member_rows_table(trend, steps, members);
  }
  return out;
}

std::string trend_markdown(const TrendData& data) {
  std::string out = "# gpueval trend\n\n";
  out += fmt::format("Config `{}`: {} checkpoint{}, oldest first.\n\n", markdown_cell(data.config_fingerprint),
                     data.trend.size(), data.trend.size() == 1 ? "" : "s");
  if (data.trend.empty()) return out + "No checkpoint of this config has been scored.\n";
  out +=
      "Each task's primary metric: value ± stderr; Δ: change from the checkpoint above; p: exact McNemar "
      "p-value of that change (from the documents that flipped; right/wrong metrics only).\n\n";
  out += trend_table(data.trend, &data.steps);

  if (data.regression_points) {
    out += fmt::format("\n## Regressions (drop > {} points)\n\n", *data.regression_points);
    if (data.regressions.empty()) out += "None.\n";
    for (const Regression& g : data.regressions) out += "- " + markdown_cell(regression_text(g)) + "\n";
  }

  out += "\n## Flipped documents\n\n";
  bool any = false;
  for (size_t i = data.steps.size(); i-- > 0;) {
    const CheckpointStep& step = data.steps[i];
    std::string lines;
    for (const Comparison& c : step.comparisons) {
      if (c.paired == 0) continue;
      lines += fmt::format("- {} {}: {} right→wrong, {} wrong→right of {} (p = {})\n", markdown_cell(c.task),
                           markdown_cell(metric_label(c.metric, c.filter)), c.b, c.c, c.paired, p_text(*c.p_value));
      if (i + 1 == data.steps.size()) {
        if (!c.lost.empty()) lines += "  - right→wrong: " + id_list(c.lost) + "\n";
        if (!c.gained.empty()) lines += "  - wrong→right: " + id_list(c.gained) + "\n";
      }
    }
    if (lines.empty()) continue;
    any = true;
    out += fmt::format("### {} → {}\n\n{}\n", markdown_cell(step.previous), markdown_cell(step.current), lines);
  }
  if (!any) out += "No per-document right/wrong values to compare.\n\n";

  out += "## Checkpoints\n\n" + order_text(data.trend) +
         "\n\n| # | name | step | state | modified | fingerprint | path |\n|---:|---|---:|---|---|---|---|\n";
  for (size_t i = 0; i < data.trend.size(); ++i) {
    const CheckpointInfo& c = data.trend[i].checkpoint;
    out += fmt::format("| {} | {} | {} | {} | {} | `{}` | `{}` |\n", i + 1, markdown_cell(c.name), step_text(c),
                       markdown_cell(data.trend[i].state), utc_text(c.mtime), markdown_cell(c.fingerprint),
                       markdown_cell(c.path));
  }
  return out;
}

std::string trend_html(const TrendData& data) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>gpueval trend: " + html_escape(data.config_fingerprint) + "</title>\n";
  out += std::string("<style>") + html::kStyle + kTrendStyle + "</style>\n</head>\n<body>\n<h1>gpueval trend</h1>\n";
  out += "<table class=\"meta\">\n";
  out += "<tr><td>config</td><td><code>" + html_escape(data.config_fingerprint) + "</code></td></tr>\n";
  out += fmt::format("<tr><td>checkpoints</td><td>{}</td></tr>\n", data.trend.size());
  if (!data.trend.empty()) {
    out += "<tr><td>newest</td><td><code>" + html_escape(data.trend.back().checkpoint.name) + "</code></td></tr>\n";
  }
  out += "</table>\n";
  if (data.config.is_object() && !data.config.empty()) {
    out += "<details><summary>run configuration</summary>\n<table class=\"meta\">\n";
    for (const auto& [key, value] : data.config.items()) {
      out += "<tr><td>" + html_escape(key) + "</td><td><code>" +
             html_escape(value.is_string() ? value.get<std::string>() : value.dump()) + "</code></td></tr>\n";
    }
    out += "</table>\n</details>\n";
  }
  if (data.trend.empty())
    return out + "<p class=\"note\">No checkpoint of this config has been scored.</p>\n</body>\n</html>\n";

  std::set<RowKey> regressed;
  if (data.regression_points) {
    for (const Regression& g : data.regressions) regressed.insert({g.task, g.metric, g.filter});
    if (!data.regressions.empty()) {
      out += fmt::format(
          "<section class=\"warn\" id=\"regressions\">\n<h2>&#9888; Regressions ({}; drop &gt; {} "
          "points)</h2>\n<ul>\n",
          data.regressions.size(), *data.regression_points);
      for (const Regression& g : data.regressions) out += "<li>" + html_escape(regression_text(g)) + "</li>\n";
      out += "</ul>\n</section>\n";
    }
  }

  // The first screen: the top level (a suite, its groups, the tasks named in the config) as
  // small multiples, then what moved at the latest change, then each group's members.
  const std::vector<Column> all_columns = display_columns(data.trend);
  const std::vector<Column> glance = top_level(all_columns);
  out += fmt::format(
      "<h2>At a glance</h2>\n<p class=\"note\">{} at each checkpoint, oldest on the left; the number is "
      "the newest value and its change from the checkpoint before, green when better and red when "
      "worse.</p>\n<div class=\"grid\">\n",
      glance.size() == all_columns.size() ? "Every task and group" : "The top level of the run");
  for (const Column& c : glance) out += card_html(data, c, regressed.count(c.key) > 0);
  out += "</div>\n";
  if (data.trend.size() > 1) {
    constexpr size_t kMaxMoved = 12;
    const std::vector<Column> moved = moved_columns(data, all_columns, kMaxMoved);
    out += fmt::format("<h2>Moved at the latest change ({} &#8594; {})</h2>\n",
                       html_escape(data.trend[data.trend.size() - 2].checkpoint.name),
                       html_escape(data.trend.back().checkpoint.name));
    if (moved.empty()) {
      out +=
          "<p class=\"note\">No task or group moved by more than chance (McNemar p &lt; 0.05, or two standard "
          "errors).</p>\n";
    } else {
      out += fmt::format(
          "<p class=\"note\">Changes unlikely by chance (McNemar p &lt; 0.05, or beyond two standard "
          "errors), most significant first{}.</p>\n<div class=\"grid\">\n",
          moved.size() == kMaxMoved ? fmt::format(", the first {}", kMaxMoved) : std::string());
      for (const Column& c : moved) out += card_html(data, c, regressed.count(c.key) > 0);
      out += "</div>\n";
    }
  }
  for (const Column& g : groups_with_members(all_columns)) {
    const std::vector<Column> members = members_of(all_columns, g.first.task);
    out +=
        fmt::format("<details class=\"members\"{}><summary>group {}: its {} member{}</summary>\n<div class=\"grid\">\n",
                    is_top_level(g, all_columns) ? " open" : "", html_escape(g.first.task), members.size(),
                    members.size() == 1 ? "" : "s");
    for (const Column& c : members) out += card_html(data, c, regressed.count(c.key) > 0);
    out += "</div>\n</details>\n";
  }

  out += "<h2>Checkpoints</h2>\n<p class=\"note\">" + html_escape(order_text(data.trend)) +
         "</p>\n<table>\n<tr><th>#</th><th>name</th><th>step</th><th>state</th><th>modified</th>"
         "<th>fingerprint</th><th>path</th></tr>\n";
  for (size_t i = 0; i < data.trend.size(); ++i) {
    const CheckpointInfo& c = data.trend[i].checkpoint;
    out += fmt::format(
        "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td>"
        "<td><code>{}</code></td><td><code>{}</code></td></tr>\n",
        i + 1, html_escape(c.name), step_text(c), html_escape(data.trend[i].state), html_escape(utc_text(c.mtime)),
        html_escape(c.fingerprint), html_escape(c.path));
  }
  out += "</table>\n";

  // Groups first (the widest, a suite, on top), then tasks.
  const std::vector<Column>& columns = all_columns;
  out +=
      "<h2>Every task and group</h2>\n<p class=\"note\">Per group and task, its primary metric at each checkpoint (oldest on the left); the "
      "band spans &#177;1 standard error; a dashed line marks the chance level of a multiple-choice score (a "
      "uniform guess among the choices), and perplexities are on a log scale. b and c count the documents that went right&#8594;wrong and "
      "wrong&#8594;right; p is the exact McNemar test of that change.</p>\n";
  for (const Column& col : columns) {
    const bool is_regressed = regressed.count(col.key) > 0;
    out += "<section class=\"task\" id=\"" + html_escape((col.first.is_group ? "group-" : "task-") + col.first.task) +
           "\">\n";
    const std::optional<double> chance = chance_level(data.trend, col.key);
    out += fmt::format("<h2>{}{} <span class=\"note\">{} {}{}</span></h2>\n", col.first.is_group ? "group: " : "",
                       html_escape(col.first.task), html_escape(metric_label(col.first.metric, col.first.filter)),
                       col.first.higher_is_better ? "&#8593;" : "&#8595;",
                       chance ? ", chance " + value_text(*chance) : std::string());
    out += "<div class=\"chart\">\n" + chart_svg(data.trend, col, is_regressed) + "</div>\n";
    out += comparison_table_html(data.steps, col.key);
    if (const Comparison* c = latest_flips(data.steps, col.key); c && (c->b > 0 || c->c > 0)) {
      out += fmt::format("<p>Latest change, {} → {}:</p>\n<ul class=\"flips\">\n", html_escape(c->previous),
                         html_escape(c->current));
      if (c->b > 0) out += fmt::format("<li>right → wrong ({}): {}</li>\n", c->b, id_list(c->lost));
      if (c->c > 0) out += fmt::format("<li>wrong → right ({}): {}</li>\n", c->c, id_list(c->gained));
      out += "</ul>\n";
    }
    out += "</section>\n";
  }
  out += "</body>\n</html>\n";
  return out;
}

void write_trend_reports(const std::string& output_dir, const History& history, const std::string& config_fingerprint,
                         std::optional<double> regression_points) {
  const TrendData data = load_trend(history, config_fingerprint, regression_points);
  io::make_directories(output_dir);
  io::write_file_atomic(output_dir + "/report.md", trend_markdown(data));
  io::write_file_atomic(output_dir + "/report.html", trend_html(data));
}

}  // namespace gpueval
