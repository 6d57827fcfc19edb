# kiln developer entry points. CMake + Ninja via CMakePresets.json; Bazel offline via .bazelrc.
#   make demo       install deps, build, run the seed example
#   make test       install deps, build, run every CTest test
#   make test-asan  same under AddressSanitizer + UBSan (all tests but the package test)
#   make bazel-test bazel test //... (offline, Debian's bazel-bootstrap)
#   make format     clang-format -i on every C++ file
#   make clean      remove build/ and Bazel's outputs

SHELL := /bin/bash
JOBS ?= 2
CTEST_ARGS ?=

.PHONY: all deps configure build demo test build-asan test-asan bazel-test format format-check clean

all: build

deps:
	scripts/install_deps.sh

build: configure
	cmake --build --preset default

configure: deps
	cmake --preset default

# Builds only what the seed example needs.
demo: configure
	cmake --build --preset default --target seed
	build/default/examples/seed/seed

test: build
	ctest --preset default -j$(JOBS) $(CTEST_ARGS)

build-asan: deps
	cmake --preset asan
	cmake --build --preset asan

test-asan: build-asan
	ctest --preset asan -j$(JOBS) $(CTEST_ARGS)

bazel-test:
	scripts/install_deps.sh --bazel
	bazel test //...

CXX_FILES = git ls-files --cached --others --exclude-standard -- '*.h' '*.cc' '*.cpp' '*.hpp'

format:
	scripts/install_deps.sh --format
	$(CXX_FILES) | xargs -r clang-format -i

format-check:
	scripts/install_deps.sh --format
	$(CXX_FILES) | xargs -r clang-format --dry-run -Werror

clean:
	rm -rf build
	if command -v bazel >/dev/null 2>&1 && [ -e bazel-out ]; then bazel clean; fi
