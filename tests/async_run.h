// A `gpueval` run started as a real child process in its own process group, so a test can
// watch its status.json, signal it or its workers, and kill the whole group.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "run/subprocess.h"
#include "test_util.h"

namespace gpueval::testing {

struct AsyncRun {
  Child child;
  std::string output;

  // stdout and stderr go to <output>.log.
  static AsyncRun start(const std::vector<std::string>& args, const std::string& output,
                        std::vector<std::pair<std::string, std::string>> env = {}) {
    SpawnOptions so;
    so.argv = {binary()};
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.env = std::move(env);
    so.log_path = output + ".log";
    return AsyncRun{Child::spawn(so), output};
  }
  // Polls status.json until `pred` holds (or the timeout passes, or the run ends); null then.
  // The timeout only bounds a broken run: every condition a test waits for is one the run is
  // made to reach (a held batch, see GPUEVAL_FAULT=hold in src/run/worker.cpp), however slow the machine.
  nlohmann::json wait_status(const std::function<bool(const nlohmann::json&)>& pred, double timeout_s = 300) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < timeout_s) {
      const std::string path = output + "/status.json";
      if (io::path_exists(path)) {
        nlohmann::json s = nlohmann::json::parse(io::read_file(path), nullptr, false);
        if (!s.is_discarded() && pred(s)) return s;
      }
      if (child.poll()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return nlohmann::json();
  }
  // Waits until every worker is busy; returns their pids (empty on timeout).
  std::vector<int> wait_all_busy() {
    nlohmann::json s = wait_status([](const nlohmann::json& st) {
      for (const auto& w : st["workers"])
        if (w["state"] != "busy") return false;
      return !st["workers"].empty();
    });
    std::vector<int> pids;
    if (!s.is_null())
      for (const auto& w : s["workers"]) pids.push_back(w["pid"].get<int>());
    return pids;
  }
  // Waits until a worker log (<output>/logs/worker_*.log) has a line containing `needle`;
  // returns that line (empty if the run ended or the timeout passed first).
  std::string wait_worker_line(const std::string& needle, double timeout_s = 300) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < timeout_s) {
      const std::string logs = output + "/logs";
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(logs, ec)) {
        if (e.path().filename().string().rfind("worker_", 0) != 0) continue;
        std::istringstream lines(io::read_file(e.path().string()));
        for (std::string line; std::getline(lines, line);)
          if (line.find(needle) != std::string::npos) return line;
      }
      if (child.poll()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return "";
  }
  // The pid in a worker's "[cpu:1] pid 1234 holding batch 5" line.
  static int pid_in(const std::string& line) {
    const size_t at = line.find(" pid ");
    return at == std::string::npos ? 0 : std::atoi(line.c_str() + at + 5);
  }
  std::string log() const { return io::path_exists(output + ".log") ? io::read_file(output + ".log") : ""; }
};

}  // namespace gpueval::testing
