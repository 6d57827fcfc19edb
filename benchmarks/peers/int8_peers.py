#!/usr/bin/env python3
"""kiln's int8 GEMM beside kiln's f32 GEMM and onnxruntime's int8 MatMulInteger / QLinearMatMul
(issue #17's figure), u8 x i8 at M = N = K = 1024 and 2048, 2 threads, in one run.

    cmake --build --preset default --target gemm_int8_bench
    benchmarks/peers/make_peers_venv.sh                  # build/peers-venv: onnxruntime, onnx
    build/peers-venv/bin/python benchmarks/peers/int8_peers.py [--build build/default]
        [--sizes 1024,2048] [--weights 8bit,7bit] [--b-packing once|per-call]

Rows (each the best of --rounds alternating rounds; kiln's binary alternates int8 and f32 calls
itself, in ~20 ms batches):
  kiln int8 (i32)   gemm_int8_bench --output=i32: the i32 sums (what MatMulInteger returns)
  kiln int8 (u8)    gemm_int8_bench --output=u8: dequantised per column, requantised to u8 in the
                    GEMM's epilogue (what QLinearMatMul returns)
  kiln f32          kiln's f32 GEMM on the same values (gemm_int8_bench's f32 column)
  ort MatMulInteger / QLinearMatMul   InferenceSession, intra_op_num_threads=2,
                    inter_op_num_threads=1, ORT_ENABLE_ALL; B is an initializer (a weight)
Each onnxruntime result is also checked against numpy's exact int64 sums: on a CPU without VNNI,
onnxruntime's u8 x i8 kernel sums pairs of products in saturating int16 (vpmaddubsw), and
full-range inputs show it; kiln's sums are exact (gemm_int8_bench checks them).
--weights: B uniform over all of i8 ("8bit"), or over [-64, 64] ("7bit": weights quantized with
onnxruntime's reduce_range or kiln's QuantizeOptions::reduce_range), where onnxruntime's sums are
exact too and kiln runs its u8-quad kernels (pmaddubsw) instead of the i16 pairs (pmaddwd).
--b-packing: "once" (the default) packs kiln's B before timing (gemm_int8_bench --prepack,
PackInt8B: what a blob or a graph does with a constant weight), as onnxruntime packs its B
initializer at session creation; "per-call" packs it in every call (a B that is a graph input).
kiln's f32 GEMM packs B in every call either way.
"""
import argparse
import json
import os
import pathlib
import subprocess

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from peer_common import best_mean_seconds

THREADS = 2
ROOT = pathlib.Path(__file__).resolve().parents[2]


def best_ms(fn, min_time):
    fn()  # warm-up
    return 1e3 * best_mean_seconds(fn, 1, min_time)


def session(model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def matmul_integer(b):
    k, n = b.shape
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info("a", TensorProto.UINT8,
                                                                            ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, ["m", n])],
                              initializer=[numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def qlinear_matmul(b):
    k, n = b.shape
    scalars = {"as": np.float32(1 / 255), "az": np.uint8(0), "bs": np.float32(0.01),
               "bz": np.int8(0), "ys": np.float32(0.05), "yz": np.uint8(0)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    inits = [numpy_helper.from_array(b, "b")] + [numpy_helper.from_array(np.array(v), k_)
                                                 for k_, v in scalars.items()]
    graph = helper.make_graph([node], "qlmm", [helper.make_tensor_value_info("a", TensorProto.UINT8,
                                                                             ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, ["m", n])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def kiln_rows(build, size, weights, output, rounds, min_time, prepack):
    binary = pathlib.Path(build) / "benchmarks" / "gemm_int8_bench"
    env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
    out = subprocess.run([str(binary), f"--sizes={size}", f"--threads={THREADS}", "--json",
                          f"--weights={weights}", f"--output={output}", f"--rounds={rounds}",
                          f"--min_time={min_time}"] + (["--prepack"] if prepack else []),
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=str(ROOT / "build" / "default"))
    parser.add_argument("--sizes", default="1024,2048")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--weights", default="8bit,7bit")
    parser.add_argument("--b-packing", choices=("once", "per-call"), default="once")
    args = parser.parse_args()
    prepack = args.b_packing == "once"
    print(f"onnxruntime {ort.__version__}, {THREADS} threads each; kiln packs B "
          f"{'once' if prepack else 'in every call'}; load {os.getloadavg()}")
    rng = np.random.default_rng(0)
    rows = []
    for weights, size in [(w, int(s)) for w in args.weights.split(",")
                          for s in args.sizes.split(",")]:
        if weights not in ("8bit", "7bit"):
            parser.error(f"--weights: {weights} is not 8bit or 7bit")
        a = rng.integers(0, 256, (size, size), dtype=np.uint8)
        low, high = (-128, 128) if weights == "8bit" else (-64, 65)
        b = rng.integers(low, high, (size, size), dtype=np.int8)
        exact = a.astype(np.int64) @ b.astype(np.int64)
        mmi, qlmm = session(matmul_integer(b)), session(qlinear_matmul(b))
        wrong = int((mmi.run(None, {"a": a})[0] != exact).sum())
        best = {"kiln int8 (i32)": 1e30, "kiln int8 (u8)": 1e30, "kiln f32": 1e30,
                "ort MatMulInteger": 1e30, "ort QLinearMatMul": 1e30}
        for _ in range(args.rounds):
            # Alternating rounds: kiln's binary (int8 and f32 alternating inside), then onnxruntime.
            for output, name in (("i32", "kiln int8 (i32)"), ("u8", "kiln int8 (u8)")):
                r = kiln_rows(args.build, size, weights, output, 2, args.min_time / 2, prepack)
                best[name] = min(best[name], r["int8_ms"])
                best["kiln f32"] = min(best["kiln f32"], r["f32_ms"])
            best["ort MatMulInteger"] = min(best["ort MatMulInteger"],
                                            best_ms(lambda: mmi.run(None, {"a": a}), args.min_time))
            best["ort QLinearMatMul"] = min(best["ort QLinearMatMul"],
                                            best_ms(lambda: qlmm.run(None, {"a": a}), args.min_time))
        rows.append((weights, size, best, wrong))
    print("\n| weights | M = N = K | kiln int8 i32 ms | kiln int8 u8 ms | kiln f32 ms | ort MatMulInteger ms "
          "| ort QLinearMatMul ms | int8 / f32 speed-up | kiln i32 / ort MatMulInteger | "
          "kiln u8 / ort QLinearMatMul | ort sums wrong |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for weights, size, t, wrong in rows:
        print(f"| {weights} | {size} | {t['kiln int8 (i32)']:.2f} | {t['kiln int8 (u8)']:.2f} | "
              f"{t['kiln f32']:.2f} | {t['ort MatMulInteger']:.2f} | {t['ort QLinearMatMul']:.2f} | "
              f"{t['kiln f32'] / t['kiln int8 (i32)']:.2f}x | "
              f"{t['ort MatMulInteger'] / t['kiln int8 (i32)']:.2f}x faster | "
              f"{t['ort QLinearMatMul'] / t['kiln int8 (u8)']:.2f}x faster | "
              f"{wrong} of {size * size} |")
    print(f"\nload after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
