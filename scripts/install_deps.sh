#!/usr/bin/env bash
# Installs the Debian packages kiln needs, only those that are missing.
#   scripts/install_deps.sh            build + test dependencies
#   scripts/install_deps.sh --bazel    ... plus Bazel (offline, Debian's bazel-bootstrap)
#   scripts/install_deps.sh --format   ... plus clang-format
#   scripts/install_deps.sh --bench    ... plus the benchmark peers' (benchmarks/README.md)
# Runs `apt-get update` only when something is missing; uses sudo when not root.
set -euo pipefail

# ---- The package lists: add new dependencies here ----------------------------------------------
BASE_PACKAGES=(
  make cmake ninja-build g++ ccache
  pkg-config  # tests/package: a C program built against kiln_runtime.pc, as a user would
  python3  # tests/docs/docblocks.py (stdlib only), the ONNX and fixture scripts
  libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev
  zlib1g-dev
  dataset-fashion-mnist
  llvm-16-dev
  nlohmann-json3-dev
  libicu-dev  # frontend/text: the BERT tokenizer's Unicode data (NFD, categories, case mapping)
  graphviz
  libonnx-dev libprotobuf-dev
  python3-onnx   # tests/onnx/export_check.py (onnx.checker on exported models)
  python3-venv   # scripts/make_venv.sh: the venv (onnx from PyPI) of tests/onnx/conformance
  ca-certificates  # pip reaches PyPI over https (its postinst adds local CAs to the bundle)
  mlir-16-tools  # tests/mlir: mlir-opt-16, mlir-translate-16, mlir-cpu-runner-16 check the MLIR export
  libmlir-16-dev  # libmlir_runner_utils.so, libmlir_c_runner_utils.so for mlir-cpu-runner-16
  libopenmpi-dev openmpi-bin  # kiln_dist (frontend/dist): MPI collectives; tests/dist runs mpirun
  iproute2  # ip: tests/dist/netns_test.sh puts the two ranks in network namespaces joined by a veth
  libcli11-dev
  qemu-user g++-aarch64-linux-gnu
  nodejs  # runs the wasm32 kernel of tests/cross/wasm
  lld  # ld.lld: links the code sections of .kiln blobs for non-host triples (codegen/aot)
  libvulkan-dev mesa-vulkan-drivers
  libshaderc-dev glslang-dev spirv-tools
  glslang-tools  # glslang-dev's CMake config (glslang-targets.cmake) names /usr/bin/glslangValidator
)
BAZEL_PACKAGES=(bazel-bootstrap bazel-rules-java)
FORMAT_PACKAGES=(clang-format)
BENCH_PACKAGES=(
  libopenblas-dev  # benchmarks: openblas_bench, gemm_vs_openblas
  python3-torch    # benchmarks/peers/torch_*.py: PyTorch eager under /usr/bin/python3
  python3-dev      # Python.h for torch.compile (benchmarks/peers/make_peers_venv.sh)
)
# -------------------------------------------------------------------------------------------------

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }

packages=("${BASE_PACKAGES[@]}")
for arg in "$@"; do
  case "$arg" in
    --bazel) packages+=("${BAZEL_PACKAGES[@]}") ;;
    --format) packages+=("${FORMAT_PACKAGES[@]}") ;;
    --bench) packages+=("${BENCH_PACKAGES[@]}") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install_deps.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

# The aarch64 abseil/xxHash of the cross-target test (tests/cross): unpacked into a sysroot folder,
# not installed (see the script).
"$(dirname "${BASH_SOURCE[0]}")/cross_sysroot.sh"

missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages are installed"
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo env DEBIAN_FRONTEND=noninteractive)
  else
    echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-y -q -o Dpkg::Use-Pty=0 -o DPkg::Lock::Timeout=600)
echo "install_deps: installing ${missing[*]}"
"${SUDO[@]}" apt-get update -q -o DPkg::Lock::Timeout=600 </dev/null
"${SUDO[@]}" apt-get install "${APT_OPTS[@]}" "${missing[@]}" </dev/null
echo "install_deps: done"
