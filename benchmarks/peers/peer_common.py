"""What the peers and run_peers.py share, with no dependency beyond the standard library (the
peers run under Debian's python3 or the compiler peers' venv, run_peers.py under any python3):
the names of the rows the compiler peers time (kiln_bench's names) and the timing loop."""

import math
import time

MLP_STEP = "train/mlp_step/784-512-256-10/b128"
CNN_STEP = "train/cnn_step/mnist/b64"
INFER_B1 = "infer/mlp/784-512-256-10/b1"
INFER_B256 = "infer/mlp/784-512-256-10/b256"
GELU = "eltwise/gelu_affine/16777216"
SOFTMAX = "softmax/rows/4096x4096"
DISPATCH = "dispatch/cache_hit"


def best_mean_seconds(fn, repetitions, min_time):
    """The best of `repetitions` batches of calls of fn(), each batch at least `min_time`
    seconds: its mean seconds per call (the statistic run_peers.py takes of kiln_bench too)."""
    best = math.inf
    for _ in range(repetitions):
        calls = 0
        start = time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / calls)
    return best
