#!/usr/bin/env python3
"""Runs kiln_bench and its peers in one run and prints the ratio table of issues #3 and #4.

Builds nothing: build the programs first, e.g.
  cmake --build build/default --target kiln_bench openblas_bench stream_triad -j2
then
  benchmarks/run_peers.py [--build-dir build/default] [--repetitions 3] [--min-time 0.5]

Runs, in this order and with 2 threads each: stream_triad (STREAM triad bandwidth), kiln_bench
(KILN_NUM_THREADS=2, KILN_CACHE_DIR unset so compile/mlp_step is cold), PyTorch eager
(peers/torch_bench.py and peers/torch_train_bench.py under /usr/bin/python3,
torch.set_num_threads(2)) and openblas_bench
(cblas_sgemm, 2 threads). Every time is the best of --repetitions batches, each batch the mean per
call over --min-time seconds. The raw JSON of every program goes to --out.

Then (--memory on, the default; --memory only runs just this) the peak-memory comparison: one
epoch of examples/fashion_mnist/mlp (target fashion_mnist_mlp) against
peers/torch_fashion_mnist_mlp.py, each under /usr/bin/time -v, and the ratio of their maximum
resident set sizes.

Then (--compilers on, the default; --compilers only runs just this) issue #18's comparison beside
the compilers, when the venv of peers/make_peers_venv.sh exists (--peers-venv; without it one
line says it was skipped): --rounds rounds, each running kiln_bench's rows of the targets and
then peers/compiler_peers.py once per peer (jax.jit, torch.compile, onnxruntime), so kiln and
the peers alternate; each row keeps its best round. On a host with AVX-512, kiln runs twice per
round, natively and under KILN_CPU=x86-64-v3 (the issue's AVX2 host), the peers run at both
levels too (at x86-64-v3 pinned to AVX2 where they allow it: AVX2_PINS, XLA's max ISA; not
onnxruntime), and the targets are judged on the x86-64-v3 pair. Then the user-path MLP step's compile, cold and from a warm KILN_CACHE_DIR, read
from KILN_TIME_PASSES's graph lines of fresh kiln_bench processes (best of COMPILE_RUNS); then
gemm_vs_openblas on every GEMM shape of the MLP and CNN training steps (GEMM_SHAPES). It prints
the targets table (each target, kiln's figure, the peer's, the ratio, PASS/MISS), the per-shape
GEMM table and every peer's time on every row.
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from peers.peer_common import (CNN_STEP, DISPATCH, GELU, INFER_B1, INFER_B256, MLP_STEP,
                               SOFTMAX)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
ELTWISE = 16777216
THREADS = 2

# (benchmark, peer, target kind, target value); kinds:
#   speedup   peer time / kiln time >= value
#   stream    kiln bytes/s (8 bytes per element) / STREAM triad bytes/s >= value
#   gflops    kiln GFLOP/s / OpenBLAS GFLOP/s >= value
#   max_s     kiln time <= value seconds
#   info      no target: the ratio is shown for reference
ROWS = [
    ("eltwise/gelu_affine/16777216", "torch", "speedup", 8.0),
    ("eltwise/gelu_affine/16777216", "stream", "stream", 0.60),
    ("eltwise/silu/16777216", "torch", "speedup", 5.0),
    ("softmax/rows/4096x4096", "torch", "speedup", 3.0),
    ("layernorm/4096x1024", "torch", "speedup", 1.0),
    ("matmul/f32/256", "openblas", "info", None),
    ("matmul/f32/512", "openblas", "info", None),
    ("matmul/f32/1024", "openblas", "gflops", 0.85),
    ("matmul/f32/2048", "openblas", "gflops", 0.85),
    ("matmul/f32/1024", "torch", "info", None),
    ("matmul/f32/2048", "torch", "info", None),
    ("reduce/sum_rows/4096x4096", "torch", "info", None),
    ("dispatch/cache_hit", "torch", "max_s", 20e-6),
    ("compile/mlp_step", None, "max_s", 0.5),
    # Issue #4 (peers/torch_train_bench.py): kiln <= 0.7x PyTorch's step time, i.e. a speedup of
    # >= 1/0.7; batch-1 inference <= 50 us; the CNN step no slower than PyTorch's.
    ("train/mlp_step/784-512-256-10/b128", "torch", "speedup", 1.0 / 0.7),
    ("infer/mlp/784-512-256-10/b1", "torch", "max_s", 50e-6),
    ("train/cnn_step/mnist/b64", "torch", "speedup", 1.0),
    # The same targets on the user's path (kiln_bench's real/ rows: nn modules, autodiff's
    # gradient graph, optim::Sgd, one realize per step), against the same PyTorch steps.
    ("real/train/mlp_step/784-512-256-10/b128", "torch", "speedup", 1.0 / 0.7),
    ("real/infer/mlp/784-512-256-10/b1", "torch", "max_s", 50e-6),
    ("real/train/cnn_step/mnist/b64", "torch", "speedup", 1.0),
]

# kiln rows whose PyTorch peer is timed under another name (PyTorch has one path for both).
PEER_NAME = {
    "real/train/mlp_step/784-512-256-10/b128": "train/mlp_step/784-512-256-10/b128",
    "real/infer/mlp/784-512-256-10/b1": "infer/mlp/784-512-256-10/b1",
    "real/train/cnn_step/mnist/b64": "train/cnn_step/mnist/b64",
}

# Peak memory (issue #4): one epoch of examples/fashion_mnist/mlp against
# peers/torch_fashion_mnist_mlp.py, each under /usr/bin/time -v; kiln's maximum resident set size
# must be at most this multiple of PyTorch's.
MEMORY_TARGET = 1.5

DIAG_PREFIX = "diag/kernel_only/"
# Bytes an ideal kernel reads and writes once (f32).
IDEAL_BYTES = {
    "eltwise/gelu_affine/16777216": 8.0 * ELTWISE,
    "eltwise/silu/16777216": 8.0 * ELTWISE,
    "softmax/rows/4096x4096": 8.0 * 4096 * 4096,
    "layernorm/4096x1024": 8.0 * 4096 * 1024,
    "reduce/sum_rows/4096x4096": 4.0 * 4096 * 4097,
}

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}

# ---- Issue #18: beside the compilers -------------------------------------------------------------

# The compile of the user-path MLP step, from KILN_TIME_PASSES's graph lines (docs/passes.md) of
# fresh kiln_bench processes: the step's graphs (the first step's and the steady state's; the
# parameters' initialisation before them is not the step), cold and from a warm KILN_CACHE_DIR.
COLD_COMPILE = "compile/cold/real/" + MLP_STEP
WARM_COMPILE = "compile/warm/real/" + MLP_STEP
COMPILE_RUNS = 3
GRAPH_LINE = re.compile(r"^kiln: cpu graph \d+ -> \d+ nodes.* total ([0-9.]+) ms$")
MICRO_KERNEL_LINE = re.compile(r"^kiln: cpu micro-kernel \S+\s+([0-9.]+) ms  compiled$")

# The peers' row (peers/compiler_peers.py's names) -> kiln_bench's row on the user's path.
KILN_ROW = {MLP_STEP: "real/" + MLP_STEP, INFER_B1: "real/" + INFER_B1,
            INFER_B256: "real/" + INFER_B256, GELU: GELU, SOFTMAX: SOFTMAX, DISPATCH: DISPATCH,
            CNN_STEP: "real/" + CNN_STEP}
COMPILER_PEERS = ("jax", "torch", "ort")
PEER_LABEL = {"jax": "JAX jit", "torch": "torch.compile", "ort": "onnxruntime"}
# (what, kiln row, kind, peer, value); kinds as ROWS's, plus
#   at_most_peer  kiln time <= value x the peer's
TARGETS_18 = [
    ("user-path MLP step <= 0.8x JAX's", MLP_STEP, "at_most_peer", "jax", 0.8),
    ("user-path batch-1 inference <= 25 us", INFER_B1, "max_s", None, 25e-6),
    ("user-path batch-1 inference <= 0.6x onnxruntime's", INFER_B1, "at_most_peer", "ort", 0.6),
    ("batch-256 inference <= onnxruntime's", INFER_B256, "at_most_peer", "ort", 1.0),
    ("gelu >= 75% of STREAM", GELU, "stream", None, 0.75),
    ("softmax >= 60% of STREAM", SOFTMAX, "stream", None, 0.60),
    ("cache-hit dispatch <= 10 us", DISPATCH, "max_s", None, 10e-6),
    ("cold compile of the user-path MLP step <= 150 ms", COLD_COMPILE, "max_s", None, 150e-3),
    ("warm (KILN_CACHE_DIR) compile of the MLP step <= 15 ms", WARM_COMPILE, "max_s", None,
     15e-3),
]
# Every GEMM of the two training steps as kiln runs them (KILN_DUMP's executable.txt and
# fusion.txt of real/train/*: gemm_* steps; the conv_* steps are the GEMMs of RunConv in
# runtime/cpu/gemm_conv.cc), in gemm_vs_openblas's --shapes spelling: C[M,N] = A[M,K] B[K,N],
# `a` = A read transposed, `t` = B read transposed, `/B` = B products (one per image). The
# convolutions are timed on explicit matrices for both libraries, so kiln's implicit im2col
# gathering, its explicit im2col^T and col2im passes are not in their figure (the CNN step's own
# time includes them).
GEMM_SHAPES = [
    ("128x512x784t", "MLP fc1 forward, X W1^T"),
    ("128x256x512t", "MLP fc2 forward"),
    ("128x10x256t", "MLP fc3 forward"),
    ("128x256x10", "MLP fc3 dX = dY W3"),
    ("128x512x256", "MLP fc2 dX"),
    ("512x784x128a", "MLP fc1 dW = dY^T X"),
    ("256x512x128a", "MLP fc2 dW"),
    ("10x256x128a", "MLP fc3 dW"),
    ("32x676x9/64", "CNN conv1 forward, W[32,9] im2col[9,676] per image"),
    ("64x121x288/64", "CNN conv2 forward"),
    ("288x121x64/64", "CNN conv2 dX as col2im: W'^T[(c, kk), o] dY[o, 121] per image"),
    ("288x64x7744t", "CNN conv2 dW as im2col^T dY^T: 32 x 9 outputs, depth 64*11*11"),
    ("9x32x43264t", "CNN conv1 dW, the same: 9 outputs, depth 64*26*26"),
    ("64x128x1600t", "CNN fc1 forward"),
    ("64x10x128t", "CNN fc2 forward"),
    ("64x128x10", "CNN fc2 dX"),
    ("64x1600x128", "CNN fc1 dX"),
    ("128x1600x64a", "CNN fc1 dW"),
    ("10x128x64a", "CNN fc2 dW"),
]
GEMM_TARGET = 1.0


def run_json(command, env=None, may_fail=False):
    """The JSON a program prints. A failing program ends the run, unless `may_fail` (a program
    that reports failed rows in its JSON and exits non-zero): then its JSON, or None."""
    print("+ " + " ".join(str(c) for c in command), file=sys.stderr, flush=True)
    done = subprocess.run([str(c) for c in command], env=env, stdout=subprocess.PIPE, text=True,
                          check=False)
    if done.returncode != 0:
        if not may_fail:
            sys.exit(f"run_peers: {command[0]} exited with {done.returncode}")
        print(f"run_peers: {command[0]} exited with {done.returncode}", file=sys.stderr)
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError:
            return None
    return json.loads(done.stdout)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def kiln_times(report):
    """name -> seconds (best repetition) or an error string."""
    times = {}
    for entry in report["benchmarks"]:
        # Google Benchmark appends "/iterations:N" and "/real_time" to the registered name.
        name = re.sub(r"(/iterations:\d+|/real_time)+$", "", entry.get("run_name", entry["name"]))
        if entry.get("error_occurred"):
            times[name] = "ERROR: " + entry.get("error_message", "?")
            continue
        if entry.get("run_type", "iteration") != "iteration":
            continue
        seconds = entry["real_time"] * TIME_UNITS[entry.get("time_unit", "ns")]
        previous = times.get(name)
        if not isinstance(previous, str):
            times[name] = seconds if previous is None else min(previous, seconds)
    return times


def matmul_flops(name):
    """2 N^3 for "matmul/f32/N"."""
    n = int(name.rsplit("/", 1)[1])
    return 2.0 * n ** 3


def human(seconds):
    if seconds >= 1e-1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=str(ROOT / "build" / "default"))
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--out", default=None, help="folder for the raw JSON (default: "
                        "<build-dir>/benchmarks/peer_results)")
    parser.add_argument("--table-only", action="store_true",
                        help="run nothing: print the table from the JSON already in --out")
    parser.add_argument("--python", default="/usr/bin/python3",
                        help="an interpreter with torch (Debian's python3-torch)")
    parser.add_argument("--memory", choices=("on", "off", "only"), default="on",
                        help="peak-memory comparison of one Fashion-MNIST MLP epoch (needs the "
                        "fashion_mnist_mlp target and Debian's dataset-fashion-mnist)")
    parser.add_argument("--compilers", choices=("on", "off", "only"), default="on",
                        help="issue #18: kiln beside jax.jit, torch.compile and onnxruntime, and "
                        "every GEMM shape of the training steps beside OpenBLAS (needs "
                        "--peers-venv and the gemm_vs_openblas target)")
    parser.add_argument("--peers-venv", default=str(ROOT / "build" / "peers-venv"),
                        help="the venv of benchmarks/peers/make_peers_venv.sh")
    parser.add_argument("--rounds", type=int, default=2,
                        help="--compilers: rounds of kiln, then each peer; each row keeps its "
                        "best round")
    options = parser.parse_args()

    if options.memory == "only":
        return 0 if print_memory(options) else 1
    bench_dir = pathlib.Path(options.build_dir) / "benchmarks"
    out = pathlib.Path(options.out) if options.out else bench_dir / "peer_results"
    if options.table_only:
        if options.compilers != "only":
            data = {n: json.loads((out / f"{n}.json").read_text())
                    for n in ("stream", "kiln", "torch", "openblas")}
            train_json = out / "torch_train.json"
            if train_json.exists():
                data["torch"]["results"].update(json.loads(train_json.read_text())["results"])
            print_table(data["stream"], data["kiln"], data["torch"], data["openblas"], out,
                        "(from saved JSON)")
        compilers_json = out / "compilers.json"
        if options.compilers != "off" and compilers_json.exists():
            print()
            print_compilers(json.loads(compilers_json.read_text()), out)
        return 0
    if options.compilers == "only":
        run_compilers(options, bench_dir, out)
        return 0
    require_built(bench_dir, ("stream_triad", "kiln_bench", "openblas_bench"), options)
    out.mkdir(parents=True, exist_ok=True)
    load_before = load()

    stream = run_json([bench_dir / "stream_triad", f"--threads={THREADS}"])
    env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
    env.pop("KILN_CACHE_DIR", None)
    env.pop("KILN_DUMP", None)
    kiln = run_json([bench_dir / "kiln_bench", "--benchmark_format=json",
                     f"--benchmark_repetitions={options.repetitions}",
                     f"--benchmark_min_time={options.min_time}"], env=env)
    torch = run_json([options.python, HERE / "peers" / "torch_bench.py",
                      f"--threads={THREADS}", f"--repetitions={options.repetitions}",
                      f"--min-time={options.min_time}"])
    torch_train = run_json([options.python, HERE / "peers" / "torch_train_bench.py",
                            f"--threads={THREADS}", f"--repetitions={options.repetitions}",
                            f"--min-time={options.min_time}"])
    openblas = run_json([bench_dir / "openblas_bench", f"--threads={THREADS}",
                         f"--repetitions={options.repetitions}",
                         f"--min_time={options.min_time}"])
    load_after = load()
    for name, data in (("stream", stream), ("kiln", kiln), ("torch", torch),
                       ("torch_train", torch_train), ("openblas", openblas)):
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    torch["results"].update(torch_train["results"])
    print_table(stream, kiln, torch, openblas, out,
                f"load average before: {load_before}, after: {load_after}")
    if options.memory == "on":
        print()
        print_memory(options)
    if options.compilers == "on":
        print()
        run_compilers(options, bench_dir, out, stream)
    return 0


def require_built(bench_dir, programs, options):
    missing = [str(bench_dir / p) for p in programs if not (bench_dir / p).exists()]
    if missing:
        sys.exit("run_peers: not built: " + ", ".join(missing) + "\n(cmake --build " +
                 options.build_dir + " --target " + " ".join(programs) + ")")


def max_rss_bytes(command, cwd):
    """Runs `command` under /usr/bin/time -v; its "Maximum resident set size" in bytes."""
    env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
    env.pop("KILN_DUMP", None)
    print("+ /usr/bin/time -v " + " ".join(str(c) for c in command), file=sys.stderr, flush=True)
    done = subprocess.run(["/usr/bin/time", "-v"] + [str(c) for c in command], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"run_peers: {command[0]} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if not match:
        sys.exit("run_peers: no 'Maximum resident set size' in /usr/bin/time -v's output")
    return int(match.group(1)) * 1024


def print_memory(options):
    """Peak RSS of one training epoch (plus validation) of the MLP, kiln against PyTorch."""
    example = pathlib.Path(options.build_dir) / "examples" / "fashion_mnist" / "fashion_mnist_mlp"
    if not example.exists():
        sys.exit(f"run_peers: not built: {example} (cmake --build {options.build_dir} "
                 "--target fashion_mnist_mlp)")
    with tempfile.TemporaryDirectory(prefix="run_peers_mem_") as scratch:
        kiln_rss = max_rss_bytes([example.resolve(), "--epochs", "1", "--dir", "ckpt"], scratch)
        torch_rss = max_rss_bytes([options.python, HERE / "peers" / "torch_fashion_mnist_mlp.py",
                                   "--epochs", "1", f"--threads={THREADS}"], scratch)
    ratio = kiln_rss / torch_rss
    print("| peak memory (max RSS, /usr/bin/time -v) | kiln | torch | kiln / torch | target | "
          "result |")
    print("|---|---|---|---|---|---|")
    ok = ratio <= MEMORY_TARGET
    print(f"| fashion_mnist_mlp, 1 epoch, batch 128 | {kiln_rss / 2**20:.0f} MiB | "
          f"{torch_rss / 2**20:.0f} MiB | {ratio:.2f} | <= {MEMORY_TARGET:g} | "
          f"{'PASS' if ok else 'MISS'} |")
    return ok


def print_table(stream, kiln, torch, openblas, out, load_text):
    kiln_t = kiln_times(kiln)
    peers = {
        "torch": {k: v["seconds"] for k, v in torch["results"].items()},
        "openblas": {k: v["seconds"] for k, v in openblas["results"].items()},
    }
    stream_bw = stream["bytes_per_second"]

    header = ("benchmark", "kiln", "peer", "peer value", "ratio", "target", "result")
    lines = []
    misses = 0
    for name, peer, kind, target in ROWS:
        k = kiln_t.get(name, "missing")
        if isinstance(k, str):
            lines.append((name, k, peer or "-", "", "", "", "ERROR"))
            misses += 1
            continue
        peer_value, ratio, target_text = "", "", ""
        if kind == "stream":
            kiln_bw = 8.0 * ELTWISE / k
            peer_value = f"{stream_bw / 1e9:.2f} GB/s"
            ratio_value = kiln_bw / stream_bw
            ratio = f"{ratio_value:.2f} ({kiln_bw / 1e9:.2f} GB/s)"
            target_text = f">= {target:.2f}"
            ok = ratio_value >= target
        elif kind == "max_s":
            p = peers.get(peer, {}).get(PEER_NAME.get(name, name)) if peer else None
            peer_value = human(p) if p is not None else "-"
            ratio = f"{p / k:.2f}x" if p is not None else ""
            target_text = f"<= {human(target)}"
            ok = k <= target
        else:
            p = peers[peer].get(PEER_NAME.get(name, name))
            if p is None:
                lines.append((name, human(k), peer, "missing", "", "", "ERROR"))
                misses += 1
                continue
            peer_value = human(p)
            if name.startswith("matmul/"):
                peer_value += f" ({matmul_flops(name) / p / 1e9:.1f} GFLOP/s)"
            ratio_value = p / k
            ratio = f"{ratio_value:.2f}x"
            ok = target is None or ratio_value >= target
            if target is not None:
                target_text = f">= {target:g}x"
        kiln_text = human(k)
        if name.startswith("matmul/"):
            kiln_text += f" ({matmul_flops(name) / k / 1e9:.1f} GFLOP/s)"
        result = "info" if target is None else ("PASS" if ok else "MISS")
        misses += result == "MISS"
        lines.append((name, kiln_text, peer or "-", peer_value, ratio, target_text, result))

    print(f"# kiln vs peers, {THREADS} threads; {load_text}")
    print(f"# torch {torch['torch']} ({torch['threads']} threads), OpenBLAS core "
          f"{openblas['core']}, STREAM triad {stream_bw / 1e9:.2f} GB/s")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for line in lines:
        print("| " + " | ".join(line) + " |")
    print(f"# {misses} miss(es); raw JSON in {out}")

    # Diagnostics: the kernels alone (compiled once, preallocated outputs), against the same peers.
    diag = [(n, t) for n, t in kiln_t.items() if n.startswith(DIAG_PREFIX)]
    if diag:
        print()
        print("| diagnostic (kernels only, no graph building, no output allocation) | kiln | "
              "GB/s (ideal bytes) | of STREAM | torch / kiln |")
        print("|---|---|---|---|---|")
        for name, k in diag:
            base = name[len(DIAG_PREFIX):]
            if isinstance(k, str):
                print(f"| {name} | {k} | | | |")
                continue
            moved = IDEAL_BYTES.get(base)
            bw = f"{moved / k / 1e9:.2f}" if moved else ""
            of_stream = f"{moved / k / stream_bw:.2f}" if moved else ""
            p = peers["torch"].get(base)
            ratio = f"{p / k:.2f}x" if p else ""
            print(f"| {name} | {human(k)} | {bw} | {of_stream} | {ratio} |")


def host_has_avx512():
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " avx512f" in line for line in f)


def kiln_env(level):
    """kiln_bench's environment: 2 threads, no disk cache or dumps, KILN_CPU pinned to `level`
    ("native": unset)."""
    env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
    for name in ("KILN_CACHE_DIR", "KILN_DUMP", "KILN_CPU"):
        env.pop(name, None)
    if level != "native":
        env["KILN_CPU"] = level
    return env


# What pins each peer to AVX2 + FMA, for the x86-64-v3 level on an AVX-512 host (the AVX2
# host). onnxruntime has no such switch: its MLAS kernels pick AVX-512 (and AMX) from CPUID.
AVX2_PINS = {
    "OPENBLAS_CORETYPE": "Haswell",  # gemm_vs_openblas, numpy's references
    "ATEN_CPU_CAPABILITY": "avx2",   # ATen's kernels and torch.compile's vector ISA
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # torch's MKL GEMMs
    "ONEDNN_MAX_CPU_ISA": "AVX2",   # torch's oneDNN primitives
}
AVX2_XLA_FLAG = "--xla_cpu_max_isa=AVX2"  # JAX's XLA:CPU code generation and its kernels


def peer_env(level, base=None):
    """A peer's environment at `level`: as it is for "native", pinned to AVX2 (AVX2_PINS and
    XLA's flag) for x86-64-v3."""
    env = dict(os.environ if base is None else base)
    for name in AVX2_PINS:
        env.pop(name, None)
    flags = env.get("XLA_FLAGS", "").replace(AVX2_XLA_FLAG, "").strip()
    if level != "native":
        env.update(AVX2_PINS)
        flags = (flags + " " + AVX2_XLA_FLAG).strip()
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    return env


def step_compile_seconds(bench_dir, level, cache_dir=None):
    """One fresh process that compiles and runs the user-path MLP step: (the slowest of the step's
    graph compiles, the micro-kernels' compile total) in seconds, or an error string. With
    `cache_dir`, KILN_CACHE_DIR points there."""
    env = kiln_env(level)
    env["KILN_TIME_PASSES"] = "1"
    if cache_dir is not None:
        env["KILN_CACHE_DIR"] = str(cache_dir)
    command = [bench_dir / "kiln_bench", f"--benchmark_filter=^{KILN_ROW[MLP_STEP]}/real_time$",
               "--benchmark_min_time=0.01"]
    print("+ " + " ".join(str(c) for c in command), file=sys.stderr, flush=True)
    done = subprocess.run([str(c) for c in command], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    lines = done.stderr.splitlines()
    graphs = [float(m.group(1)) for m in map(GRAPH_LINE.match, lines) if m]
    if done.returncode != 0 or len(graphs) < 2:
        return f"ERROR: kiln_bench exited with {done.returncode}, {len(graphs)} graph lines"
    micro = sum(float(m.group(1)) for m in map(MICRO_KERNEL_LINE.match, lines) if m)
    # The first graph realizes the parameters' pending initialisation; the step's follow.
    return max(graphs[1:]) / 1e3, micro / 1e3


def measure_step_compiles(bench_dir, level):
    """Best of COMPILE_RUNS fresh processes, cold and warm: ({row: seconds or error string}, the
    micro-kernels' cold total in seconds or None)."""
    rows, micro = {}, None
    cold = [step_compile_seconds(bench_dir, level) for _ in range(COMPILE_RUNS)]
    with tempfile.TemporaryDirectory(prefix="kiln_cache_") as cache_dir:
        step_compile_seconds(bench_dir, level, cache_dir)  # fills the cache
        warm = [step_compile_seconds(bench_dir, level, cache_dir) for _ in range(COMPILE_RUNS)]
    for row, runs in ((COLD_COMPILE, cold), (WARM_COMPILE, warm)):
        times = [r for r in runs if not isinstance(r, str)]
        rows[row] = min(t for t, _ in times) if times else runs[0]
        if row == COLD_COMPILE and times:
            micro = min(m for _, m in times)
    return rows, micro


def keep_best(best, name, value):
    """Keeps the smaller time; an error string only while there is no time."""
    old = best.get(name)
    if isinstance(value, str):
        if old is None:
            best[name] = value
    elif old is None or isinstance(old, str) or value < old:
        best[name] = value


def run_compilers(options, bench_dir, out, stream=None):
    """Issue #18's rounds (kiln_bench's rows, then each compiler peer), the GEMM shapes against
    OpenBLAS, the JSON saved as compilers.json and the tables printed."""
    python = pathlib.Path(options.peers_venv) / "bin" / "python"
    if not python.exists():
        print(f"# beside the compilers (issue #18): skipped: no venv at {options.peers_venv} "
              f"(make it: benchmarks/peers/make_peers_venv.sh {options.peers_venv})")
        return
    require_built(bench_dir, ("kiln_bench", "gemm_vs_openblas", "stream_triad"), options)
    out.mkdir(parents=True, exist_ok=True)
    levels = ["native", "x86-64-v3"] if host_has_avx512() else ["native"]
    data = {"load_before": load(), "loads_after_round": [], "levels": levels,
            "threads": THREADS, "kiln": {level: {} for level in levels},
            "peers": {level: {peer: {} for peer in COMPILER_PEERS} for level in levels},
            "versions": {}, "gemm": {}}
    if stream is None:
        stream = run_json([bench_dir / "stream_triad", f"--threads={THREADS}"])
    data["stream_bytes_per_second"] = stream["bytes_per_second"]
    rows = sorted(set(KILN_ROW.values())) + [DIAG_PREFIX + GELU, DIAG_PREFIX + SOFTMAX]
    # Google Benchmark's filter is a POSIX extended regex; the names hold no special characters.
    kiln_filter = "^(" + "|".join(rows) + ")(/real_time)?$"
    for _ in range(options.rounds):
        for level in levels:
            report = run_json([bench_dir / "kiln_bench", "--benchmark_format=json",
                               f"--benchmark_filter={kiln_filter}",
                               f"--benchmark_repetitions={options.repetitions}",
                               f"--benchmark_min_time={options.min_time}"], env=kiln_env(level))
            for name, value in kiln_times(report).items():
                keep_best(data["kiln"][level], name, value)
        for level in levels:
            for peer in COMPILER_PEERS:
                run_peer(python, peer, level, options, data["peers"][level][peer],
                         data["versions"])
        data["loads_after_round"].append(load())
    data["micro_kernels"] = {}
    for level in levels:
        rows, data["micro_kernels"][level] = measure_step_compiles(bench_dir, level)
        data["kiln"][level].update(rows)
    shapes = ",".join(shape for shape, _ in GEMM_SHAPES)
    for level in levels:
        data["gemm"][level] = run_json([bench_dir / "gemm_vs_openblas", f"--shapes={shapes}",
                                        f"--threads={THREADS}", "--format=json"],
                                       env=peer_env(level, kiln_env(level)), may_fail=True)
    data["load_after"] = load()
    (out / "compilers.json").write_text(json.dumps(data, indent=1))
    print_compilers(data, out)


def run_peer(python, peer, level, options, best, versions):
    """One compiler_peers.py process at `level` (peer_env); keeps each row's best in `best`."""
    report = run_json([python, HERE / "peers" / "compiler_peers.py", f"--peer={peer}",
                       f"--threads={THREADS}", f"--repetitions={options.repetitions}",
                       f"--min-time={options.min_time}"], env=peer_env(level), may_fail=True)
    if report is None:
        keep_best(best, "*", "ERROR: compiler_peers.py printed no JSON")
        return
    versions[peer] = report["version"]
    for name, result in report["results"].items():
        old = best.get(name)
        if "error" in result:
            if old is None:
                best[name] = result
        elif old is None or "error" in old or result["seconds"] < old["seconds"]:
            best[name] = result


def print_compilers(data, out):
    levels = data["levels"]
    judged = levels[-1]  # x86-64-v3 on an AVX-512 host: the AVX2 host
    kiln = data["kiln"]
    stream_bw = data["stream_bytes_per_second"]
    peers = data["peers"]
    if set(peers) <= set(COMPILER_PEERS):  # a compilers.json of before the pins: peers native
        peers = {level: data["peers"] for level in levels}
        pinned = False
    else:
        pinned = judged != "native"

    def kiln_time(row, level=judged):
        return kiln[level].get(KILN_ROW.get(row, row), "missing")

    def peer_time(peer, row, level=judged):
        result = peers[level][peer].get(row)
        return None if result is None or "error" in result else result["seconds"]

    def kiln_text(row):
        texts = []
        for level in reversed(levels):
            t = kiln_time(row, level)
            text = t if isinstance(t, str) else human(t)
            texts.append(text if level == judged else f"{level}: {text}")
        return texts[0] + (f" ({', '.join(texts[1:])})" if len(texts) > 1 else "")

    versions = ", ".join(f"{PEER_LABEL[p]} {v}" for p, v in data["versions"].items())
    where = (f"kiln at {' and '.join(levels)} (targets judged at {judged})" if len(levels) > 1
             else "kiln native (no AVX-512 on this host: the issue's AVX2 host)")
    print(f"# beside the compilers (issue #18), {data['threads']} threads, {where}; {versions}; "
          f"STREAM triad {stream_bw / 1e9:.2f} GB/s")
    if pinned:
        pins = ", ".join(f"{k}={v}" for k, v in AVX2_PINS.items())
        print(f"# peers at {judged}: pinned to AVX2 where they allow it ({pins}, XLA_FLAGS="
              f"{AVX2_XLA_FLAG}); onnxruntime cannot be pinned and runs its AVX-512 code. "
              f"Ratios in parentheses: kiln native / peers native")
    print(f"# load average before: {data['load_before']}; after each round: "
          f"{' | '.join(data['loads_after_round'])}; at the end: {data['load_after']}")
    print("| target | kiln | peer | peer value | ratio | target | result |")
    print("|---|---|---|---|---|---|---|")
    misses = 0
    for what, row, kind, peer, value in TARGETS_18:
        k = kiln_time(row)
        peer_label, peer_value, ratio, target_text = PEER_LABEL.get(peer, "-"), "", "", ""
        if isinstance(k, str):
            result = "ERROR"
        elif kind == "max_s":
            target_text = f"<= {human(value)}"
            result = "PASS" if k <= value else "MISS"
        elif kind == "stream":
            kiln_bw = IDEAL_BYTES[row] / k
            peer_label, peer_value = "STREAM triad", f"{stream_bw / 1e9:.2f} GB/s"
            ratio = f"{kiln_bw / stream_bw:.2f} ({kiln_bw / 1e9:.2f} GB/s)"
            target_text = f">= {value:.2f}"
            result = "PASS" if kiln_bw / stream_bw >= value else "MISS"
        else:  # at_most_peer
            p = peer_time(peer, row)
            target_text = f"kiln / peer <= {value:g}"
            if p is None:
                peer_value, result = "missing", "ERROR"
            else:
                peer_value, ratio = human(p), f"{k / p:.2f}"
                result = "PASS" if k <= value * p else "MISS"
                native_k, native_p = kiln_time(row, "native"), peer_time(peer, row, "native")
                if judged != "native" and not isinstance(native_k, str) and native_p:
                    peer_value += f" (native {human(native_p)})"
                    ratio += f" ({native_k / native_p:.2f})"
        misses += result != "PASS"
        print(f"| {what} | {kiln_text(row)} | {peer_label} | {peer_value} | {ratio} | "
              f"{target_text} | {result} |")

    gemm = data["gemm"].get(judged)
    native = data["gemm"].get("native") if judged != "native" else None
    print()
    if gemm is None:
        print("| GEMM shapes | ERROR: gemm_vs_openblas printed no JSON |")
        misses += 1
    else:
        print(f"# every GEMM of the MLP (b128) and CNN (b64) steps, kiln ({gemm['kiln_kernel']}) "
              f"vs OpenBLAS (core {gemm['openblas_core']}), {gemm['threads']} threads, "
              f"batch-interleaved; target kiln / OpenBLAS >= {GEMM_TARGET:g} (best batch of each)")
        extra = " | native kiln / OpenBLAS" if native else ""
        print(f"| M x N x K | GEMM | kiln GFLOP/s | OpenBLAS GFLOP/s | kiln / OpenBLAS | median of "
              f"pairs{extra} | result |")
        print("|---|---|---|---|---|---|" + ("---|" if native else "") + "---|")
        what = dict(GEMM_SHAPES)
        native_ratio = {r["shape"]: r["ratio_best"] for r in native["results"]} if native else {}
        for r in gemm["results"]:
            ok = r["ok"] and r["ratio_best"] >= GEMM_TARGET
            misses += not ok
            cell = f" | {native_ratio.get(r['shape'], 0):.2f}" if native else ""
            result = "PASS" if ok else ("MISMATCH" if not r["ok"] else "MISS")
            print(f"| {r['shape']} | {what.get(r['shape'], '')} | {r['kiln_gflops']:.1f} | "
                  f"{r['openblas_gflops']:.1f} | {r['ratio_best']:.2f} | "
                  f"{r['ratio_median']:.2f}{cell} | {result} |")
    micro = data.get("micro_kernels", {}).get(judged)
    if micro is not None:
        print(f"# compiles: the slowest of the step's graphs, best of {COMPILE_RUNS} fresh "
              f"processes (KILN_TIME_PASSES); besides them the GEMM micro-kernels, made once per "
              f"process on first use, took {human(micro)} on the first step")
    print(f"# {misses} target(s) missed or failed; raw JSON in {out / 'compilers.json'}")

    print()
    print("| row (kiln's name) | kiln | " + " | ".join(PEER_LABEL[p] for p in COMPILER_PEERS) +
          " |")
    print("|---|---|" + "---|" * len(COMPILER_PEERS))
    for row in KILN_ROW:
        k = kiln_time(row)
        cells = []
        for peer in COMPILER_PEERS:
            result = peers[judged][peer].get(row)
            if result is None:
                cells.append("-")
            elif "error" in result:
                cells.append("ERROR: " + result["error"][:80])
            else:
                ratio = "" if isinstance(k, str) else f", kiln / peer {k / result['seconds']:.2f}"
                cells.append(f"{human(result['seconds'])} (first call "
                             f"{result['first_call_seconds']:.1f} s{ratio})")
        print(f"| {KILN_ROW[row]} | {kiln_text(row)} | " + " | ".join(cells) + " |")
    for row in (GELU, SOFTMAX):
        k = kiln_time(DIAG_PREFIX + row)
        if not isinstance(k, str):
            print(f"| {DIAG_PREFIX + row} (kernel alone) | {human(k)}, "
                  f"{IDEAL_BYTES[row] / k / stream_bw:.2f} of STREAM | | | |")


if __name__ == "__main__":
    sys.exit(main())
