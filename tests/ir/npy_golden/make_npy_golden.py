#!/usr/bin/python3
"""Writes the golden .npy files of tests/ir/npy_test.cc with numpy (the oracle), and MANIFEST.txt:
one line per file, "<file>\t<dtype>\t<shape>\t<hex of the little-endian C-order element bytes>".
The test parses each file with ir::ParseNpy and compares dtype, shape and bytes with the manifest;
for the files numpy wrote with np.save (little-endian, version 1.0) it also checks that
ir::EncodeNpy reproduces the file byte for byte. Run: /usr/bin/python3 <this file>."""
import io
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
KILN = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32", "int64": "i64",
        "uint8": "u8", "bool": "bool"}
lines = []


def values(dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 1).reshape(shape)
    if np.issubdtype(dtype, np.floating):
        v = (np.arange(n, dtype=np.float64) - n / 2) * 0.37
        if n >= 4:
            v[:4] = [np.nan, np.inf, -np.inf, -0.0]
        return v.astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    v = np.arange(n, dtype=np.int64) * 7919 - 1000
    if n >= 2:
        v[0], v[1] = info.min, info.max
    return v.astype(dtype).reshape(shape)


def record(name, array):
    little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
    shape = "[" + ",".join(str(d) for d in array.shape) + "]"
    lines.append(f"{name}\t{KILN[array.dtype.name]}\t{shape}\t{little.tobytes().hex()}")


def save(name, array, version=None, big=False):
    if big:
        array = array.astype(array.dtype.newbyteorder(">"))
    with open(os.path.join(HERE, name), "wb") as f:
        if version is None:
            np.save(f, array)
        else:
            np.lib.format.write_array(f, array, version=version)
    record(name, array)


for dtype in [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_]:
    tag = np.dtype(dtype).name
    save(f"{tag}_2x3.npy", values(dtype, (2, 3)))
    save(f"{tag}_scalar.npy", values(dtype, ()))
    save(f"{tag}_big_2x3x2.npy", values(dtype, (2, 3, 2)), big=True)
save("float32_empty_0x5.npy", values(np.float32, (0, 5)))
save("int64_vector_7.npy", values(np.int64, (7,)))
save("float32_rank5.npy", values(np.float32, (1, 2, 1, 3, 2)))
save("float32_v2.npy", values(np.float32, (3, 4)), version=(2, 0))
save("int32_v3.npy", values(np.int32, (4,)), version=(3, 0))
save("float64_v2_big.npy", values(np.float64, (2, 2)), version=(2, 0), big=True)

with open(os.path.join(HERE, "MANIFEST.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
