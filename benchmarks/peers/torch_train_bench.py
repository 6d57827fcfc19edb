#!/usr/bin/env python3
"""PyTorch eager on kiln_bench's training workloads (issue #4; same names), for run_peers.py.

Run with Debian's interpreter, which has python3-torch: /usr/bin/python3 torch_train_bench.py.
The models and steps match benchmarks/train_graphs.h:
  train/mlp_step/784-512-256-10/b128: Linear 784-512, ReLU, Linear 512-256, ReLU, Linear 256-10,
    F.cross_entropy from logits (mean), backward, SGD(lr=0.01, momentum=0.9) step.
  infer/mlp/784-512-256-10/b1: the same MLP's forward to logits on one sample, under no_grad.
  train/cnn_step/mnist/b64: conv 1->32 3x3, ReLU, max_pool 2, conv 32->64 3x3, ReLU, max_pool 2,
    Linear 1600-128, ReLU, Linear 128-10, cross-entropy, backward, SGD momentum step.
Each step is zero_grad(set_to_none=True) + forward + backward + optimizer.step(). Timing as in
torch_bench.py: one warm-up, then --repetitions batches of >= --min-time seconds; "seconds" is
the best batch's mean per call. Prints JSON: {"torch": version, "threads": n, "results": ...}.
"""

import argparse
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_bench import time_workload  # one timing loop for both peers


def mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def train_step(model, x, labels):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        optimizer.step()
        return loss

    return step


def inference(model, x):
    def run():
        with torch.no_grad():
            return model(x)

    return run


def workloads():
    """name -> () -> step function; inputs are built outside the timed calls."""
    gen = torch.Generator().manual_seed(0)
    return {
        "train/mlp_step/784-512-256-10/b128": lambda: train_step(
            mlp(), torch.rand(128, 784, generator=gen),
            torch.randint(0, 10, (128,), generator=gen)),
        "infer/mlp/784-512-256-10/b1": lambda: inference(mlp(), torch.rand(1, 784, generator=gen)),
        "train/cnn_step/mnist/b64": lambda: train_step(
            cnn(), torch.rand(64, 1, 28, 28, generator=gen),
            torch.randint(0, 10, (64,), generator=gen)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--filter", default="", help="run only names containing this")
    options = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(options.threads)
    results = {}
    for name, make in workloads().items():
        if options.filter and options.filter not in name:
            continue
        results[name] = {"seconds": time_workload(lambda: (), make(), options.repetitions,
                                                   options.min_time)}
        print(f"torch_train_bench: {name}: {results[name]['seconds']:.6g} s", file=sys.stderr)
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(),
               "results": results}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
