#include "gpueval/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "common/unicode_regex.h"
#include "common/utf8.h"
#include "gpueval/error.h"
#include "tasks/metric_table.h"
#include "tasks/python_random.h"

namespace gpueval {
namespace {

// Python's str.isspace(), which is what `\s` matches in a str pattern: Unicode White_Space
// plus the four ASCII information separators U+001C..U+001F.
bool python_isspace(char32_t c) { return (c >= 0x1C && c <= 0x1F) || is_unicode_whitespace(c); }

std::vector<double> scores(const std::vector<MetricValue>& items, Aggregation aggregation) {
  std::vector<double> out;
  out.reserve(items.size());
  for (const MetricValue& item : items) {
    if (item.count) {
      throw Error(fmt::format("aggregation '{}' takes scores, got a (loglikelihood, count) pair",
                              aggregation_name(aggregation)));
    }
    out.push_back(item.value);
  }
  return out;
}

// lm-eval's weighted_mean: sum(loglikelihoods) / sum(counts), the counts summed as integers.
double weighted_mean(const std::vector<MetricValue>& items, Aggregation aggregation) {
  std::vector<double> values;
  values.reserve(items.size());
  int64_t total = 0;
  for (const MetricValue& item : items) {
    if (!item.count) {
      throw Error(fmt::format("aggregation '{}' takes (loglikelihood, count) pairs, got a score",
                              aggregation_name(aggregation)));
    }
    values.push_back(item.value);
    total += *item.count;
  }
  return python_sum(values) / static_cast<double>(total);
}

}  // namespace

const char* aggregation_name(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::kMean: return "mean";
    case Aggregation::kPerplexity: return "perplexity";
    case Aggregation::kWeightedPerplexity: return "weighted_perplexity";
    case Aggregation::kBitsPerByte: return "bits_per_byte";
  }
  return "?";
}

std::optional<Aggregation> parse_aggregation(std::string_view name) {
  for (const Aggregation a :
       {Aggregation::kMean, Aggregation::kPerplexity, Aggregation::kWeightedPerplexity, Aggregation::kBitsPerByte}) {
    if (name == aggregation_name(a)) return a;
  }
  return std::nullopt;
}

bool is_weighted(Aggregation aggregation) {
  return aggregation == Aggregation::kWeightedPerplexity || aggregation == Aggregation::kBitsPerByte;
}

std::optional<MetricSpec> builtin_metric(std::string_view name) {
  const MetricRow* row = metric_row(name);
  if (!row) return std::nullopt;
  return MetricSpec{row->name, row->aggregation, row->higher_is_better, nlohmann::json::object()};
}

double python_sum(const std::vector<double>& xs) {
  double sum = 0.0;
  double compensation = 0.0;
  for (const double x : xs) {
    const double t = sum + x;
    if (std::fabs(sum) >= std::fabs(x)) {
      compensation += (sum - t) + x;
    } else {
      compensation += (x - t) + sum;
    }
    sum = t;
  }
  // CPython leaves a zero or non-finite compensation out, keeping -0.0 and inf intact.
  if (compensation != 0.0 && std::isfinite(compensation)) sum += compensation;
  return sum;
}

double mean(const std::vector<double>& xs) {
  if (xs.empty()) return std::numeric_limits<double>::quiet_NaN();
  return python_sum(xs) / static_cast<double>(xs.size());
}

double sample_stddev(const std::vector<double>& xs) {
  if (xs.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  const double mu = mean(xs);
  std::vector<double> squares;
  squares.reserve(xs.size());
  for (const double x : xs) squares.push_back((x - mu) * (x - mu));
  return std::sqrt(python_sum(squares) / static_cast<double>(xs.size() - 1));
}

double mean_stderr(const std::vector<double>& xs) {
  return sample_stddev(xs) / std::sqrt(static_cast<double>(xs.size()));
}

double aggregate(Aggregation aggregation, const std::vector<MetricValue>& items) {
  if (items.empty()) return std::numeric_limits<double>::quiet_NaN();
  switch (aggregation) {
    case Aggregation::kMean: return mean(scores(items, aggregation));
    case Aggregation::kPerplexity: return std::exp(-mean(scores(items, aggregation)));
    case Aggregation::kWeightedPerplexity: return std::exp(-weighted_mean(items, aggregation));
    case Aggregation::kBitsPerByte: return -weighted_mean(items, aggregation) / std::log(2.0);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::optional<double> aggregate_stderr(Aggregation aggregation, const std::vector<MetricValue>& items,
                                       int64_t bootstrap_iters) {
  if (items.size() < 2 || bootstrap_iters <= 0) return std::nullopt;
  switch (aggregation) {
    case Aggregation::kMean: return mean_stderr(scores(items, aggregation));
    case Aggregation::kPerplexity: return bootstrap_stderr(aggregation, items, bootstrap_iters);
    // lm-eval's stderr_for_metric has no rule for weighted_perplexity or bits_per_byte.
    case Aggregation::kWeightedPerplexity:
    case Aggregation::kBitsPerByte: return std::nullopt;
  }
  return std::nullopt;
}

double bootstrap_stderr(Aggregation aggregation, const std::vector<MetricValue>& items, int64_t iters) {
  if (items.empty() || iters <= 0) return std::numeric_limits<double>::quiet_NaN();
  const int64_t chunk = std::min<int64_t>(1000, iters);
  std::vector<double> replicates;
  replicates.reserve(static_cast<size_t>(iters / chunk * chunk));
  std::vector<MetricValue> resample(items.size());
  for (int64_t i = 0; i < iters / chunk; ++i) {
    PythonRandom rng(static_cast<uint64_t>(i));
    for (int64_t r = 0; r < chunk; ++r) {
      for (MetricValue& slot : resample) slot = items[rng.choice_index(items.size())];
      replicates.push_back(aggregate(aggregation, resample));
    }
  }
  return sample_stddev(replicates);
}

std::vector<MetricResult> aggregate_metrics(const std::vector<MetricSpec>& specs,
                                            const std::vector<const DocMetrics*>& docs, int64_t bootstrap_iters) {
  std::vector<MetricResult> out;
  for (const MetricSpec& spec : specs) {
    std::vector<MetricValue> items;
    for (const DocMetrics* doc : docs) {
      if (auto it = doc->find(spec.name); it != doc->end()) items.push_back(it->second);
    }
    if (items.empty()) continue;
    MetricResult result;
    result.name = spec.name;
    result.aggregation = spec.aggregation;
    result.higher_is_better = spec.higher_is_better;
    try {
      result.value = aggregate(spec.aggregation, items);
      result.stderr = aggregate_stderr(spec.aggregation, items, bootstrap_iters);
    } catch (const Error& e) {
      fail("metric '" + spec.name + "'", "{}", e.what());
    }
    result.n = static_cast<int64_t>(items.size());
    out.push_back(std::move(result));
  }
  return out;
}

int64_t count_words(std::string_view text) {
  // re.split(r"\s+", text) yields one piece more than there are runs of whitespace,
  // empty pieces at either end included.
  int64_t pieces = 1;
  bool in_space = false;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = utf8_sequence_length(text, pos);
    bool space = false;
    if (length == 0) {
      length = 1;
    } else {
      space = python_isspace(utf8_decode(text, pos, &length));
    }
    if (space && !in_space) ++pieces;
    in_space = space;
    pos += length;
  }
  return pieces;
}

int64_t count_bytes(std::string_view text) { return static_cast<int64_t>(text.size()); }

int64_t count_code_points(std::string_view text) {
  int64_t n = 0;
  for (size_t pos = 0; pos < text.size(); ++n) {
    const size_t length = utf8_sequence_length(text, pos);
    pos += length == 0 ? 1 : length;
  }
  return n;
}

double exact_match(std::string prediction, std::string reference, const nlohmann::json& kwargs) {
  bool ignore_case = false, ignore_punctuation = false, ignore_numbers = false;
  std::vector<std::string> regexes;
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& value = it.value();
    if (key == "ignore_case" && value.is_boolean()) {
      ignore_case = value.get<bool>();
    } else if (key == "ignore_punctuation" && value.is_boolean()) {
      ignore_punctuation = value.get<bool>();
    } else if (key == "ignore_numbers" && value.is_boolean()) {
      ignore_numbers = value.get<bool>();
    } else if (key == "regexes_to_ignore" && value.is_array()) {
      for (const auto& r : value) {
        if (!r.is_string()) fail("exact_match", "regexes_to_ignore must be a list of strings");
        regexes.push_back(r.get<std::string>());
      }
    } else {
      fail("exact_match", "unsupported option '{}' = {}", key, value.dump());
    }
  }
  auto normalize = [&](std::string s) {
    for (const std::string& pattern : regexes) {
      const UnicodeRegex regex(pattern, "exact_match regexes_to_ignore");
      std::string kept;
      size_t last = 0;
      for (const auto& [begin, end] : regex.find_all(s)) {
        kept.append(s, last, begin - last);
        last = end;
      }
      kept.append(s, last, std::string::npos);
      s = std::move(kept);
    }
    std::string out;
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (ignore_punctuation && u < 0x80 && std::ispunct(u)) continue;
      if (ignore_numbers && c >= '0' && c <= '9') continue;
      out += ignore_case && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    }
    return out;
  };
  return normalize(std::move(prediction)) == normalize(std::move(reference)) ? 1.0 : 0.0;
}

}  // namespace gpueval

namespace gpueval {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (c < 0 || c > n || k < 1 || k > n)
    throw Error(fmt::format("pass@k: needs 0 <= c <= n and 1 <= k <= n, got n={} c={} k={}", n, c, k));
  if (n - c < k) return 1.0;
  // 1 - prod_{i = n-c+1}^{n} (1 - k / i), left to right as numpy's prod over np.arange.
  double product = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) product *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - product;
}

}  // namespace gpueval
