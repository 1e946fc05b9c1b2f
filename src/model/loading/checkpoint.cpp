#include "model/loading/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/file_io.h"
#include "common/strict_json.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

using Json = nlohmann::ordered_json;

// Real indexes are tens of kilobytes even for the largest models; the bound only stops a
// corrupt file from being read whole into memory.
constexpr uint64_t kMaxIndexBytes = uint64_t{100} << 20;

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// true if `path` exists; a failure other than "not there" (EACCES, EIO) is an error, not absence.
bool exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  fail(path, "stat failed: {}", std::strerror(err));
}

// Shards live in the checkpoint directory; an index must not send us to read /etc/passwd.
void check_shard_name(const std::string& index_path, const std::string& shard) {
  bool escapes = shard.empty() || shard.front() == '/';
  size_t start = 0;
  while (!escapes && start <= shard.size()) {
    const size_t slash = std::min(shard.find('/', start), shard.size());
    escapes = shard.compare(start, slash - start, "..") == 0;
    start = slash + 1;
  }
  if (escapes) fail(index_path, "shard name {} is not a file inside the checkpoint", quote_untrusted(shard));
}

}  // namespace

CheckpointFiles CheckpointFiles::open(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    fail(dir, "checkpoint directory: stat failed: {}", std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) fail(dir, "checkpoint is not a directory");
  CheckpointFiles checkpoint(dir);
  const std::string single = join(dir, kSingleFile);
  if (exists(single)) {
    checkpoint.add_file(SafetensorsFile::open(single), single);
    return checkpoint;
  }
  const std::string index = join(dir, kIndexFile);
  if (exists(index)) {
    checkpoint.load_index(index);
    return checkpoint;
  }
  fail(dir, "checkpoint directory has neither {} nor {}", kSingleFile, kIndexFile);
}

void CheckpointFiles::load_index(const std::string& index_path) {
  const Json index = parse_strict_json(io::read_file(index_path, kMaxIndexBytes), index_path, "index");
  if (!index.is_object()) fail(index_path, "index is a JSON {}, not an object", index.type_name());
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) fail(index_path, "index has no \"weight_map\"");
  if (!weight_map->is_object()) fail(index_path, "\"weight_map\" is not a JSON object");

  // Keyed by the name the index uses, each shard opened once however many tensors it holds.
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> shards;
  for (const auto& item : weight_map->items()) {
    const std::string& tensor = item.key();
    if (!item.value().is_string()) {
      fail(index_path, "\"weight_map\" value for tensor {} is a {}, not a string", quote_untrusted(tensor),
           item.value().type_name());
    }
    const auto& shard = item.value().get_ref<const std::string&>();
    auto it = shards.find(shard);
    if (it == shards.end()) {
      check_shard_name(index_path, shard);
      const std::string shard_path = join(dir_, shard);
      if (!exists(shard_path)) {
        fail(index_path, "shard {} (listed for tensor {}) does not exist", quote_untrusted(shard),
             quote_untrusted(tensor));
      }
      it = shards.emplace(shard, SafetensorsFile::open(shard_path)).first;
    }
    if (it->second->find(tensor) == nullptr) {
      fail(index_path, "tensor {} is mapped to shard {}, which does not contain it", quote_untrusted(tensor),
           quote_untrusted(shard));
    }
  }
  // Shards are read whole, not just for the tensors the index names: a tensor in two shards or
  // missing from the index means index and shards come from different saves.
  for (const auto& [shard, file] : shards) add_file(file, index_path);
  for (const auto& [name, entry] : entries_) {
    if (weight_map->find(name) == weight_map->end()) {
      fail(index_path, "shard {} holds tensor {}, which the index does not list", quote_untrusted(entry.file->path()),
           quote_untrusted(name));
    }
  }
}

void CheckpointFiles::add_file(const std::shared_ptr<const SafetensorsFile>& file, const std::string& where) {
  for (const TensorInfo& info : file->tensors()) {
    const auto [it, added] = entries_.emplace(info.name, Entry{file, &info});
    if (!added) {
      fail(where, "tensor {} appears in two shards: {} and {}", quote_untrusted(info.name),
           quote_untrusted(it->second.file->path()), quote_untrusted(file->path()));
    }
  }
}

std::vector<std::string> CheckpointFiles::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const CheckpointFiles::Entry& CheckpointFiles::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) fail(dir_, "checkpoint has no tensor named {}", quote_untrusted(name));
  return it->second;
}

const TensorInfo& CheckpointFiles::info(const std::string& name) const { return *entry(name).info; }

at::Tensor CheckpointFiles::tensor(const std::string& name) const {
  const Entry& found = entry(name);
  return found.file->tensor(name);
}

std::string CheckpointFiles::file_of(const std::string& name) const { return entry(name).file->path(); }

}  // namespace gpueval
