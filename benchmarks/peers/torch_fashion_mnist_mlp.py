#!/usr/bin/env python3
"""PyTorch's twin of examples/fashion_mnist/mlp.cc, for run_peers.py's peak-memory comparison.

Run with Debian's interpreter (python3-torch): /usr/bin/python3 torch_fashion_mnist_mlp.py.
Same data, model and loop as the kiln example: Fashion-MNIST read from Debian's gz IDX files with
numpy, pixels scaled to [0, 1] and normalised with the training set's pixel mean and standard
deviation (computed here, as the example does), the MLP 784-512-256-10 with ReLU and He-uniform
weights (kaiming_uniform_(nonlinearity="relu"); biases keep nn.Linear's default; --default-init
keeps nn.Linear's default weights too), F.cross_entropy, SGD(lr=0.01, momentum=0.9), batch 128
shuffled each epoch (--seed seeds the initialisation and the shuffle), then the test set's loss
and accuracy in batches of 1000 under no_grad. Peak memory is
measured from outside (/usr/bin/time -v, "Maximum resident set size"), so the script only trains
and prints the same summary line shape as the example.
"""

import argparse
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    images = read_idx(f"{data_dir}/{split}-images-idx3-ubyte.gz")
    labels = read_idx(f"{data_dir}/{split}-labels-idx1-ubyte.gz")
    return images.astype(np.float32) / 255.0, torch.from_numpy(labels.astype(np.int64))


def normalize(x, mean, std):
    return torch.from_numpy((x - mean) / std)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--default-init", action="store_true",
                        help="nn.Linear's default weights instead of He-uniform")
    parser.add_argument("--data-dir", default=DEBIAN_DIR)
    options = parser.parse_args()

    torch.manual_seed(options.seed)
    torch.set_num_threads(options.threads)
    train_x, train_y = load(options.data_dir, "train")
    test_x, test_y = load(options.data_dir, "t10k")
    # The training set's pixel statistics (float64 sums, population std), like the example.
    mean = float(train_x.mean(dtype=np.float64))
    std = float(train_x.std(dtype=np.float64))
    train_x, test_x = normalize(train_x, mean, std), normalize(test_x, mean, std)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    if not options.default_init:
        for layer in model:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_uniform_(layer.weight, nonlinearity="relu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(options.seed)
    for epoch in range(1, options.epochs + 1):
        started = time.perf_counter()
        order = torch.from_numpy(rng.permutation(len(train_x)))
        total_loss, correct = 0.0, 0
        for start in range(0, len(order), options.batch_size):
            index = order[start:start + options.batch_size]
            x, y = train_x[index].reshape(-1, 784), train_y[index]
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * len(index)
            correct += (logits.argmax(1) == y).sum().item()
        with torch.no_grad():
            valid_loss, valid_correct = 0.0, 0
            for start in range(0, len(test_x), 1000):
                x, y = test_x[start:start + 1000].reshape(-1, 784), test_y[start:start + 1000]
                logits = model(x)
                valid_loss += F.cross_entropy(logits, y, reduction="sum").item()
                valid_correct += (logits.argmax(1) == y).sum().item()
        print(f"epoch {epoch}/{options.epochs}  train loss {total_loss / len(train_x):.4f} "
              f"accuracy {correct / len(train_x):.4f} | valid loss {valid_loss / len(test_x):.4f} "
              f"accuracy {valid_correct / len(test_x):.4f}  "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
