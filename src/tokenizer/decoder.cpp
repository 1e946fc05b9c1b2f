#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "gpueval/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/split_pattern.h"

namespace gpueval {

namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      // A token with any character outside the byte table (an added token
      // such as "<|eot_id|>" spelled in plain text) is taken verbatim.
      std::string mapped;
      bool all_mapped = true;
      for (size_t pos = 0; pos < token.size();) {
        size_t length = 0;
        const int byte = byte_level_byte(utf8_decode(token, pos, &length));
        if (byte < 0) {
          all_mapped = false;
          break;
        }
        mapped += static_cast<char>(byte);
        pos += length;
      }
      bytes += all_mapped ? mapped : token;
    }
    tokens.assign(1, utf8_from_bytes_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(SplitPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  SplitPattern pattern_;
  std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> result;
    std::string pending;  // bytes of consecutive <0xNN> tokens
    const auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_invalid_offset(pending) == pending.size()) {
        result.push_back(pending);
      } else {
        // Hugging Face emits one U+FFFD per byte of an invalid run.
        for (size_t i = 0; i < pending.size(); ++i) result.emplace_back(kReplacementChar);
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') byte = parse_hex_byte(token);
      if (byte >= 0) {
        pending += static_cast<char>(byte);
      } else {
        flush();
        result.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(result);
  }

 private:
  static int parse_hex_byte(const std::string& token) {
    const auto digit = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int high = digit(token[3]), low = digit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Removes up to start leading and stop trailing copies of one character from
// every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0;
      for (size_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      size_t end = token.size();
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const SplitPattern pattern = SplitPattern::literal(replacement_);
    for (size_t i = 0; i < tokens.size(); ++i) {
      // Hugging Face drops every replacement character of the first token
      // (not only its leading one) when a prefix was being prepended.
      tokens[i] = pattern.replace_all(tokens[i], i == 0 && drop_in_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(SplitPattern::from_json(spec.at("pattern"), where),
                                            spec.at("content").get<std::string>());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(spec.at("content").get<std::string>(), spec.value("start", size_t{0}),
                                          spec.value("stop", size_t{0}));
  }
  if (type == "Metaspace") {
    std::string scheme = spec.value("prepend_scheme", std::string("always"));
    if (spec.contains("add_prefix_space") && spec.at("add_prefix_space").is_boolean() &&
        !spec.at("add_prefix_space").get<bool>()) {
      scheme = "never";
    }
    return std::make_unique<MetaspaceDecoder>(spec.value("replacement", std::string("\u2581")), scheme != "never");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : spec.at("decoders")) {
      if (auto decoder = make_decoder(step, where)) steps.push_back(std::move(decoder));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  fail(where, "unsupported decoder '{}'", type);
}

}  // namespace gpueval
