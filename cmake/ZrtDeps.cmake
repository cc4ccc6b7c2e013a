# Dependency probes of the build (DESIGN.md dependency table): one found /
# not-found line each, a missing required one stops the configure. Required:
# MPI, OpenBLAS, jemalloc, libnuma, libyaml, cJSON, liburing, OpenMP,
# pthreads, libm. Optional: CUDA Toolkit (+cuBLAS), NCCL. The finding itself
# is cmake/ZrtFindDeps.cmake, which an installed zrt's package uses too.
# Out: zrt_deps (interface target linking them all), ZRT_HAVE_CUDA,
# ZRT_HAVE_NCCL.
set(ZRT_HAVE_CUDA OFF)
set(ZRT_HAVE_NCCL OFF)
set(ZRT_FIND_CUDA OFF)
if(NOT ZRT_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(ZRT_FIND_CUDA ON)
  endif()
endif()
set(ZRT_FIND_NCCL ${ZRT_NCCL})
set(ZRT_NEED_NCCL OFF)
include(${CMAKE_CURRENT_LIST_DIR}/ZrtFindDeps.cmake)

set(_zrt_cuda_missing OFF)
if(ZRT_FIND_CUDA AND NOT CUDAToolkit_FOUND)
  set(_zrt_cuda_missing ON)
  list(FILTER ZRT_DEPS_MISSING EXCLUDE REGEX "^CUDA Toolkit")
endif()
foreach(line IN LISTS ZRT_DEPS_SUMMARY)
  message(STATUS "zrt: ${line}")
endforeach()
if(ZRT_DEPS_MISSING)
  string(REPLACE ";" ", " _zrt_m "${ZRT_DEPS_MISSING}")
  message(FATAL_ERROR "zrt: NOT found: ${_zrt_m} — run scripts/setup.sh (apt-get install the -dev package named)")
endif()

add_library(zrt_deps INTERFACE)
target_link_libraries(zrt_deps INTERFACE PkgConfig::ZRT_YAML PkgConfig::ZRT_CJSON
                      PkgConfig::ZRT_JEMALLOC PkgConfig::ZRT_NUMA PkgConfig::ZRT_URING
                      PkgConfig::ZRT_OPENBLAS MPI::MPI_C OpenMP::OpenMP_C Threads::Threads m)

if(ZRT_FIND_CUDA AND CUDAToolkit_FOUND)
  set(ZRT_HAVE_CUDA ON)
  set(CMAKE_CUDA_ARCHITECTURES ${ZRT_CUDA_ARCH})
  target_compile_definitions(zrt_deps INTERFACE ZRT_HAVE_CUDA=1)
  # stdc++: the CUDA objects' host code needs the C++ runtime, which a C
  # link (a program using libzrt.a) does not add by itself
  target_link_libraries(zrt_deps INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt stdc++)
  message(STATUS "zrt: CUDA compiler ${CMAKE_CUDA_COMPILER}, archs ${ZRT_CUDA_ARCH}")
  if(TARGET ZrtDeps::nccl)
    set(ZRT_HAVE_NCCL ON)
    target_compile_definitions(zrt_deps INTERFACE ZRT_HAVE_NCCL=1)
    target_link_libraries(zrt_deps INTERFACE ZrtDeps::nccl)
  elseif(ZRT_NCCL)
    message(STATUS "zrt: NCCL: not found (GPU collectives go through MPI)")
  endif()
elseif(ZRT_CUDA STREQUAL "ON")
  message(FATAL_ERROR "zrt: ZRT_CUDA=ON but no CUDA compiler/toolkit found")
elseif(ZRT_CUDA STREQUAL "OFF")
  message(STATUS "zrt: CUDA: disabled (ZRT_CUDA=OFF)")
else()
  message(STATUS "zrt: CUDA Toolkit: not found (CPU backend only)")
endif()
