// `gpueval status DIR` (gpueval/cluster.h): every shard's status.json and shard.json summed up
// without touching a journal, so it is cheap to run in a loop while the shards run.
#include <ctime>
#include <map>
#include <iostream>

#include "cluster/sharded_plan.h"
#include "common/file_io.h"
#include "gpueval/cluster.h"
#include "gpueval/error.h"
#include "run/progress.h"

namespace gpueval {
namespace {

using nlohmann::json;

// A running shard whose status.json has not changed for this long has most likely lost its
// process (killed on its node, or its node lost); it is shown as stale.
constexpr double kStaleAfterS = 120;

double parse_utc(const std::string& s) {
  std::tm tm{};
  if (!strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return -1;
  return static_cast<double>(timegm(&tm));
}

std::string duration(double s) { return format_duration(s, "-"); }

json shard_line(const ShardedPlan& sp, int i, double now) {
  const int64_t total = sp.batches_of(i);
  json line = {{"shard", i},      {"batches_total", total},  {"batches_done", 0},        {"state", "pending"},
               {"host", nullptr}, {"slurm_job_id", nullptr}, {"updated_s_ago", nullptr}, {"eta_s", nullptr}};
  if (total == 0) {
    line["state"] = "complete";  // nothing to do
    return line;
  }
  const std::string path = sp.shard_dir(i) + "/status.json";
  if (!io::path_exists(path)) return line;
  const json s = json::parse(io::read_file(path), nullptr, false);
  if (s.is_discarded() || !s.is_object() || s.value("plan_fingerprint", "") != sp.fingerprint) return line;
  const std::string state = s.value("state", "");
  line["batches_done"] = s.value("shard_batches_done", int64_t{0});
  line["host"] = s.value("host", "");
  if (!s.value("slurm_job_id", "").empty()) line["slurm_job_id"] = s["slurm_job_id"];
  if (!s.value("slurm_array_task", "").empty()) line["slurm_array_task"] = s["slurm_array_task"];
  const double updated = parse_utc(s.value("updated_at", ""));
  const double ago = updated < 0 ? -1 : now - updated;
  if (ago >= 0) line["updated_s_ago"] = ago;
  if (state == "running" || state == "finishing") {
    line["state"] = ago > kStaleAfterS ? "stale" : "running";
    if (s.contains("eta_s") && s["eta_s"].is_number()) line["eta_s"] = s["eta_s"];
  } else if (state == "complete") {
    line["state"] = "complete";
  } else if (state == "interrupted") {
    line["state"] = "interrupted";
  } else {
    line["state"] = "failed";  // failed, incomplete (a quarantined batch)
  }
  return line;
}

}  // namespace

int run_status_command(const std::string& dir, bool as_json, std::ostream& out) {
  const ShardedPlan sp = read_sharded_plan(dir);
  const double now = static_cast<double>(std::time(nullptr));
  json shards = json::array();
  std::map<std::string, int> counts;
  double eta = -1;
  int64_t done = 0, total = 0;
  for (int i = 0; i < sp.shards; ++i) {
    json line = shard_line(sp, i, now);
    counts[line["state"].get<std::string>()]++;
    if (line["eta_s"].is_number()) eta = std::max(eta, line["eta_s"].get<double>());
    done += line["batches_done"].get<int64_t>();
    total += line["batches_total"].get<int64_t>();
    shards.push_back(line);
  }
  const bool all_done = counts["complete"] == sp.shards;
  const bool merged = io::path_exists(sp.dir + "/merge.json");
  if (as_json) {
    out << json{{"dir", sp.dir},
                {"plan_fingerprint", sp.fingerprint},
                {"shards", shards},
                {"counts", counts},
                {"batches_done", done},
                {"batches_total", total},
                {"eta_s", eta < 0 ? json() : json(eta)},
                {"merged", merged}}
               .dump(2)
        << "\n";
    return all_done ? 0 : kExitIncomplete;
  }
  out << fmt::format("{}: {} shards, {} checkpoint(s), plan {}\n", sp.dir, sp.shards, sp.checkpoints.size(),
                     sp.fingerprint.substr(0, 12));
  out << fmt::format("{:>5}  {:<11}  {:>13}  {:<16}  {:<10}  {:>8}  {:>8}\n", "shard", "state", "batches", "host",
                     "slurm job", "updated", "ETA");
  for (const json& l : shards) {
    auto text = [&](const char* k) { return l[k].is_string() ? l[k].get<std::string>() : std::string("-"); };
    const std::string updated =
        l["updated_s_ago"].is_number() ? duration(l["updated_s_ago"].get<double>()) + " ago" : "-";
    out << fmt::format("{:>5}  {:<11}  {:>13}  {:<16}  {:<10}  {:>8}  {:>8}\n", l["shard"].get<int>(),
                       l["state"].get<std::string>(),
                       fmt::format("{}/{}", l["batches_done"].get<int64_t>(), l["batches_total"].get<int64_t>()),
                       text("host"), l.contains("slurm_array_task") ? text("slurm_array_task") : text("slurm_job_id"),
                       updated, l["eta_s"].is_number() ? duration(l["eta_s"].get<double>()) : "-");
  }
  out << fmt::format(
      "{} complete, {} running, {} pending, {} failed, {} interrupted, {} stale; {}/{} batches; ETA {}; "
      "{}\n",
      counts["complete"], counts["running"], counts["pending"], counts["failed"], counts["interrupted"],
      counts["stale"], done, total, duration(eta),
      merged     ? "merged"
      : all_done ? "ready to merge: gpueval merge " + sp.dir
                 : "not merged");
  for (const json& l : shards) {
    const std::string st = l["state"].get<std::string>();
    if (st == "failed" || st == "interrupted" || st == "stale")
      out << fmt::format("  shard {} {}: see {}/ (status.json, logs/); run it again: gpueval run {} --shard {}/{}\n",
                         l["shard"].get<int>(), st, sp.shard_dir(l["shard"].get<int>()), sp.dir, l["shard"].get<int>(),
                         sp.shards);
  }
  return all_done ? 0 : kExitIncomplete;
}

}  // namespace gpueval
