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
#                 [ENVIRONMENT VAR=value ...] [FILTER <gtest filter>] [NO_RUN] [DATA file ...])
#     A test executable, one per test folder (a suite), not one per source file: linking is
#     most of a test's build time. Linked with GTest::gtest_main and GTest::gmock (plus DEPS),
#     compiled with KILN_TEST_COMPILE_OPTIONS, and registered as one run (kiln_add_test_run
#     with PREFIX "<folder>.", the rest of the arguments passed on) unless NO_RUN is given.
#     DATA is accepted for documentation only (files are read from the source tree).
#
#   kiln_add_test_run(<target> PREFIX <prefix> [FILTER <gtest filter>] [ENVIRONMENT VAR=v ...]
#                     [LABELS l ...])
#     One more run of a test executable: gtest_discover_tests makes one CTest test per
#     TEST()/TEST_F()/TEST_P() case that FILTER selects, named <prefix><Suite>.<Case>, with the
#     environment ENVIRONMENT. So one binary serves several configurations (the frontend suite
#     on each backend, the CPU suites at each KILN_CPU level) without being compiled again.
#     Tests run with the repository root as their working directory, as under Bazel, so a test
#     opens its data files as "tests/<folder>/<file>". Every test is labelled with its folder
#     name (ir, frontend, runtime, ...) plus LABELS.
#
#   kiln_add_test_whole(<target> NAME <ctest name> [FILTER <gtest filter>]
#                       [ENVIRONMENT VAR=v ...] [LABELS l ...] [TIMEOUT s])
#     The cases FILTER selects as one CTest test, run in one process: for suites of hundreds of
#     parameterised cases whose per-process start (a Vulkan device, glslang) would cost more
#     than the cases themselves. gtest still names each failing case in the output.
#
#   kiln_add_conformance(<backend> SOURCES backend_under_test.cc ... DEPS <backend libs> ...
#                        [ENVIRONMENT VAR=v ...] [WHOLE_OP_CASES] [LEVELS]
#                        [SKIP_WITHOUT_DEVICE] [NO_BLOB]
#                        [LEVEL_ENVIRONMENT_v3 VAR=v ...] [LEVEL_ENVIRONMENT_v2 VAR=v ...])
#     Instantiates the conformance suite (tests/conformance) for one backend, from its test
#     folder: the executable <backend>_conformance_test (the suite's objects plus SOURCES, which
#     define conformance::Backend()), registered as `<backend>.<Suite>.<Case>`; the frontend's
#     conformance suite (frontend_backend_test) run again with KILN_DEVICE=<backend> under the
#     same prefix; with WHOLE_OP_CASES, the op cases as the one CTest test
#     `<backend>.conformance_op_test` (for backends whose per-process start, a device, costs more
#     than a case); with LEVELS, the op, random-graph and blob suites again at each x86-64 level
#     of kiln_test_cpu_levels as `<backend>_<level>.conformance_test` (KILN_CPU=x86-64-<level>
#     plus LEVEL_ENVIRONMENT_<level>). ENVIRONMENT applies to every run (a driver file). With
#     SKIP_WITHOUT_DEVICE, every run skips (with the reason) where the backend's device is not
#     available (tests/frontend/skip_without_device.cc: CUDA without a GPU). NO_BLOB leaves out
#     the AOT blob suite (it links the compiler, LLVM included), so the executable links only
#     what the backend needs at run time.

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
      PATTERN "dist" EXCLUDE  # frontend/dist: kiln_dist (MPI) is not installed yet
      PATTERN "CMakeFiles" EXCLUDE)
  # The umbrella folder: frontend/kiln/kiln.h -> include/kiln/kiln.h.
  if(IS_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/kiln")
    install(DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/kiln/"
      DESTINATION "${KILN_INSTALL_INCLUDEDIR}/kiln"
      FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp" PATTERN "*.inc" PATTERN "*.def")
  endif()
endfunction()

# Test code is not where the time goes at run time (kernels are JIT-compiled; the libraries
# under test keep the build type's flags), but it is most of the compile time: -O1 without
# debug info compiles the gtest- and template-heavy test files much faster. Set
# KILN_TEST_COMPILE_OPTIONS to "" to debug a test with full information.
set(KILN_TEST_COMPILE_OPTIONS "-O1;-g0" CACHE STRING
  "Extra compile options of kiln's test executables (appended after the build type's flags)")

function(kiln_add_test name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "NO_RUN" "FILTER" "SOURCES;DEPS;LABELS;ENVIRONMENT;DATA")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_add_test(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_add_test(${name}): SOURCES is empty")
  endif()

  add_executable(${name} ${ARG_SOURCES})
  target_compile_features(${name} PRIVATE cxx_std_20)
  target_compile_options(${name} PRIVATE -Wall -Wextra ${KILN_TEST_COMPILE_OPTIONS})
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/frontend")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)

  if(NOT ARG_NO_RUN)
    get_filename_component(folder "${CMAKE_CURRENT_SOURCE_DIR}" NAME)
    set(run_args PREFIX "${folder}.")
    if(ARG_FILTER)
      list(APPEND run_args FILTER "${ARG_FILTER}")
    endif()
    kiln_add_test_run(${name} ${run_args} LABELS ${ARG_LABELS} ENVIRONMENT ${ARG_ENVIRONMENT})
  endif()
endfunction()

# The label every test of the calling folder carries.
function(kiln_test_folder_label out)
  get_filename_component(folder "${CMAKE_CURRENT_SOURCE_DIR}" NAME)
  set(${out} ${folder} PARENT_SCOPE)
endfunction()

function(kiln_add_test_run target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "PREFIX;FILTER" "ENVIRONMENT;LABELS")
  if(ARG_UNPARSED_ARGUMENTS OR NOT ARG_PREFIX)
    message(FATAL_ERROR "kiln_add_test_run(${target}): needs PREFIX; unknown arguments "
                        "'${ARG_UNPARSED_ARGUMENTS}'")
  endif()
  # A name for this run's test list: the target's name and the number of its run.
  get_property(runs TARGET ${target} PROPERTY KILN_TEST_RUNS)
  if(NOT runs)
    set(runs 0)
  endif()
  math(EXPR runs "${runs} + 1")
  set_property(TARGET ${target} PROPERTY KILN_TEST_RUNS ${runs})
  set(run_id "${target}_run${runs}")
  set(filter_args)
  if(ARG_FILTER)
    set(filter_args TEST_FILTER "${ARG_FILTER}")
  endif()
  gtest_discover_tests(${target}
    TEST_PREFIX "${ARG_PREFIX}"
    ${filter_args}
    TEST_LIST ${run_id}_TESTS
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    DISCOVERY_TIMEOUT 60
    DISCOVERY_MODE PRE_TEST)

  # gtest_discover_tests flattens list-valued PROPERTIES, so labels and environment are set by
  # a CTest include file that runs after the discovered tests are added.
  kiln_test_folder_label(folder_label)
  set(labels ${folder_label} ${ARG_LABELS})
  set(props_file "${CMAKE_CURRENT_BINARY_DIR}/${run_id}_properties.cmake")
  set(content "if(${run_id}_TESTS)\n  set_tests_properties(\${${run_id}_TESTS} PROPERTIES\n")
  string(APPEND content "    LABELS [==[${labels}]==]\n")
  if(ARG_ENVIRONMENT)
    string(APPEND content "    ENVIRONMENT [==[${ARG_ENVIRONMENT}]==]\n")
  endif()
  string(APPEND content "  )\nendif()\n")
  file(WRITE "${props_file}" "${content}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${props_file}")
endfunction()

function(kiln_add_test_whole target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "NAME;FILTER;TIMEOUT" "ENVIRONMENT;LABELS")
  if(ARG_UNPARSED_ARGUMENTS OR NOT ARG_NAME)
    message(FATAL_ERROR "kiln_add_test_whole(${target}): needs NAME; unknown arguments "
                        "'${ARG_UNPARSED_ARGUMENTS}'")
  endif()
  set(filter_arg)
  if(ARG_FILTER)
    set(filter_arg "--gtest_filter=${ARG_FILTER}")
  endif()
  add_test(NAME ${ARG_NAME} COMMAND ${target} ${filter_arg}
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}")
  kiln_test_folder_label(folder_label)
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "${folder_label};${ARG_LABELS}")
  if(ARG_ENVIRONMENT)
    set_tests_properties(${ARG_NAME} PROPERTIES ENVIRONMENT "${ARG_ENVIRONMENT}")
  endif()
  if(ARG_TIMEOUT)
    set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  endif()
endfunction()

# kiln_test_cpu_levels(<out>): the pinned x86-64 levels (KILN_CPU=x86-64-<level>, "v3", "v2")
# that the level runs of the CPU suites use on this machine: those its CPU has (from
# /proc/cpuinfo's flags, as runtime/cpu/cpu_features.cc lists them), so that `make test` on an
# SSE4.2-only host runs the v2 suites and leaves out v3 rather than failing at KILN_CPU's check.
# Empty on other architectures.
function(kiln_test_cpu_levels out)
  set(levels)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" AND EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo flags_line REGEX "^flags" LIMIT_COUNT 1)
    string(REGEX REPLACE "^flags[ \t]*:" "" flags " ${flags_line} ")
    string(APPEND flags " ")
    set(v3_flags avx avx2 bmi1 bmi2 f16c fma abm movbe xsave)
    set(v2_flags cx16 lahf_lm popcnt pni ssse3 sse4_1 sse4_2)
    foreach(level v3 v2)
      set(has ON)
      foreach(flag ${${level}_flags})
        if(NOT flags MATCHES " ${flag} ")
          set(has OFF)
        endif()
      endforeach()
      if(has)
        list(APPEND levels ${level})
      endif()
    endforeach()
  endif()
  set(${out} ${levels} PARENT_SCOPE)
endfunction()

function(kiln_add_conformance backend)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "WHOLE_OP_CASES;LEVELS;SKIP_WITHOUT_DEVICE;NO_BLOB" ""
    "SOURCES;DEPS;ENVIRONMENT;LEVEL_ENVIRONMENT_v3;LEVEL_ENVIRONMENT_v2")
  if(ARG_UNPARSED_ARGUMENTS OR NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_add_conformance(${backend}): needs SOURCES; unknown arguments "
                        "'${ARG_UNPARSED_ARGUMENTS}'")
  endif()
  if(ARG_SKIP_WITHOUT_DEVICE)
    list(APPEND ARG_ENVIRONMENT KILN_TEST_SKIP_WITHOUT_DEVICE=${backend})
  endif()
  set(exe ${backend}_conformance_test)
  # An object library's objects reach only the targets that link it directly: both are named.
  set(suite kiln_conformance kiln_conformance_blob)
  if(ARG_NO_BLOB)
    set(suite kiln_conformance)
  endif()
  kiln_add_test(${exe} SOURCES ${ARG_SOURCES} DEPS ${suite} ${ARG_DEPS} NO_RUN)

  # The frontend's conformance suite on this backend's device (kiln::Any reads KILN_DEVICE).
  kiln_add_test_run(frontend_backend_test PREFIX "${backend}."
    ENVIRONMENT KILN_DEVICE=${backend} ${ARG_ENVIRONMENT})

  set(op_cases "*ConformanceOpTest.*:ConformanceOpCoverageTest.*")
  if(ARG_WHOLE_OP_CASES)
    kiln_add_test_whole(${exe} NAME ${backend}.conformance_op_test FILTER "${op_cases}"
      ENVIRONMENT ${ARG_ENVIRONMENT})
    kiln_add_test_run(${exe} PREFIX "${backend}." FILTER "-${op_cases}"
      ENVIRONMENT ${ARG_ENVIRONMENT})
  else()
    kiln_add_test_run(${exe} PREFIX "${backend}." ENVIRONMENT ${ARG_ENVIRONMENT})
  endif()

  if(ARG_LEVELS)
    kiln_test_cpu_levels(levels)
    foreach(level ${levels})
      kiln_add_test_whole(${exe} NAME ${backend}_${level}.conformance_test
        FILTER "${op_cases}:ConformanceRandomGraphTest.*:ConformanceBlobTest.*"
        ENVIRONMENT ${ARG_ENVIRONMENT} KILN_CPU=x86-64-${level} ${ARG_LEVEL_ENVIRONMENT_${level}}
        LABELS cpu_level TIMEOUT 1500)
    endforeach()
  endif()
endfunction()
