#!/usr/bin/env python3
"""Writes ONNX's backend conformance cases for tests/onnx/conformance/onnx_conformance.

Run it with the venv's python (scripts/make_venv.sh: onnx, numpy), not Debian's python3 (onnx
1.12 there). Writes into OUT (a build folder; nothing here is committed):

  OUT/node/<case>/model.onnx, test_data_set_0/{input,output}_<i>.pb, data.json
      every case of onnx.backend.test.case.node.collect_testcases(), written the way ONNX's own
      `backend-test-tools generate-data` (onnx/backend/test/cmd_tools.py) writes model cases;
      data.json holds the case's tolerances (the loader's keys: rtol, atol) and the operator
      the case tests (op_type; an *_expanded case tests the operator it expands);
  OUT/suites.txt
      one line per suite, "<suite> <folder>": node (above) and the suites the onnx wheel stores
      as files (pytorch-converted, pytorch-operator, simple), read in place from the wheel;
  OUT/stamp.json
      the onnx version and this script's hash: a second run with both unchanged does nothing.

Usage: write_cases.py --out DIR [--force]
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import warnings

STORED_SUITES = ("pytorch-converted", "pytorch-operator", "simple")


def tensor_bytes(value, value_info):
    """The serialized proto of one input/output, as cmd_tools.generate_data writes it."""
    from onnx import TensorProto, numpy_helper

    kind = value_info.type.WhichOneof("value")
    if kind == "map_type":
        return numpy_helper.from_dict(value, value_info.name).SerializeToString()
    if kind == "sequence_type":
        return numpy_helper.from_list(value, value_info.name).SerializeToString()
    if kind == "optional_type":
        return numpy_helper.from_optional(value, value_info.name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, value_info.name).SerializeToString()


def write_node_cases(out_dir):
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        # Some generators divide by zero on purpose (ReduceMax of an empty set is -inf).
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    single_op = {}
    for case in cases:
        ops = {n.op_type for n in case.model.graph.node}
        if len(ops) == 1 and not case.name.endswith("_expanded") and "_expanded_ver" not in case.name:
            single_op[case.name] = ops.pop()
    names = set()
    for case in cases:
        if case.name in names:
            sys.exit(f"write_cases: two node cases are named {case.name}")
        names.add(case.name)
        base = case.name.split("_expanded")[0]
        op_type = single_op.get(case.name) or single_op.get(base)
        if op_type is None and len(case.model.graph.node) > 0:
            op_type = case.model.graph.node[0].op_type
        case_dir = os.path.join(out_dir, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        with open(os.path.join(case_dir, "data.json"), "w") as f:
            json.dump({"rtol": case.rtol, "atol": case.atol, "op_type": op_type}, f, sort_keys=True)
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            set_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(set_dir)
            for prefix, values, infos in (("input", inputs, graph.input),
                                          ("output", outputs, graph.output)):
                for j, value in enumerate(values):
                    with open(os.path.join(set_dir, f"{prefix}_{j}.pb"), "wb") as f:
                        f.write(tensor_bytes(value, infos[j]))
    return len(cases)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output folder (a build folder)")
    parser.add_argument("--force", action="store_true", help="rewrite even when up to date")
    args = parser.parse_args()
    try:
        import onnx
    except ImportError as e:
        sys.exit(f"write_cases: the onnx package is missing ({e}): run scripts/make_venv.sh "
                 "and use the venv's python")

    with open(__file__, "rb") as f:
        script_hash = hashlib.sha256(f.read()).hexdigest()
    stamp = {"onnx": onnx.__version__, "script": script_hash}
    stamp_path = os.path.join(args.out, "stamp.json")
    if not args.force and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if json.load(f) == stamp:
                print(f"write_cases: {args.out} is up to date (onnx {onnx.__version__})")
                return

    os.makedirs(args.out, exist_ok=True)
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    node_dir = os.path.join(args.out, "node")
    shutil.rmtree(node_dir, ignore_errors=True)
    os.makedirs(node_dir)
    count = write_node_cases(node_dir)

    data_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    lines = [f"node {os.path.abspath(node_dir)}"]
    for suite in STORED_SUITES:
        folder = os.path.join(data_dir, suite)
        if not os.path.isdir(folder):
            sys.exit(f"write_cases: onnx {onnx.__version__} stores no {suite} suite ({folder})")
        lines.append(f"{suite} {os.path.abspath(folder)}")
    with open(os.path.join(args.out, "suites.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(stamp_path, "w") as f:
        json.dump(stamp, f, sort_keys=True)
    print(f"write_cases: {count} node cases in {node_dir}; stored suites "
          f"{', '.join(STORED_SUITES)} from onnx {onnx.__version__} in {data_dir}")


if __name__ == "__main__":
    main()
