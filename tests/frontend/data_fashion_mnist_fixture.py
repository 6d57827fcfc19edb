#!/usr/bin/python3
"""Writes data_fashion_mnist_fixture.json: statistics of Debian's Fashion-MNIST test set
(dataset-fashion-mnist), computed with numpy and gzip independently of kiln's IDX reader.
data_test.cc checks kiln's reader against it. Run: /usr/bin/python3 <this file>."""
import gzip
import json
import os

import numpy as np

DIR = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))

with gzip.open(os.path.join(DIR, "t10k-images-idx3-ubyte.gz"), "rb") as f:
    raw = f.read()
n, rows, cols = (int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, rows, cols)
with gzip.open(os.path.join(DIR, "t10k-labels-idx1-ubyte.gz"), "rb") as f:
    labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)

picked = [0, 1, 2, 1234, n - 1]
scaled = images.astype(np.float64) / 255.0
fixture = {
    "shape": [n, rows, cols],
    "total_pixel_sum": [int(images.sum(dtype=np.int64))],
    "picked_images": picked,
    "picked_pixel_sums": [int(images[i].sum(dtype=np.int64)) for i in picked],
    "picked_center_pixels": [int(images[i, rows // 2, cols // 2]) for i in picked],
    "label_counts": [int((labels == c).sum()) for c in range(10)],
    "first_labels": [int(x) for x in labels[:16]],
    # mean and std of the pixels scaled to [0, 1], times 1e6, rounded (integers keep the
    # fixture format simple).
    "scaled_mean_e6": [int(round(scaled.mean() * 1e6))],
    "scaled_std_e6": [int(round(scaled.std() * 1e6))],
}
with open(os.path.join(HERE, "data_fashion_mnist_fixture.json"), "w") as f:
    f.write("{\n" + ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in fixture.items()) + "\n}\n")
