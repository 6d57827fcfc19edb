#!/usr/bin/env bash
# Makes the Python venv of the tests: Debian's /usr/bin/python3 -m venv (package python3-venv,
# in scripts/install_deps.sh) plus `pip install` of scripts/venv-requirements.txt (pinned onnx
# and numpy, from PyPI: needs the network the first time). Used by the ONNX conformance test
# (tests/onnx/conformance), which skips without it.
#   scripts/make_venv.sh [VENV]      (default: build/venv in the repository)
# Quick when VENV already holds exactly these requirements (a stamp file in VENV records their
# hash); a changed requirements file or a broken venv makes it again.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQUIREMENTS="$REPO/scripts/venv-requirements.txt"
VENV="${1:-$REPO/build/venv}"
case "$VENV" in
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
PYTHON=/usr/bin/python3  # Debian's, not a pyenv or conda python3 on PATH
STAMP="$VENV/.kiln-requirements.sha256"
want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] &&
   "$VENV/bin/python" -c 'import onnx, numpy' 2>/dev/null; then
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
"$VENV/bin/python" -c 'import onnx; print("make_venv: onnx", onnx.__version__, "in '"$VENV"'")'
echo "$want" >"$STAMP"
