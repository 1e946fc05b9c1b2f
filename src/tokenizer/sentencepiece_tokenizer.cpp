#include "tokenizer/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include "gpueval/error.h"
#include "tokenizer/sentencepiece_module.h"
#include "tokenizer/tokenizer_config.h"

namespace gpueval {

namespace {

constexpr const char* kModuleFile = "libgpueval_sentencepiece.so";

void append_text(void* context, const char* text, size_t size) {
  static_cast<std::string*>(context)->append(text, size);
}

void append_ids(void* context, const int* ids, size_t count) {
  auto* out = static_cast<std::vector<int32_t>*>(context);
  out->insert(out->end(), ids, ids + count);
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// Where the module may be: named by $GPUEVAL_SENTENCEPIECE_MODULE, beside the
// running executable (an installed layout), or where the build put it.
std::vector<std::string> module_candidates() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("GPUEVAL_SENTENCEPIECE_MODULE"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  }
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back((exe.parent_path() / kModuleFile).string());
#ifdef GPUEVAL_SENTENCEPIECE_MODULE
  candidates.emplace_back(GPUEVAL_SENTENCEPIECE_MODULE);
#endif
  return candidates;
}

// Loads the module once per process; a failed attempt is retried next time.
const GpuevalSentencePieceApi& sentencepiece_api(const std::string& where) {
  static std::mutex mutex;
  static const GpuevalSentencePieceApi* api = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (api != nullptr) return *api;
  std::string tried;
  for (const std::string& path : module_candidates()) {
    if (!std::filesystem::exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path + " (missing)";
      continue;
    }
    // RTLD_DEEPBIND keeps the module's bundled protobuf from binding to the
    // system one, RTLD_LOCAL keeps it from leaking into everyone else's lookups.
    // AddressSanitizer refuses RTLD_DEEPBIND, and without it the two protobufs clash, so a
    // sanitizer build (-DGPUEVAL_SANITIZE=ON) says so instead.
#ifdef GPUEVAL_SANITIZE
    throw Error(
        "SentencePiece (tokenizer.model) cannot be loaded in a sanitizer build: its module needs "
        "RTLD_DEEPBIND, which AddressSanitizer refuses");
#endif
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      tried += (tried.empty() ? "" : ", ") + path + " (" + dlerror() + ")";
      continue;
    }
    const auto entry =
        reinterpret_cast<GpuevalSentencePieceApiFunction>(dlsym(handle, GPUEVAL_SENTENCEPIECE_API_SYMBOL));
    if (entry == nullptr || entry()->version != GPUEVAL_SENTENCEPIECE_API_VERSION) {
      tried += (tried.empty() ? "" : ", ") + path + " (wrong or missing entry point)";
      dlclose(handle);
      continue;
    }
    // The handle stays open for the life of the process.
    api = entry();
    return *api;
  }
  fail(where, "cannot load the SentencePiece module: tried {}", tried);
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const nlohmann::json* config)
      : origin_(path), api_(sentencepiece_api(path)) {
    std::string error;
    model_ = api_.load(path.c_str(), append_text, &error);
    if (model_ == nullptr) fail(path, "cannot load SentencePiece model: {}", one_line(error));
    size_ = api_.piece_size(model_);
    add_bos_ = config_flag(config, "add_bos_token").value_or(true);
    add_eos_ = config_flag(config, "add_eos_token").value_or(false);
    bos_id_ = special_id(config, "bos_token", api_.bos_id(model_));
    eos_id_ = special_id(config, "eos_token", api_.eos_id(model_));
  }
  ~SentencePieceTokenizer() override { api_.release(model_); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_ && bos_id_) ids.push_back(*bos_id_);
    std::string error;
    if (api_.encode(model_, text.data(), text.size(), append_ids, &ids, append_text, &error) != 0) {
      fail(origin_, "SentencePiece encode failed: {}", one_line(error));
    }
    if (add_special_tokens && add_eos_ && eos_id_) ids.push_back(*eos_id_);
    return ids;
  }

  // SentencePiece drops control tokens (<s>, </s>) when decoding; to match a
  // tokenizer.json's decode they are written out as their piece unless
  // skip_special_tokens, which drops <unk> as well.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string text;
    std::vector<int> run;
    const auto flush = [&] {
      if (run.empty()) return;
      std::string error;
      if (api_.decode(model_, run.data(), run.size(), append_text, &text, append_text, &error) != 0) {
        fail(origin_, "SentencePiece decode failed: {}", one_line(error));
      }
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= size_) continue;
      const bool control = api_.is_control(model_, id) != 0;
      if (skip_special_tokens && (control || api_.is_unknown(model_, id) != 0)) continue;
      if (control) {
        flush();
        api_.id_to_piece(model_, id, append_text, &text);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return text;
  }

  int32_t vocab_size() const override { return size_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }

  std::string id_to_piece(int32_t id) const override {
    if (id < 0 || id >= size_) fail(origin_, "token id {} is not in the vocabulary (size {})", id, size_);
    std::string piece;
    api_.id_to_piece(model_, id, append_text, &piece);
    return piece;
  }

  std::optional<int32_t> piece_to_id(std::string_view piece) const override {
    // An unknown piece comes back as the unk id, so confirm the round trip.
    const int id = api_.piece_to_id(model_, piece.data(), piece.size());
    if (id < 0 || id >= size_ || id_to_piece(id) != piece) return std::nullopt;
    return id;
  }

  const std::string& origin() const override { return origin_; }

 private:
  std::optional<int32_t> special_id(const nlohmann::json* config, const char* key, int model_id) const {
    if (const auto name = config_token(config, key)) {
      if (const auto id = piece_to_id(*name)) return id;
    }
    if (model_id >= 0 && model_id < size_) return model_id;
    return std::nullopt;
  }

  std::string origin_;
  const GpuevalSentencePieceApi& api_;
  GpuevalSpModel* model_ = nullptr;
  int32_t size_ = 0;
  bool add_bos_ = true;
  bool add_eos_ = false;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path, const nlohmann::json* config) {
  return std::make_unique<SentencePieceTokenizer>(path, config);
}

}  // namespace gpueval
