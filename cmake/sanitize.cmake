# A sanitizer build of nala's own code: -DNALA_SANITIZE=address,undefined (any list -fsanitize=
# takes). LibTorch itself is not instrumented, so errors inside it go unseen; errors in nala's code,
# and nala's misuse of memory that LibTorch hands it, are caught. CPU only (NALA_CUDA=OFF): the
# CUDA runtime maps memory where AddressSanitizer keeps its shadow.
# The options (use-after-return checks, UBSan stacks; the first error stops the run) are built into the programs:
# tests/sanitizer/default_options.cpp. The Python package's tests are
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
# The options' hooks must be defined in the executable itself: the runtime (libasan.so, loaded
# first) carries weak defaults of its own that a definition in a shared library of ours does not
# override. Every nala executable calls this.
function(nala_sanitizer_defaults target)
  if(NALA_SANITIZE)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/sanitizer/default_options.cpp)
  endif()
endfunction()
