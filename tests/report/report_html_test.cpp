#include "report/report_html.h"

#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"
#include "common/strings.h"
#include "gpueval/error.h"
#include "test_util.h"

namespace gpueval {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::Not;

// A results.json as write_reports() writes it, one multiple-choice task per (name, acc) pair
// plus a perplexity task, with `incomplete` as its incomplete list.
Json results_with(const std::vector<std::pair<std::string, double>>& accs, std::vector<std::string> incomplete = {}) {
  Json j;
  Json results = Json::object();
  for (const auto& [name, acc] : accs) {
    results[name] = {{"alias", name},
                     {"acc,none", acc},
                     {"acc_stderr,none", 0.03},
                     {"acc_norm,none", acc / 2},
                     {"acc_norm_stderr,none", 0.02}};
  }
  results["story"] = {{"alias", "story"},
                      {"word_perplexity,none", 123.5},
                      {"word_perplexity_stderr,none", "N/A"},
                      {"bits_per_byte,none", 1.25},
                      {"bits_per_byte_stderr,none", "N/A"}};
  j["results"] = results;
  j["versions"] = Json::object();
  j["n-shot"] = Json::object();
  j["higher_is_better"] = Json::object();
  j["n-samples"] = Json::object();
  for (const auto& [name, acc] : results.items()) {
    j["versions"][name] = nullptr;
    j["n-shot"][name] = 0;
    j["n-samples"][name] = {{"original", 100}, {"effective", 40}};
  }
  j["config"] = {{"model", "models/stories260K"}, {"batch_size", "auto"}, {"limit", 40}};
  j["model_name"] = "models/stories260K";
  j["total_evaluation_time_seconds"] = "3725.5";
  j["date"] = 1700000000.75;
  j["incomplete"] = incomplete;
  return j;
}

struct Bar {
  std::string cls, task;
  double width = 0;
};

std::vector<Bar> bars_of(const std::string& html) {
  static const std::regex kRect(
      R"re(<rect class="(bar[^"]*)" data-task="([^"]*)" x="[^"]*" y="[^"]*" width="([^"]*)")re");
  std::vector<Bar> out;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), kRect); it != std::sregex_iterator(); ++it) {
    out.push_back(Bar{(*it)[1], (*it)[2], std::stod((*it)[3])});
  }
  return out;
}

double svg_height(const std::string& html) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(html, m, std::regex(R"re(<svg class="bars" width="[0-9]+" height="([0-9]+)")re")));
  return m.empty() ? 0 : std::stod(m[1]);
}

TEST(ReportHtmlTest, PageIsSelfContained) {
  const std::string html = report_html(results_with({{"quiz", 0.5}}, {"quiz doc 3"}));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* banned : {"http://", "https://", "<script", "<link", "@import", "url(", "<img", "<iframe"}) {
    EXPECT_THAT(html, Not(HasSubstr(banned))) << banned;
  }
  EXPECT_THAT(html, HasSubstr("<style>"));
  EXPECT_THAT(html, HasSubstr("<svg class=\"bars\""));
}

TEST(ReportHtmlTest, EveryStringIsEscaped) {
  Json j = results_with({{"quiz", 0.5}}, {"batch 7 <script>alert(1)</script> quarantined"});
  j["results"]["quiz"]["alias"] = "<b>&\"quiz'";
  j["config"]["model"] = "models/<i>odd&path";
  const std::string html = report_html(j);
  EXPECT_THAT(html, Not(HasSubstr("<b>")));
  EXPECT_THAT(html, Not(HasSubstr("<b>&\"")));
  EXPECT_THAT(html, Not(HasSubstr("<i>")));
  EXPECT_THAT(html, Not(HasSubstr("<script>")));
  EXPECT_THAT(html, HasSubstr("&lt;b&gt;&amp;&quot;quiz&#39;"));
  EXPECT_THAT(html, HasSubstr("models/&lt;i&gt;odd&amp;path"));
  EXPECT_THAT(html, HasSubstr("batch 7 &lt;script&gt;alert(1)&lt;/script&gt; quarantined"));
  // The table and the chart both name the task.
  EXPECT_THAT(html, HasSubstr("<td rowspan=\"2\">&lt;b&gt;&amp;&quot;quiz&#39;<span class=\"name\">quiz</span></td>"));
  EXPECT_THAT(html, HasSubstr("dominant-baseline=\"middle\">&lt;b&gt;&amp;&quot;quiz&#39;</text>"));
  EXPECT_EQ(html_escape("a<b>&\"c'd"), "a&lt;b&gt;&amp;&quot;c&#39;d");
}

TEST(ReportHtmlTest, OneBarPerTaskProportionalToTheScoreAndSorted) {
  // 57 subjects, as in MMLU, with long names and scores spread over [0, 1].
  std::vector<std::pair<std::string, double>> accs;
  for (int i = 0; i < 57; ++i) {
    accs.emplace_back("mmlu_high_school_subject_with_a_long_name_" + std::to_string(i), std::fmod(i * 0.37, 1.0));
  }
  const Json j = results_with(accs);
  const std::string html = report_html(j);
  const std::vector<Bar> bars = bars_of(html);
  ASSERT_EQ(bars.size(), 57u);  // the perplexity task has no bar
  std::map<std::string, double> acc_of(accs.begin(), accs.end());
  double scale = 0;
  for (const Bar& b : bars) {
    EXPECT_EQ(b.cls, "bar");
    ASSERT_TRUE(acc_of.count(b.task)) << b.task;
    if (acc_of[b.task] > 0.5) scale = b.width / acc_of[b.task];
  }
  ASSERT_GT(scale, 100);
  for (size_t i = 0; i < bars.size(); ++i) {
    EXPECT_NEAR(bars[i].width, acc_of[bars[i].task] * scale, 0.01) << bars[i].task;
    if (i > 0) {
      EXPECT_LE(bars[i].width, bars[i - 1].width);  // highest first
    }
    acc_of.erase(bars[i].task);  // each task once
  }
  EXPECT_TRUE(acc_of.empty());
  for (const auto& [name, acc] : accs) EXPECT_THAT(html, HasSubstr(">" + name + "</text>"));
  EXPECT_THAT(html, HasSubstr("<code>story</code>"));  // named as not charted, and in the table:
  EXPECT_THAT(html, HasSubstr("<td>word_perplexity</td><td></td><td class=\"num\">123.5000</td>"));

  // One row each: the chart grows with the number of tasks.
  const double small = svg_height(report_html(results_with({{"a", 0.5}, {"b", 0.25}})));
  EXPECT_NEAR(svg_height(html) - small, 55 * 22, 1);
}

TEST(ReportHtmlTest, GroupsAreShownApartWhenPresent) {
  Json j = results_with({{"mmlu_anatomy", 0.25}, {"mmlu_physics", 0.75}});
  const std::string plain = report_html(j);
  EXPECT_THAT(plain, Not(HasSubstr("bar group")));
  EXPECT_THAT(plain, Not(HasSubstr("<h2>Groups</h2>")));

  // lm-eval's layout: groups in "groups" and again in "results", aliases indented.
  j["groups"] = {{"mmlu_stem", {{"acc,none", 0.5}, {"acc_stderr,none", 0.01}, {"alias", " - stem"}}}};
  j["results"]["mmlu_stem"] = j["groups"]["mmlu_stem"];
  const std::string html = report_html(j);
  const std::vector<Bar> bars = bars_of(html);
  ASSERT_EQ(bars.size(), 3u);
  EXPECT_EQ(bars[0].cls, "bar group");
  EXPECT_EQ(bars[0].task, "mmlu_stem");
  EXPECT_EQ(bars[1].cls, "bar");
  EXPECT_EQ(bars[2].cls, "bar");
  EXPECT_THAT(html, HasSubstr("<h2>Groups</h2>"));
  EXPECT_THAT(html, HasSubstr("<tr class=\"group\"><td>group: stem<span class=\"name\">mmlu_stem</span></td>"));
  EXPECT_THAT(html, HasSubstr("<td>tasks</td><td>3 tasks, 1 group</td>"));
}

TEST(ReportHtmlTest, IncompleteWorkGetsAWarning) {
  const std::string html = report_html(results_with({{"quiz", 0.5}}, {"quiz doc 3", "batch 2 quarantined"}));
  EXPECT_THAT(html, HasSubstr("class=\"warn\" id=\"incomplete\""));
  EXPECT_THAT(html, HasSubstr("Incomplete (2)"));
  EXPECT_THAT(html, HasSubstr("<li>quiz doc 3</li>"));
  EXPECT_THAT(html, HasSubstr("<li>batch 2 quarantined</li>"));
  const std::string clean = report_html(results_with({{"quiz", 0.5}}));
  EXPECT_THAT(clean, Not(HasSubstr("Incomplete")));
}

TEST(ReportHtmlTest, HeaderAndCounts) {
  const Json j = results_with({{"quiz", 0.5}});
  const std::string html = report_html(j, {{"quiz", {{"acc", 37}}}});
  EXPECT_THAT(html, HasSubstr("<code>models/stories260K</code>"));
  EXPECT_THAT(html, HasSubstr("2023-11-14 22:13:20 UTC"));
  EXPECT_THAT(html, HasSubstr("3725.5 s (1:02:05)"));
  EXPECT_THAT(html, HasSubstr("<td>batch_size</td><td><code>auto</code></td>"));
  // n from the counts where given, else n-samples' effective.
  EXPECT_THAT(html, HasSubstr("<td>acc</td><td></td><td class=\"num\">0.5000</td><td>±</td>"
                              "<td class=\"num\">0.0300</td><td class=\"num\">37</td>"));
  EXPECT_THAT(html, HasSubstr("<td>acc_norm</td><td></td><td class=\"num\">0.2500</td><td>±</td>"
                              "<td class=\"num\">0.0200</td><td class=\"num\">40</td>"));
}

TEST(ReportHtmlTest, SameInputSameBytes) {
  std::vector<std::pair<std::string, double>> accs;
  for (int i = 0; i < 20; ++i) accs.emplace_back("t" + std::to_string(i), (i % 7) / 7.0);  // ties sort by name
  const Json j = results_with(accs, {"x"});
  const std::string a = report_html(j);
  EXPECT_EQ(a, report_html(j));
  EXPECT_EQ(a, report_html(Json::parse(j.dump())));
}

TEST(ReportHtmlTest, RejectsWhatIsNotAResultsFile) {
  EXPECT_THROW(report_html(Json::array()), Error);
  EXPECT_THROW(report_html(Json{{"config", Json::object()}}), Error);
}

TEST(ReportHtmlTest, RegeneratesFromAResultsFile) {
  testing::TempDir dir;
  const Json j = results_with({{"quiz", 0.5}}, {"quiz doc 3"});
  testing::write_text(dir.file("results.json"), j.dump(2));
  write_report_html(dir.file("results.json"));
  EXPECT_EQ(io::read_file(dir.file("report.html")), report_html(j));

  const auto r = testing::run_gpueval({"report", "--results", dir.file("results.json"), "--out", dir.file("x.html")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(io::read_file(dir.file("x.html")), report_html(j));

  testing::write_text(dir.file("bad.json"), "{\"results\": [1]}");
  const auto bad = testing::run_gpueval({"report", "--results", dir.file("bad.json")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("bad.json: report_html: no \"results\" object"));
  EXPECT_THROW(write_report_html(dir.file("missing.json")), Error);
}

}  // namespace
}  // namespace gpueval
