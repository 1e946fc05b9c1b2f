#include "tokenizer/post_processor.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/strict_json.h"
#include "gpueval/error.h"
#include "tokenizer/token_id.h"

namespace gpueval {

namespace {

// One element of a template: the sequence itself, or the name of a special token.
struct TemplatePiece {
  bool is_sequence;
  std::string special;
};

// Pieces come serialized as {"Sequence": {...}} / {"SpecialToken": {"id": ...}},
// or in the short string form "$A" / "<s>" (optionally with ":type_id").
TemplatePiece parse_piece(const nlohmann::json& piece, const std::string& where) {
  if (piece.is_object() && piece.contains("Sequence")) return {true, ""};
  if (piece.is_object() && piece.contains("SpecialToken")) {
    return {false, piece.at("SpecialToken").at("id").get<std::string>()};
  }
  if (piece.is_string()) {
    std::string text = piece.get<std::string>();
    const size_t colon = text.rfind(':');
    if (colon != std::string::npos && colon > 0) text.resize(colon);
    if (!text.empty() && text[0] == '$') return {true, ""};
    return {false, text};
  }
  fail(where, "unsupported TemplateProcessing piece {}", piece.dump());
}

std::vector<nlohmann::json> template_pieces(const nlohmann::json& single) {
  std::vector<nlohmann::json> pieces;
  if (single.is_string()) {
    const std::string text = single.get<std::string>();
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = std::min(text.find(' ', pos), text.size());
      if (end > pos) pieces.emplace_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
  } else {
    for (const auto& piece : single) pieces.push_back(piece);
  }
  return pieces;
}

void parse_template(const nlohmann::json& spec, const std::string& where, std::vector<int32_t>& prefix,
                    std::vector<int32_t>& suffix) {
  const nlohmann::json& specials = spec.at("special_tokens");
  bool seen_sequence = false;
  for (const auto& raw : template_pieces(spec.at("single"))) {
    const TemplatePiece piece = parse_piece(raw, where);
    if (piece.is_sequence) {
      if (seen_sequence) fail(where, "TemplateProcessing 'single' uses the sequence twice");
      seen_sequence = true;
      continue;
    }
    if (!specials.contains(piece.special)) {
      fail(where, "TemplateProcessing uses special token '{}' missing from special_tokens", piece.special);
    }
    auto& target = seen_sequence ? suffix : prefix;
    for (const auto& id : specials.at(piece.special).at("ids"))
      target.push_back(token_id_from_json(id, where, "special token " + quote_untrusted(piece.special)));
  }
}

}  // namespace

PostProcessor PostProcessor::from_json(const nlohmann::json& spec, const std::string& where) {
  PostProcessor processor;
  if (spec.is_null()) return processor;
  const std::string type = spec.value("type", "");
  if (type == "TemplateProcessing") {
    parse_template(spec, where, processor.prefix_, processor.suffix_);
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    // cls and sep are ["<token>", id] pairs; a single sequence becomes cls A sep.
    processor.prefix_.push_back(token_id_from_json(spec.at("cls").at(1), where, "cls"));
    processor.suffix_.push_back(token_id_from_json(spec.at("sep").at(1), where, "sep"));
  } else if (type == "ByteLevel") {
    // Only trims offsets, which gpueval does not keep.
  } else if (type == "Sequence") {
    // Each later processor wraps what the earlier ones produced.
    for (const auto& step : spec.at("processors")) {
      const PostProcessor inner = from_json(step, where);
      processor.prefix_.insert(processor.prefix_.begin(), inner.prefix_.begin(), inner.prefix_.end());
      processor.suffix_.insert(processor.suffix_.end(), inner.suffix_.begin(), inner.suffix_.end());
    }
  } else {
    fail(where, "unsupported post_processor '{}'", type);
  }
  return processor;
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

}  // namespace gpueval
