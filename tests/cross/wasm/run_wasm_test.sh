#!/usr/bin/env bash
# Stretch of the cross-target proof (CTest: cross.wasm32_node): graphs that fuse into one kernel
# are compiled for wasm32 (wasm_kernel: LowerGroup + the CPU emitter; opt-16 -O3, llc-16), linked
# with wasm-ld and
# run by node (run_kernel.cjs), which compares the outputs with the reference interpreter's.
# Usage: run_wasm_test.sh <repo root> <work dir> <wasm_kernel>
set -euo pipefail
ROOT="$1" WORK="$2" WASM_KERNEL="$3"
for tool in opt-16 llc-16 wasm-ld node; do
  command -v "$tool" >/dev/null || { echo "missing $tool: run scripts/install_deps.sh" >&2; exit 1; }
done
for graph in tests/cross/wasm/softmax.kir tests/cross/wasm/elementwise.kir; do
  dir="$WORK/$(basename "$graph" .kir)"
  rm -rf "$dir" && mkdir -p "$dir"
  "$WASM_KERNEL" "$ROOT/$graph" "$dir"
  opt-16 -O3 "$dir/kernel.ll" -o "$dir/kernel.bc"
  llc-16 -O3 -filetype=obj -relocation-model=static -mattr=+simd128 "$dir/kernel.bc" \
    -o "$dir/kernel.o"
  wasm-ld --no-entry --export=kernel_0 --export=__heap_base --allow-undefined \
    -o "$dir/kernel.wasm" "$dir/kernel.o"
  node "$ROOT/tests/cross/wasm/run_kernel.cjs" "$dir/kernel.wasm" "$dir/plan.txt"
done
