#include "tokenizer/normalizer.h"

#include <vector>

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "gpueval/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/split_pattern.h"

namespace gpueval {

namespace {

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    // Hugging Face leaves an empty piece empty, so "" never becomes "▁".
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(SplitPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  SplitPattern pattern_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    while (left_ && begin < end) {
      size_t length = 0;
      if (!is_unicode_whitespace(utf8_decode(text, begin, &length))) break;
      begin += length;
    }
    while (right_ && end > begin) {
      const size_t start = utf8_previous(text, end);
      size_t length = 0;
      if (!is_unicode_whitespace(utf8_decode(text, start, &length))) break;
      end = start;
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = byte_level_encode(text); }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(spec.at("prepend").get<std::string>());
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(SplitPattern::from_json(spec.at("pattern"), where),
                                               spec.at("content").get<std::string>());
  }
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(spec.value("strip_left", true), spec.value("strip_right", true));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : spec.at("normalizers")) {
      if (auto normalizer = make_normalizer(step, where)) steps.push_back(std::move(normalizer));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  fail(where, "unsupported normalizer '{}'", type);
}

}  // namespace gpueval
