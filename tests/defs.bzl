"""kiln_cc_suite: the Bazel side of a tests/<folder>/ directory, with no per-file edits.

One cc_test per folder (a suite), not one per `*_test.cc`: linking is most of a test's build
time, as in CMake (cmake/KilnHelpers.cmake). Other `*.cc`/`*.h` files of the folder are shared
helpers compiled into the suite. Every other file of the folder (test data) is in `data`,
readable at run time as "tests/<folder>/<file>" relative to the working directory, the same path
as under CTest (which runs tests from the repository root). Files named `*_cmake_only_test.cc`
are CMake-only (compiler-invoking, memory, ... tests): Bazel skips them.
"""

load("@rules_cc//cc:defs.bzl", "cc_test")

def kiln_test_data():
    """The folder's test data: every file but sources and build files."""
    return native.glob(
        ["**"],
        exclude = [
            "**/*.cc",
            "**/*.h",
            "BUILD",
            "BUILD.bazel",
            "CMakeLists.txt",
        ],
    )

def kiln_cc_suite(
        name,
        deps,
        srcs = None,
        exclude = [],
        data = [],
        size = "small",
        shard_count = None,
        env = {},
        local_defines = []):
    """Declares the calling package's test suite: one cc_test of its test files.

    Args:
      name: the cc_test's name (the CMake executable's name).
      deps: kiln libraries the suite links (gtest_main and abseil are added).
      srcs: the test files; default every `*_test.cc` of the folder but the CMake-only ones.
      exclude: test files of the folder that are not part of this suite.
      data: extra data (other packages' files); the folder's own data is always included.
      size: Bazel test size (.bazelrc gives "small" a 300 s timeout, "medium" 600 s).
      shard_count: gtest shards run in parallel (GTEST_SHARD_INDEX), for long suites.
      env: environment of the test run (e.g. the device under test).
      local_defines: preprocessor definitions of the suite's files.
    """
    helpers = native.glob(["*.cc", "*.h"], exclude = ["*_test.cc"])
    if srcs == None:
        srcs = native.glob(["*_test.cc"], exclude = ["*_cmake_only_test.cc"] + exclude)
    cc_test(
        name = name,
        srcs = srcs + helpers,
        data = kiln_test_data() + data,
        size = size,
        shard_count = shard_count,
        env = env,
        local_defines = local_defines,
        deps = deps + ["@absl", "@gtest//:gtest_main"],
    )
