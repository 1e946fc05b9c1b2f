#include "model/loading/model_fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/file_io.h"
#include "gpueval/error.h"

#include <nlohmann/json.hpp>
#include "common/sha256.h"
#include "model/config/generation_config.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

// A safetensors header larger than this is not a header (the format caps it at 100 MB too).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// pread until `size` bytes are in or the file ends; EINTR retried.
std::string read_at(int fd, uint64_t offset, uint64_t size, const std::string& path) {
  std::string out(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, &out[done], size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "pread failed: {}", std::strerror(errno));
    if (n == 0) fail(path, "file ends inside its safetensors header");
    done += static_cast<uint64_t>(n);
  }
  return out;
}

// One safetensors file of a checkpoint: where it is, its size and its JSON header.
struct WeightsFile {
  std::string name, path;
  uint64_t size = 0;
  std::string header;
};

std::vector<WeightsFile> weights_files(const std::string& model_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) names.push_back(name);
  }
  if (ec) fail(model_dir, "cannot list the directory: {}", ec.message());
  if (names.empty()) fail(model_dir, "no *.safetensors file to fingerprint");
  std::sort(names.begin(), names.end());
  std::vector<WeightsFile> files;
  for (const std::string& name : names) {
    WeightsFile f;
    f.name = name;
    f.path = model_dir + "/" + name;
    io::UniqueFd fd = io::open_file(f.path, O_RDONLY);
    f.size = fs::file_size(f.path, ec);
    if (ec) fail(f.path, "cannot stat: {}", ec.message());
    const std::string prefix = read_at(fd.get(), 0, 8, f.path);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= uint64_t{static_cast<unsigned char>(prefix[i])} << (8 * i);
    if (header_len > kMaxHeaderBytes || header_len + 8 > f.size)
      fail(f.path, "safetensors header length {} does not fit the file ({} bytes)", header_len, f.size);
    f.header = read_at(fd.get(), 8, header_len, f.path);
    files.push_back(std::move(f));
  }
  return files;
}

std::string architecture_material(const std::string& model_dir, const std::vector<WeightsFile>& files) {
  std::string material = "gpueval-model-fingerprint-v1\n";
  const std::string config = io::read_file(model_dir + "/config.json", uint64_t{16} << 20);
  material += "config.json " + std::to_string(config.size()) + "\n" + config + "\n";
  // The tokens that end generation, where generation_config.json replaces config.json's (only then,
  // so that a checkpoint's fingerprint stays what it was wherever the two agree).
  if (const std::optional<std::vector<int64_t>> eos = generation_eos_token_ids(model_dir)) {
    const nlohmann::json parsed = nlohmann::json::parse(config, nullptr, false);
    const nlohmann::json own = parsed.is_object() ? parsed.value("eos_token_id", nlohmann::json()) : nlohmann::json();
    const nlohmann::json as_list =
        own.is_array() ? own : (own.is_null() ? nlohmann::json::array() : nlohmann::json::array({own}));
    if (as_list != nlohmann::json(*eos))
      material += "generation_config.json eos_token_id " + nlohmann::json(*eos).dump() + "\n";
  }
  for (const WeightsFile& f : files)
    material += f.name + " " + std::to_string(f.size) + " " + std::to_string(f.header.size()) + "\n" + f.header + "\n";
  return material;
}

constexpr uint64_t kSampleBytes = 1024;

}  // namespace

std::string model_fingerprint(const std::string& model_dir) {
  return sha256_hex(architecture_material(model_dir, weights_files(model_dir)));
}

std::string checkpoint_fingerprint(const std::string& model_dir) {
  const std::vector<WeightsFile> files = weights_files(model_dir);
  std::string material = architecture_material(model_dir, files) + "gpueval-checkpoint-samples-v1\n";
  for (const WeightsFile& f : files) {
    const nlohmann::json header = nlohmann::json::parse(f.header, nullptr, false);
    if (!header.is_object()) fail(f.path, "safetensors header is not a JSON object");
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // data offsets [begin, end), file order
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      const auto offsets = info.is_object() ? info.value("data_offsets", nlohmann::json()) : nlohmann::json();
      if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
          !offsets[1].is_number_unsigned())
        fail(f.path, "tensor '{}' has no valid data_offsets", name);
      ranges.emplace_back(offsets[0].get<uint64_t>(), offsets[1].get<uint64_t>());
    }
    std::sort(ranges.begin(), ranges.end());
    io::UniqueFd fd = io::open_file(f.path, O_RDONLY);
    const uint64_t data = 8 + f.header.size();
    for (const auto& [begin, end] : ranges) {
      if (end < begin || data + end > f.size)
        fail(f.path, "tensor data offsets [{}, {}) do not fit the file", begin, end);
      const uint64_t len = end - begin;
      material += sha256_hex(read_at(fd.get(), data + begin, std::min(len, kSampleBytes), f.path));
      if (len > kSampleBytes) {
        const uint64_t mid = begin + len / 2;
        material += sha256_hex(read_at(fd.get(), data + mid, std::min(end - mid, kSampleBytes), f.path));
      }
      material += "\n";
    }
  }
  return sha256_hex(material);
}

}  // namespace gpueval
