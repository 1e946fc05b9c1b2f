#include "gpueval/model.h"

#include <c10/core/InferenceMode.h>

#include "gpueval/error.h"
#include "model/config/generation_config.h"
#include "model/decoder/module_parts.h"
#include "model/loading/checkpoint.h"
#include "model/loading/weight_names.h"

namespace gpueval {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Architecture::rope_interleaved: a q_proj or k_proj weight or bias with each head's first rotary_dim
// rows reordered to the even ones, then the odd ones (the rest of the head as it is); anything else as given.
at::Tensor interleaved_rope_rows(const ModelConfig& c, const std::string& name, const at::Tensor& t) {
  if (!c.arch.rope_interleaved) return t;
  bool projection = false;
  for (const char* p : {"self_attn.q_proj.", "self_attn.k_proj."})
    for (const char* kind : {"weight", "bias"}) projection = projection || ends_with(name, std::string(p) + kind);
  if (!projection) return t;
  const int64_t hd = c.head_dim, r = c.rotary_dim();
  std::vector<int64_t> order;
  for (int64_t i = 0; i < r; i += 2) order.push_back(i);
  for (int64_t i = 1; i < r; i += 2) order.push_back(i);
  for (int64_t i = r; i < hd; ++i) order.push_back(i);
  std::vector<int64_t> heads = t.sizes().vec();
  heads[0] = t.size(0) / hd;
  heads.insert(heads.begin() + 1, hd);
  return t.reshape(heads).index_select(1, at::tensor(order, at::kLong)).reshape(t.sizes());
}

DecoderModel build_with_source(const ModelConfig& config, LoadOptions options,
                               const std::function<at::Tensor(const std::string&)>& lookup,
                               const std::function<std::string(const std::string&)>& where_of) {
  WeightSource source = [&](const std::string& name, const std::vector<int64_t>& shape) {
    at::Tensor t = lookup(name);
    if (!t.sizes().equals(shape))
      fail(where_of(name), "tensor '{}' has shape {}, but config.json implies {}", name, shape_str(t.sizes()),
           shape_str(shape));
    if (!at::isFloatingType(t.scalar_type()))
      fail(where_of(name), "tensor '{}' has dtype {}, expected a floating-point type", name,
           dtype_name(t.scalar_type()));
    return interleaved_rope_rows(config, name, t).to(options.device, options.dtype);
  };
  c10::InferenceMode guard;
  return DecoderModel(config, source, options);
}

// A checkpoint's tensors as the modules ask for them, by module name, through the family's
// stored_layout (weight_names.h): under the layout's name where the checkpoint has it (transposed and
// sliced as the layout says), else under the module's own name, else the layout's bare form. The
// layout's name comes first because a family may store another weight under a module's name: GLM-4's
// post_attention_layernorm is the norm before its MLP, gpueval's pre_feedforward_layernorm.
// `contains` and `tensor` look names up in the checkpoint.
class StoredTensors {
 public:
  StoredTensors(const ModelConfig& config, std::function<bool(const std::string&)> contains,
                std::function<at::Tensor(const std::string&)> tensor,
                std::function<std::string(const std::string&)> file_of, std::string where)
      : layout_(stored_layout(config)),
        contains_(std::move(contains)),
        tensor_(std::move(tensor)),
        file_of_(std::move(file_of)),
        where_(std::move(where)) {}

  // The checkpoint name that holds `module`'s tensor; "" when none does.
  std::string holder(const std::string& module) const {
    const auto it = layout_.find(module);
    if (it != layout_.end() && contains_(it->second.stored)) return it->second.stored;
    if (contains_(module)) return module;
    if (it != layout_.end() && !it->second.bare.empty() && contains_(it->second.bare)) return it->second.bare;
    return "";
  }
  // The name a checkpoint of this family should hold `module`'s tensor under, for messages.
  std::string expected(const std::string& module) const {
    const auto it = layout_.find(module);
    return it == layout_.end() ? module : it->second.stored;
  }
  // The file that holds `module`'s tensor (or the directory when none does).
  std::string file_of(const std::string& module) const {
    const std::string name = holder(module);
    return name.empty() ? where_ : file_of_(name);
  }

  at::Tensor read(const std::string& module) const {
    const std::string name = holder(module);
    if (name.empty()) fail(where_, "checkpoint is missing tensor '{}'", expected(module));
    at::Tensor t = tensor_(name);
    if (name == module) return t;
    const StoredAs& s = layout_.at(module);
    const std::string stored_shape = shape_str(t.sizes());
    if (s.transposed) {
      if (t.dim() != 2)
        fail(file_of_(name), "tensor '{}' has shape {}, expected 2 dimensions", name, shape_str(t.sizes()));
      t = t.t();
    }
    if (t.dim() < 1 || t.size(0) != s.stored_rows)
      fail(file_of_(name), "tensor '{}' has shape {}, but config.json implies {} {}", name, stored_shape, s.stored_rows,
           s.transposed ? "columns (stored [in, out], as Conv1D)" : "rows");
    if (s.groups > 1) {  // [groups * block, ...] -> [groups, block, ...], this weight's rows of each block
      std::vector<int64_t> blocks = t.sizes().vec(), out = t.sizes().vec();
      blocks[0] = s.groups;
      blocks.insert(blocks.begin() + 1, s.stored_rows / s.groups);
      out[0] = s.groups * s.rows;
      return t.reshape(blocks).narrow(1, s.begin, s.rows).reshape(out);
    }
    t = s.rows == s.stored_rows ? t : t.narrow(0, s.begin, s.rows);
    return s.transposed ? t.contiguous() : t;
  }

 private:
  std::map<std::string, StoredAs> layout_;
  std::function<bool(const std::string&)> contains_;
  std::function<at::Tensor(const std::string&)> tensor_;
  std::function<std::string(const std::string&)> file_of_;
  std::string where_;
};

}  // namespace

DecoderModel load_model(const std::string& dir, LoadOptions options) {
  ModelConfig config = ModelConfig::load(dir + "/config.json");
  if (std::optional<std::vector<int64_t>> eos = generation_eos_token_ids(dir)) config.eos_token_ids = std::move(*eos);
  CheckpointFiles ckpt = CheckpointFiles::open(dir);
  const StoredTensors stored(
      config, [&](const std::string& n) { return ckpt.contains(n); },
      [&](const std::string& n) { return ckpt.tensor(n); }, [&](const std::string& n) { return ckpt.file_of(n); }, dir);
  const std::string lm_head = weight_name(WeightKind::kLmHead);
  if (!config.tie_word_embeddings && stored.holder(lm_head).empty() &&
      !stored.holder(weight_name(WeightKind::kEmbedTokens)).empty())
    fail(dir, "checkpoint has no '{}' and config.json does not set tie_word_embeddings", stored.expected(lm_head));
  return build_with_source(
      config, options, [&](const std::string& name) { return stored.read(name); },
      [&](const std::string& name) { return stored.file_of(name); });
}

DecoderModel build_model(const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
                         LoadOptions options, const std::string& where) {
  const StoredTensors stored(
      config, [&](const std::string& n) { return weights.count(n) > 0; },
      [&](const std::string& n) { return weights.at(n); }, [&](const std::string&) { return where; }, where);
  return build_with_source(
      config, options, [&](const std::string& name) { return stored.read(name); },
      [&](const std::string&) { return where; });
}

}  // namespace gpueval
