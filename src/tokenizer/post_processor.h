// PostProcessor is the `post_processor` of a tokenizer.json, reduced to what a
// single sequence needs: the special-token ids that add_special_tokens puts
// before and after the encoded text. TemplateProcessing, RobertaProcessing,
// BertProcessing, ByteLevel (adds nothing) and Sequence of them are supported;
// pair templates are ignored because gpueval never encodes pairs.
// Immutable; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gpueval {

class PostProcessor {
 public:
  PostProcessor() = default;
  // A null spec adds nothing.
  static PostProcessor from_json(const nlohmann::json& spec, const std::string& where);

  void apply(std::vector<int32_t>& ids) const;
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace gpueval
