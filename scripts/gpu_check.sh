#!/usr/bin/env bash
# The CUDA backend's check on a GPU server, from the repository root, with the bundle that
# scripts/gpu_bundle.sh made on the build machine (default .gpu/): the CUDA conformance suites on
# the device, then cuda_bench beside the machine's PyTorch (benchmarks/cuda_peers.py) and one
# table. Under 10 minutes on an H200. Writes its logs and the table to $OUT (default gpu_out/).
set -uo pipefail
bundle=${1:-.gpu}
out=${OUT:-gpu_out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
run() {  # name, seconds, command...
  local name=$1 seconds=$2
  shift 2
  echo "== $name"
  timeout "$seconds" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$out/$name.log"
  if [[ $rc != 0 ]]; then
    echo "gpu_check: $name failed (exit $rc); the failures:"
    grep -E '^\[  FAILED  \]|Failure' "$out/$name.log" | head -n 30
    status=1
  fi
}
run runtime_cuda_test 60 "$bundle/bin/runtime_cuda_test"
run cuda_conformance_test 240 "$bundle/bin/cuda_conformance_test"
KILN_DEVICE=cuda run cuda_frontend_backend_test 150 "$bundle/bin/cuda_frontend_backend_test"
echo "== cuda_bench"
timeout 150 "$bundle/bin/cuda_bench" > "$out/cuda_bench.json" 2> "$out/cuda_bench.log" || {
  echo "gpu_check: cuda_bench failed"; tail -n 20 "$out/cuda_bench.log"; status=1; }
echo "== PyTorch beside it"
PYTHONUNBUFFERED=1 timeout 150 python3 "$bundle/cuda_peers.py" "$out/cuda_bench.json" \
  | tee "$out/table.md" || status=1
exit $status
