# CPU options, decided after find_package(Torch):
#   GPUEVAL_ONEDNN  float32 matrix products of the model's projections on the CPU through oneDNN's
#                   sgemm (src/model/cpu_matmul.h). Defaults to ON when oneDNN's header and library
#                   are found (Debian: libdnnl-dev, the library Debian's LibTorch itself links) and the
#                   LibTorch has no CUDA: a PyTorch wheel carries its own oneDNN inside, so a second
#                   copy is not loaded beside it.
# Sources see GPUEVAL_WITH_ONEDNN=1.
find_path(GPUEVAL_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
find_library(GPUEVAL_DNNL_LIBRARY NAMES dnnl)
find_package(OpenMP COMPONENTS CXX)
set(_gpueval_onednn_default OFF)
if(GPUEVAL_DNNL_INCLUDE_DIR AND GPUEVAL_DNNL_LIBRARY AND OpenMP_CXX_FOUND AND NOT GPUEVAL_CUDA)
  set(_gpueval_onednn_default ON)
endif()
option(GPUEVAL_ONEDNN "Multiply the model's float32 projections on the CPU with oneDNN's sgemm" ${_gpueval_onednn_default})
if(GPUEVAL_ONEDNN AND NOT (GPUEVAL_DNNL_INCLUDE_DIR AND GPUEVAL_DNNL_LIBRARY AND OpenMP_CXX_FOUND))
  message(FATAL_ERROR "GPUEVAL_ONEDNN=ON: needs oneapi/dnnl/dnnl.h, libdnnl and OpenMP (Debian: libdnnl-dev)")
endif()
