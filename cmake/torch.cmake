# Finds LibTorch (from the torch wheel in .venv) and defines the target nala::torch.
#
# The wheel's TorchConfig.cmake insists on a CUDA toolkit because the wheel is CUDA-enabled. So:
#   - CUDA on (nvcc found, NALA_CUDA=AUTO/ON): use find_package(Torch) as is, enable the CUDA language.
#   - CUDA off: build against the CPU libraries of the same wheel (torch_cpu, c10) directly, which
#     needs no CUDA toolkit at all. Everything CUDA is then compiled out.
if(NOT TORCH_ROOT)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_EXECUTABLE)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch,os;print(os.path.dirname(torch.__file__))"
                    OUTPUT_VARIABLE TORCH_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(NOT TORCH_ROOT)
    foreach(p ${CMAKE_PREFIX_PATH})
      if(EXISTS "${p}/../../lib/libtorch_cpu.so")
        get_filename_component(TORCH_ROOT "${p}/../.." ABSOLUTE)
      endif()
    endforeach()
  endif()
endif()
if(NOT EXISTS "${TORCH_ROOT}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "LibTorch not found (TORCH_ROOT='${TORCH_ROOT}'). Run scripts/setup.sh, or pass "
                      "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')")
endif()
message(STATUS "nala: LibTorch at ${TORCH_ROOT}")

set(NALA_WITH_CUDA OFF)
if(NOT NALA_CUDA STREQUAL "OFF" AND EXISTS "${TORCH_ROOT}/lib/libtorch_cuda.so")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(NALA_WITH_CUDA ON)
  elseif(NALA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "NALA_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

if(NALA_WITH_CUDA)
  if(NOT NALA_CUDA_ARCHS)
    set(NALA_CUDA_ARCHS 90)   # H100 / H200
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${NALA_CUDA_ARCHS})
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  list(APPEND CMAKE_PREFIX_PATH "${TORCH_ROOT}/share/cmake")
  # TorchConfig appends -gencode flags for every architecture the wheel supports (compute_50 among
  # them, which nvcc 13 rejects); our kernels are built for NALA_CUDA_ARCHS only.
  set(_nala_cuda_flags "${CMAKE_CUDA_FLAGS}")
  set(TORCH_CUDA_ARCH_LIST "9.0")
  find_package(Torch REQUIRED)
  set(CMAKE_CUDA_FLAGS "${_nala_cuda_flags}")
  add_library(nala_torch INTERFACE)
  target_link_libraries(nala_torch INTERFACE ${TORCH_LIBRARIES})
  # TorchConfig adds its flags (ABI) through TORCH_CXX_FLAGS
  separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(nala_torch INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_torch_flags}>)
  # NCCL for multi-GPU training: the header comes with the torch wheel's nvidia-nccl package
  find_path(NCCL_INCLUDE_DIR nccl.h PATHS "${TORCH_ROOT}/../nvidia/nccl/include" /usr/local/cuda/include /usr/include NO_DEFAULT_PATH)
  if(NCCL_INCLUDE_DIR)
    target_include_directories(nala_torch SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_compile_definitions(nala_torch INTERFACE NALA_WITH_NCCL=1)
  endif()
  message(STATUS "nala: CUDA ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${NALA_CUDA_ARCHS}, NCCL headers: ${NCCL_INCLUDE_DIR})")
else()
  add_library(nala_torch INTERFACE)
  target_include_directories(nala_torch SYSTEM INTERFACE "${TORCH_ROOT}/include"
                             "${TORCH_ROOT}/include/torch/csrc/api/include")
  target_link_libraries(nala_torch INTERFACE "${TORCH_ROOT}/lib/libtorch_cpu.so" "${TORCH_ROOT}/lib/libc10.so")
  target_link_options(nala_torch INTERFACE "-Wl,-rpath,${TORCH_ROOT}/lib")
  target_compile_definitions(nala_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1 USE_DISTRIBUTED USE_C10D_GLOO)
  message(STATUS "nala: CUDA OFF (CPU-only build)")
endif()
# The torch wheel's libtorch*.so export their own static copies of std::filesystem, some of which
# crash when called (std::filesystem::remove_all jumps to address 0). Putting libstdc++ first in
# every binary's NEEDED list makes those symbols bind to the system libstdc++ instead: so it does on
# the Debian machines, but not on the GPU machine (Ubuntu 24.04, its own cmake and binutils; seen
# 2026-12-02 with LD_DEBUG=bindings: nala's std::filesystem calls bind to LibTorch's copies there).
# Hence nala does not call remove_all at all (io::remove_tree; tests/python/test_binaries.py).
target_link_options(nala_torch INTERFACE "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
add_library(nala::torch ALIAS nala_torch)
