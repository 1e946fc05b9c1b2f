# CPU options, decided after find_package(Torch):
#   GPUEVAL_ONEDNN  float32 matrix products of the model's projections on the CPU through oneDNN's
#                   sgemm (src/model/kernels/cpu_matmul.h). Defaults to ON when oneDNN's header and library
#                   are found (Debian: libdnnl-dev, the library Debian's LibTorch itself links) and the
#                   LibTorch has no CUDA: a PyTorch wheel carries its own oneDNN inside, so a second
#                   copy is not loaded beside it.
#   GPUEVAL_SLEEF   attention's tile softmax in AVX2+FMA vector code with Sleef's exponential
#                   (src/model/kernels/tile_softmax.h; the CPU is checked at run time). Defaults to ON with
#                   GPUEVAL_ONEDNN on x86-64 when Sleef's header and library are found (Debian:
#                   libsleef-dev; libsleef is a library Debian's LibTorch already loads).
# Sources see GPUEVAL_WITH_ONEDNN=1; src/model/kernels/tile_softmax.cpp alone sees GPUEVAL_WITH_SLEEF=1.
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

find_path(GPUEVAL_SLEEF_INCLUDE_DIR sleef.h)
find_library(GPUEVAL_SLEEF_LIBRARY NAMES sleef)
set(_gpueval_sleef_default OFF)
if(GPUEVAL_ONEDNN AND GPUEVAL_SLEEF_INCLUDE_DIR AND GPUEVAL_SLEEF_LIBRARY AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
  set(_gpueval_sleef_default ON)
endif()
option(GPUEVAL_SLEEF "Attention's tile softmax in AVX2 code with Sleef's exponential (CPU checked at run time)"
       ${_gpueval_sleef_default})
if(GPUEVAL_SLEEF AND NOT (GPUEVAL_ONEDNN AND GPUEVAL_SLEEF_INCLUDE_DIR AND GPUEVAL_SLEEF_LIBRARY))
  message(FATAL_ERROR "GPUEVAL_SLEEF=ON: needs GPUEVAL_ONEDNN, sleef.h and libsleef (Debian: libsleef-dev)")
endif()
