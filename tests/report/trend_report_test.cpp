// The trend report files and `gpueval history`, from a history database written here.
#include "report/trend_report.h"

#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "report/chart.h"
#include "test_util.h"

namespace gpueval {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ScoreRow row(const std::string& task, const std::string& metric, double value, std::optional<double> se,
             bool higher = true, bool group = false, std::optional<double> chance = std::nullopt) {
  ScoreRow r = testing::score_row(task, metric, value, se, 8, higher, group);
  r.chance = chance;
  return r;
}

const std::vector<std::string> kNames = {"step-100", "step-200 <b>&amp;</b>", "step-300"};

// Three checkpoints of one config: a right/wrong task whose accuracy falls at the end, a
// perplexity task, and a group over them; and a second config with one checkpoint.
std::string write_history(const testing::TempDir& dir) {
  const std::string path = dir.file("history.sqlite");
  History h = History::open(path);
  const int64_t run = h.begin_run("cfg-main", {{"model", "models/<tiny>"}, {"tasks", {"quiz", "story"}}}, "");
  const std::vector<std::vector<double>> right = {
      {1, 0, 0, 1, 0, 1, 0, 0}, {1, 1, 0, 1, 1, 1, 0, 1}, {0, 1, 0, 0, 1, 0, 0, 1}};
  for (size_t i = 0; i < kNames.size(); ++i) {
    double acc = 0;
    std::vector<SampleRow> samples;
    for (size_t d = 0; d < right[i].size(); ++d) {
      acc += right[i][d] / right[i].size();
      samples.push_back(SampleRow{"quiz", "acc", static_cast<int64_t>(d), right[i][d]});
    }
    const std::vector<ScoreRow> scores = {row("all", "acc", acc - 0.01, 0.05, true, true),
                                          row("quiz", "acc", acc, 0.17), row("quiz", "acc_norm", 0.5, 0.17),
                                          row("story", "word_perplexity", 50.0 - 5.0 * i, std::nullopt, false)};
    h.record(run, CheckpointInfo{"fp" + std::to_string(i), "/ck/" + kNames[i], kNames[i], 1000.0 * (i + 1)}, "cfg-main",
             "complete", scores, samples);
  }
  const int64_t other = h.begin_run("cfg-other", {{"model", "m2"}}, "");
  h.record(other, CheckpointInfo{"fpx", "/x", "solo", 5}, "cfg-other", "complete", {row("quiz", "acc", 0.25, 0.1)}, {});
  return path;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TrendReportTest, HtmlHasOneChartPerTaskWithABandAndEscapedNames) {
  testing::TempDir dir;
  const History h = History::open(write_history(dir));
  write_trend_reports(dir.file("out"), h, "cfg-main", 1.0);
  const std::string html = io::read_file(dir.file("out/report.html"));

  EXPECT_EQ(count(html, "<svg class=\"trend"), 3u);  // group all, quiz, story
  EXPECT_EQ(count(html, "<svg class=\"trend group\""), 1u);
  EXPECT_LT(html.find("id=\"group-all\""), html.find("id=\"task-quiz\""));  // groups first
  // A band over every point (three up, three back) where a task has stderrs; none for story.
  static const std::regex kBand(R"re(<path class="band" d="M[0-9. ]+(L[0-9. ]+){5}Z"/>)re");
  EXPECT_EQ(std::distance(std::sregex_iterator(html.begin(), html.end(), kBand), std::sregex_iterator()), 2);
  EXPECT_EQ(count(html, "<circle class=\"pt"), 9u);
  EXPECT_EQ(count(html, "<path class=\"line\""), 3u);

  EXPECT_THAT(html, HasSubstr("step-200 &lt;b&gt;&amp;amp;&lt;/b&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<b>")));
  EXPECT_THAT(html, HasSubstr("models/&lt;tiny&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("http")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));

  // quiz went from 6/8 to 3/8: lost docs 0, 3, 5; gained 2... none; regression of 37.5 points.
  EXPECT_THAT(html, HasSubstr("right → wrong (3): 0, 3, 5"));
  EXPECT_THAT(html, Not(HasSubstr("wrong → right (0)")));
  EXPECT_THAT(html, HasSubstr("id=\"regressions\""));
  EXPECT_THAT(html, HasSubstr("37.50 points worse"));
  EXPECT_THAT(html, HasSubstr("<circle class=\"pt regressed\""));
  // The change table: b and c from the documents, p of that split.
  EXPECT_THAT(html, HasSubstr(fmt::format("<td class=\"num\">8</td><td class=\"num\">3</td><td class=\"num\">0</td>"
                                          "<td class=\"num\">{:.3f}</td>",
                                          mcnemar_p(3, 0))));

  // Same history, same bytes; and the file is trend_html() of load_trend().
  write_trend_reports(dir.file("again"), h, "cfg-main", 1.0);
  EXPECT_EQ(io::read_file(dir.file("again/report.html")), html);
  EXPECT_EQ(io::read_file(dir.file("again/report.md")), io::read_file(dir.file("out/report.md")));
  EXPECT_EQ(trend_html(load_trend(h, "cfg-main", 1.0)), html);
}

TEST(TrendReportTest, HtmlCapsTheListedFlips) {
  testing::TempDir dir;
  History h = History::open(dir.file("h.sqlite"));
  const int64_t run = h.begin_run("cfg", {}, "");
  for (int i = 0; i < 2; ++i) {
    std::vector<SampleRow> s;
    for (int d = 0; d < 60; ++d) s.push_back(SampleRow{"t", "acc", d, (d < 50) == (i == 0) ? 1.0 : 0.0});
    h.record(run, CheckpointInfo{"f" + std::to_string(i), "", "c" + std::to_string(i), static_cast<double>(i)}, "cfg",
             "complete", {row("t", "acc", i ? 10 / 60.0 : 50 / 60.0, 0.05)}, s);
  }
  const std::string html = trend_html(load_trend(h, "cfg"));
  EXPECT_THAT(html, HasSubstr("right → wrong (50): 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, "
                              "19 and 30 more"));
  EXPECT_THAT(html, HasSubstr("wrong → right (10): 50, 51, 52, 53, 54, 55, 56, 57, 58, 59</li>"));
  EXPECT_THAT(html, Not(HasSubstr("id=\"regressions\"")));  // no threshold given
}

TEST(TrendReportTest, MarkdownTableHasEveryCheckpointWithDeltasAndPValues) {
  testing::TempDir dir;
  const History h = History::open(write_history(dir));
  const TrendData data = load_trend(h, "cfg-main", 1.0);
  ASSERT_EQ(data.steps.size(), 2u);
  const std::string md = trend_markdown(data);
  size_t last = 0;
  for (const std::string& name : kNames) {
    const size_t at = md.find("| " + name + " |");
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_GT(at, last);  // oldest first
    last = at;
  }
  EXPECT_THAT(
      md, HasSubstr("| checkpoint | group all acc ↑ | Δ | p | quiz acc ↑ | Δ | p | story word_perplexity ↓ | Δ | p |"));
  EXPECT_THAT(md, HasSubstr("| step-300 | 0.3650 ± 0.0500 | -0.3750 |  | 0.3750 ± 0.1700 | -0.3750 | " +
                            fmt::format("{:.3f}", mcnemar_p(3, 0)) + " | 40.0000 | -5.0000 |  |"));
  EXPECT_THAT(md, HasSubstr("## Regressions (drop > 1 points)"));
  EXPECT_THAT(md, HasSubstr("- group all acc: 0.7400 → 0.3650"));
  EXPECT_THAT(md, HasSubstr("- quiz acc: 3 right→wrong, 0 wrong→right of 8"));
  EXPECT_THAT(md, HasSubstr("  - right→wrong: 0, 3, 5\n"));
  EXPECT_THAT(md, HasSubstr("### step-100 → step-200 <b>&amp;</b>"));
  EXPECT_THAT(md, Not(HasSubstr("cfg-other")));
}

// Three checkpoints of a pretraining suite: a suite group's score (chance 0.3125), a
// multiple-choice task (chance 0.25), a generation task (no chance) and a perplexity that falls
// from a random model's millions to a trained one's tens.
std::string write_suite_history(const testing::TempDir& dir) {
  const std::string path = dir.file("suite.sqlite");
  History h = History::open(path);
  const int64_t run = h.begin_run("cfg-suite", {{"tasks", {"pretraining"}}}, "");
  const std::vector<double> acc = {0.25, 0.5, 0.625}, em = {0.0, 0.125, 0.25}, ppl = {2.3e6, 812.0, 45.7};
  for (size_t i = 0; i < 3; ++i) {
    // In results.json order (by name): the suite group after piqa.
    const std::vector<ScoreRow> scores = {
        row("piqa", "acc", acc[i], 0.05, true, false, 0.25), row("piqa", "acc_norm", acc[i], 0.05, true, false, 0.25),
        row("pretraining", "score", (acc[i] + em[i] + 0.375) / 3, 0.03, true, true, 0.3125),
        row("trivia", "exact_match", em[i], 0.04), row("wiki", "word_perplexity", ppl[i], std::nullopt, false)};
    h.record(
        run,
        CheckpointInfo{"fp" + std::to_string(i), "/ck/" + kNames[i], "step-" + std::to_string(i + 1), 1000.0 * (i + 1)},
        "cfg-suite", "complete", scores, {});
  }
  return path;
}

// The <svg> of one section of report.html.
std::string section_svg(const std::string& html, const std::string& id) {
  const size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t begin = html.find("<svg", at), end = html.find("</svg>", at);
  return begin == std::string::npos || end == std::string::npos ? "" : html.substr(begin, end - begin);
}

// Each y-axis tick of a chart: its label and its y.
std::vector<std::pair<std::string, double>> ticks_of(const std::string& svg) {
  static const std::regex kTick(R"re(<text class="axis" x="64\.00" y="([0-9.]+)" text-anchor="end" )re"
                                R"re(dominant-baseline="middle">([^<]*)</text>)re");
  std::vector<std::pair<std::string, double>> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kTick); it != std::sregex_iterator(); ++it) {
    out.emplace_back((*it)[2].str(), std::stod((*it)[1].str()));
  }
  return out;
}

// The checkpoints table says which order the trend is in, and each checkpoint's training step.
TEST(TrendReportTest, TheCheckpointsTableSaysTheOrderAndTheSteps) {
  testing::TempDir dir;
  const History h = History::open(write_history(dir));  // no steps recorded
  const TrendData by_time = load_trend(h, "cfg-main", 1.0);
  EXPECT_THAT(trend_markdown(by_time),
              HasSubstr("In the order they were written: 3 of 3 checkpoints have no training step."));
  EXPECT_THAT(trend_markdown(by_time), HasSubstr("| 1 | step-100 | — | complete |"));
  const std::string path = dir.file("steps.sqlite");
  History s = History::open(path);
  const int64_t run = s.begin_run("cfg", {{"model", "m"}}, "");
  for (int64_t step : {1000, 0, 500}) {  // written newest step first
    CheckpointInfo c{"fp" + std::to_string(step), "/ck", "step-" + std::to_string(step), 2000.0 - step};
    c.step = step;
    s.record(run, c, "cfg", "complete", {row("quiz", "acc", 0.5, 0.1)}, {});
  }
  const TrendData by_step = load_trend(s, "cfg", 1.0);
  const std::string md = trend_markdown(by_step), html = trend_html(by_step);
  EXPECT_THAT(md, HasSubstr("In training-step order"));
  EXPECT_THAT(html, HasSubstr("In training-step order"));
  EXPECT_LT(md.find("| 1 | step-0 | 0 |"), md.find("| 2 | step-500 | 500 |"));
  EXPECT_LT(md.find("| 2 | step-500 | 500 |"), md.find("| 3 | step-1000 | 1000 |"));
  EXPECT_THAT(html, HasSubstr("<td>step-1000</td><td class=\"num\">1000</td>"));
}

TEST(TrendReportTest, ChanceLevelIsADashedLineAtItsValue) {
  testing::TempDir dir;
  const History h = History::open(write_suite_history(dir));
  const std::string html = trend_html(load_trend(h, "cfg-suite"));
  EXPECT_THAT(html, HasSubstr("svg .chance{stroke:#6b6b6b;stroke-width:1.5;stroke-dasharray:6 4}"));

  // piqa's axis includes the chance level; the dashed line sits where the ticks put 0.25.
  const std::string piqa = section_svg(html, "task-piqa");
  const auto ticks = ticks_of(piqa);
  ASSERT_GE(ticks.size(), 2u) << piqa;
  const double v0 = std::stod(ticks.front().first), v1 = std::stod(ticks.back().first);
  const double y0 = ticks.front().second, y1 = ticks.back().second;
  EXPECT_LE(v0, 0.25);
  const double y_chance = y0 + (y1 - y0) * (0.25 - v0) / (v1 - v0);
  static const std::regex kChance(R"re(<line class="chance" x1="70\.00" y1="([0-9.]+)" x2="[0-9.]+" y2="([0-9.]+)">)re"
                                  R"re(<title>chance level 0\.2500</title></line>)re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(piqa, m, kChance)) << piqa;
  EXPECT_EQ(m[1].str(), m[2].str());  // horizontal
  EXPECT_NEAR(std::stod(m[1].str()), y_chance, 0.006);
  EXPECT_THAT(piqa, HasSubstr(">chance 0.2500</text>"));
  EXPECT_THAT(html, HasSubstr("piqa <span class=\"note\">acc &#8593;, chance 0.2500</span>"));

  // The suite group's chart has its own; a generation task and a perplexity have none.
  EXPECT_THAT(section_svg(html, "group-pretraining"), HasSubstr("<title>chance level 0.3125</title>"));
  EXPECT_THAT(section_svg(html, "task-trivia"), Not(HasSubstr("class=\"chance\"")));
  EXPECT_THAT(section_svg(html, "task-wiki"), Not(HasSubstr("class=\"chance\"")));
  EXPECT_EQ(count(html, "<line class=\"chance\""), 2u);

  // Same history, same bytes.
  EXPECT_EQ(trend_html(load_trend(h, "cfg-suite")), html);
}

TEST(TrendReportTest, PerplexityIsOnALogAxisWithDecadeTicks) {
  testing::TempDir dir;
  const History h = History::open(write_suite_history(dir));
  const std::string html = trend_html(load_trend(h, "cfg-suite"));
  const std::string wiki = section_svg(html, "task-wiki");
  EXPECT_THAT(wiki, HasSubstr("aria-label=\"word_perplexity of wiki per checkpoint (log scale)\""));
  const auto ticks = ticks_of(wiki);
  std::vector<std::string> labels;
  for (const auto& t : ticks) labels.push_back(t.first);
  EXPECT_EQ(labels, (std::vector<std::string>{"10", "100", "1000", "10⁴", "10⁵", "10⁶", "10⁷"}));
  // Decades are evenly spaced, and each point sits at its log10 between them.
  const double y10 = ticks.front().second, per_decade = (ticks.back().second - y10) / 6;
  for (size_t k = 1; k < ticks.size(); ++k) EXPECT_NEAR(ticks[k].second, y10 + per_decade * k, 0.006);
  static const std::regex kPoint(R"re(<circle class="pt[a-z ]*" cx="[0-9.]+" cy="([0-9.]+)")re");
  std::vector<double> ys;
  for (auto it = std::sregex_iterator(wiki.begin(), wiki.end(), kPoint); it != std::sregex_iterator(); ++it) {
    ys.push_back(std::stod((*it)[1].str()));
  }
  ASSERT_EQ(ys.size(), 3u);
  const std::vector<double> ppl = {2.3e6, 812.0, 45.7};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(ys[i], y10 + per_decade * (std::log10(ppl[i]) - 1), 0.006) << i;
  // A trained checkpoint's 45.7 is well off the bottom of the plot.
  EXPECT_LT(ys[2], y10 - per_decade / 2);
  // Accuracies keep their linear axis.
  EXPECT_THAT(section_svg(html, "task-piqa"), Not(HasSubstr("log scale")));

  // Past ten decades a tick every other decade, the top of the axis being one.
  History wide = History::open(dir.file("wide.sqlite"));
  const int64_t run = wide.begin_run("cfg", {}, "");
  for (int i = 0; i < 2; ++i) {
    wide.record(run, CheckpointInfo{"f" + std::to_string(i), "", "c" + std::to_string(i), static_cast<double>(i)},
                "cfg", "complete", {row("t", "byte_perplexity", i ? 1.5 : 3e14, std::nullopt, false)}, {});
  }
  labels.clear();
  for (const auto& t : ticks_of(section_svg(trend_html(load_trend(wide, "cfg")), "task-t"))) labels.push_back(t.first);
  EXPECT_EQ(labels, (std::vector<std::string>{"1", "100", "10⁴", "10⁶", "10⁸", "10¹⁰", "10¹²", "10¹⁴", "10¹⁶"}));
}

TEST(TrendReportTest, SuiteScoreHasAColumnAndAChart) {
  testing::TempDir dir;
  const History h = History::open(write_suite_history(dir));
  const TrendData data = load_trend(h, "cfg-suite");
  const std::string md = trend_markdown(data);
  // Groups first, as in report.html.
  EXPECT_THAT(md, HasSubstr("| checkpoint | group pretraining score ↑ | Δ | p | piqa acc ↑ | Δ | p | trivia "
                            "exact_match ↑ | Δ | p | wiki word_perplexity ↓ | Δ | p |\n"));
  EXPECT_THAT(md, HasSubstr("| step-3 | 0.4167 ± 0.0300 | +0.0833 |  | 0.6250 ± 0.0500 | +0.1250 |  |"));
  const std::string html = trend_html(data);
  EXPECT_THAT(html, HasSubstr("<h2>group: pretraining <span class=\"note\">score &#8593;, chance 0.3125</span></h2>"));
  EXPECT_THAT(section_svg(html, "group-pretraining"), HasSubstr("<svg class=\"trend group\""));
  EXPECT_LT(html.find("id=\"group-pretraining\""), html.find("id=\"task-piqa\""));
}

// A suite comes before the groups under it, whatever order the history lists them in: groups
// are shown widest (most documents) first.
TEST(TrendReportTest, TheWidestGroupComesFirst) {
  ScoredCheckpoint sc;
  sc.checkpoint.name = "step-1";
  auto row = [](const std::string& task, const std::string& metric, int64_t n, bool group) {
    ScoreRow r;
    r.task = task;
    r.metric = metric;
    r.value = 0.5;
    r.n = n;
    r.is_group = group;
    return r;
  };
  sc.scores = {row("mmlu_stem", "acc", 30, true), row("piqa", "acc", 10, false), row("mmlu", "acc", 100, true),
               row("suite", "score", 110, true)};
  const std::string md = trend_table({sc});
  EXPECT_THAT(md,
              HasSubstr("| checkpoint | group suite score ↑ | Δ | group mmlu acc ↑ | Δ | group mmlu_stem acc ↑ | Δ | "
                        "piqa acc ↑ | Δ |"));
}

// A wide suite: report.md's table shows only the top level (the suite and a task named beside
// it), each group's members get a section with a row per member; report.html shows the top level
// as small multiples, what moved, and each group's members in a block (open for the suite's).
TEST(TrendReportTest, AWideSuiteShowsItsTopLevelFirstAndEachGroupsMembersInTheirOwnSection) {
  auto scored = [](const std::string& name, double shift) {
    ScoredCheckpoint sc;
    sc.checkpoint.name = name;
    sc.checkpoint.fingerprint = "fp-" + name;
    sc.state = "complete";
    auto add = [&](const std::string& task, const std::string& metric, double v, bool group,
                   const std::string& parent) {
      ScoreRow r = row(task, metric, v, 0.01, true, group);
      r.parent = parent;
      sc.scores.push_back(r);
    };
    add("suite", "score", 0.40 + shift, true, "");
    add("mmlu", "acc", 0.30, true, "suite");
    add("mmlu_stem", "acc", 0.31, true, "mmlu");
    add("mmlu_physics", "acc", 0.32, false, "mmlu_stem");
    add("piqa", "acc", 0.50 + 4 * shift, false, "suite");
    add("extra", "acc", 0.60, false, "");
    return sc;
  };
  TrendData data;
  data.trend = {scored("step-1", 0), scored("step-2", 0.05)};
  data.steps = compare_trend(data.trend, {{}, {}});
  const std::string md = trend_markdown(data);
  EXPECT_THAT(md, HasSubstr("| checkpoint | group suite score ↑ | Δ | p | extra acc ↑ | Δ | p |\n"));
  EXPECT_THAT(md, HasSubstr("### group suite: its 2 members\n\n| task | metric | step-1 | step-2 | Δ | p |\n"));
  EXPECT_THAT(
      md,
      HasSubstr("| group mmlu | acc ↑ | 0.3000 | 0.3000 | ±0 |  |\n| piqa | acc ↑ | 0.5000 | 0.7000 | +0.2000 |  |\n"));
  EXPECT_THAT(md, HasSubstr("### group mmlu: its 1 member"));
  EXPECT_THAT(md, HasSubstr("### group mmlu_stem: its 1 member\n\n| task | metric | step-1 | step-2 | Δ | p |\n"
                            "|---|---|---:|---:|---:|---:|\n| mmlu_physics | acc ↑ | 0.3200 | 0.3200 | ±0 |  |\n"));
  // Sections depth first: the suite's, then mmlu's, then mmlu_stem's.
  EXPECT_LT(md.find("### group suite"), md.find("### group mmlu:"));
  EXPECT_LT(md.find("### group mmlu:"), md.find("### group mmlu_stem:"));
  // `gpueval history --task` still finds a nested task.
  EXPECT_THAT(trend_table(data.trend, nullptr, "mmlu_physics"), HasSubstr("| checkpoint | mmlu_physics acc ↑ | Δ |"));

  const std::string html = trend_html(data);
  const size_t glance = html.find("<h2>At a glance</h2>"), moved = html.find("<h2>Moved at the latest change"),
               members = html.find("<details class=\"members\" open><summary>group suite: its 2 members</summary>"),
               checkpoints = html.find("<h2>Checkpoints</h2>"), detail = html.find("<h2>Every task and group</h2>");
  ASSERT_NE(glance, std::string::npos) << html;
  ASSERT_NE(moved, std::string::npos) << html;
  ASSERT_NE(members, std::string::npos) << html;
  EXPECT_LT(glance, moved);
  EXPECT_LT(moved, members);
  EXPECT_LT(members, checkpoints);
  EXPECT_LT(checkpoints, detail);
  // At a glance: the suite and extra, each a card with a small chart linking to its section.
  const std::string glance_part = html.substr(glance, moved - glance);
  EXPECT_EQ(count(glance_part, "<div class=\"card"), 2u);
  EXPECT_EQ(count(glance_part, "<svg class=\"mini"), 2u);
  EXPECT_THAT(glance_part, HasSubstr("<a href=\"#group-suite\">suite</a>"));
  EXPECT_THAT(glance_part, HasSubstr("0.4500 <span class=\"d good\">+0.0500</span>"));
  // Moved: suite (+5 points, 3.5 standard errors) and piqa (+20); not mmlu, whose score stood still.
  const std::string moved_part = html.substr(moved, members - moved);
  EXPECT_EQ(count(moved_part, "<div class=\"card"), 2u);
  EXPECT_THAT(moved_part, HasSubstr("href=\"#task-piqa\""));
  EXPECT_THAT(moved_part, Not(HasSubstr("href=\"#group-mmlu\"")));
  // Nested groups' blocks start closed.
  EXPECT_THAT(html, HasSubstr("<details class=\"members\"><summary>group mmlu_stem: its 1 member</summary>"));
  // Every column still has its full section below.
  EXPECT_EQ(count(html, "<svg class=\"trend"), 6u);
}

TEST(ChartTest, DecadesAndTheirLabels) {
  EXPECT_EQ(chart::decade_range(45.7, 2.3e6), (std::pair<int, int>{1, 7}));
  EXPECT_EQ(chart::decade_range(100, 100), (std::pair<int, int>{2, 3}));
  EXPECT_EQ(chart::decade_range(1000, 5000), (std::pair<int, int>{3, 4}));
  EXPECT_EQ(chart::decade_range(0.02, 0.5), (std::pair<int, int>{-2, 0}));
  EXPECT_EQ(chart::decade_label(0), "1");
  EXPECT_EQ(chart::decade_label(3), "1000");
  EXPECT_EQ(chart::decade_label(4), "10⁴");
  EXPECT_EQ(chart::decade_label(12), "10¹²");
  EXPECT_EQ(chart::decade_label(-1), "0.1");
  EXPECT_EQ(chart::decade_label(-3), "0.001");
  EXPECT_EQ(chart::decade_label(-4), "10⁻⁴");
  const chart::LogScale y{10, 1e7, 214, 14};
  EXPECT_DOUBLE_EQ(y(10), 214);
  EXPECT_DOUBLE_EQ(y(1e7), 14);
  EXPECT_NEAR(y(1e4), 114, 1e-9);
}

TEST(TrendReportTest, EmptyTrendStillWritesBothFiles) {
  testing::TempDir dir;
  const History h = History::open(dir.file("h.sqlite"));
  write_trend_reports(dir.file("out"), h, "nothing");
  EXPECT_THAT(io::read_file(dir.file("out/report.md")), HasSubstr("No checkpoint of this config has been scored."));
  EXPECT_THAT(io::read_file(dir.file("out/report.html")), HasSubstr("No checkpoint of this config has been scored."));
}

TEST(HistoryCliTest, PrintsEveryCheckpointOfEveryConfig) {
  testing::TempDir dir;
  const std::string path = write_history(dir);
  auto r = testing::run_gpueval({"history", "--history", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t last = 0;
  for (const std::string& name : kNames) {
    const size_t at = r.out.find("| " + name + " |");
    ASSERT_NE(at, std::string::npos) << name << "\n" << r.out;
    EXPECT_GT(at, last);
    last = at;
  }
  // The most recently run config first.
  EXPECT_LT(r.out.find("## config cfg-other (1 checkpoint, model m2)"),
            r.out.find("## config cfg-main (3 checkpoints"));
  EXPECT_THAT(r.out,
              HasSubstr("| step-300 | 0.3650 ± 0.0500 | -0.3750 | 0.3750 ± 0.1700 | -0.3750 | 40.0000 | -5.0000 |"));

  r = testing::run_gpueval({"history", "--history", path, "--task", "story", "--config", "cfg-m"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| checkpoint | story word_perplexity ↓ | Δ |\n"));
  EXPECT_THAT(r.out, HasSubstr("| step-200 <b>&amp;</b> | 45.0000 | -5.0000 |\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("cfg-other")));

  // --report writes the config's trend report, the same bytes as write_trend_reports().
  r = testing::run_gpueval({"history", "--history", path, "--config", "cfg-main", "--report", dir.file("rep")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  write_trend_reports(dir.file("direct"), History::open(path), "cfg-main");
  EXPECT_EQ(io::read_file(dir.file("rep/cfg-main/report.html")), io::read_file(dir.file("direct/report.html")));
  EXPECT_EQ(io::read_file(dir.file("rep/cfg-main/report.md")), io::read_file(dir.file("direct/report.md")));
  EXPECT_FALSE(io::path_exists(dir.file("rep/cfg-other")));
}

TEST(HistoryCliTest, FailsClearly) {
  testing::TempDir dir;
  const std::string path = write_history(dir);
  auto r = testing::run_gpueval({"history", "--history", path, "--task", "nope"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "gpueval: --task: no task 'nope' in " + path + " (tasks: all, quiz, story)\n");

  r = testing::run_gpueval({"history", "--history", path, "--config", "zzz"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no config in " + path + " starts with 'zzz' (configs: cfg-other, cfg-main)"));

  r = testing::run_gpueval({"history", "--history", dir.file("missing.sqlite")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "gpueval: " + dir.file("missing.sqlite") + ": no history file\n");
  EXPECT_FALSE(io::path_exists(dir.file("missing.sqlite")));

  History::open(dir.file("empty.sqlite"));
  r = testing::run_gpueval({"history", "--history", dir.file("empty.sqlite")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, dir.file("empty.sqlite") + ": no runs recorded yet\n");

  r = testing::run_gpueval({"--help"});
  EXPECT_THAT(r.out, HasSubstr("history"));
}

}  // namespace
}  // namespace gpueval
