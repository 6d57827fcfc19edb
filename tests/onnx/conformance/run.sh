#!/usr/bin/env bash
# Runs ONNX's backend conformance cases on kiln: CTest's onnx.conformance and the target
# onnx_conformance_known_failures (tests/onnx/CMakeLists.txt; docs/onnx.md, "Conformance").
#   run.sh VENV RUNNER OUT [onnx_conformance options...]
# Writes the cases into OUT/cases with VENV's python (write_cases.py; quick when up to date),
# then runs RUNNER --cases OUT/cases --report OUT and the options. Exits 77 (CTest's skip) with
# the reason when VENV or its onnx package is absent: make it with scripts/make_venv.sh.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '4p' "$0" | sed 's/^# *//' >&2
  exit 2
fi
venv="$1" runner="$2" out="$3"
shift 3
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
  echo "[  SKIPPED ] onnx.conformance: no Python venv at $venv (make it with scripts/make_venv.sh;" \
       "make test does)"
  exit 77
fi
if ! version="$("$py" -c 'import onnx; print(onnx.__version__)' 2>&1)"; then
  echo "[  SKIPPED ] onnx.conformance: the venv $venv has no onnx package (${version##*$'\n'});" \
       "run scripts/make_venv.sh $venv"
  exit 77
fi
"$py" "$(dirname "${BASH_SOURCE[0]}")/write_cases.py" --out "$out/cases"
exec "$runner" --cases "$out/cases" --report "$out" "$@"
