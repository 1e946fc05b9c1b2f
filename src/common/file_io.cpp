#include "common/file_io.h"

#include <zlib.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "gpueval/error.h"

namespace gpueval::io {
namespace {

// Linux caps a single write at just under 2 GiB; asking for more only returns a short count.
constexpr size_t kMaxWriteChunk = size_t{1} << 30;

[[noreturn]] void fail_errno(const std::string& path, const char* call) {
  const int err = errno;
  fail(path, "{} failed: {}", call, std::strerror(err));
}

// "dir/" for "dir/name", "" for a bare name, so the temp file lands next to the target.
std::string dir_prefix(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

}  // namespace

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  // close() is not retried on EINTR: Linux has released the descriptor either way.
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

UniqueFd open_file(const std::string& path, int flags, mode_t mode) {
  for (;;) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != EINTR) fail_errno(path, "open");
  }
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  UniqueFd fd = open_file(path, O_RDONLY);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, "fstat");
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    fail(path, "file is {} bytes, more than the {} bytes allowed", st.st_size, max_bytes);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "read");
    }
    if (n == 0) break;  // shrank since fstat; return what is there
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

std::string read_gzip_file(const std::string& path, uint64_t max_bytes) {
  const std::string packed = read_file(path, max_bytes);
  if (packed.size() < 2 || static_cast<unsigned char>(packed[0]) != 0x1f ||
      static_cast<unsigned char>(packed[1]) != 0x8b)
    fail(path, "not a gzip file (it does not start with gzip's magic bytes 1f 8b)");
  std::string out;
  size_t offset = 0;
  while (offset < packed.size()) {  // one member after another, as `cat a.gz b.gz` makes
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) fail(path, "zlib could not start inflating");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + offset));
    z.avail_in = static_cast<uInt>(packed.size() - offset);
    int rc = Z_OK;
    char buf[1 << 16];
    while (rc == Z_OK) {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        const std::string why = z.msg ? z.msg : (rc == Z_BUF_ERROR ? "the file ends early" : "corrupt data");
        inflateEnd(&z);
        fail(path, "not valid gzip data at byte {}: {}", offset + z.total_in, why);
      }
      out.append(buf, sizeof buf - z.avail_out);
      if (out.size() > max_bytes) {
        inflateEnd(&z);
        fail(path, "decompresses to more than the {} bytes allowed", max_bytes);
      }
    }
    offset += z.total_in;
    inflateEnd(&z);
  }
  return out;
}

int write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size < kMaxWriteChunk ? size : kMaxWriteChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  UniqueFd fd = open_file(path, O_RDONLY);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, "fstat");
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return std::shared_ptr<const MappedFile>(new MappedFile(nullptr, 0));
  // The mapping outlives the descriptor, so fd closes when this function returns.
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) fail_errno(path, "mmap");
  return std::shared_ptr<const MappedFile>(new MappedFile(static_cast<const uint8_t*>(addr), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const size_t slash = path_.rfind('/');
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  // O_EXCL with our own random suffix instead of mkstemp, so the file gets 0666 & ~umask like
  // any other file the user creates, not mkstemp's 0600.
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  for (int attempt = 0;; ++attempt) {
    temp_path_ =
        fmt::format("{}.{}.tmp.{}.{}.{:08x}", dir_prefix(path_), base, ::getpid(), counter.fetch_add(1), entropy());
    const int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fd_ = UniqueFd(fd);
      return;
    }
    if (errno == EINTR || (errno == EEXIST && attempt < 100)) continue;
    fail_call("open of", errno);
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    fd_ = UniqueFd();
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::fail_call(const char* call, int err) const {
  fail(path_, "{} temporary file {} failed: {}", call, temp_path_, std::strerror(err));
}

void AtomicFile::write(const void* data, size_t size) {
  if (const int err = write_all(fd_.get(), data, size)) fail_call("write to", err);
}

void AtomicFile::commit() {
  while (::fsync(fd_.get()) != 0) {
    if (errno != EINTR) fail_call("fsync of", errno);
  }
  // close() can report a deferred write error (NFS), so its result matters here.
  if (::close(fd_.release()) != 0) fail_call("close of", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail_call("rename of", errno);
  // From here the temp name is gone and may be reused by another writer: never unlink it.
  committed_ = true;
  // The rename itself is only durable once the directory entry is on disk.
  const std::string dir = dir_prefix(path_).empty() ? "." : dir_prefix(path_);
  UniqueFd dir_fd = open_file(dir, O_RDONLY | O_DIRECTORY);
  while (::fsync(dir_fd.get()) != 0) {
    if (errno != EINTR) fail_errno(dir, "fsync");
  }
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile out(path);
  out.write(contents.data(), contents.size());
  out.commit();
}

void make_directories(const std::string& path) {
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string partial = path.substr(0, pos);
    if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) fail_errno(partial, "mkdir");
    if (pos == std::string::npos) break;
  }
  if (!is_directory(path)) fail(path, "exists and is not a directory");
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace gpueval::io
