#include "gpueval/model_fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "gpueval/error.h"
#include "gpueval/file_io.h"
#include "sha256.h"

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

}  // namespace

std::string model_fingerprint(const std::string& model_dir) {
  std::string material = "gpueval-model-fingerprint-v1\n";
  const std::string config = io::read_file(model_dir + "/config.json", uint64_t{16} << 20);
  material += "config.json " + std::to_string(config.size()) + "\n" + config + "\n";
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) names.push_back(name);
  }
  if (ec) fail(model_dir, "cannot list the directory: {}", ec.message());
  if (names.empty()) fail(model_dir, "no *.safetensors file to fingerprint");
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = model_dir + "/" + name;
    io::UniqueFd fd = io::open_file(path, O_RDONLY);
    const uint64_t size = fs::file_size(path, ec);
    if (ec) fail(path, "cannot stat: {}", ec.message());
    const std::string prefix = read_at(fd.get(), 0, 8, path);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= uint64_t{static_cast<unsigned char>(prefix[i])} << (8 * i);
    if (header_len > kMaxHeaderBytes || header_len + 8 > size)
      fail(path, "safetensors header length {} does not fit the file ({} bytes)", header_len, size);
    material += name + " " + std::to_string(size) + " " + std::to_string(header_len) + "\n";
    material += read_at(fd.get(), 8, header_len, path) + "\n";
  }
  return sha256_hex(material);
}

}  // namespace gpueval
