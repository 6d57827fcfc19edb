# Build helpers shared by every folder of kiln.
#
#   kiln_add_library(<name> SOURCES a.cc ... [DEPS x y ...])
#     STATIC library, position-independent, C++20, -Wall -Wextra. The repository root and
#     <root>/frontend are its public include dirs in the build tree (so `#include "ir/graph.h"`
#     and `#include <kiln/kiln.h>` both work); installed, they are <prefix>/include and
#     <prefix>/include/kiln. DEPS are linked PUBLIC. The library is installed and exported
#     into the `kilnTargets` export set (namespace kiln::), and an in-tree alias kiln::<name>
#     exists. The folder's headers (*.h *.hpp *.inc *.def, recursively) are installed under
#     <prefix>/include/kiln/<folder>/; a `kiln/` sub-folder (frontend/kiln/kiln.h) is installed
#     as <prefix>/include/kiln/ instead.
#
#   kiln_add_test(<name> SOURCES a_test.cc ... [DEPS kiln_ir ...] [LABELS l ...]
#                 [ENVIRONMENT VAR=value ...] [DATA file ...])
#     Test executable linked with GTest::gtest_main and GTest::gmock (plus DEPS), registered
#     with gtest_discover_tests: one CTest test per TEST()/TEST_F(). Tests run with the
#     repository root as their working directory, as under Bazel, so a test opens its data
#     files as "tests/<folder>/<file>". Every test is labelled with its folder name
#     (ir, frontend, runtime, ...) plus LABELS. DATA is accepted for documentation only
#     (files are read from the source tree).

include_guard(GLOBAL)
include(GNUInstallDirs)
include(GoogleTest)

set(KILN_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
set(KILN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kiln")

function(kiln_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "SOURCES;DEPS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_add_library(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_add_library(${name}): SOURCES is empty")
  endif()

  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(kiln::${name} ALIAS ${name})
  set_target_properties(${name} PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    EXPORT_NAME ${name})
  target_compile_features(${name} PUBLIC cxx_std_20)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  target_include_directories(${name} PUBLIC
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>"
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/frontend>"
    "$<INSTALL_INTERFACE:${KILN_INSTALL_INCLUDEDIR}>"
    "$<INSTALL_INTERFACE:${KILN_INSTALL_INCLUDEDIR}/kiln>")
  if(ARG_DEPS)
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  endif()

  install(TARGETS ${name}
    EXPORT kilnTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

  # Headers keep their folder: ir/graph.h -> include/kiln/ir/graph.h.
  file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  install(DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/"
    DESTINATION "${KILN_INSTALL_INCLUDEDIR}/kiln/${rel}"
    FILES_MATCHING
      PATTERN "*.h" PATTERN "*.hpp" PATTERN "*.inc" PATTERN "*.def"
      PATTERN "kiln" EXCLUDE
      PATTERN "CMakeFiles" EXCLUDE)
  # The umbrella folder: frontend/kiln/kiln.h -> include/kiln/kiln.h.
  if(IS_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/kiln")
    install(DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/kiln/"
      DESTINATION "${KILN_INSTALL_INCLUDEDIR}/kiln"
      FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp" PATTERN "*.inc" PATTERN "*.def")
  endif()
endfunction()

function(kiln_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "SOURCES;DEPS;LABELS;ENVIRONMENT;DATA")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_add_test(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_add_test(${name}): SOURCES is empty")
  endif()

  add_executable(${name} ${ARG_SOURCES})
  target_compile_features(${name} PRIVATE cxx_std_20)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/frontend")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)

  get_filename_component(folder "${CMAKE_CURRENT_SOURCE_DIR}" NAME)
  gtest_discover_tests(${name}
    TEST_PREFIX "${folder}."
    TEST_LIST ${name}_TESTS
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    DISCOVERY_TIMEOUT 60
    DISCOVERY_MODE PRE_TEST)

  # gtest_discover_tests flattens list-valued PROPERTIES, so labels and environment are set by
  # a CTest include file that runs after the discovered tests are added.
  set(labels ${folder} ${ARG_LABELS})
  set(props_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_properties.cmake")
  set(content "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES\n")
  string(APPEND content "    LABELS [==[${labels}]==]\n")
  if(ARG_ENVIRONMENT)
    string(APPEND content "    ENVIRONMENT [==[${ARG_ENVIRONMENT}]==]\n")
  endif()
  string(APPEND content "  )\nendif()\n")
  file(WRITE "${props_file}" "${content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${props_file}")
endfunction()
