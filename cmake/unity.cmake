# Unity builds: each target's C++ sources are compiled in batches of NALA_UNITY_BATCH files, one
# translation unit a batch (CMake's UNITY_BUILD).
#
# Why: with GCC, every translation unit that includes LibTorch's API (torch/torch.h, our precompiled
# header) spends ≈ 12 s instantiating the templates the headers use before its own first line, even
# from the precompiled header ("lang. deferred" in -ftime-report: 11.9 of 12.4 s for an empty file,
# measured 2026-12-05 on the 2-core machine), and again compiles the same inline code. A fresh
# build of ≈ 150 such files paid that ≈ 150 times; batched, ≈ 25 times. docs/benchmarks.md has the
# before/after build times.
#
# The cost: a one-file edit recompiles its batch, and names in anonymous namespaces (or `static`)
# must be unique within a target's folder, since a batch is one translation unit. CUDA sources are
# never batched (nvcc; CMake ≥ 3.31 would otherwise include them). -DNALA_UNITY_BUILD=OFF turns it off.
option(NALA_UNITY_BUILD "Compile each target's C++ sources in batches (unity build)" ON)
set(NALA_UNITY_BATCH 8 CACHE STRING "C++ sources a unity translation unit holds")
if(NALA_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${NALA_UNITY_BATCH})
  # a class in one batched file holding a type from another's anonymous namespace is fine here
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()

# nala_no_unity_cuda(<sources>): keep the .cu files among <sources> out of unity batches
function(nala_no_unity_cuda)
  set(_cu ${ARGN})
  list(FILTER _cu INCLUDE REGEX "\\.cu$")
  if(_cu)
    set_source_files_properties(${_cu} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()
