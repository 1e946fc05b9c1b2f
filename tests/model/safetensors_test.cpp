#include "model/loading/safetensors.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gpueval/error.h"
#include "model/loading/checkpoint.h"
#include "test_util.h"

namespace gpueval {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string u64_le(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

// The raw little-endian bytes of `values`, as the data section stores them.
template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

// A file exactly as the format spells it: u64 header length, header bytes as given, data section.
std::string build_file(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

std::string tensor_bytes(const at::Tensor& tensor) {
  const at::Tensor dense = tensor.contiguous();
  return std::string(static_cast<const char*>(dense.data_ptr()), dense.numel() * dense.element_size());
}

using testing::error_of;

// A good error is one line naming the file and the problem.
void expect_error(const std::string& message, const std::string& file, const std::string& problem) {
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find(problem), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// Whether /proc/self/maps shows a mapping of `path` that contains `address` (any mapping of
// `path` when address is null).
bool mapped_from(const std::string& path, const void* address = nullptr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto target = reinterpret_cast<uintptr_t>(address);
  while (std::getline(maps, line)) {
    if (line.size() < path.size() || line.compare(line.size() - path.size(), path.size(), path) != 0) {
      continue;
    }
    const uintptr_t begin = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const uintptr_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    if (address == nullptr || (begin <= target && target < end)) return true;
  }
  return false;
}

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

NamedTensors sample_tensors() {
  at::manual_seed(7);
  at::Tensor f32 = at::tensor({0.5f, -1.25f, 3.0e38f, -0.0f, 1.0e-45f, 42.0f}).reshape({2, 3});  // [2, 3]
  at::Tensor f16 = at::randn({2, 3, 5}).to(at::kHalf);  // [2, 3, 5]
  at::Tensor bf16 = at::randn({7}).to(at::kBFloat16);  // [7]
  at::Tensor i64 = at::tensor(
      {std::numeric_limits<int64_t>::min(), int64_t{-1}, int64_t{0}, std::numeric_limits<int64_t>::max()});  // [4]
  return {{"model.embed.weight", f32},
          {"layers.0.attn.q.weight", f16},
          {"layers.0.norm.weight", bf16},
          {"position_ids", i64},
          {"f64", at::randn({3}, at::kDouble)},  // [3]
          {"i32", at::tensor({-7, 7}, at::kInt)},  // [2]
          {"i16", at::tensor({-300, 300}, at::kShort)},  // [2]
          {"i8", at::tensor({-128, 127}, at::kChar)},  // [2]
          {"u8", at::tensor({0, 255}, at::kByte)},  // [2]
          {"mask", at::tensor({1, 0, 1}, at::kByte).to(at::kBool)},  // [3]
          {"scalar", at::scalar_tensor(2.5, at::kFloat)},  // []
          {"empty", at::empty({0, 4}, at::kFloat)}};  // [0, 4]
}

void expect_same_tensor(const at::Tensor& actual, const at::Tensor& expected, const std::string& name) {
  EXPECT_EQ(actual.scalar_type(), expected.scalar_type()) << name;
  EXPECT_EQ(actual.sizes(), expected.sizes()) << name;
  EXPECT_EQ(tensor_bytes(actual), tensor_bytes(expected)) << name;  // bit-exact, -0.0 and denormals too
}

TEST(SafetensorsRoundTrip, ValuesDtypesShapesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors tensors = sample_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode \"quoted\""}};
  write_safetensors(path, tensors, metadata);

  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, expected] = tensors[i];
    const TensorInfo& info = file->tensors()[i];
    EXPECT_EQ(info.name, name) << "tensors() must keep the written order";
    EXPECT_EQ(info.dtype, expected.scalar_type()) << name;
    EXPECT_EQ(info.shape, expected.sizes().vec()) << name;
    EXPECT_EQ(info.nbytes(), static_cast<uint64_t>(expected.numel() * expected.element_size())) << name;
    EXPECT_EQ(file->find(name), &info);
    expect_same_tensor(file->tensor(name), expected, name);
  }
  EXPECT_EQ(file->find("absent"), nullptr);
}

TEST(SafetensorsRoundTrip, ViewsAreZeroCopyIntoTheMapping) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  // Widest dtypes first, as Python's writer orders them, so every tensor lands aligned.
  NamedTensors tensors = sample_tensors();
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const auto& a, const auto& b) { return a.second.element_size() > b.second.element_size(); });
  write_safetensors(path, tensors);
  const std::string bytes = read_bytes(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);

  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->data_size(), bytes.size() - 8 - header_size);
  for (const TensorInfo& info : file->tensors()) {
    if (info.nbytes() == 0) continue;
    const at::Tensor view = file->tensor(info.name);
    EXPECT_EQ(view.data_ptr(), file->data() + info.data_begin) << info.name;
    EXPECT_TRUE(mapped_from(path, view.data_ptr())) << info.name << " is not inside the mapping";
    EXPECT_NE(view.clone().data_ptr(), view.data_ptr());
    // The view's bytes are the file's bytes at 8 + N + data_begin.
    EXPECT_EQ(tensor_bytes(view), bytes.substr(8 + header_size + info.data_begin, info.nbytes())) << info.name;
    // A second call maps the same bytes instead of copying again.
    EXPECT_EQ(file->tensor(info.name).data_ptr(), view.data_ptr());
  }
}

TEST(SafetensorsRoundTrip, TensorKeepsMappingAliveAfterFileIsDropped) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const at::Tensor expected = at::arange(1000, at::kFloat).reshape({10, 100});  // [10, 100]
  write_safetensors(path, {{"w", expected}});

  auto file = SafetensorsFile::open(path);
  at::Tensor view = file->tensor("w");  // [10, 100]
  std::weak_ptr<SafetensorsFile> weak = file;
  file.reset();
  EXPECT_TRUE(weak.expired());
  EXPECT_TRUE(mapped_from(path, view.data_ptr()));
  EXPECT_TRUE(at::equal(view, expected));
  view = at::Tensor();
  EXPECT_FALSE(mapped_from(path)) << "the last tensor should have unmapped the file";
}

TEST(SafetensorsRoundTrip, MisalignedTensorIsCopied) {
  TempDir dir;
  const std::string path = dir.file("packed.safetensors");
  // A 2-byte U8 tensor first puts the F32 tensor at data offset 2; the header is padded as usual,
  // so the data section itself is 8-aligned and only the offset misaligns it.
  std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  write_bytes(path, build_file(header, raw<uint8_t>({9, 8}) + raw<float>({1.5f, -2.0f})));

  const auto file = SafetensorsFile::open(path);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(file->data()) % 8, 0u);
  const at::Tensor b = file->tensor("b");  // [2]
  EXPECT_NE(b.data_ptr(), file->data() + 2);
  EXPECT_FALSE(mapped_from(path, b.data_ptr()));
  EXPECT_TRUE(at::equal(b, at::tensor({1.5f, -2.0f})));
  EXPECT_EQ(file->tensor("a").data_ptr(), file->data()) << "a U8 tensor is always aligned";
}

TEST(SafetensorsRoundTrip, NonContiguousInputIsWrittenContiguous) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6});  // [4, 6]
  const NamedTensors tensors = {{"transposed", base.t()},  // [6, 4]
                                {"strided", base.slice(1, 1, 6, 2)},  // [4, 3]
                                {"offset", base[2]},  // [6]
                                {"expanded", at::tensor({1.0f, 2.0f}).expand({3, 2})}};  // [3, 2]
  ASSERT_FALSE(tensors[0].second.is_contiguous());
  write_safetensors(path, tensors);
  const auto file = SafetensorsFile::open(path);
  for (const auto& [name, expected] : tensors) {
    const at::Tensor actual = file->tensor(name);
    EXPECT_TRUE(actual.is_contiguous()) << name;
    EXPECT_TRUE(at::equal(actual, expected)) << name;
  }
  EXPECT_EQ(file->data_size(), (24 + 12 + 6 + 6) * sizeof(float));
}

TEST(SafetensorsRoundTrip, ConcurrentReadersSeeTheSameTensors) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors tensors = sample_tensors();
  write_safetensors(path, tensors);
  const auto file = SafetensorsFile::open(path);
  std::vector<int> mismatches(8, 0);
  std::vector<std::thread> readers;
  for (size_t r = 0; r < mismatches.size(); ++r) {
    readers.emplace_back([&, r] {
      for (int round = 0; round < 50; ++round) {
        for (const auto& [name, expected] : tensors) {
          if (tensor_bytes(file->tensor(name)) != tensor_bytes(expected)) ++mismatches[r];
        }
      }
    });
  }
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(mismatches, std::vector<int>(8, 0));
}

TEST(SafetensorsFormat, ReadsFileHandBuiltFromTheSpec) {
  TempDir dir;
  const std::string path = dir.file("spec.safetensors");
  // Legal but unlike our writer: whitespace, keys out of order, "__metadata__" between tensors,
  // header order unlike offset order, and an unpadded 231-byte header that puts the data section
  // at an odd address, so every tensor here takes the copying path.
  const std::string header =
      "{\n  \"b\": {\"data_offsets\": [8, 12], \"shape\": [], \"dtype\": \"I32\"},\n"
      "  \"__metadata__\": {\"format\": \"pt\"},\n"
      "  \"a\": {\"shape\": [2, 1], \"dtype\": \"BF16\", \"data_offsets\": [0, 4]},\n"
      "  \"c\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [4, 8]}\n}";
  ASSERT_EQ(header.size(), 231u);
  // BF16 1.0 = 0x3F80, -2.0 = 0xC000; F16 0.5 = 0x3800, 65504 = 0x7BFF.
  const std::string data = raw<uint16_t>({0x3F80, 0xC000}) + raw<uint16_t>({0x3800, 0x7BFF}) + raw<int32_t>({-123456});
  write_bytes(path, build_file(header, data));

  const auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file->tensors().size(), 3u);
  EXPECT_EQ(file->tensors()[0].name, "b");
  EXPECT_EQ(file->tensors()[1].name, "a");
  EXPECT_EQ(file->tensors()[2].name, "c");
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));

  const TensorInfo* a = file->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, at::kBFloat16);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(a->data_begin, 0u);
  EXPECT_EQ(a->data_end, 4u);
  EXPECT_TRUE(at::equal(file->tensor("a"), at::tensor({1.0f, -2.0f}).to(at::kBFloat16).reshape({2, 1})));
  EXPECT_TRUE(at::equal(file->tensor("c"), at::tensor({0.5f, 65504.0f}).to(at::kHalf)));
  const at::Tensor b = file->tensor("b");  // []
  EXPECT_EQ(b.dim(), 0);
  EXPECT_EQ(b.item<int32_t>(), -123456);
}

TEST(SafetensorsFormat, WriterBytesMatchTheSpecExactly) {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  write_safetensors(path, {{"attn.0", at::arange(6, at::kFloat).reshape({1, 2, 3})}});
  // Compact JSON with keys in the order dtype, shape, data_offsets, as Python's safetensors writes
  // it; 64 bytes, so no padding.
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  EXPECT_EQ(read_bytes(path), build_file(header, raw<float>({0, 1, 2, 3, 4, 5})));
}

TEST(SafetensorsFormat, WriterPadsHeaderAndPutsMetadataFirst) {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  write_safetensors(path, {{"w", at::tensor({int64_t{1}, int64_t{-2}})}}, {{"format", "pt"}});
  std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  ASSERT_EQ(header.size(), 86u);
  header += "  ";  // to 88 bytes, so that the data section starts 8-aligned
  EXPECT_EQ(read_bytes(path), build_file(header, raw<int64_t>({1, -2})));
}

TEST(SafetensorsFormat, EmptyFileHasOnlyAPaddedEmptyObject) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {});
  EXPECT_EQ(read_bytes(path), build_file("{}      ", ""));
  const auto file = SafetensorsFile::open(path);
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_TRUE(file->metadata().empty());
}

class SafetensorsBadInput : public ::testing::Test {
 protected:
  // Writes `bytes` as a .safetensors file and returns the message open() fails with.
  std::string open_error(const std::string& bytes) {
    write_bytes(path_, bytes);
    return error_of([&] { SafetensorsFile::open(path_); });
  }
  // The same for a header that is padded like a writer would and followed by `data`.
  std::string open_error(std::string header, const std::string& data) {
    header.append((8 - header.size() % 8) % 8, ' ');
    return open_error(build_file(header, data));
  }

  TempDir dir_;
  std::string path_ = dir_.file("bad.safetensors");
};

TEST_F(SafetensorsBadInput, FileShorterThanTheLengthField) {
  expect_error(open_error(std::string("\x08\x00\x00", 3)), path_, "too short for the 8-byte header length");
  expect_error(open_error(std::string()), path_, "file is 0 bytes");
}

TEST_F(SafetensorsBadInput, TruncatedHeader) {
  expect_error(open_error(u64_le(100) + R"({"a":{"dtype":"F32")"), path_,
               "truncated header: header length is 100 but only 19 bytes follow");
}

TEST_F(SafetensorsBadInput, OversizedHeaderLength) {
  expect_error(open_error(u64_le((uint64_t{100} << 20) + 1) + "{}"), path_, "exceeds the 104857600-byte");
  // The largest u64 must not wrap around when added to the 8-byte prefix.
  expect_error(open_error(u64_le(~uint64_t{0}) + "{}"), path_, "exceeds the 104857600-byte");
}

TEST_F(SafetensorsBadInput, InvalidJson) {
  expect_error(open_error(R"({"a": {"dtype": "F32",)", ""), path_, "header is not valid JSON");
  expect_error(open_error("", ""), path_, "header is not valid JSON");
}

TEST_F(SafetensorsBadInput, HeaderNotAnObject) {
  expect_error(open_error("[1, 2]", ""), path_, "header is a JSON array, not an object");
}

TEST_F(SafetensorsBadInput, DuplicateTensorName) {
  expect_error(open_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                          R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                          "xy"),
               path_, "header has duplicate key 'a'");
}

TEST_F(SafetensorsBadInput, EntryNotAnObjectOrMissingFields) {
  expect_error(open_error(R"({"a": 5})", ""), path_, "tensor 'a': entry is not a JSON object");
  expect_error(open_error(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "x"), path_, "tensor 'a': missing \"dtype\"");
  expect_error(open_error(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "x"), path_, "tensor 'a': missing \"shape\"");
  expect_error(open_error(R"({"a":{"dtype":"U8","shape":[1]}})", "x"), path_, "tensor 'a': missing \"data_offsets\"");
  expect_error(open_error(R"({"a":{"dtype":8,"shape":[1],"data_offsets":[0,1]}})", "x"), path_,
               "tensor 'a': \"dtype\" is not a string");
  expect_error(open_error(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "x"), path_,
               "tensor 'a': \"shape\" holds a number, not an integer");
  expect_error(open_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"), path_,
               "tensor 'a': \"data_offsets\" is not a pair of non-negative integers");
  expect_error(open_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"), path_,
               "tensor 'a': \"data_offsets\" is not a pair of non-negative integers");
}

TEST_F(SafetensorsBadInput, UnknownDtype) {
  expect_error(open_error(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", "abcd"), path_,
               "tensor 'w': unknown dtype 'F7'");
  // Valid in the spec, but not loadable here: a different message from a typo.
  expect_error(open_error(R"({"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})", "abcd"), path_,
               "tensor 'w': dtype 'U16' has no LibTorch 1.13 equivalent");
}

TEST_F(SafetensorsBadInput, NegativeDimension) {
  expect_error(open_error(R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", raw<float>({1, 2})), path_,
               "tensor 'w': negative dimension -1 in shape");
}

TEST_F(SafetensorsBadInput, ShapeAndDtypeDoNotMatchTheBytes) {
  expect_error(
      open_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", raw<float>({1, 2, 3, 4, 5})), path_,
      "tensor 'w': dtype/shape do not match the bytes: F32 [2, 3] needs 24 bytes, data_offsets [0, 20] span 20");
}

TEST_F(SafetensorsBadInput, HugeShapeDoesNotWrapAround) {
  // 2^31 * 2^31 elements of 4 bytes is exactly 2^64 bytes: a wrapping multiply would get 0 and
  // accept these empty offsets.
  expect_error(open_error(R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", ""), path_,
               "dtype/shape do not match the bytes: F32 [2147483648, 2147483648] needs more than 2^64 bytes");
  expect_error(open_error(R"({"w":{"dtype":"U8","shape":[4611686018427387904,16],"data_offsets":[0,0]}})", ""), path_,
               "tensor 'w': shape [4611686018427387904, 16] has more than 2^63-1 elements");
  expect_error(open_error(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""), path_,
               "tensor 'w': dimension 18446744073709551615 does not fit in int64");
}

TEST_F(SafetensorsBadInput, OffsetsOutOfRange) {
  expect_error(open_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", raw<float>({1})), path_,
               "tensor 'w': offsets out of range: data_offsets [0, 8] end past the 4-byte data section");
  expect_error(open_error(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", raw<float>({1, 2})), path_,
               "tensor 'w': data_offsets [8, 0] begin after they end");
}

TEST_F(SafetensorsBadInput, OverlappingOffsets) {
  expect_error(open_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                          raw<float>({1, 2, 3, 4, 5, 6})),
               path_, "tensors 'a' [0, 16) and 'b' [8, 24) overlap");
}

TEST_F(SafetensorsBadInput, BytesNotCoveredByAnyTensor) {
  // A gap between tensors, and a tail after the last one: both are errors in the reference reader.
  expect_error(open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                          raw<float>({1, 2, 3, 4, 5})),
               path_, "data section bytes [8, 12) are not covered by any tensor");
  expect_error(open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", raw<float>({1, 2, 3})), path_,
               "data section bytes [8, 12) are not covered by any tensor");
}

TEST_F(SafetensorsBadInput, MetadataWithNonStringValue) {
  expect_error(open_error(R"({"__metadata__":{"format":"pt","epoch":3}})", ""), path_,
               "\"__metadata__\" value for key 'epoch' is a number, not a string");
  expect_error(open_error(R"({"__metadata__":["pt"]})", ""), path_, "\"__metadata__\" is not a JSON object");
}

TEST_F(SafetensorsBadInput, HostileNamesStayOnOneLine) {
  const std::string message =
      open_error("{\"evil\\nname\":{\"dtype\":\"F7\",\"shape\":[],\"data_offsets\":[0,0]}}", "");
  expect_error(message, path_, "tensor 'evil\\x0aname': unknown dtype 'F7'");
}

TEST_F(SafetensorsBadInput, MissingTensorAndMissingFile) {
  write_safetensors(path_, {{"w", at::ones({2})}});
  const auto file = SafetensorsFile::open(path_);
  expect_error(error_of([&] { file->tensor("nope"); }), path_, "no tensor named 'nope'");
  const std::string absent = dir_.file("absent.safetensors");
  expect_error(error_of([&] { SafetensorsFile::open(absent); }), absent, "open failed: No such file or directory");
  expect_error(error_of([&] { SafetensorsFile::open(dir_.path()); }), dir_.path(), "not a regular file");
}

TEST_F(SafetensorsBadInput, EveryTruncationIsRejected) {
  const std::string good = dir_.file("good.safetensors");
  write_safetensors(good, {{"a", at::arange(6, at::kFloat)}, {"b", at::ones({3}, at::kHalf)}}, {{"k", "v"}});
  const std::string bytes = read_bytes(good);
  // Tensors must cover the data section exactly, so no proper prefix of a file is a valid file.
  for (size_t size = 0; size < bytes.size(); ++size) {
    const std::string message = open_error(bytes.substr(0, size));
    EXPECT_NE(message.find(path_), std::string::npos) << "prefix of " << size << " bytes: " << message;
  }
}

TEST_F(SafetensorsBadInput, CorruptedHeaderBytesFailCleanly) {
  const std::string good = dir_.file("good.safetensors");
  write_safetensors(good, {{"a", at::arange(6, at::kFloat)}, {"b", at::ones({3}, at::kHalf)}});
  const std::string bytes = read_bytes(good);
  // Every single-byte change in the length and header either still parses or throws Error; none
  // may crash or throw anything else.
  const size_t header_end = 8 + (static_cast<uint8_t>(bytes[0]) | static_cast<uint8_t>(bytes[1]) << 8);
  int rejected = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (const uint8_t value : {uint8_t{0x00}, uint8_t{0x7f}, uint8_t{0xff}, uint8_t{'9'}, uint8_t{'"'}}) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(value);
      write_bytes(path_, corrupt);
      try {
        const auto file = SafetensorsFile::open(path_);
        for (const TensorInfo& info : file->tensors()) file->tensor(info.name).sum();
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

// A two-shard checkpoint as transformers saves one, plus helpers to break it.
class SafetensorsCheckpoint : public ::testing::Test {
 protected:
  static constexpr char kShard1[] = "model-00001-of-00002.safetensors";
  static constexpr char kShard2[] = "model-00002-of-00002.safetensors";

  void SetUp() override {
    write_safetensors(dir_.file(kShard1), {{"model.embed.weight", embed_}, {"model.norm.weight", norm_}});
    write_safetensors(dir_.file(kShard2), {{"lm_head.weight", head_}});
    write_index({{"model.embed.weight", kShard1}, {"model.norm.weight", kShard1}, {"lm_head.weight", kShard2}});
  }

  void write_index(const std::vector<std::pair<std::string, std::string>>& weight_map) {
    std::string json = R"({"metadata": {"total_size": 76}, "weight_map": {)";
    for (size_t i = 0; i < weight_map.size(); ++i) {
      json += (i ? ", " : "") + ("\"" + weight_map[i].first + "\": \"" + weight_map[i].second + "\"");
    }
    write_bytes(index_path(), json + "}}");
  }
  std::string index_path() const { return dir_.file("model.safetensors.index.json"); }
  std::string open_error() const {
    return error_of([&] { CheckpointFiles::open(dir_.path()); });
  }

  TempDir dir_;
  at::Tensor embed_ = at::arange(12, at::kFloat).reshape({4, 3});  // [vocab 4, hidden 3]
  at::Tensor norm_ = at::tensor({1.0f, 0.5f, 2.0f}).to(at::kBFloat16);  // [hidden 3]
  at::Tensor head_ = at::randn({4, 3}).to(at::kHalf);  // [vocab 4, hidden 3]
};

TEST_F(SafetensorsCheckpoint, ShardedTensorsAreAllReadable) {
  const CheckpointFiles checkpoint = CheckpointFiles::open(dir_.path());
  EXPECT_EQ(checkpoint.names(),
            (std::vector<std::string>{"lm_head.weight", "model.embed.weight", "model.norm.weight"}));
  EXPECT_TRUE(checkpoint.contains("model.norm.weight"));
  EXPECT_FALSE(checkpoint.contains("model.layers.0.weight"));
  EXPECT_EQ(checkpoint.file_of("model.embed.weight"), dir_.file(kShard1));
  EXPECT_EQ(checkpoint.file_of("model.norm.weight"), dir_.file(kShard1));
  EXPECT_EQ(checkpoint.file_of("lm_head.weight"), dir_.file(kShard2));
  EXPECT_EQ(checkpoint.info("lm_head.weight").dtype, at::kHalf);
  EXPECT_EQ(checkpoint.info("lm_head.weight").shape, (std::vector<int64_t>{4, 3}));
  expect_same_tensor(checkpoint.tensor("model.embed.weight"), embed_, "embed");
  expect_same_tensor(checkpoint.tensor("model.norm.weight"), norm_, "norm");
  expect_same_tensor(checkpoint.tensor("lm_head.weight"), head_, "head");
  EXPECT_TRUE(mapped_from(dir_.file(kShard2), checkpoint.tensor("lm_head.weight").data_ptr()));
  expect_error(error_of([&] { checkpoint.tensor("missing.weight"); }), dir_.path(),
               "checkpoint has no tensor named 'missing.weight'");
  expect_error(error_of([&] { checkpoint.file_of("missing.weight"); }), dir_.path(), "'missing.weight'");
}

TEST_F(SafetensorsCheckpoint, SingleFileWinsOverIndex) {
  write_safetensors(dir_.file("model.safetensors"), {{"only", norm_}});
  const CheckpointFiles checkpoint = CheckpointFiles::open(dir_.path() + "/");
  EXPECT_EQ(checkpoint.names(), std::vector<std::string>{"only"});
  EXPECT_EQ(checkpoint.file_of("only"), dir_.file("model.safetensors"));
  expect_same_tensor(checkpoint.tensor("only"), norm_, "only");
}

TEST_F(SafetensorsCheckpoint, MissingShard) {
  fs::remove(dir_.file(kShard2));
  expect_error(open_error(), index_path(),
               "shard 'model-00002-of-00002.safetensors' (listed for tensor 'lm_head.weight') does not exist");
}

TEST_F(SafetensorsCheckpoint, IndexNamesTensorAbsentFromShard) {
  write_index({{"model.embed.weight", kShard1}, {"model.norm.weight", kShard1}, {"lm_head.weight", kShard1}});
  expect_error(
      open_error(), index_path(),
      "tensor 'lm_head.weight' is mapped to shard 'model-00001-of-00002.safetensors', which does not contain it");
}

TEST_F(SafetensorsCheckpoint, TensorInTwoShards) {
  write_safetensors(dir_.file(kShard2), {{"lm_head.weight", head_}, {"model.norm.weight", norm_}});
  expect_error(open_error(), index_path(), "tensor 'model.norm.weight' appears in two shards");
}

TEST_F(SafetensorsCheckpoint, ShardTensorMissingFromIndex) {
  write_index({{"model.embed.weight", kShard1}, {"lm_head.weight", kShard2}});
  expect_error(open_error(), index_path(), "holds tensor 'model.norm.weight', which the index does not list");
}

TEST_F(SafetensorsCheckpoint, ShardOutsideTheDirectory) {
  write_index({{"lm_head.weight", "../model-00002-of-00002.safetensors"}});
  expect_error(open_error(), index_path(), "shard name '../model-00002-of-00002.safetensors' is not a file inside");
}

TEST_F(SafetensorsCheckpoint, MalformedIndex) {
  write_bytes(index_path(), R"({"weight_map": {"a": 1}})");
  expect_error(open_error(), index_path(), "\"weight_map\" value for tensor 'a' is a number, not a string");
  write_bytes(index_path(), R"({"metadata": {}})");
  expect_error(open_error(), index_path(), "index has no \"weight_map\"");
  write_bytes(index_path(), R"({"weight_map": )");
  expect_error(open_error(), index_path(), "index is not valid JSON");
}

TEST(SafetensorsCheckpointDir, MissingModelFile) {
  TempDir dir;
  write_bytes(dir.file("config.json"), "{}");
  expect_error(error_of([&] { CheckpointFiles::open(dir.path()); }), dir.path(),
               "checkpoint directory has neither model.safetensors nor model.safetensors.index.json");
  const std::string absent = dir.file("absent");
  expect_error(error_of([&] { CheckpointFiles::open(absent); }), absent, "stat failed: No such file or directory");
  expect_error(error_of([&] { CheckpointFiles::open(dir.file("config.json")); }), dir.file("config.json"),
               "checkpoint is not a directory");
}

TEST(SafetensorsWrite, BadInputLeavesExistingFileUntouched) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, "old contents");
  const at::Tensor t = at::ones({2});  // [2]
  expect_error(error_of([&] { write_safetensors(path, {{"a", t}, {"a", t}}); }), path, "tensor 'a' is given twice");
  expect_error(error_of([&] { write_safetensors(path, {{"__metadata__", t}}); }), path, "reserved for metadata");
  expect_error(error_of([&] {
                 write_safetensors(path, {{"c", at::ones({2}, at::kComplexFloat)}});
               }),
               path, "tensor 'c': dtype ComplexFloat cannot be stored");
  expect_error(error_of([&] { write_safetensors(path, {{"u", at::Tensor()}}); }), path, "tensor 'u' is undefined");
  expect_error(error_of([&] { write_safetensors(path, {{std::string("bad\xff", 4), t}}); }), path, "not valid UTF-8");
  EXPECT_EQ(read_bytes(path), "old contents");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsWrite, MissingDirectoryCreatesNothing) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/model.safetensors");
  const std::string message = error_of([&] { write_safetensors(path, {{"a", at::ones({2})}}); });
  expect_error(message, path, "open of temporary file");
  expect_error(message, path, "failed: No such file or directory");
  EXPECT_TRUE(dir.listing().empty());
}

TEST(SafetensorsWrite, FailedRenameRemovesTheTempFile) {
  TempDir dir;
  // A directory at the target path makes the final rename fail after every byte was written.
  const std::string path = dir.file("model.safetensors");
  fs::create_directory(path);
  expect_error(error_of([&] { write_safetensors(path, {{"a", at::ones({1000})}}); }), path, "rename of temporary file");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_TRUE(fs::is_directory(path));
}

// Lowers RLIMIT_FSIZE for the test process so that a write fails with EFBIG part-way through a
// file; SIGXFSZ is ignored meanwhile, else it would kill the test binary.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, saved_handler_);
  }

 private:
  rlimit saved_{};
  void (*saved_handler_)(int);
};

TEST(SafetensorsWrite, WriteFailingMidFileKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, {{"old", at::ones({3})}});
  const std::string before = read_bytes(path);
  std::string message;
  {
    FileSizeLimit limit(4096);
    // 64 KiB of data cannot fit under a 4 KiB limit, so a write fails after a partial one.
    message = error_of([&] { write_safetensors(path, {{"new", at::ones({16384})}}); });
  }
  expect_error(message, path, "write to temporary file");
  expect_error(message, path, "failed: File too large");
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_TRUE(at::equal(SafetensorsFile::open(path)->tensor("old"), at::ones({3})));
}

TEST(SafetensorsWrite, UnwritableDirectory) {
  TempDir dir;
  const std::string sub = dir.file("ro");
  fs::create_directory(sub);
  fs::permissions(sub, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(sub.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  const std::string path = sub + "/model.safetensors";
  expect_error(error_of([&] { write_safetensors(path, {{"a", at::ones({2})}}); }), path, "failed: Permission denied");
  fs::permissions(sub, fs::perms::owner_all);
  EXPECT_TRUE(fs::is_empty(sub));
}

TEST(SafetensorsWrite, OverwriteReplacesTheWholeFile) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, {{"big", at::zeros({4096})}});
  write_safetensors(path, {{"small", at::ones({2})}});
  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->tensors().size(), 1u);
  EXPECT_TRUE(at::equal(file->tensor("small"), at::ones({2})));
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});
}

}  // namespace
}  // namespace gpueval
