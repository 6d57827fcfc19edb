#!/usr/bin/env bash
# Makes the venv of the compiler peers (benchmarks/peers/compiler_peers.py, run by
# benchmarks/run_peers.py): Debian's /usr/bin/python3 -m venv plus the pinned wheels of
# benchmarks/peers/peers-requirements.txt from PyPI (JAX, PyTorch 2.x, onnxruntime, onnx), wheels
# only and --no-deps (the file lists every dependency). Needs the network the first time; about
# 5 GB on disk, most of it the CUDA libraries that PyPI's torch wheel links.
#   benchmarks/peers/make_peers_venv.sh [VENV]    (default: build/peers-venv in the repository)
# Quick when VENV already holds exactly these requirements (a stamp file in VENV records their
# hash); a changed requirements file or a broken venv makes it again. torch.compile's CPU backend
# compiles C++ at run time, so g++ and Python's headers (Debian: g++, python3-dev) must be there.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
REQUIREMENTS="$REPO/benchmarks/peers/peers-requirements.txt"
VENV="${1:-$REPO/build/peers-venv}"
case "$VENV" in
  -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
PYTHON=/usr/bin/python3  # Debian's, not a pyenv or conda python3 on PATH
STAMP="$VENV/.kiln-peers-requirements.sha256"
want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
IMPORTS='import jax, jaxlib, torch, onnxruntime, onnx, onnxscript, numpy'

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] &&
   "$VENV/bin/python" -c "$IMPORTS" 2>/dev/null; then
  echo "make_peers_venv: $VENV is up to date"
  exit 0
fi
if [[ ! -x "$PYTHON" ]]; then
  echo "make_peers_venv: needs $PYTHON (scripts/install_deps.sh)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "make_peers_venv: $PYTHON has no venv/ensurepip module: install python3-venv" \
       "(scripts/install_deps.sh)" >&2
  exit 1
fi
include="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if [[ ! -f "$include/Python.h" ]] || ! command -v g++ >/dev/null; then
  echo "make_peers_venv: torch.compile needs g++ and $include/Python.h:" \
       "scripts/install_deps.sh --bench" >&2
  exit 1
fi
start=$SECONDS
echo "make_peers_venv: making $VENV (pip install --no-deps -r ${REQUIREMENTS#"$REPO"/})"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
# Wheels only: nothing is compiled, and a missing wheel is an error, not a long build.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --only-binary=:all: --no-deps -r "$REQUIREMENTS"
# Every dependency is pinned, so pip's own check finds nothing missing but the one package left
# out on purpose.
problems="$("$VENV/bin/python" -m pip check --disable-pip-version-check 2>&1 |
            grep -v -e 'requires triton, which is not installed' -e '^No broken' || true)"
if [[ -n "$problems" ]]; then
  echo "make_peers_venv: the requirements are inconsistent:" >&2
  echo "$problems" >&2
  exit 1
fi
# A smoke test of each peer, torch.compile's C++ toolchain included (about 20 s).
(cd "$(mktemp -d)" && OMP_NUM_THREADS=1 "$VENV/bin/python" - <<'EOF'
import jax, jax.numpy as jnp, numpy as np, onnx, onnxruntime, torch
x = np.linspace(-3, 3, 64, dtype=np.float32)
f = torch.compile(lambda t: torch.tanh(t) * 2)
assert np.allclose(f(torch.from_numpy(x)).numpy(), np.tanh(x) * 2, atol=1e-6)
assert np.allclose(np.asarray(jax.jit(lambda t: jnp.tanh(t) * 2)(x)), np.tanh(x) * 2, atol=1e-6)
print(f"make_peers_venv: jax {jax.__version__}, torch {torch.__version__}, onnxruntime "
      f"{onnxruntime.__version__}, onnx {onnx.__version__}, numpy {np.__version__}")
EOF
) 2>&1 | grep -v -e 'triton not found' -e 'No CUDA runtime is found'
echo "$want" >"$STAMP"
echo "make_peers_venv: $VENV: $(du -sh "$VENV" | cut -f1), made in $((SECONDS - start)) s"
