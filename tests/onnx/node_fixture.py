"""One-node ONNX models with their test data, in the ONNX backend-test layout
(<root>/<case>/model.onnx, test_data_set_0/input_i.pb, output_i.pb): the writer shared by
make_opset_fixtures.py and make_op_fixtures_more.py (plain onnx + numpy, no torch)."""

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper


def elem_type(a):
    return helper.np_dtype_to_tensor_dtype(a.dtype) if hasattr(helper, "np_dtype_to_tensor_dtype") \
        else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(a.dtype)]


def write_node_case(root, c, expected, producer, ir_version, check):
    """Writes case `c` (name, op, opset, attrs; inputs: [(name, array)], (name, None) for the
    initializer consts[name], (None, None) for an omitted input) with outputs `expected` (a list
    of arrays). `check`: run onnx.checker (it knows opsets only up to its release)."""
    folder = os.path.join(root, c["name"])
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    in_names, graph_inputs, feeds, inits = [], [], [], []
    for nm, arr in c["inputs"]:
        if nm is None:
            in_names.append("")
            continue
        in_names.append(nm)
        if arr is None:
            inits.append(numpy_helper.from_array(np.asarray(c["consts"][nm]), nm))
        else:
            arr = np.asarray(arr)
            graph_inputs.append(helper.make_tensor_value_info(nm, elem_type(arr), list(arr.shape)))
            feeds.append((nm, arr))
    out_names = [f"y{i}" for i in range(len(expected))]
    outputs = [helper.make_tensor_value_info(n, elem_type(e), list(e.shape))
               for n, e in zip(out_names, expected)]
    node = helper.make_node(c["op"], in_names, out_names, name=c["name"], **c["attrs"])
    graph = helper.make_graph([node], c["name"], graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", c["opset"])],
                              producer_name=producer)
    model.ir_version = ir_version
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for i, (nm, arr) in enumerate(feeds):
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr, nm).SerializeToString())
    for i, e in enumerate(expected):
        with open(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(e, out_names[i]).SerializeToString())
