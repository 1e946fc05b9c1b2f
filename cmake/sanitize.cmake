# Sanitizer and fuzzing builds. Both are for a separate build directory (scripts/sanitize.sh makes
# build-fuzz/ with clang); the default build/ has neither.
#   GPUEVAL_SANITIZE  every C++ object and binary built with AddressSanitizer + UndefinedBehaviorSanitizer
#                     (GCC or clang). A finding aborts the process (-fno-sanitize-recover), so a test
#                     that trips one fails. vptr is left out: LibTorch's classes come from an
#                     uninstrumented library, and the check cannot see their type info reliably.
#   GPUEVAL_FUZZ      also the libFuzzer targets of tests/fuzz/ (clang only; implies GPUEVAL_SANITIZE):
#                     every object gets -fsanitize=fuzzer-no-link, so coverage reaches into the library.
option(GPUEVAL_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(GPUEVAL_FUZZ "Build the libFuzzer targets in tests/fuzz/ (clang; implies GPUEVAL_SANITIZE)" OFF)
if(GPUEVAL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "GPUEVAL_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                        "(scripts/sanitize.sh does)")
  endif()
  set(GPUEVAL_SANITIZE ON CACHE BOOL "Build with AddressSanitizer and UndefinedBehaviorSanitizer" FORCE)
endif()
if(GPUEVAL_SANITIZE)
  set(GPUEVAL_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=all
                             -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${GPUEVAL_SANITIZE_FLAGS}>")
  add_link_options(-fsanitize=address,undefined)
  # Sources may say which build they are in (the SentencePiece module cannot be dlopen'ed with
  # RTLD_DEEPBIND under ASan: src/tokenizer/sentencepiece_tokenizer.cpp).
  add_compile_definitions(GPUEVAL_SANITIZE=1)
endif()
if(GPUEVAL_FUZZ)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()
