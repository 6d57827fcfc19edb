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
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

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


def run_json(command, env=None):
    print("+ " + " ".join(str(c) for c in command), file=sys.stderr, flush=True)
    done = subprocess.run([str(c) for c in command], env=env, stdout=subprocess.PIPE, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"run_peers: {command[0]} exited with {done.returncode}")
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
    options = parser.parse_args()

    if options.memory == "only":
        return 0 if print_memory(options) else 1
    bench_dir = pathlib.Path(options.build_dir) / "benchmarks"
    out = pathlib.Path(options.out) if options.out else bench_dir / "peer_results"
    if options.table_only:
        data = {n: json.loads((out / f"{n}.json").read_text())
                for n in ("stream", "kiln", "torch", "openblas")}
        train_json = out / "torch_train.json"
        if train_json.exists():
            data["torch"]["results"].update(json.loads(train_json.read_text())["results"])
        print_table(data["stream"], data["kiln"], data["torch"], data["openblas"], out,
                    "(from saved JSON)")
        return 0
    programs = [bench_dir / p for p in ("stream_triad", "kiln_bench", "openblas_bench")]
    missing = [str(p) for p in programs if not p.exists()]
    if missing:
        sys.exit("run_peers: not built: " + ", ".join(missing) + "\n(cmake --build " +
                 options.build_dir + " --target kiln_bench openblas_bench stream_triad)")
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
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
