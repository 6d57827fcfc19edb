#!/usr/bin/env bash
# Gathers what scripts/gpu_check.sh runs on a GPU server into <out> (default .gpu/): the CUDA test
# programs and cuda_bench from <build> (default build/default), stripped, and every shared library
# they need beyond a base system's (glibc, libstdc++, libgcc). Run it on the build machine after
# the build; carry <out> with the source tree (docs/cuda.md).
set -euo pipefail
build=${1:-build/default}
out=${2:-.gpu}
programs=(
  "$build/tests/cuda/cuda_conformance_test"
  "$build/tests/cuda/cuda_frontend_backend_test"
  "$build/tests/runtime/cuda/runtime_cuda_test"
  "$build/benchmarks/cuda_bench"
)
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for program in "${programs[@]}"; do
  if [[ ! -x $program ]]; then
    echo "gpu_bundle: $program is missing: build it first (cmake --build --preset default)" >&2
    exit 1
  fi
  if nm -C "$program" 2>/dev/null | grep -q ' llvm::'; then
    echo "gpu_bundle: $program links LLVM; the GPU programs must not" >&2
    exit 1
  fi
  strip -o "$out/bin/$(basename "$program")" "$program"
  # The libraries the dynamic loader finds here, minus the base system's.
  ldd "$program" | awk '/=> \//{print $3}' | while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | libpthread.so* | libdl.so* | \
        librt.so* | ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
cp benchmarks/cuda_peers.py "$out/"
du -sh "$out"
