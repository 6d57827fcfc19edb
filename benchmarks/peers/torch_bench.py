#!/usr/bin/env python3
"""PyTorch eager on kiln_bench's workloads (same names), for run_peers.py.

Run with Debian's interpreter, which has python3-torch: /usr/bin/python3 torch_bench.py.
Each workload runs once to warm up, then --repetitions batches of as many calls as fit in
--min-time seconds; "seconds" is the best batch's mean per call, the statistic run_peers.py takes
of kiln. Prints JSON: {"torch": version, "threads": n, "results": {name: {"seconds": s}}}.
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from peer_common import best_mean_seconds

ELTWISE = 16777216
AFFINE_SCALE, AFFINE_SHIFT = 0.75, 0.25
LAYER_NORM_EPS = 1e-5


def workloads():
    """name -> (setup() -> args, fn(*args)); inputs are built outside the timed calls."""
    gen = torch.Generator().manual_seed(0)

    def uniform(*shape, low=-3.0, high=3.0):
        return torch.rand(*shape, generator=gen) * (high - low) + low

    def dispatch_inputs():
        return uniform(16, low=-1.0, high=1.0), uniform(16)

    def dispatch(x, y):
        # The same 10 elementwise ops as kiln_bench's dispatch/cache_hit.
        a = x * y
        b = torch.tanh(a - y)
        c = b * a + torch.exp(y)
        return c / (torch.abs(y) + torch.abs(x))

    table = {
        "eltwise/gelu_affine/16777216": (
            lambda: (uniform(ELTWISE),),
            lambda x: F.gelu(x * AFFINE_SCALE + AFFINE_SHIFT, approximate="tanh")),
        "eltwise/silu/16777216": (lambda: (uniform(ELTWISE),), lambda x: x * torch.sigmoid(x)),
        "softmax/rows/4096x4096": (lambda: (uniform(4096, 4096),),
                                   lambda x: torch.softmax(x, dim=1)),
        # No affine parameters, biased variance: kiln_bench's layernorm.
        "layernorm/4096x1024": (lambda: (uniform(4096, 1024),),
                                lambda x: F.layer_norm(x, (1024,), eps=LAYER_NORM_EPS)),
        "reduce/sum_rows/4096x4096": (lambda: (uniform(4096, 4096),), lambda x: x.sum(dim=1)),
        "dispatch/cache_hit": (dispatch_inputs, dispatch),
    }
    for n in (256, 512, 1024, 2048):
        table[f"matmul/f32/{n}"] = (
            lambda n=n: (uniform(n, n, low=-1.0, high=1.0), uniform(n, n, low=-1.0, high=1.0)),
            torch.mm)
    return table


def time_workload(setup, fn, repetitions, min_time):
    args = setup()
    fn(*args)  # warm-up
    return best_mean_seconds(lambda: fn(*args), repetitions, min_time)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--filter", default="", help="run only names containing this")
    options = parser.parse_args()

    torch.set_num_threads(options.threads)
    results = {}
    with torch.no_grad():
        for name, (setup, fn) in workloads().items():
            if options.filter and options.filter not in name:
                continue
            results[name] = {"seconds": time_workload(setup, fn, options.repetitions,
                                                      options.min_time)}
            print(f"torch_bench: {name}: {results[name]['seconds']:.6g} s", file=sys.stderr)
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(),
               "results": results}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
