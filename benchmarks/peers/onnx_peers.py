#!/usr/bin/env python3
"""The imported CNN at batch 64: kiln (Cpu backend) vs onnxruntime vs PyTorch TorchScript.

Run from the repository root with a Python that has torch 1.13 + onnx (Debian's) and onnxruntime
(PyPI), e.g. the venv made with
    /usr/bin/python3 -m venv --system-site-packages /work/venv-onnx
    /work/venv-onnx/bin/pip install onnxruntime "numpy<2"
after building kiln's row:
    cmake --build build/dev --target onnx_kiln_bench
    /work/venv-onnx/bin/python benchmarks/peers/onnx_peers.py [--build build/dev] [--batch 64]

The model is tests/onnx/make_fixtures.py's CNN (Conv-BN-ReLU-MaxPool-Conv-ReLU-BN-
GlobalAveragePool-Linear, 3x16x16 inputs), with random weights and BN statistics (seed 0),
exported at opset 14 with a dynamic batch. All three run in this process's run, 2 threads each:
  kiln         onnx_kiln_bench (frontend/onnx import with the initializers baked in as
               constants, like onnxruntime treats them; Cpu backend, KILN_NUM_THREADS=2)
  onnxruntime  InferenceSession, intra_op_num_threads=2, inter_op_num_threads=1, all graph
               optimizations (ORT_ENABLE_ALL)
  torchscript  torch.jit.trace + torch.jit.optimize_for_inference, torch.set_num_threads(2)
Each time is the best of --repetitions batches, each batch the mean per call over --min-time
seconds (the same statistic for all three). The outputs of all three are compared (max relative
difference), and the ratios kiln/torchscript and kiln/onnxruntime printed; the targets of issue
#7 are kiln <= torchscript and kiln <= 1.2 x onnxruntime.
"""
import argparse
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

THREADS = 2
ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_fixture_models():
    spec = importlib.util.spec_from_file_location("make_fixtures", ROOT / "tests/onnx/make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def best_time(fn, min_time, repetitions):
    fn()  # warm-up
    best = float("inf")
    for _ in range(repetitions):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            now = time.perf_counter()
            if now - start >= min_time:
                break
        best = min(best, (now - start) / n)
    return best


def rel_diff(a, b):
    return float(np.max(np.abs(a - b) / (np.abs(b) + 1e-3)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/dev")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()

    torch.set_num_threads(THREADS)
    fixtures = load_fixture_models()
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = fixtures.CNN()
    fixtures.randomize_bn(model, gen)
    model.eval()
    x = torch.randn(args.batch, 3, 16, 16, generator=gen)

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="onnx_peers_"))
    onnx_path = tmp / "cnn.onnx"
    torch.onnx.export(model, (x,), str(onnx_path), opset_version=14, input_names=["input_0"],
                      output_names=["output_0"],
                      dynamic_axes={"input_0": {0: "batch"}, "output_0": {0: "batch"}})
    with open(tmp / "input_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "input_0").SerializeToString())

    with torch.no_grad():
        want = model(x).numpy()

    # kiln
    env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
    bench = ROOT / args.build / "benchmarks/onnx_kiln_bench"
    out = subprocess.run([str(bench), str(onnx_path), str(tmp / "input_0.pb"), "--input-name", "input_0", "--weights", "constants",
                          "--output", str(tmp / "kiln.f32"), "--min-time", str(args.min_time),
                          "--repetitions", str(args.repetitions)],
                         env=env, check=True, capture_output=True, text=True)
    kiln = json.loads(out.stdout)
    kiln_out = np.fromfile(tmp / "kiln.f32", dtype=np.float32).reshape(want.shape)

    # onnxruntime
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    feed = {"input_0": x.numpy()}
    ort_out = sess.run(None, feed)[0]
    ort_s = best_time(lambda: sess.run(None, feed), args.min_time, args.repetitions)

    # TorchScript
    with torch.no_grad():
        traced = torch.jit.optimize_for_inference(torch.jit.trace(model, (x,)))
        ts_out = traced(x).numpy()
        ts_s = best_time(lambda: traced(x), args.min_time, args.repetitions)

    print(f"model: CNN (tests/onnx/make_fixtures.py), batch {args.batch}, 3x16x16, {THREADS} threads")
    print(f"onnxruntime {ort.__version__}, torch {torch.__version__}, onnx {onnx.__version__}")
    print(f"kiln import {kiln['import_seconds'] * 1e3:.1f} ms, compile {kiln['compile_seconds'] * 1e3:.1f} ms, "
          f"{kiln['kernels']} kernels + {kiln['gemm_steps']} GEMM steps")
    print(f"{'runtime':<14}{'ms/batch':>10}{'kiln ratio':>12}")
    for name, s in [("kiln", kiln["seconds"]), ("onnxruntime", ort_s), ("torchscript", ts_s)]:
        print(f"{name:<14}{s * 1e3:>10.3f}{kiln['seconds'] / s:>12.2f}")
    print(f"outputs: kiln vs torch {rel_diff(kiln_out, want):.2e}, onnxruntime vs torch "
          f"{rel_diff(ort_out, want):.2e}, kiln vs onnxruntime {rel_diff(kiln_out, ort_out):.2e}, "
          f"torchscript vs torch {rel_diff(ts_out, want):.2e}")
    ok_ts = kiln["seconds"] <= ts_s
    ok_ort = kiln["seconds"] <= 1.2 * ort_s
    print(f"targets: kiln <= torchscript: {'met' if ok_ts else 'NOT met'}; "
          f"kiln <= 1.2 x onnxruntime: {'met' if ok_ort else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
