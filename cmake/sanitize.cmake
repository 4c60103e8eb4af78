# A sanitizer build of nala's own code: -DNALA_SANITIZE=address,undefined (any list -fsanitize=
# takes). LibTorch itself is not instrumented, so errors inside it go unseen; errors in nala's code,
# and nala's misuse of memory that LibTorch hands it, are caught. CPU only (NALA_CUDA=OFF): the
# CUDA runtime maps memory where AddressSanitizer keeps its shadow.
# The options (halt on the first error, LibTorch's lifetime singletons kept out of leak reports)
# are built into the programs: tests/sanitizer/default_options.cpp. The Python package's tests are
# left out (test_package.py: an instrumented extension in an uninstrumented python needs LD_PRELOAD).
set(NALA_SANITIZE "" CACHE STRING "Sanitizers for nala's code, e.g. address,undefined (empty: none)")
if(NALA_SANITIZE)
  if(NALA_WITH_CUDA)
    message(FATAL_ERROR "NALA_SANITIZE='${NALA_SANITIZE}' needs a CPU build: configure with -DNALA_CUDA=OFF")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${NALA_SANITIZE}> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${NALA_SANITIZE})
  message(STATUS "nala: sanitizers ${NALA_SANITIZE} (CPU build)")
endif()
