# The CUDA kernels in kernels/ (issue 7), included from the top-level CMakeLists.txt once gpueval_core
# exists. Two independent parts:
#  - a compile check that needs only nvcc (no CUDA LibTorch): target kernels_check and the CTest test
#    KernelsCompile.Sm90, which compile every kernels/*.cu for sm_90 into build/kernels_check/;
#  - GPUEVAL_WITH_CUDA_KERNELS (the option in gpu_options.cmake, ON when the LibTorch has CUDA): builds
#    kernels/*.cu into the static library gpueval_kernels, links it into gpueval_core and defines
#    GPUEVAL_WITH_CUDA_KERNELS=1, which makes src/model/kernels/cuda_kernels.cpp dispatch CUDA tensors to it.

find_program(NVCC nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
if(NVCC)
  set(_gpueval_kernels_check
      ${CMAKE_COMMAND} -DNVCC=${NVCC} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}/kernels
      -DOUTPUT_DIR=${PROJECT_BINARY_DIR}/kernels_check -P ${PROJECT_SOURCE_DIR}/cmake/kernels_compile.cmake)
  add_custom_target(kernels_check COMMAND ${_gpueval_kernels_check}
                    COMMENT "nvcc -arch=sm_90: compiling kernels/*.cu" VERBATIM)
  if(GPUEVAL_BUILD_TESTS)
    add_test(NAME KernelsCompile.Sm90 COMMAND ${_gpueval_kernels_check})
    set_tests_properties(KernelsCompile.Sm90 PROPERTIES TIMEOUT 300)
  endif()
else()
  message(STATUS "nvcc not found: KernelsCompile.Sm90 will report itself skipped")
  if(GPUEVAL_BUILD_TESTS)
    add_test(NAME KernelsCompile.Sm90
             COMMAND sh -c "echo 'KernelsCompile.Sm90 skipped: nvcc not found (set CUDA_HOME or PATH)'; exit 77")
    set_tests_properties(KernelsCompile.Sm90 PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endif()

if(GPUEVAL_WITH_CUDA_KERNELS)
  # Torch's cuda.cmake sets CMAKE_CUDA_ARCHITECTURES to OFF: treat that like unset.
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND NVCC)
    set(CMAKE_CUDA_COMPILER ${NVCC})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  file(GLOB GPUEVAL_KERNEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
  add_library(gpueval_kernels STATIC ${GPUEVAL_KERNEL_SOURCES})
  set_target_properties(gpueval_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                        POSITION_INDEPENDENT_CODE ON CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  target_include_directories(gpueval_kernels PUBLIC ${PROJECT_SOURCE_DIR}/kernels)
  target_link_libraries(gpueval_kernels PUBLIC CUDA::cudart)
  target_link_libraries(gpueval_core PUBLIC gpueval_kernels)
  # Public, like the other definitions of gpueval_core: the targets reusing its PCH must agree.
  target_compile_definitions(gpueval_core PUBLIC GPUEVAL_WITH_CUDA_KERNELS=1)
  message(STATUS "CUDA kernels: on (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "CUDA kernels: off (CPU references only)")
endif()
