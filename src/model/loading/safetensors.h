// Reading and writing single .safetensors files, the weight format of Hugging Face checkpoints.
//
// File layout (all integers little-endian):
//   [0, 8)          u64 N, the length of the header in bytes
//   [8, 8+N)        header: UTF-8 JSON object
//                     {"<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [B, E]},
//                      ..., "__metadata__": {"<key>": "<value>", ...}}
//                   "__metadata__" is optional; writers pad the header with spaces so that 8+N is a
//                   multiple of 8, which keeps the data section 8-byte aligned.
//   [8+N, size)     data section: each tensor's bytes, row-major, in [B, E) relative to 8+N.
//                   Tensors must cover the data section exactly: no overlap, no gap, no tail.
//
// SafetensorsFile maps the file read-only and validates the whole header before handing out
// anything, so a truncated or hostile file fails in open() with one line naming the file and the
// problem, never later with a crash. It is immutable after open(): every method is const and safe
// to call from several threads at once. Tensors it returns are zero-copy views into the mapping and
// each holds a reference to it, so they outlive the SafetensorsFile; because the mapping is
// read-only, writing into such a tensor in place faults -- clone() it first. A tensor whose bytes
// are not aligned for its dtype (possible in files from other writers) is returned as a copy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace gpueval {

namespace io {
class MappedFile;
}

struct TensorInfo {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // byte offsets relative to the data section, begin <= end
  uint64_t data_end = 0;

  uint64_t nbytes() const { return data_end - data_begin; }
};

// The LibTorch type for a safetensors dtype name ("F32" -> Float); nullopt for names outside
// F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL.
std::optional<c10::ScalarType> scalar_type_from_safetensors(std::string_view dtype);
// The safetensors dtype name for a LibTorch type; nullptr if the format has no such dtype.
const char* safetensors_dtype_name(c10::ScalarType type);

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws Error on any I/O failure or malformed content.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // [info.shape], dtype info.dtype, on CPU; a view into the mapping when aligned.
  // Throws Error naming the file and the tensor if there is no such tensor.
  at::Tensor tensor(const std::string& name) const;

  // The data section as mapped: tensor(name).data_ptr() == data() + info.data_begin for a view.
  const uint8_t* data() const { return data_; }
  uint64_t data_size() const { return data_size_; }

 private:
  SafetensorsFile(std::string path, std::shared_ptr<const io::MappedFile> mapping);
  void parse();  // fills everything below from the mapping, or throws

  std::string path_;
  std::shared_ptr<const io::MappedFile> mapping_;
  const uint8_t* data_ = nullptr;  // start of the data section inside mapping_
  uint64_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` to `path` as one .safetensors file, atomically: a temporary file in the same
// directory is written, fsynced and renamed over `path`, so `path` never holds a partial file and
// a failure leaves whatever was there before. Tensors are stored in the given order, each made
// contiguous on CPU first; put wider dtypes first if readers should get aligned, zero-copy views.
// Throws Error naming `path` for duplicate or reserved names, unsupported dtypes, undefined tensors
// and I/O failures.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace gpueval
