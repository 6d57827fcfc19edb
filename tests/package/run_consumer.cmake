# Driver of the `package.consumer` test (cmake -P). Installs a kiln build tree into a temporary
# prefix, then configures, builds and runs tests/package/consumer against that prefix.
#   -DKILN_BUILD_DIR=<kiln build tree>   -DKILN_CONSUMER_DIR=<tests/package/consumer>
#   -DKILN_WORK_DIR=<scratch folder>     [-DKILN_GENERATOR=Ninja] [-DKILN_CXX_COMPILER=...]
#   [-DKILN_C_COMPILER=...] [-DKILN_BUILD_TYPE=...]
cmake_minimum_required(VERSION 3.22)

foreach(var KILN_BUILD_DIR KILN_CONSUMER_DIR KILN_WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${KILN_WORK_DIR}/prefix")
set(build "${KILN_WORK_DIR}/build")
file(REMOVE_RECURSE "${KILN_WORK_DIR}")
file(MAKE_DIRECTORY "${KILN_WORK_DIR}")

function(step what)
  message(STATUS "package test: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: '${what}' failed (${rc})")
  endif()
endfunction()

step("install into ${prefix}"
  "${CMAKE_COMMAND}" --install "${KILN_BUILD_DIR}" --prefix "${prefix}")

# The consumer must only see the installed headers: the installed tree has no .cc files and
# no source include dir.
file(GLOB_RECURSE installed_sources "${prefix}/*.cc")
if(installed_sources)
  message(FATAL_ERROR "package test: sources were installed: ${installed_sources}")
endif()
foreach(f include/kiln/kiln.h lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnTargets.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "package test: ${prefix}/${f} was not installed")
  endif()
endforeach()

set(configure_args -S "${KILN_CONSUMER_DIR}" -B "${build}" "-DCMAKE_PREFIX_PATH=${prefix}")
if(KILN_GENERATOR)
  list(APPEND configure_args -G "${KILN_GENERATOR}")
endif()
if(KILN_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${KILN_CXX_COMPILER}")
endif()
if(KILN_C_COMPILER)
  list(APPEND configure_args "-DCMAKE_C_COMPILER=${KILN_C_COMPILER}")
endif()
if(KILN_BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE}")
endif()
step("configure the consumer" "${CMAKE_COMMAND}" ${configure_args})
step("build the consumer" "${CMAKE_COMMAND}" --build "${build}")

execute_process(COMMAND "${build}/app" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "package test: app printed:\n${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "package test: app exited with ${rc}")
endif()
if(NOT out MATCHES "kiln consumer ok")
  message(FATAL_ERROR "package test: app did not print 'kiln consumer ok'")
endif()
message(STATUS "package test: passed")
