# Driver of the `package.install` test (cmake -P), the fixture of package.consumer and of the docs
# tests (tests/docs): installs a kiln build tree into a fresh prefix the way docs/deploy.md says,
# with --strip, and checks the layout the README documents.
#   -DKILN_BUILD_DIR=<kiln build tree>  -DKILN_PREFIX=<the prefix, removed first>
#   -DKILN_LIBDIR=<CMAKE_INSTALL_LIBDIR>  [-DKILN_READELF=<readelf>]
cmake_minimum_required(VERSION 3.22)

foreach(var KILN_BUILD_DIR KILN_PREFIX KILN_LIBDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install.cmake: -D${var}=... is required")
  endif()
endforeach()
set(prefix "${KILN_PREFIX}")
set(lib "${prefix}/${KILN_LIBDIR}")

# A fresh prefix, so a file the install no longer makes cannot linger and pass the checks.
file(REMOVE_RECURSE "${prefix}")
message(STATUS "package test: cmake --install ${KILN_BUILD_DIR} --prefix ${prefix} --strip")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${KILN_BUILD_DIR}" --prefix "${prefix}" --strip
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "package test: the install failed (${rc}):\n${out}${err}")
endif()

# Only headers go to include/: no sources, no build-tree paths.
file(GLOB_RECURSE installed_sources "${prefix}/*.cc" "${prefix}/*.cpp")
if(installed_sources)
  message(FATAL_ERROR "package test: sources were installed: ${installed_sources}")
endif()
# What README.md ("Using the installed package") and docs/deploy.md promise.
foreach(f
    bin/kiln
    include/kiln/kiln.h
    include/kiln/codegen/aot/aot.h
    include/kiln/frontend/onnx/import.h
    include/kiln/frontend/train/checkpoint.h
    include/kiln_runtime.h
    ${KILN_LIBDIR}/libkiln_runtime.so
    ${KILN_LIBDIR}/pkgconfig/kiln_runtime.pc
    ${KILN_LIBDIR}/cmake/kiln/kilnConfig.cmake
    ${KILN_LIBDIR}/cmake/kiln/kilnConfigVersion.cmake
    ${KILN_LIBDIR}/cmake/kiln/kilnTargets.cmake
    ${KILN_LIBDIR}/cmake/kiln/kilnOnnxTargets.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "package test: ${prefix}/${f} was not installed")
  endif()
endforeach()

# -lkiln_runtime must mean the C runtime, also with -static: no C++ archive of that name.
if(EXISTS "${lib}/libkiln_runtime.a")
  message(FATAL_ERROR "package test: ${lib}/libkiln_runtime.a would shadow libkiln_runtime.so "
                      "for -static links (the C++ runtime library is libkiln_runtime_core.a)")
endif()

# --strip: no debug information left in the programs, libkiln_runtime.so or the archives
# (the root CMakeLists.txt strips the archives' debug sections; CMake strips the rest).
file(GLOB archives "${lib}/*.a")
if(KILN_READELF)
  foreach(f "${prefix}/bin/kiln" "${lib}/libkiln_runtime.so" ${archives})
    execute_process(COMMAND "${KILN_READELF}" -S --wide "${f}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE sections ERROR_QUIET)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "package test: '${KILN_READELF} -S ${f}' failed")
    endif()
    if(sections MATCHES "\\.debug_info")
      message(FATAL_ERROR "package test: ${f} still has debug information after --strip")
    endif()
  endforeach()
endif()

# The size (docs/deploy.md, "Installing" records it for both presets).
file(GLOB_RECURSE files "${prefix}/*")
set(total 0)
set(archive_total 0)
foreach(f IN LISTS files)
  file(SIZE "${f}" size)
  math(EXPR total "${total} + ${size}")
endforeach()
foreach(f IN LISTS archives)
  file(SIZE "${f}" size)
  math(EXPR archive_total "${archive_total} + ${size}")
endforeach()
file(SIZE "${prefix}/bin/kiln" kiln_size)
list(LENGTH files count)
math(EXPR total_mb "${total} / 1000000")
math(EXPR archive_mb "${archive_total} / 1000000")
math(EXPR kiln_mb "${kiln_size} / 1000000")
message(STATUS "package test: installed ${count} files, ${total_mb} MB "
               "(static libraries ${archive_mb} MB, bin/kiln ${kiln_mb} MB)")
message(STATUS "package test: install passed")
