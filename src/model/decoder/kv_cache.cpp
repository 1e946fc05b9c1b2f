#include "gpueval/kv_cache.h"

#include "gpueval/error.h"
#include "model/kernels/cuda_kernels.h"

namespace gpueval {

KVCache::KVCache(const ModelConfig& c, int64_t batch, int64_t capacity, at::ScalarType dtype, at::Device device) {
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  values_are_keys_ = c.cache_values_are_keys();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    keys_.push_back(at::zeros({batch, c.cache_heads(), capacity, c.cache_head_dim()}, opts));
    values_.push_back(values_are_keys_ ? keys_.back()
                                       : at::zeros({batch, c.cache_heads(), capacity, c.cache_head_dim()}, opts));
  }
  key_valid_ = at::zeros({batch, capacity}, at::TensorOptions().dtype(at::kBool).device(device));
  key_positions_ = at::zeros({batch, capacity}, at::TensorOptions().dtype(at::kLong).device(device));
}

std::pair<at::Tensor, at::Tensor> KVCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = k.size(2);
  if (length_ + t > capacity())
    throw Error(fmt::format("KV cache: {} + {} positions exceed its capacity of {}", length_, t, capacity()));
  if (values_are_keys_)
    keys_[layer].narrow(2, length_, t).copy_(k);  // v is k: stored once
  else
    kv_append(keys_[layer], values_[layer], k, v, length_);
  return {keys_[layer].narrow(2, 0, length_ + t), values_[layer].narrow(2, 0, length_ + t)};
}

void KVCache::set_pending(const at::Tensor& valid, const at::Tensor& positions) {
  key_valid_.narrow(1, length_, valid.size(1)).copy_(valid);
  key_positions_.narrow(1, length_, positions.size(1)).copy_(positions);
}

void KVCache::commit(const at::Tensor& valid, const at::Tensor& positions) {
  set_pending(valid, positions);
  length_ += valid.size(1);
}

void KVCache::select_rows(const at::Tensor& indices) {
  for (size_t l = 0; l < keys_.size(); ++l) {
    keys_[l] = keys_[l].index_select(0, indices);
    values_[l] = values_are_keys_ ? keys_[l] : values_[l].index_select(0, indices);
  }
  key_valid_ = key_valid_.index_select(0, indices);
  key_positions_ = key_positions_.index_select(0, indices);
}

void KVCache::place_row(int64_t row, const KVCache& source, int64_t source_row, int64_t n) {
  if (n > length_ || n > source.length_)
    throw Error(fmt::format("KV cache: a row of {} positions does not fit before position {} (the source holds {})", n,
                            length_, source.length_));
  clear_row(row);
  const int64_t from = source.length_ - n, to = length_ - n;
  for (size_t l = 0; l < keys_.size(); ++l) {
    keys_[l][row].narrow(1, to, n).copy_(source.keys_[l][source_row].narrow(1, from, n));
    if (!values_are_keys_) values_[l][row].narrow(1, to, n).copy_(source.values_[l][source_row].narrow(1, from, n));
  }
  key_valid_[row].narrow(0, to, n).copy_(source.key_valid_[source_row].narrow(0, from, n));
  key_positions_[row].narrow(0, to, n).copy_(source.key_positions_[source_row].narrow(0, from, n));
}

void KVCache::clear_row(int64_t row) { key_valid_[row].fill_(false); }

void KVCache::realign(const std::vector<int64_t>& row_lengths, int64_t new_length) {
  if (static_cast<int64_t>(row_lengths.size()) != batch())
    throw Error(fmt::format("KV cache: {} row lengths for {} rows", row_lengths.size(), batch()));
  if (new_length > capacity())
    throw Error(fmt::format("KV cache: realigning to {} positions exceeds its capacity of {}", new_length, capacity()));
  for (int64_t r = 0; r < batch(); ++r) {
    const int64_t n = row_lengths[static_cast<size_t>(r)];
    if (n > new_length || n > length_)
      throw Error(fmt::format("KV cache: row {} holds {} positions, more than {} or {}", r, n, new_length, length_));
    if (n > 0 && new_length != length_) {
      // Moved through a copy: the source and the destination may overlap.
      for (size_t l = 0; l < keys_.size(); ++l) {
        keys_[l][r].narrow(1, new_length - n, n).copy_(keys_[l][r].narrow(1, length_ - n, n).clone());
        if (!values_are_keys_)
          values_[l][r].narrow(1, new_length - n, n).copy_(values_[l][r].narrow(1, length_ - n, n).clone());
      }
      key_positions_[r].narrow(0, new_length - n, n).copy_(key_positions_[r].narrow(0, length_ - n, n).clone());
    }
    key_valid_[r].fill_(false);
    if (n > 0) key_valid_[r].narrow(0, new_length - n, n).fill_(true);
  }
  length_ = new_length;
}

}  // namespace gpueval
