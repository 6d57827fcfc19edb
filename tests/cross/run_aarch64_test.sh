#!/usr/bin/env bash
# The cross-target proof (CTest: cross.aarch64_qemu): an aarch64 blob runs under qemu-user and
# gives the host blob's and the reference interpreter's outputs.
#   1. cross-build kiln_ir, libkiln_runtime.so and tests/cross/runner.cc for aarch64
#      (tests/cross/aarch64/, cmake/toolchains/aarch64-linux-gnu.cmake)
#   2. per graph, kiln compile --triple aarch64-linux-gnu: one blob, code for both CPUs
#   3. run it with the same runner on the host and on aarch64 (qemu-aarch64)
#   4. cross_check compare: both against ir::Interpret and against each other
# Usage: run_aarch64_test.sh <repo root> <work dir> <kiln> <cross_check> <host runner>
# Needs: g++-aarch64-linux-gnu, qemu-user, and the sysroot of scripts/cross_sysroot.sh
# (scripts/install_deps.sh runs it). CMake only (docs/cli.md, "Cross-target test").
set -euo pipefail
ROOT="$1" WORK="$2" KILN="$3" CHECK="$4" HOST_RUNNER="$5"
SYSROOT="${KILN_AARCH64_SYSROOT:-/opt/kiln/sysroot-aarch64}"

for tool in aarch64-linux-gnu-g++ qemu-aarch64 cmake ninja; do
  command -v "$tool" >/dev/null || { echo "missing $tool: run scripts/install_deps.sh" >&2; exit 1; }
done
[[ -f "$SYSROOT/.complete" ]] || {
  echo "missing the aarch64 sysroot $SYSROOT: run scripts/install_deps.sh (scripts/cross_sysroot.sh)" >&2
  exit 1
}

mkdir -p "$WORK"
echo "== cross-building the runtime and the runner for aarch64"
start=$SECONDS
cmake -S "$ROOT/tests/cross/aarch64" -B "$WORK/aarch64" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DKILN_AARCH64_SYSROOT="$SYSROOT" >"$WORK/configure.log" 2>&1 || { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/aarch64" --target kiln_cross_runner -j2 >"$WORK/build.log" 2>&1 ||
  { tail -50 "$WORK/build.log"; exit 1; }
echo "   built in $((SECONDS - start)) s"
file "$WORK/aarch64/kiln_cross_runner" "$WORK/aarch64/runtime/libkiln_runtime.so" 2>/dev/null || true

# The MLP (GEMM, weights, fused kernels) and single-op graphs from the IR seed corpus that take
# other paths of the runtime: convolution, gather, scatter, windows on u8, the int8 GEMM's quad
# kernels (u8 and i8 A; plain IR on aarch64, pmaddubsw on x86).
GRAPHS=(tests/tools/graphs/mlp.kir tests/tools/corpus/ir/conv.kir tests/tools/corpus/ir/gather.kir
        tests/tools/corpus/ir/scatter_add.kir tests/tools/corpus/ir/window_max.kir
        tests/tools/corpus/ir/matmul_int8.kir)
for graph in "${GRAPHS[@]}"; do
  name="$(basename "$graph" .kir)"
  run="$WORK/run/$name"
  echo "== $graph: one blob for the host and aarch64-linux-gnu"
  rm -rf "$run" && mkdir -p "$run/host" "$run/aarch64"
  "$KILN" compile "$ROOT/$graph" -o "$run/m.kiln" --triple aarch64-linux-gnu
  "$CHECK" prepare "$ROOT/$graph" "$run"
  inputs=("$run"/in_*.npy)
  "$HOST_RUNNER" "$run/m.kiln" "$run/host" "${inputs[@]}"
  qemu-aarch64 -L /usr/aarch64-linux-gnu \
    -E LD_LIBRARY_PATH="$SYSROOT/usr/lib/aarch64-linux-gnu" \
    "$WORK/aarch64/kiln_cross_runner" "$run/m.kiln" "$run/aarch64" "${inputs[@]}"
  "$CHECK" compare "$ROOT/$graph" "$run" host="$run/host" aarch64="$run/aarch64"
done
"$KILN" inspect "$WORK/run/mlp/m.kiln"
