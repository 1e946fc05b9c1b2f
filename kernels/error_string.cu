// error_string of the kernels' C API: the CUDA runtime's message for a launcher's return value.
#include <cuda_runtime.h>

#include "gpueval_kernels.h"

namespace gpueval::kernels {

const char* error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace gpueval::kernels
