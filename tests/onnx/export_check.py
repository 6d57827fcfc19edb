#!/usr/bin/python3
"""Runs onnx.checker.check_model(full_check=True) on every DIR/*/model.onnx (written by
tests/onnx/export_test.cc) and checks that each model's declared input/output types and the
test_data_set_0/*.pb files next to it agree. Exit status 1 on any failure, listing them all.

full_check runs ONNX's strict shape inference too, so a node whose inferred output type or shape
differs from the exporter's value_info fails here."""
import glob
import os
import sys

import onnx
from onnx import numpy_helper


def check(case_dir):
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    data = os.path.join(case_dir, "test_data_set_0")
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for i, value in enumerate(values):
            path = os.path.join(data, f"{kind}_{i}.pb")
            if not os.path.exists(path):
                continue
            tensor = onnx.TensorProto()
            with open(path, "rb") as f:
                tensor.ParseFromString(f.read())
            t = value.type.tensor_type
            dims = [d.dim_value for d in t.shape.dim]
            if tensor.data_type != t.elem_type or list(tensor.dims) != dims:
                raise ValueError(f"{kind} {i} ({value.name}): model says type {t.elem_type} "
                                 f"{dims}, data is {tensor.data_type} {list(tensor.dims)}")
            numpy_helper.to_array(tensor)  # the raw_data length must match


def main():
    cases = sorted(glob.glob(os.path.join(sys.argv[1], "*", "model.onnx")))
    failures = []
    for path in cases:
        case_dir = os.path.dirname(path)
        try:
            check(case_dir)
        except Exception as e:  # every failure is reported, not just the first
            failures.append(f"{os.path.basename(case_dir)}: {type(e).__name__}: {e}")
    for f in failures:
        print(f)
    print(f"onnx {onnx.__version__}: checked {len(cases)} models, {len(failures)} failed")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
