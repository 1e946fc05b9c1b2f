# Compile check of kernels/*.cu, run by the CTest test KernelsCompile.Sm90 and the kernels_check
# target: `cmake -DNVCC=... -DSOURCE_DIR=<kernels/> -DOUTPUT_DIR=<dir> -P kernels_compile.cmake`.
# The files go to nvcc side by side (one pipeline of processes, so two cores work at once) and the
# check fails naming every file that did not compile. The device code includes no LibTorch header,
# so a bare CUDA toolkit is enough.
file(GLOB sources ${SOURCE_DIR}/*.cu)
if(NOT sources)
  message(FATAL_ERROR "kernels_compile: no .cu files in ${SOURCE_DIR}")
endif()
file(MAKE_DIRECTORY ${OUTPUT_DIR})
set(commands)
foreach(source IN LISTS sources)
  get_filename_component(name ${source} NAME_WE)
  list(APPEND commands COMMAND ${NVCC} -arch=sm_90 -std=c++17 -O2 --Werror all-warnings -c ${source}
       -o ${OUTPUT_DIR}/${name}.o)
endforeach()
execute_process(${commands} RESULTS_VARIABLE results)
set(failed)
foreach(source result IN ZIP_LISTS sources results)
  if(NOT result STREQUAL "0")
    list(APPEND failed "${source} (${result})")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "kernels_compile: nvcc -arch=sm_90 failed on: ${failed}")
endif()
list(LENGTH sources count)
message(STATUS "kernels_compile: ${count} files compiled for sm_90 into ${OUTPUT_DIR}")
