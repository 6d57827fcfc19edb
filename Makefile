# kiln developer entry points. CMake + Ninja via CMakePresets.json; Bazel offline via .bazelrc.
#   make demo       install deps, build, train the Fashion-MNIST MLP (examples/fashion_mnist)
#   make test       install deps, build, make the tests' Python venv, run every CTest test
#   make test-asan  same under AddressSanitizer + UBSan (all tests but the package, docs and cross tests)
#   make bazel-test bazel test //... (offline, Debian's bazel-bootstrap)
#   make format     clang-format -i on every C++ file
#   make clean      remove build/ and Bazel's outputs

SHELL := /bin/bash
JOBS ?= 2
CTEST_ARGS ?=

.PHONY: all deps configure build venv demo test build-asan test-asan bazel-test format format-check clean

all: build

deps:
	scripts/install_deps.sh

build: configure
	cmake --build --preset default

configure: deps
	cmake --preset default

# The main job: trains the MLP 784-512-256-10 on Fashion-MNIST with the CPU backend for
# DEMO_EPOCHS epochs, printing progress and per-epoch test accuracy; checkpoint and metrics go to
# runs/mlp/ (delete it to start over: a second run resumes from its last checkpoint).
DEMO_EPOCHS ?= 5
demo: configure
	cmake --build --preset default --target fashion_mnist_mlp
	build/default/examples/fashion_mnist/fashion_mnist_mlp --epochs $(DEMO_EPOCHS) --dir runs/mlp

# The tests' Python venv (scripts/make_venv.sh: pinned onnx and numpy from PyPI, once) for the
# ONNX conformance test (tests/onnx/conformance). Where it cannot be made (no network) make test
# warns and that test skips; in CI (CI set) it is an error.
venv: deps
	@scripts/make_venv.sh build/venv || { if [[ -n "$$CI" ]]; then exit 1; fi; \
	  echo "make: warning: no Python venv in build/venv: onnx.conformance will skip"; }

test: build venv
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
