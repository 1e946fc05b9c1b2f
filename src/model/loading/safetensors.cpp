#include "model/loading/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>
#include <unordered_set>

#include "common/file_io.h"
#include "common/strict_json.h"
#include "gpueval/error.h"

// Tensor bytes are handed to LibTorch as they lie in the file, which is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors needs a little-endian host");

namespace gpueval {
namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kLengthBytes = 8;
// A header is a few MB even for the largest models, so anything bigger is corruption or an attempt
// to make us parse gigabytes of JSON. (The reference reader stops at 100,000,000 bytes, a little
// lower; no real file comes near either.)
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr char kMetadataKey[] = "__metadata__";
constexpr uint64_t kMaxElements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

struct DtypeName {
  const char* name;
  c10::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", c10::ScalarType::Double},    {"F32", c10::ScalarType::Float}, {"F16", c10::ScalarType::Half},
    {"BF16", c10::ScalarType::BFloat16}, {"I64", c10::ScalarType::Long},  {"I32", c10::ScalarType::Int},
    {"I16", c10::ScalarType::Short},     {"I8", c10::ScalarType::Char},   {"U8", c10::ScalarType::Byte},
    {"BOOL", c10::ScalarType::Bool},
};
// Valid in the format, but LibTorch 1.13 has no type to hold them; named apart from typos.
constexpr const char* kUnsupportedDtypes[] = {"U16",         "U32",     "U64",     "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ",
                                              "F8_E5M2FNUZ", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",      "C64"};

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// A JSON number that is an integer >= 0 (nlohmann stores "-0" as a signed integer).
std::optional<uint64_t> as_u64(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return value.get<uint64_t>();
  return std::nullopt;
}

const Json& require_field(const std::string& path, const std::string& tensor, const Json& entry, const char* key) {
  const auto it = entry.find(key);
  if (it == entry.end()) fail(path, "tensor {}: missing \"{}\"", tensor, key);
  return *it;
}

c10::ScalarType parse_dtype(const std::string& path, const std::string& tensor, const Json& value) {
  if (!value.is_string()) fail(path, "tensor {}: \"dtype\" is not a string", tensor);
  const auto& name = value.get_ref<const std::string&>();
  if (const auto type = scalar_type_from_safetensors(name)) return *type;
  for (const char* unsupported : kUnsupportedDtypes) {
    if (name == unsupported) {
      fail(path, "tensor {}: dtype {} has no LibTorch 1.13 equivalent", tensor, quote_untrusted(name));
    }
  }
  fail(path, "tensor {}: unknown dtype {}", tensor, quote_untrusted(name));
}

std::vector<int64_t> parse_shape(const std::string& path, const std::string& tensor, const Json& value) {
  if (!value.is_array()) fail(path, "tensor {}: \"shape\" is not an array", tensor);
  std::vector<int64_t> shape;
  shape.reserve(value.size());
  for (const Json& dim : value) {
    if (!dim.is_number_integer()) {
      fail(path, "tensor {}: \"shape\" holds a {}, not an integer", tensor, dim.type_name());
    }
    if (dim.is_number_unsigned()) {
      const uint64_t size = dim.get<uint64_t>();
      if (size > kMaxElements) fail(path, "tensor {}: dimension {} does not fit in int64", tensor, size);
      shape.push_back(static_cast<int64_t>(size));
    } else {
      const int64_t size = dim.get<int64_t>();
      if (size < 0) fail(path, "tensor {}: negative dimension {} in shape", tensor, size);
      shape.push_back(size);
    }
  }
  return shape;
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const Json& entry, uint64_t data_size) {
  const std::string tensor = quote_untrusted(name);
  if (!entry.is_object()) fail(path, "tensor {}: entry is not a JSON object", tensor);
  TensorInfo info;
  info.name = name;
  info.dtype = parse_dtype(path, tensor, require_field(path, tensor, entry, "dtype"));
  info.shape = parse_shape(path, tensor, require_field(path, tensor, entry, "shape"));

  const Json& offsets = require_field(path, tensor, entry, "data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_u64(offsets[0]);
    end = as_u64(offsets[1]);
  }
  if (!begin || !end) {
    fail(path, "tensor {}: \"data_offsets\" is not a pair of non-negative integers", tensor);
  }
  info.data_begin = *begin;
  info.data_end = *end;
  if (info.data_begin > info.data_end) {
    fail(path, "tensor {}: data_offsets [{}, {}] begin after they end", tensor, info.data_begin, info.data_end);
  }
  if (info.data_end > data_size) {
    fail(path, "tensor {}: offsets out of range: data_offsets [{}, {}] end past the {}-byte data section", tensor,
         info.data_begin, info.data_end, data_size);
  }

  // Checked arithmetic throughout: a hostile shape must not wrap around to the right byte count.
  // Zero dimensions are skipped in the element bound because LibTorch still computes strides from
  // the other dimensions, which must fit in int64 even when the tensor is empty.
  uint64_t elements = 1;
  bool empty = false;
  for (const int64_t dim : info.shape) {
    if (dim == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements) || elements > kMaxElements) {
      fail(path, "tensor {}: shape {} has more than 2^63-1 elements", tensor, format_shape(info.shape));
    }
  }
  if (empty) elements = 0;
  const char* dtype_name = safetensors_dtype_name(info.dtype);
  uint64_t expected = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(c10::elementSize(info.dtype)), &expected)) {
    fail(path, "tensor {}: dtype/shape do not match the bytes: {} {} needs more than 2^64 bytes, data_offsets span {}",
         tensor, dtype_name, format_shape(info.shape), info.nbytes());
  }
  if (expected != info.nbytes()) {
    fail(path, "tensor {}: dtype/shape do not match the bytes: {} {} needs {} bytes, data_offsets [{}, {}] span {}",
         tensor, dtype_name, format_shape(info.shape), expected, info.data_begin, info.data_end, info.nbytes());
  }
  return info;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const Json& value) {
  std::map<std::string, std::string> metadata;
  // The reference reader treats a null "__metadata__" as absent.
  if (value.is_null()) return metadata;
  if (!value.is_object()) fail(path, "\"__metadata__\" is not a JSON object");
  for (const auto& item : value.items()) {
    if (!item.value().is_string()) {
      fail(path, "\"__metadata__\" value for key {} is a {}, not a string", quote_untrusted(item.key()),
           item.value().type_name());
    }
    metadata.emplace(item.key(), item.value().get<std::string>());
  }
  return metadata;
}

// Tensors must tile the data section: sorted by offsets, each begins where the previous ended and
// the last ends at the end of the file. This is what the reference reader enforces; it also means
// no two tensors alias the same bytes.
void check_layout(const std::string& path, const std::vector<TensorInfo>& tensors, uint64_t data_size) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const TensorInfo& info : tensors) by_offset.push_back(&info);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::tie(a->data_begin, a->data_end) < std::tie(b->data_begin, b->data_end);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* info : by_offset) {
    if (info->data_begin < covered) {
      fail(path, "tensors {} [{}, {}) and {} [{}, {}) overlap", quote_untrusted(previous->name), previous->data_begin,
           previous->data_end, quote_untrusted(info->name), info->data_begin, info->data_end);
    }
    if (info->data_begin > covered) {
      fail(path, "data section bytes [{}, {}) are not covered by any tensor", covered, info->data_begin);
    }
    covered = info->data_end;
    previous = info;
  }
  if (covered != data_size) {
    fail(path, "data section bytes [{}, {}) are not covered by any tensor", covered, data_size);
  }
}

}  // namespace

std::optional<c10::ScalarType> scalar_type_from_safetensors(std::string_view dtype) {
  for (const DtypeName& entry : kDtypes) {
    if (dtype == entry.name) return entry.type;
  }
  return std::nullopt;
}

const char* safetensors_dtype_name(c10::ScalarType type) {
  for (const DtypeName& entry : kDtypes) {
    if (type == entry.type) return entry.name;
  }
  return nullptr;
}

SafetensorsFile::SafetensorsFile(std::string path, std::shared_ptr<const io::MappedFile> mapping)
    : path_(std::move(path)), mapping_(std::move(mapping)) {}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(path, io::MappedFile::open(path)));
  file->parse();
  return file;
}

void SafetensorsFile::parse() {
  const uint8_t* bytes = mapping_->data();
  const uint64_t size = mapping_->size();
  if (size < kLengthBytes) {
    fail(path_, "file is {} bytes, too short for the 8-byte header length", size);
  }
  uint64_t header_size = 0;
  for (size_t i = 0; i < kLengthBytes; ++i) header_size |= uint64_t{bytes[i]} << (8 * i);
  if (header_size > kMaxHeaderBytes) {
    fail(path_, "header length {} exceeds the {}-byte (100 MiB) limit", header_size, kMaxHeaderBytes);
  }
  if (header_size > size - kLengthBytes) {
    fail(path_, "truncated header: header length is {} but only {} bytes follow it", header_size, size - kLengthBytes);
  }
  data_ = bytes + kLengthBytes + header_size;
  data_size_ = size - kLengthBytes - header_size;

  const Json header = parse_strict_json(
      std::string_view(reinterpret_cast<const char*>(bytes + kLengthBytes), header_size), path_, "header");
  if (!header.is_object()) fail(path_, "header is a JSON {}, not an object", header.type_name());
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey) {
      metadata_ = parse_metadata(path_, item.value());
    } else {
      tensors_.push_back(parse_entry(path_, item.key(), item.value(), data_size_));
    }
  }
  check_layout(path_, tensors_, data_size_);
  index_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) fail(path_, "no tensor named {}", quote_untrusted(name));
  const auto options = at::TensorOptions().dtype(info->dtype).device(at::kCPU);
  // An empty tensor may sit at the very end of the mapping; it needs no bytes, so do not point at any.
  if (info->nbytes() == 0) return at::empty(info->shape, options);  // [info.shape]
  const uint8_t* bytes = data_ + info->data_begin;
  if (reinterpret_cast<uintptr_t>(bytes) % c10::elementSize(info->dtype) != 0) {
    // Kernels assume aligned elements; other writers may pack a 2-byte tensor before a 4-byte one.
    at::Tensor copy = at::empty(info->shape, options);  // [info.shape]
    std::memcpy(copy.data_ptr(), bytes, info->nbytes());
    return copy;
  }
  // The deleter owns a reference to the mapping, so the view keeps the file mapped; const_cast is
  // sound because nobody may write through the tensor, and PROT_READ turns a write into a fault
  // instead of silently changing the weights every other view shares.
  return at::from_blob(
      const_cast<uint8_t*>(bytes), info->shape,  // [info.shape]
      [keep_mapped = mapping_](void*) {}, options);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Build and check the whole header before creating any file, so bad input leaves no trace.
  Json header = Json::object();
  if (!metadata.empty()) {
    Json entries = Json::object();
    for (const auto& [key, value] : metadata) entries[key] = value;
    // First, as the reference writer puts it.
    header[kMetadataKey] = std::move(entries);
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) fail(path, "tensor name {} is reserved for metadata", quote_untrusted(name));
    if (!seen.insert(name).second) fail(path, "tensor {} is given twice", quote_untrusted(name));
    if (!tensor.defined()) fail(path, "tensor {} is undefined", quote_untrusted(name));
    if (tensor.layout() != at::kStrided) fail(path, "tensor {} is not a dense tensor", quote_untrusted(name));
    const char* dtype = safetensors_dtype_name(tensor.scalar_type());
    if (dtype == nullptr) {
      fail(path, "tensor {}: dtype {} cannot be stored in safetensors here", quote_untrusted(name),
           c10::toString(tensor.scalar_type()));
    }
    const uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    Json entry = Json::object();
    entry["dtype"] = dtype;
    entry["shape"] = tensor.sizes().vec();
    entry["data_offsets"] = Json::array({offset, offset + nbytes});
    header[name] = std::move(entry);
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error&) {
    fail(path, "a tensor name or metadata string is not valid UTF-8");
  }
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  uint8_t length[kLengthBytes];
  for (size_t i = 0; i < kLengthBytes; ++i) length[i] = static_cast<uint8_t>(text.size() >> (8 * i));

  io::AtomicFile out(path);
  out.write(length, sizeof(length));
  out.write(text.data(), text.size());
  for (const auto& [name, tensor] : tensors) {
    // One tensor at a time, so at most one extra copy is alive for non-contiguous or GPU input.
    const at::Tensor bytes = tensor.to(at::kCPU).contiguous();  // [tensor.sizes()]
    out.write(bytes.data_ptr(), static_cast<size_t>(bytes.numel()) * bytes.element_size());
  }
  out.commit();
}

}  // namespace gpueval
