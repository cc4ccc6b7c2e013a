# ZrtFindDeps.cmake — finds zrt's dependencies and makes one imported target
# for each. Two users, so that they find the same libraries the same way:
# the build (cmake/ZrtDeps.cmake) and an installed zrt's package
# (zrtConfig.cmake, which installs this file beside it) for the static
# library zrt::zrt_static, whose link interface names these targets.
#
# In:  ZRT_FIND_CUDA  look for the CUDA Toolkit (CUDA::cudart, CUDA::cublas,
#                     CUDA::cublasLt); the caller has decided CUDA is wanted
#      ZRT_FIND_NCCL  look for NCCL (target ZrtDeps::nccl) beside the toolkit;
#                     ZRT_NEED_NCCL: its absence counts as missing (the build
#                     goes on without it; a zrt built with it needs it)
# Out: ZRT_DEPS_MISSING  what was not found, as "name (the Debian -dev
#                        package or what to install)"; empty when all were
#      ZRT_DEPS_SUMMARY  one "name version: found" line per dependency found
#      imported targets: PkgConfig::ZRT_YAML, _CJSON, _JEMALLOC, _NUMA, _URING,
#      _OPENBLAS; MPI::MPI_C; OpenMP::OpenMP_C; Threads::Threads; with CUDA
#      CUDA::cudart, CUDA::cublas, CUDA::cublasLt; with NCCL ZrtDeps::nccl
# Nothing here stops the caller: it decides what a missing one means.
set(ZRT_DEPS_MISSING)
set(ZRT_DEPS_SUMMARY)

find_package(PkgConfig QUIET)
if(NOT PkgConfig_FOUND)
  list(APPEND ZRT_DEPS_MISSING "pkg-config (apt-get install pkg-config)")
endif()
find_package(Threads QUIET)
if(NOT Threads_FOUND)
  list(APPEND ZRT_DEPS_MISSING "pthreads (build-essential)")
endif()
find_package(OpenMP QUIET COMPONENTS C)
if(OpenMP_C_FOUND)
  list(APPEND ZRT_DEPS_SUMMARY "OpenMP ${OpenMP_C_VERSION}: found")
else()
  list(APPEND ZRT_DEPS_MISSING "OpenMP (a C compiler with OpenMP: gcc, or clang with libomp-dev)")
endif()
find_package(MPI QUIET COMPONENTS C)
if(MPI_C_FOUND)
  list(APPEND ZRT_DEPS_SUMMARY "MPI ${MPI_C_VERSION}: found")
else()
  list(APPEND ZRT_DEPS_MISSING "MPI (libopenmpi-dev)")
endif()

# pkg-config module -> Debian -dev package
set(_zrt_pkgs "YAML yaml-0.1 libyaml-dev" "CJSON libcjson libcjson-dev"
    "JEMALLOC jemalloc libjemalloc-dev" "NUMA numa libnuma-dev" "URING liburing liburing-dev"
    "OPENBLAS openblas libopenblas-dev")
foreach(_zrt_p IN LISTS _zrt_pkgs)
  string(REPLACE " " ";" _zrt_p "${_zrt_p}")
  list(GET _zrt_p 0 _zrt_var)
  list(GET _zrt_p 1 _zrt_mod)
  list(GET _zrt_p 2 _zrt_deb)
  if(PkgConfig_FOUND AND NOT TARGET PkgConfig::ZRT_${_zrt_var})
    pkg_check_modules(ZRT_${_zrt_var} QUIET IMPORTED_TARGET ${_zrt_mod})
  endif()
  if(TARGET PkgConfig::ZRT_${_zrt_var})
    list(APPEND ZRT_DEPS_SUMMARY "${_zrt_mod} ${ZRT_${_zrt_var}_VERSION}: found")
  else()
    list(APPEND ZRT_DEPS_MISSING "${_zrt_mod} (${_zrt_deb})")
  endif()
endforeach()

if(ZRT_FIND_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    list(APPEND ZRT_DEPS_SUMMARY "CUDA Toolkit ${CUDAToolkit_VERSION}: found")
  else()
    list(APPEND ZRT_DEPS_MISSING "CUDA Toolkit (the one zrt was built with: set CUDAToolkit_ROOT)")
  endif()
endif()
if(ZRT_FIND_CUDA AND ZRT_FIND_NCCL AND NOT TARGET ZrtDeps::nccl)
  find_library(ZRT_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  find_path(ZRT_NCCL_INC nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(ZRT_NCCL_LIB AND ZRT_NCCL_INC)
    add_library(ZrtDeps::nccl UNKNOWN IMPORTED)
    set_target_properties(ZrtDeps::nccl PROPERTIES IMPORTED_LOCATION "${ZRT_NCCL_LIB}"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${ZRT_NCCL_INC}")
  endif()
endif()
if(TARGET ZrtDeps::nccl)
  list(APPEND ZRT_DEPS_SUMMARY "NCCL (${ZRT_NCCL_LIB}): found")
elseif(ZRT_FIND_CUDA AND ZRT_FIND_NCCL AND ZRT_NEED_NCCL)
  list(APPEND ZRT_DEPS_MISSING "NCCL (libnccl.so and nccl.h: set ZRT_NCCL_LIB and ZRT_NCCL_INC)")
endif()
