#include "evaluation/checkpoints.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "common/file_io.h"
#include "evaluation/training_step.h"
#include "gpueval/error.h"
#include "model/loading/model_fingerprint.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

double mtime_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
}

// When the checkpoint was written: the newest of its config.json and weight files.
double written_at(const std::string& dir) {
  double t = mtime_of(dir + "/config.json");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0)
      t = std::max(t, mtime_of(entry.path().string()));
  }
  return t;
}

std::string normalise(const std::string& path) {
  std::string p = fs::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_base(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : io::base_name(path.substr(0, slash));
}

bool is_checkpoint_dir(const std::string& path) {
  return io::is_directory(path) && io::path_exists(path + "/config.json");
}

}  // namespace

bool is_glob(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])), db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      // Compare as numbers without overflow: strip leading zeros, then length, then digits.
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      if (ie - i != je - j) return ie - i < je - j;  // "01" after "1"
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

std::vector<Checkpoint> resolve_checkpoints(const std::vector<std::string>& patterns, const std::string& source) {
  if (patterns.empty()) fail(source, "no model given");
  std::vector<std::string> dirs;
  for (const std::string& pattern : patterns) {
    if (!is_glob(pattern)) {
      if (!io::is_directory(pattern)) fail(pattern, "model directory does not exist");
      if (!io::path_exists(pattern + "/config.json"))
        fail(pattern, "not a checkpoint directory: it has no config.json");
      dirs.push_back(normalise(pattern));
      continue;
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g);
    size_t found = 0;
    if (rc == 0)
      for (size_t k = 0; k < g.gl_pathc; ++k)
        if (is_checkpoint_dir(g.gl_pathv[k])) {
          dirs.push_back(normalise(g.gl_pathv[k]));
          ++found;
        }
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) fail(source, "model '{}': the glob could not be read (error {})", pattern, rc);
    if (found == 0) fail(source, "model '{}' matches no checkpoint directory (one with config.json)", pattern);
  }
  std::vector<Checkpoint> out;
  std::set<std::string> seen_paths;
  std::map<std::string, std::string> seen_fingerprints;  // fingerprint -> path
  for (const std::string& dir : dirs) {
    if (!seen_paths.insert(dir).second) continue;
    Checkpoint c;
    c.path = dir;
    c.mtime = written_at(dir);
    try {
      c.fingerprint = checkpoint_fingerprint(dir);
      c.step = training_step(dir);
    } catch (const Error& e) {
      c.error = e.what();  // e.g. still being written by the training job; the run reports it
      out.push_back(std::move(c));
      continue;
    }
    auto [it, fresh] = seen_fingerprints.emplace(c.fingerprint, dir);
    if (!fresh) continue;  // a copy of a checkpoint already listed
    out.push_back(std::move(c));
  }
  // By step where every checkpoint has one: copies synced from elsewhere arrive in any order.
  const bool by_step = std::all_of(out.begin(), out.end(), [](const Checkpoint& c) { return c.step.has_value(); });
  std::stable_sort(out.begin(), out.end(), [by_step](const Checkpoint& a, const Checkpoint& b) {
    if (by_step && *a.step != *b.step) return *a.step < *b.step;
    if (!by_step && a.mtime != b.mtime) return a.mtime < b.mtime;
    return natural_less(a.path, b.path);
  });
  std::map<std::string, int> base_count;
  for (const Checkpoint& c : out) ++base_count[io::base_name(c.path)];
  std::set<std::string> names;
  for (Checkpoint& c : out) {
    c.name = base_count[io::base_name(c.path)] > 1 ? parent_base(c.path) + "_" + io::base_name(c.path)
                                                   : io::base_name(c.path);
    std::string unique = c.name;
    for (int k = 2; !names.insert(unique).second; ++k) unique = c.name + "_" + std::to_string(k);
    c.name = unique;
  }
  return out;
}

}  // namespace gpueval
