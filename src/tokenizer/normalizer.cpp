#include "tokenizer/normalizer.h"

#include <vector>

#include <nlohmann/json.hpp>

#include "common/unicode_text.h"
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

class UnicodeFormNormalizer : public Normalizer {
 public:
  explicit UnicodeFormNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode_normalize(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode_lower_each(text); }
};

// Removes nonspacing marks; files put it after NFD/NFKD so accents are marks by then.
std::string without_nonspacing_marks(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const char32_t c = utf8_decode(text, pos, &length);
    if (!is_nonspacing_mark(c)) out.append(text.substr(pos, length));
    pos += length;
  }
  return out;
}

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = without_nonspacing_marks(text); }
};

// The CJK Unified Ideograph blocks BERT puts spaces around.
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
      size_t length = 0;
      const char32_t c = utf8_decode(text, pos, &length);
      const std::string_view bytes = std::string_view(text).substr(pos, length);
      pos += length;
      const bool tab_or_newline = c == '\t' || c == '\n' || c == '\r';
      if (clean_text_) {
        if (c == 0 || c == 0xFFFD || (!tab_or_newline && is_other_category(c))) continue;
        if (tab_or_newline || is_unicode_whitespace(c)) {
          out += ' ';
          continue;
        }
      }
      if (handle_chinese_chars_ && is_chinese_char(c)) {
        out += ' ';
        out.append(bytes);
        out += ' ';
        continue;
      }
      out.append(bytes);
    }
    if (strip_accents_) out = without_nonspacing_marks(unicode_normalize(out, NormalForm::kNfd));
    if (lowercase_) out = unicode_lower_each(out);
    text = std::move(out);
  }

 private:
  bool clean_text_;
  bool handle_chinese_chars_;
  bool strip_accents_;
  bool lowercase_;
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
  if (type == "NFC") return std::make_unique<UnicodeFormNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeFormNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeFormNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeFormNormalizer>(NormalForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "BertNormalizer") {
    const bool lowercase = spec.value("lowercase", true);
    // A null strip_accents follows lowercase, as in Hugging Face.
    const bool strip_accents = spec.contains("strip_accents") && spec.at("strip_accents").is_boolean()
                                   ? spec.at("strip_accents").get<bool>()
                                   : lowercase;
    return std::make_unique<BertNormalizer>(spec.value("clean_text", true), spec.value("handle_chinese_chars", true),
                                            strip_accents, lowercase);
  }
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
