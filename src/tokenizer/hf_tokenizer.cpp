#include "tokenizer/hf_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/strict_json.h"
#include "common/utf8.h"
#include "gpueval/error.h"
#include "tokenizer/token_id.h"
#include "tokenizer/tokenizer_config.h"

namespace gpueval {

namespace {

// Names the common model families give their BOS/EOS tokens, tried when
// neither tokenizer_config.json nor the post-processor says which they are.
constexpr const char* kBosNames[] = {"<s>", "<|begin_of_text|>", "<bos>"};
constexpr const char* kEosNames[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"};

std::vector<AddedToken> parse_added_tokens(const nlohmann::json& spec, const BpeModel& model,
                                           const std::string& where) {
  std::vector<AddedToken> tokens;
  if (!spec.contains("added_tokens") || spec.at("added_tokens").is_null()) return tokens;
  for (const auto& entry : spec.at("added_tokens")) {
    AddedToken token;
    token.content = entry.at("content").get<std::string>();
    token.single_word = entry.value("single_word", false);
    token.lstrip = entry.value("lstrip", false);
    token.rstrip = entry.value("rstrip", false);
    token.special = entry.value("special", false);
    token.normalized = entry.value("normalized", !token.special);
    // As in Hugging Face, a content the model already knows keeps the model's id.
    const int32_t id = token_id_from_json(entry.at("id"), where, "added token " + quote_untrusted(token.content));
    token.id = model.token_to_id(token.content).value_or(id);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

HfTokenizer::HfTokenizer(const nlohmann::json& spec, std::string origin, const nlohmann::json* config)
    : origin_(std::move(origin)) {
  try {
    build(spec, config);
  } catch (const nlohmann::json::exception& e) {
    fail(origin_, "malformed tokenizer.json: {}", e.what());
  }
}

void HfTokenizer::build(const nlohmann::json& spec, const nlohmann::json* config) {
  if (!spec.is_object()) fail(origin_, "tokenizer.json must hold a JSON object");
  if (!spec.contains("model") || !spec.at("model").is_object()) fail(origin_, "no \"model\" object");
  const nlohmann::json& model = spec.at("model");
  // Old files leave out the model type; only BPE has merges.
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE") fail(origin_, "unsupported tokenizer model type '{}'", type);

  const auto stage = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json kNull;
    return spec.contains(key) ? spec.at(key) : kNull;
  };
  normalizer_ = make_normalizer(stage("normalizer"), origin_);
  pre_tokenizer_ = make_pre_tokenizer(stage("pre_tokenizer"), origin_);
  model_ = std::make_unique<BpeModel>(model, origin_);
  added_ = std::make_unique<AddedVocabulary>(parse_added_tokens(spec, *model_, origin_), normalizer_.get());
  post_processor_ = PostProcessor::from_json(stage("post_processor"), origin_);
  decoder_ = make_decoder(stage("decoder"), origin_);
  // truncation and padding are ignored on purpose: transformers turns them off
  // for a plain encode(), and gpueval handles lengths itself.
  bos_id_ = find_special(config, "bos_token", true);
  eos_id_ = find_special(config, "eos_token", false);
}

std::optional<int32_t> HfTokenizer::find_special(const nlohmann::json* config, const char* key, bool leading) const {
  if (const auto name = config_token(config, key)) {
    if (const auto id = piece_to_id(*name)) return id;
  }
  const std::vector<int32_t>& wrap = leading ? post_processor_.prefix() : post_processor_.suffix();
  if (wrap.size() == 1) return wrap[0];
  const auto try_names = [&](const auto& names) -> std::optional<int32_t> {
    for (const char* name : names) {
      if (const auto id = piece_to_id(name)) return id;
    }
    return std::nullopt;
  };
  return leading ? try_names(kBosNames) : try_names(kEosNames);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = utf8_invalid_offset(text);
  if (bad != text.size()) fail(origin_, "cannot encode text that is not valid UTF-8 (byte {})", bad);
  std::vector<TextSplit> splits = added_->split(text, normalizer_.get());
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(splits);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const TextSplit& split : splits) {
    if (split.token_id >= 0) {
      ids.push_back(split.token_id);
    } else {
      model_->tokenize(split.text, ids);
    }
  }
  if (add_special_tokens) post_processor_.apply(ids);
  return ids;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    // Like transformers' all_special_ids: BOS/EOS count as special even when
    // they are plain vocabulary entries (a converted llama2.c tokenizer).
    if (skip_special_tokens && (id == bos_id_ || id == eos_id_)) continue;
    const std::string* token = added_->decode_string(id);
    if (token == nullptr) token = model_->id_to_token(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && added_->is_special(*token)) continue;
    tokens.push_back(*token);
  }
  if (decoder_) {
    decoder_->decode_chain(tokens);
    std::string text;
    for (const std::string& token : tokens) text += token;
    return text;
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

int32_t HfTokenizer::vocab_size() const { return std::max(model_->id_limit(), added_->id_limit()); }

std::string HfTokenizer::id_to_piece(int32_t id) const {
  if (const std::string* content = added_->content(id)) return *content;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  fail(origin_, "token id {} is not in the vocabulary (size {})", id, vocab_size());
}

std::optional<int32_t> HfTokenizer::piece_to_id(std::string_view piece) const {
  if (const auto id = added_->token_to_id(piece)) return id;
  return model_->token_to_id(piece);
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const nlohmann::json& tokenizer_json, const std::string& origin,
                                               const nlohmann::json* config) {
  return std::make_unique<HfTokenizer>(tokenizer_json, origin, config);
}

}  // namespace gpueval
