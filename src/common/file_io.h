// POSIX file plumbing shared by the on-disk formats (safetensors, checkpoint index): an owning
// descriptor, EINTR-safe open/read/write, a read-only memory mapping, and a file written under a
// temporary name and renamed into place. Private to src/: the public API speaks in formats, not
// descriptors. Every failure throws gpueval::Error "<path>: <call> failed: <strerror>". A MappedFile
// is immutable once built and may be shared across threads; UniqueFd and AtomicFile are not
// thread-safe and belong to one caller.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpueval::io {

// Owns one file descriptor; closing on destruction so an exception never leaks it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC added and EINTR retried.
UniqueFd open_file(const std::string& path, int flags, mode_t mode = 0);

// The whole of a regular file; fails if it is larger than max_bytes rather than reading a
// surprise multi-gigabyte file into memory.
std::string read_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 34);

// The decompressed bytes of a gzip file (one or more members, as gzip writes them), read whole
// like read_file; fails naming the file if it is not gzip, is truncated or decompresses to more
// than max_bytes.
std::string read_gzip_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 34);

// write(2) until every byte is written, retrying EINTR and short writes; 0 or the errno of the
// write that failed, so the caller can say which file it was writing.
int write_all(int fd, const void* data, size_t size);

// A whole regular file mapped PROT_READ, MAP_PRIVATE. The bytes stay valid until the last
// shared_ptr to the MappedFile is dropped; truncating the file underneath raises SIGBUS, as with
// any mapping.
class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  const uint8_t* data_;  // nullptr for an empty file: mmap refuses length 0
  size_t size_;
};

// Writes `path` so that readers see either the old file or the complete new one, never a prefix:
// bytes go to a temporary file in the same directory (so rename stays on one filesystem), which
// commit() fsyncs, renames over `path`, and makes durable by fsyncing the directory. Destroying an
// uncommitted AtomicFile removes the temporary file. Failures name `path` first and then the
// temporary file and the call: "<path>: write to temporary file <tmp> failed: <strerror>".
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, size_t size);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  bool committed_ = false;

  [[noreturn]] void fail_call(const char* call, int err) const;
};

// Writes `contents` to `path` through AtomicFile: readers see the old file or the new one, never a mix.
void write_file_atomic(const std::string& path, const std::string& contents);

// The directory part of a path, as dirname(1) gives it for these: "a/b" -> "a", "b" -> ".",
// "/x" -> "/". base_name: the part after the last slash ("a/b" -> "b", "b" -> "b").
std::string dir_of(const std::string& path);
std::string base_name(const std::string& path);

// mkdir -p; an existing directory is fine, an existing non-directory is an Error.
void make_directories(const std::string& path);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace gpueval::io
