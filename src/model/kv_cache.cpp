#include "gpueval/kv_cache.h"

#include "gpueval/error.h"
#include "model/kernels.h"

namespace gpueval {

KVCache::KVCache(const ModelConfig& c, int64_t batch, int64_t capacity, at::ScalarType dtype, at::Device device) {
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  values_are_keys_ = c.cache_values_are_keys();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    keys_.push_back(at::zeros({batch, c.cache_heads(), capacity, c.cache_head_dim()}, opts));
    values_.push_back(values_are_keys_ ? keys_.back() : at::zeros({batch, c.cache_heads(), capacity, c.cache_head_dim()}, opts));
  }
  key_valid_ = at::zeros({batch, capacity}, at::TensorOptions().dtype(at::kBool).device(device));
  key_positions_ = at::zeros({batch, capacity}, at::TensorOptions().dtype(at::kLong).device(device));
}

std::pair<at::Tensor, at::Tensor> KVCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = k.size(2);
  if (length_ + t > capacity())
    throw Error(fmt::format("KV cache: {} + {} positions exceed its capacity of {}", length_, t, capacity()));
  if (values_are_keys_) keys_[layer].narrow(2, length_, t).copy_(k);  // v is k: stored once
  else kv_append(keys_[layer], values_[layer], k, v, length_);
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

}  // namespace gpueval
