# GPU options, decided after find_package(Torch): each defaults to ON when what it needs was found.
#   GPUEVAL_CUDA               the LibTorch found was built with CUDA (its c10_cuda / torch_cuda targets)
#   GPUEVAL_NCCL               nccl.h and libnccl found (the pip nvidia-nccl wheel beside torch first, so
#                              we use the very library torch loads; then the CUDA toolkit); needs GPUEVAL_CUDA
#   GPUEVAL_WITH_CUDA_KERNELS  build kernels/*.cu (the block that builds them reads this variable)
# Sources see GPUEVAL_WITH_CUDA=1 / GPUEVAL_WITH_NCCL=1. gpueval_print_build_summary() prints one line.

set(_gpueval_torch_has_cuda OFF)
if(TARGET c10_cuda OR TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(_gpueval_torch_has_cuda ON)
endif()
option(GPUEVAL_CUDA "Build the CUDA paths (needs a LibTorch built with CUDA)" ${_gpueval_torch_has_cuda})
if(GPUEVAL_CUDA AND NOT _gpueval_torch_has_cuda)
  message(FATAL_ERROR "GPUEVAL_CUDA=ON: the LibTorch found (${TORCH_INSTALL_PREFIX}) has no CUDA; "
                      "pass -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path> or -DGPUEVAL_TORCH_PYTHON=<python>")
endif()

set(_gpueval_nccl_hints)
if(_gpueval_site_packages)
  list(APPEND _gpueval_nccl_hints "${_gpueval_site_packages}/nvidia/nccl")
endif()
if(CUDAToolkit_ROOT)
  list(APPEND _gpueval_nccl_hints "${CUDAToolkit_ROOT}")
endif()
if(CUDA_TOOLKIT_ROOT_DIR)
  list(APPEND _gpueval_nccl_hints "${CUDA_TOOLKIT_ROOT_DIR}")
endif()
list(APPEND _gpueval_nccl_hints /usr/local/cuda)
set(_gpueval_nccl_found OFF)
if(GPUEVAL_CUDA)
  # The header and the library come from the same place: the first hint that has both.
  foreach(_h IN LISTS _gpueval_nccl_hints)
    if(EXISTS "${_h}/include/nccl.h")
      find_library(_gpueval_nccl_lib NAMES nccl libnccl.so.2 PATHS "${_h}/lib" "${_h}/lib64" NO_DEFAULT_PATH)
      if(_gpueval_nccl_lib)
        set(GPUEVAL_NCCL_INCLUDE_DIR "${_h}/include" CACHE PATH "Directory holding nccl.h")
        set(GPUEVAL_NCCL_LIBRARY "${_gpueval_nccl_lib}" CACHE FILEPATH "libnccl")
        break()
      endif()
      unset(_gpueval_nccl_lib CACHE)
    endif()
  endforeach()
  if(GPUEVAL_NCCL_INCLUDE_DIR AND GPUEVAL_NCCL_LIBRARY)
    set(_gpueval_nccl_found ON)
  endif()
endif()
option(GPUEVAL_NCCL "Build the NCCL weight broadcast (load: broadcast)" ${_gpueval_nccl_found})
if(GPUEVAL_NCCL AND NOT _gpueval_nccl_found)
  message(FATAL_ERROR "GPUEVAL_NCCL=ON: needs GPUEVAL_CUDA and nccl.h + libnccl "
                      "(set GPUEVAL_NCCL_INCLUDE_DIR and GPUEVAL_NCCL_LIBRARY)")
endif()

option(GPUEVAL_WITH_CUDA_KERNELS "Build the CUDA kernels in kernels/" ${GPUEVAL_CUDA})
if(GPUEVAL_WITH_CUDA_KERNELS AND NOT GPUEVAL_CUDA)
  message(FATAL_ERROR "GPUEVAL_WITH_CUDA_KERNELS=ON needs GPUEVAL_CUDA (a LibTorch built with CUDA)")
endif()

# LibTorch 2.x ships its own {fmt} (12.x) in its include dir and its headers use it; that include dir
# comes before /usr/include, so our <fmt/...> are the bundled ones too and Debian's libfmt (9.x) would
# not match them at link time: with a bundled {fmt}, use it header-only.
# (Debian's LibTorch has none: its include dir is /usr/include, where the system {fmt} is.)
get_target_property(_gpueval_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
get_filename_component(_gpueval_torch_include "${TORCH_INSTALL_PREFIX}/include" REALPATH)
if(EXISTS "${_gpueval_torch_include}/fmt/format.h" AND NOT "${_gpueval_torch_include}" IN_LIST _gpueval_fmt_include)
  add_library(gpueval_fmt_header_only INTERFACE)
  target_compile_definitions(gpueval_fmt_header_only INTERFACE FMT_HEADER_ONLY=1)
  set(GPUEVAL_FMT gpueval_fmt_header_only)
else()
  set(GPUEVAL_FMT fmt::fmt)
endif()

# PyTorch's Linux wheels (2.5 and later) export copies of libstdc++'s std::filesystem functions from
# libtorch.so, whose recursive_directory_iterator calls are weak and unresolved (pytorch/pytorch#133437,
# worked around in #163980). An executable that lists libtorch.so before libstdc++.so.6 binds its own
# std::filesystem calls to those copies, and remove_all(path, ec) jumps to address 0 (seen: TempDir's
# destructor in gpueval_tests, torch 2.11.0+cu130). Naming libstdc++ first on every link line makes it
# the first definition in the lookup scope (gpueval_core links this target PUBLIC). Debian's LibTorch
# 1.13 exports none, so its builds are unchanged.
add_library(gpueval_libstdcxx_first INTERFACE)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND Torch_VERSION VERSION_GREATER_EQUAL 2.5)
  target_link_options(gpueval_libstdcxx_first INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
endif()

function(gpueval_print_build_summary)
  set(_torch_version "${Torch_VERSION}")
  if(NOT _torch_version)
    set(_torch_version "?")
  endif()
  file(GLOB _cu ${PROJECT_SOURCE_DIR}/kernels/*.cu)
  if(GPUEVAL_WITH_CUDA_KERNELS AND _cu)
    set(_kernels ON)
  elseif(GPUEVAL_WITH_CUDA_KERNELS)
    set(_kernels "OFF (no kernels/*.cu)")
  else()
    set(_kernels OFF)
  endif()
  message(STATUS "gpueval: Torch ${_torch_version} (${TORCH_INSTALL_PREFIX}), CUDA ${GPUEVAL_CUDA}, "
                 "NCCL ${GPUEVAL_NCCL}, kernels ${_kernels}, oneDNN ${GPUEVAL_ONEDNN}")
endfunction()
