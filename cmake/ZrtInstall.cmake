# ZrtInstall.cmake — what `cmake --install` puts in a prefix and what
# `cpack -G DEB` packs, so that other programs build against zrt:
#   lib/libzrt.so.MAJOR (+ libzrt.so), lib/libzrt.a, include/zrt.h,
#   lib/pkgconfig/zrt.pc, lib/cmake/zrt/ (zrtConfig.cmake, its version file,
#   the targets zrt::zrt and zrt::zrt_static, ZrtFindDeps.cmake),
#   bin/ (zrt, zrt-perf; the examples install themselves), share/zrt/
#   (example launch configs, the GPT-2 corpus), share/doc/zrt/.
# Invariants: every installed file names others by paths relative to itself
# (zrt.pc by ${pcfiledir}, the CMake files by their own directory), so a
# prefix can be moved or unpacked under a scratch root (dpkg -x) and still
# be used; the package finds the static library's dependencies with the
# build's own probes (cmake/ZrtFindDeps.cmake).
include(CMakePackageConfigHelpers)
set(ZRT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zrt)

install(TARGETS zrt EXPORT zrtTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS zrt_static zrt_deps EXPORT zrtStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/zrt.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS zrt_cli zrt_perf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT zrtTargets NAMESPACE zrt:: DESTINATION ${ZRT_CMAKE_DIR})
install(EXPORT zrtStaticTargets NAMESPACE zrt:: DESTINATION ${ZRT_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/zrtConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/zrtConfig.cmake INSTALL_DESTINATION ${ZRT_CMAKE_DIR})
# 0.x: a new minor may change the ABI (the soname is the major, 0), so only
# the same minor is compatible; from 1.0 on, the same major.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_zrt_compat SameMinorVersion)
else()
  set(_zrt_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/zrtConfigVersion.cmake
                                 COMPATIBILITY ${_zrt_compat})
install(FILES ${CMAKE_BINARY_DIR}/zrtConfig.cmake ${CMAKE_BINARY_DIR}/zrtConfigVersion.cmake
              ${CMAKE_SOURCE_DIR}/cmake/ZrtFindDeps.cmake
        DESTINATION ${ZRT_CMAKE_DIR})

# ---- zrt.pc: Libs for the shared library; the static one's dependencies in
# Requires.private (pkg-config modules) and Libs.private (the rest), as the
# build found them.
function(zrt_pc_libs out)
  set(flags)
  set(dirs)
  foreach(lib IN LISTS ARGN)
    if(lib MATCHES "^-")
      list(APPEND flags "${lib}")
    elseif(lib MATCHES "^(.*)/lib([^/]+)\\.(so|a)(\\.[0-9.]+)?$")
      set(dir ${CMAKE_MATCH_1})
      set(name ${CMAKE_MATCH_2})
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES AND NOT dir IN_LIST dirs)
        list(APPEND dirs ${dir})
        list(APPEND flags "-L${dir}" "-Wl,-rpath,${dir}")
      endif()
      list(APPEND flags "-l${name}")
    elseif(lib)
      list(APPEND flags "-l${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  string(REPLACE ";" " " flags "${flags}")
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
set(_zrt_pc_private ${MPI_C_LINK_FLAGS} ${MPI_C_LIBRARIES} ${OpenMP_C_FLAGS})
if(ZRT_HAVE_CUDA)
  # the CUDA objects' host code needs the C++ runtime (a C link lacks it)
  list(APPEND _zrt_pc_private ${CUDA_cudart_LIBRARY} ${CUDA_cublas_LIBRARY} ${CUDA_cublasLt_LIBRARY}
       stdc++)
endif()
if(ZRT_HAVE_NCCL)
  list(APPEND _zrt_pc_private ${ZRT_NCCL_LIB})
endif()
list(APPEND _zrt_pc_private -pthread m)
zrt_pc_libs(ZRT_PC_LIBS_PRIVATE ${_zrt_pc_private})
set(ZRT_PC_REQUIRES_PRIVATE "yaml-0.1 libcjson jemalloc numa liburing openblas")
file(RELATIVE_PATH ZRT_PC_PREFIX_FROM_PCDIR /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" ZRT_PC_PREFIX_FROM_PCDIR "${ZRT_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/zrt.pc.in ${CMAKE_BINARY_DIR}/zrt.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/zrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- data and docs
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/zrt/configs)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_SOURCE_DIR}/examples/gpt2/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
        RENAME gpt2-example.md)

# ---- Debian package: cpack -G DEB (from the build directory). Depends: the
# runtime packages of the -dev packages scripts/setup.sh installs (libzrt.so
# and the commands need these; tests/cli/test_install_deb.sh checks every
# library they load comes from one of them); Recommends: the -dev packages
# that static linking (pkg-config --static, zrt::zrt_static) needs. A CUDA
# build also needs the CUDA Toolkit it was built with (not a Debian package).
set(CPACK_PACKAGE_NAME zrt)
set(CPACK_PACKAGE_VENDOR zrt)
set(CPACK_PACKAGE_CONTACT "zrt maintainers <zrt@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "ZeRO-style mixed-precision and memory-optimization training runtime (library, header, zrt command)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(ZRT_DEB_DEPENDS libc6 libgomp1 libopenmpi3 openmpi-bin
    "libopenblas0-pthread | libopenblas0-openmp | libopenblas0-serial" libjemalloc2 libnuma1
    libyaml-0-2 libcjson1 liburing2)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "pkg-config, libopenmpi-dev, libopenblas-dev, libjemalloc-dev, libnuma-dev, libyaml-dev, libcjson-dev, liburing-dev")
if(ZRT_HAVE_CUDA)
  # the CUDA objects' host code links the C++ runtime
  list(APPEND ZRT_DEB_DEPENDS libstdc++6 libgcc-s1)
  string(APPEND CPACK_PACKAGE_DESCRIPTION_SUMMARY
         "; built with CUDA ${CUDAToolkit_VERSION}: needs that toolkit at ${CUDAToolkit_LIBRARY_DIR}")
endif()
string(REPLACE ";" ", " CPACK_DEBIAN_PACKAGE_DEPENDS "${ZRT_DEB_DEPENDS}")
set(CPACK_GENERATOR DEB)
include(CPack)
