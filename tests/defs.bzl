"""kiln_cc_suite: the Bazel side of a tests/<folder>/ directory, with no per-file edits.

One cc_test per folder (a suite), not one per `*_test.cc`: linking is most of a test's build
time, as in CMake (cmake/KilnHelpers.cmake). Other `*.cc`/`*.h` files of the folder are shared
helpers compiled into the suite. Every other file of the folder (test data) is in `data`,
readable at run time as "tests/<folder>/<file>" relative to the working directory, the same path
as under CTest (which runs tests from the repository root). Files named `*_cmake_only_test.cc`
are CMake-only (compiler-invoking, memory, ... tests): Bazel skips them. A folder's
`backend_under_test.cc` belongs to its kiln_conformance_suite, not to its kiln_cc_suite.

kiln_conformance_suite: one backend's instantiation of the conformance suite
(//tests/conformance:suite) and of the frontend's (//tests/frontend:backend_suite), the Bazel side
of CMake's kiln_add_conformance.
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
        srcs = native.glob(
            ["*_test.cc"],
            exclude = ["*_cmake_only_test.cc", "backend_under_test.cc"] + exclude,
        )
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

def kiln_conformance_suite(
        backend,
        deps,
        srcs = ["backend_under_test.cc"],
        size = "large",
        shard_count = 2,
        env = {},
        skip_without_device = False,
        blob = True):
    """Instantiates the conformance suites for one backend, from its test package.

    Declares `<backend>_conformance_test` (//tests/conformance:suite with `srcs`, which define
    conformance::Backend()) and `<backend>_frontend_backend_test` (//tests/frontend:backend_suite
    with KILN_DEVICE=<backend>).

    Args:
      backend: the backend's name, as KILN_DEVICE spells it ("cpu", "vulkan").
      deps: the backend's libraries the description links.
      srcs: the backend-under-test description.
      size: Bazel test size of both tests.
      shard_count: gtest shards of both tests.
      env: environment of both runs (a driver file).
      blob: whether the AOT blob suite is part of it (//tests/conformance:suite, else
        :suite_core).
      skip_without_device: skip every case, with the reason, where the backend's device is not
        available (tests/frontend/skip_without_device.cc: CUDA without a GPU).
    """
    env = dict(env)
    if skip_without_device:
        env["KILN_TEST_SKIP_WITHOUT_DEVICE"] = backend
    cc_test(
        name = backend + "_conformance_test",
        srcs = srcs,
        data = kiln_test_data(),
        size = size,
        shard_count = shard_count,
        env = env,
        deps = deps + [
            "//tests/conformance:suite" if blob else "//tests/conformance:suite_core",
            "@absl",
            "@gtest//:gtest_main",
        ],
    )
    frontend_env = dict(env)
    frontend_env["KILN_DEVICE"] = backend
    cc_test(
        name = backend + "_frontend_backend_test",
        data = ["//tests/frontend:fixtures"],
        size = size,
        shard_count = shard_count,
        env = frontend_env,
        deps = [
            "//tests/frontend:backend_suite",
            "@gtest//:gtest_main",
        ],
    )
