#!/usr/bin/env python3
"""Development-time check, not part of `make test`: runs every exported model under DIR (the
layout tests/onnx/export_test.cc writes with KILN_ONNX_EXPORT_DIR=DIR: <case>/model.onnx and
test_data_set_0/{input,output}_<i>.pb, the outputs from ir::Interpret) with onnxruntime and
compares. Needs onnxruntime from PyPI, e.g.

  python3 -m venv --system-site-packages /work/venv-onnxout
  /work/venv-onnxout/bin/pip install onnxruntime
  KILN_ONNX_EXPORT_DIR=/tmp/kiln_onnx build/dev/tests/onnx/onnx_export_test
  /work/venv-onnxout/bin/python tests/onnx/export_ort_check.py /tmp/kiln_onnx

Floats: |ort - kiln| <= atol + rtol * |kiln| (rtol/atol 1e-5 for f32/f64 and 1e-2 for f16/bf16,
which ONNX Runtime computes in f32), NaN must meet NaN; integers and bools must be equal.
Prints one line per mismatching or failing case and a summary."""
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t, numpy_helper.to_array(t)


def as_float(a, data_type):
    if data_type == onnx.TensorProto.BFLOAT16:  # numpy_helper gives bf16 as raw uint16 bits
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)


def compare(kiln, ort_value, data_type):
    float_types = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                   onnx.TensorProto.BFLOAT16)
    if data_type in float_types:
        loose = data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
        tol = 1e-2 if loose else 1e-5
        a = as_float(np.asarray(kiln), data_type).astype(np.float64)
        b = as_float(np.asarray(ort_value), data_type).astype(np.float64)
        if a.shape != b.shape:
            return f"shape {b.shape} vs {a.shape}"
        both_nan = np.isnan(a) & np.isnan(b)
        with np.errstate(invalid="ignore"):
            close = (a == b) | (np.abs(a - b) <= tol + tol * np.abs(a)) | both_nan
        if not close.all():
            i = np.argwhere(~close)[0]
            return f"{(~close).sum()} of {a.size} differ, first at {tuple(i)}: ort {b[tuple(i)]} kiln {a[tuple(i)]}"
        return None
    a, b = np.asarray(kiln), np.asarray(ort_value)
    if a.shape != b.shape:
        return f"shape {b.shape} vs {a.shape}"
    if not np.array_equal(a, b):
        i = np.argwhere(a != b)[0]
        return f"{(a != b).sum()} of {a.size} differ, first at {tuple(i)}: ort {b[tuple(i)]} kiln {a[tuple(i)]}"
    return None


def main():
    cases = sorted(glob.glob(os.path.join(sys.argv[1], "**", "model.onnx"), recursive=True))
    ok, failed = 0, []
    for path in cases:
        case_dir = os.path.dirname(path)
        name = os.path.relpath(case_dir, sys.argv[1])
        try:
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            data = os.path.join(case_dir, "test_data_set_0")
            feeds = {}
            for i, value in enumerate(sess.get_inputs()):
                t, a = load(os.path.join(data, f"input_{i}.pb"))
                if t.data_type == onnx.TensorProto.BFLOAT16:
                    raise RuntimeError("bf16 inputs: numpy has no bfloat16 to feed")
                feeds[value.name] = a
            outs = sess.run(None, feeds)
            problems = []
            for i, out in enumerate(outs):
                t, expected = load(os.path.join(data, f"output_{i}.pb"))
                p = compare(expected, out, t.data_type)
                if p:
                    problems.append(f"output {i}: {p}")
            if problems:
                failed.append(f"{name}: MISMATCH " + "; ".join(problems))
            else:
                ok += 1
        except Exception as e:
            failed.append(f"{name}: ERROR {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    for f in failed:
        print(f)
    print(f"onnxruntime {ort.__version__}: {len(cases)} models, {ok} match, {len(failed)} do not")


if __name__ == "__main__":
    main()
