"""kiln_cc_tests: the Bazel side of a tests/<folder>/ directory, with no per-file edits.

One cc_test per `*_test.cc` (target name = file name without `.cc`). Other `*.cc`/`*.h` files
of the folder are shared helpers compiled into every test. Every other file of the folder
(test data) is in `data`, readable at run time as "tests/<folder>/<file>" relative to the working
directory, the same path as under CTest (which runs tests from the repository root).
Files named `*_cmake_only_test.cc` are CMake-only (compiler-invoking, memory, ... tests): Bazel
skips them.
"""

load("@rules_cc//cc:defs.bzl", "cc_test")

def kiln_cc_tests(deps, size = "small", per_test = {}):
    """Declares the tests of the calling package.

    Args:
      deps: kiln libraries the tests link (gtest_main and abseil are added).
      size: Bazel test size of every test (.bazelrc gives "small" a 300 s timeout).
      per_test: {"foo_test": {attr: value}} extra or overriding cc_test attributes for one test.
    """
    helpers = native.glob(
        ["*.cc", "*.h"],
        exclude = ["*_test.cc"],
    )
    data = native.glob(
        ["**"],
        exclude = [
            "**/*.cc",
            "**/*.h",
            "BUILD",
            "BUILD.bazel",
            "CMakeLists.txt",
        ],
    )
    for src in native.glob(["*_test.cc"], exclude = ["*_cmake_only_test.cc"]):
        name = src[:-len(".cc")]
        attrs = {
            "srcs": [src] + helpers,
            "data": data,
            "size": size,
            "deps": deps + ["@absl", "@gtest//:gtest_main"],
        }
        attrs.update(per_test.get(name, {}))
        cc_test(name = name, **attrs)
