// Compiled only with GPUEVAL_WITH_NCCL (CMakeLists.txt drops it otherwise).
#include "run/weight_broadcast.h"

#include <cstring>

#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "gpueval/error.h"
#include "gpueval/model_config.h"

namespace gpueval {
namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw Error(fmt::format("weight broadcast: {} failed: {}", call, ncclGetErrorString(r)));
}

void cuda_check(cudaError_t r, const char* call) {
  if (r != cudaSuccess) throw Error(fmt::format("weight broadcast: {} failed: {}", call, cudaGetErrorString(r)));
}

ncclUniqueId id_from_hex(const std::string& hex) {
  ncclUniqueId id;
  if (hex.size() != 2 * sizeof(id.internal))
    throw Error(fmt::format("weight broadcast: the NCCL id has {} hex digits, expected {}", hex.size(),
                            2 * sizeof(id.internal)));
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}

// Destroys the communicator however the load ends; after an error, abort() so no rank waits on it.
class Communicator {
 public:
  explicit Communicator(const BroadcastGroup& g) {
    ncclUniqueId id = id_from_hex(g.nccl_id);
    nccl_check(ncclCommInitRank(&comm_, g.world, id, g.rank), "ncclCommInitRank");
  }
  ~Communicator() {
    if (failed_)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  ncclComm_t get() const { return comm_; }
  void mark_failed() { failed_ = true; }

 private:
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
};

}  // namespace

std::string new_broadcast_id() {
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::string hex;
  for (char c : id.internal) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return hex;
}

DecoderModel load_model_broadcast(const std::string& dir, LoadOptions options, const BroadcastGroup& group) {
  if (!options.device.is_cuda()) throw Error("weight broadcast: the device must be a GPU, got " + options.device.str());
  c10::cuda::CUDAGuard device_guard(options.device);
  // Rank 0 maps its safetensors first, so the others wait in ncclCommInitRank meanwhile.
  DecoderModel model{nullptr};
  if (group.rank == 0) {
    model = load_model(dir, options);
  } else {
    const ModelConfig config = ModelConfig::load(dir + "/config.json");
    c10::InferenceMode guard;
    WeightSource empty = [&](const std::string&, const std::vector<int64_t>& shape) {
      return at::empty(shape, at::TensorOptions().device(options.device).dtype(options.dtype));
    };
    model = DecoderModel(config, empty, options);
  }
  Communicator comm(group);
  try {
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(options.device.index()).stream();
    std::vector<at::Tensor> params;
    int64_t bytes = 0;
    for (const auto& p : model->named_parameters(/*recurse=*/true)) {
      if (!p.value().is_contiguous()) throw Error("weight broadcast: parameter '" + p.key() + "' is not contiguous");
      params.push_back(p.value());
      bytes += static_cast<int64_t>(p.value().nbytes());
    }
    // Every rank checks its model against rank 0's (count and bytes of parameters); all agree on
    // the outcome through a max-reduction before any weight moves, so none is left waiting.
    at::Tensor shape = at::tensor({static_cast<int64_t>(params.size()), bytes}, at::kLong).to(options.device);  // [2]
    at::Tensor mine = shape.clone();
    nccl_check(ncclBroadcast(shape.data_ptr(), shape.data_ptr(), 2, ncclInt64, 0, comm.get(), stream), "ncclBroadcast");
    at::Tensor bad = shape.ne(mine).any().to(at::kInt);  // [] int32
    nccl_check(ncclAllReduce(bad.data_ptr(), bad.data_ptr(), 1, ncclInt32, ncclMax, comm.get(), stream),
               "ncclAllReduce");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (bad.item<int32_t>() != 0) {
      const at::Tensor theirs = shape.cpu();
      throw Error(fmt::format("weight broadcast: rank {} has {} parameters ({} bytes), rank 0 has {} ({} bytes) of {}",
                              group.rank, params.size(), bytes, theirs[0].item<int64_t>(), theirs[1].item<int64_t>(),
                              dir));
    }
    // In place, as bytes (dtype-agnostic), queued on this device's stream one after another.
    for (at::Tensor& t : params)
      nccl_check(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, 0, comm.get(), stream),
                 "ncclBroadcast");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } catch (...) {
    comm.mark_failed();
    throw;
  }
  return model;
}

}  // namespace gpueval
