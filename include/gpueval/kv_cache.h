// KVCache holds the keys and values a decoder has computed so far, for a batch
// of sequences that advance together (padding keeps them aligned; a row may take another
// sequence, place_row). Storage is
// allocated once for `capacity` positions, so appending never reallocates.
// It also remembers which key slots are real tokens (padding slots are never
// attended to) and each slot's position (a sliding window is a distance in positions). Under latent
// attention (DeepSeek-V3) a layer holds one latent head (ModelConfig::cache_heads, cache_head_dim) whose
// values are its keys: one tensor, stored once. One cache belongs to one forward loop; not thread-safe.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "gpueval/model_config.h"

namespace gpueval {

class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t batch, int64_t capacity, at::ScalarType dtype, at::Device device);

  int64_t batch() const { return key_valid_.size(0); }
  int64_t capacity() const { return key_valid_.size(1); }
  // Positions already committed (the same for every row).
  int64_t length() const { return length_; }

  // Writes this step's keys and values for `layer` at [length, length + T) and
  // returns views of everything so far. k, v: [B, n_kv_heads, T, head_dim] (cache_heads, cache_head_dim).
  // Returns ([B, n_kv_heads, length + T, head_dim], same).
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);

  // Marks the step's T slots (valid: [B, T] bool; positions: [B, T] int64) and moves length
  // forward; called once per forward, after every layer appended.
  void commit(const at::Tensor& valid, const at::Tensor& positions);

  // Views of the committed keys and values of `layer`: [B, n_kv_heads, length, head_dim].
  at::Tensor keys(int64_t layer) const { return keys_[layer].narrow(2, 0, length_); }
  at::Tensor values(int64_t layer) const { return values_[layer].narrow(2, 0, length_); }

  // [B, length + pending] bool: which key slots hold real tokens.
  at::Tensor key_valid(int64_t pending) const { return key_valid_.narrow(1, 0, length_ + pending); }
  // [B, length + pending] int64: each key slot's position.
  at::Tensor key_positions(int64_t pending) const { return key_positions_.narrow(1, 0, length_ + pending); }
  void set_pending(const at::Tensor& valid, const at::Tensor& positions);

  // Keeps only the given rows (indices: [B'] int64), e.g. to drop finished sequences.
  void select_rows(const at::Tensor& indices);

  // Continuous batching (model/decoder/generate.h) moves whole sequences between rows. Each row's real
  // positions end at length() and are contiguous, so attention sees them in the same order
  // wherever they sit.
  // Row `row` takes the last n committed positions of `source`'s row `source_row` as its last
  // n, and nothing before them; needs n <= length().
  void place_row(int64_t row, const KVCache& source, int64_t source_row, int64_t n);
  // Row `row` holds nothing.
  void clear_row(int64_t row);
  // Sets length() to new_length (<= capacity) with each row's last row_lengths[r] positions
  // moved to end there: grows the cache's span for a longer row, or compacts it when full.
  void realign(const std::vector<int64_t>& row_lengths, int64_t new_length);

 private:
  std::vector<at::Tensor> keys_;  // per layer [B, n_kv_heads, capacity, head_dim]
  std::vector<at::Tensor>
      values_;  // per layer [B, n_kv_heads, capacity, head_dim]; keys_ itself under latent attention
  bool values_are_keys_ = false;  // ModelConfig::cache_values_are_keys: one tensor per layer
  at::Tensor key_valid_;  // [B, capacity] bool
  at::Tensor key_positions_;  // [B, capacity] int64
  int64_t length_ = 0;
};

}  // namespace gpueval
