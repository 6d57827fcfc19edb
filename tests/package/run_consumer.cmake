# Driver of the `package.consumer` test (cmake -P). Uses the prefix that package.install made
# (tests/package/install.cmake) as a user would: configures, builds and runs tests/package/consumer
# with find_package(kiln); builds its C program without CMake too (plain cc -lkiln_runtime, and
# pkg-config); checks `kiln --version` against the package's version.
#   -DKILN_PREFIX=<installed prefix>  -DKILN_LIBDIR=<CMAKE_INSTALL_LIBDIR>
#   -DKILN_CONSUMER_DIR=<tests/package/consumer>  -DKILN_WORK_DIR=<scratch folder>
#   -DKILN_ONNX_MODEL=<a model.onnx>  -DKILN_VERSION=<the project version>
#   [-DKILN_GENERATOR=Ninja] [-DKILN_CXX_COMPILER=...] [-DKILN_C_COMPILER=...]
#   [-DKILN_BUILD_TYPE=...] [-DKILN_COMPILER_LAUNCHER=ccache]
cmake_minimum_required(VERSION 3.22)

foreach(var KILN_PREFIX KILN_LIBDIR KILN_CONSUMER_DIR KILN_WORK_DIR KILN_ONNX_MODEL KILN_VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${KILN_PREFIX}")
set(lib "${prefix}/${KILN_LIBDIR}")
set(build "${KILN_WORK_DIR}/build")
set(out "${KILN_WORK_DIR}/out")
file(REMOVE_RECURSE "${out}")
file(MAKE_DIRECTORY "${out}")

# Runs a command; fails the test on a non-zero exit; `var` gets its stdout.
function(step what var)
  message(STATUS "package test: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: '${what}' failed (${rc}):\n${stdout}${stderr}")
  endif()
  set(${var} "${stdout}" PARENT_SCOPE)
endfunction()

# `kiln --version` is the package's version.
step("kiln --version" version "${prefix}/bin/kiln" --version)
if(NOT version STREQUAL "kiln ${KILN_VERSION}\n")
  message(FATAL_ERROR "package test: kiln --version printed '${version}', not 'kiln ${KILN_VERSION}'")
endif()

# CMake: find_package(kiln) and the three documented targets. The build folder is kept between
# runs (only what changed rebuilds; the install keeps the headers' time stamps).
set(configure_args -S "${KILN_CONSUMER_DIR}" -B "${build}" "-DCMAKE_PREFIX_PATH=${prefix}")
if(KILN_GENERATOR)
  list(APPEND configure_args -G "${KILN_GENERATOR}")
endif()
foreach(pair CXX_COMPILER:KILN_CXX_COMPILER C_COMPILER:KILN_C_COMPILER
             BUILD_TYPE:KILN_BUILD_TYPE CXX_COMPILER_LAUNCHER:KILN_COMPILER_LAUNCHER
             C_COMPILER_LAUNCHER:KILN_COMPILER_LAUNCHER)
  string(REPLACE ":" ";" pair "${pair}")
  list(GET pair 0 cmake_var)
  list(GET pair 1 our_var)
  if(${our_var})
    list(APPEND configure_args "-DCMAKE_${cmake_var}=${${our_var}}")
  endif()
endforeach()
step("configure the consumer" ignored "${CMAKE_COMMAND}" ${configure_args})
step("build the consumer" ignored "${CMAKE_COMMAND}" --build "${build}")

step("run app" app_out "${build}/app" "${KILN_ONNX_MODEL}" "${out}")
message(STATUS "package test: app printed:\n${app_out}")
if(NOT app_out MATCHES "kiln consumer ok")
  message(FATAL_ERROR "package test: app did not print 'kiln consumer ok'")
endif()
step("run cpu_only" cpu_only_out "${build}/cpu_only")
if(NOT cpu_only_out MATCHES "kiln cpu-only consumer ok")
  message(FATAL_ERROR "package test: cpu_only printed '${cpu_only_out}'")
endif()
string(REGEX MATCH "y = [^\n]*" want "${app_out}")

# The C program three ways; each must print the C++ result for the blob app wrote.
set(c_compiler cc)
if(KILN_C_COMPILER)
  set(c_compiler "${KILN_C_COMPILER}")
endif()
step("cc -lkiln_runtime" ignored "${c_compiler}" -std=c99 -Wall -Werror
     "${KILN_CONSUMER_DIR}/c_app.c" "-I${prefix}/include" "-L${lib}" -lkiln_runtime
     "-Wl,-rpath,${lib}" -o "${out}/c_app_plain")
set(ENV{PKG_CONFIG_PATH} "${lib}/pkgconfig")
step("pkg-config --modversion kiln_runtime" pc_version pkg-config --modversion kiln_runtime)
if(NOT pc_version STREQUAL "${KILN_VERSION}\n")
  message(FATAL_ERROR "package test: kiln_runtime.pc has version '${pc_version}'")
endif()
step("pkg-config --cflags --libs kiln_runtime" pc_flags pkg-config --cflags --libs kiln_runtime)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
step("cc ... $(pkg-config --cflags --libs kiln_runtime)" ignored "${c_compiler}" -std=c99 -Wall
     -Werror "${KILN_CONSUMER_DIR}/c_app.c" ${pc_flags} "-Wl,-rpath,${lib}"
     -o "${out}/c_app_pkgconfig")
foreach(c_app "${build}/c_app" "${out}/c_app_plain" "${out}/c_app_pkgconfig")
  step("run ${c_app}" got "${c_app}" "${out}/net.kiln")
  string(STRIP "${got}" got)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "package test: ${c_app} printed '${got}', app printed '${want}'")
  endif()
endforeach()
message(STATUS "package test: consumer passed")
