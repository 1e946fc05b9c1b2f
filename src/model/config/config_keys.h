// The readers of config.json's keys that ModelConfig::from_json and the family rows (families.cpp)
// share, private to model/config/: typed keys with a fallback and bounds, each error naming the file and
// the key; rope_scaling as transformers reads it; the MLP activation's names. Stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/wire_json.h"
#include "gpueval/model_config.h"

namespace gpueval {

// Bounds on the values that size allocations (embeddings, KV cache, RoPE tables, layers). Each is
// far past any released Llama-family model (Llama 3.1 405B: hidden 16384, intermediate 53248,
// 126 layers, 128 heads; Llama 4 Scout: 10M positions; Gemma: 256k vocabulary) and stops a corrupt
// or hostile config.json (max_position_embeddings 2^40) before it asks for terabytes.
constexpr int64_t kMaxVocab = int64_t{1} << 24;  // 16,777,216 tokens
constexpr int64_t kMaxHidden = int64_t{1} << 17;  // 131,072
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 24;  // 16,777,216 positions
constexpr int64_t kMaxTokenId = (int64_t{1} << 31) - 1;

// Typed keys with a fallback and bounds (common/wire_json.h), shared with the wire's field access.
using wire::get_bool;
using wire::get_double;
using wire::get_int;
// A positive number, `fallback` when absent.
double get_positive(const nlohmann::json& j, const std::string& where, const char* key, double fallback);
// A positive number, `fallback` when absent, none when null (Gemma's soft-caps).
std::optional<double> get_optional_positive(const nlohmann::json& j, const std::string& where, const char* key,
                                            std::optional<double> fallback);

// rope_scaling as transformers' modeling_rope_utils reads it: the keys each type uses, its defaults.
// `top` is the whole config (a top-level original_max_position_embeddings wins, as transformers 5's
// standardize_rope_params has it); `c` has head_dim, rotary_dim() and max_position_embeddings read.
RopeScaling parse_rope_scaling(const nlohmann::json& j, const nlohmann::json& top, const std::string& where,
                               const ModelConfig& c);
// The fraction of each head RoPE rotates: partial_rotary_factor (phi3 and most), rotary_pct (gpt_neox).
double parse_partial_rotary(const nlohmann::json& j, const std::string& where, int64_t head_dim, double fallback);

// The MLP's activation under `key`: silu, gelu (erf) or GELU's tanh approximation under each of
// transformers' names for it (gelu_pytorch_tanh, gelu_new, gelu_fast: the same function).
Activation read_activation(const nlohmann::json& j, const std::string& where, const char* key, const char* fallback);
const char* activation_name(Activation a);

}  // namespace gpueval
