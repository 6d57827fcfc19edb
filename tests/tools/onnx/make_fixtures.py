#!/usr/bin/python3
"""Writes the `kiln compile` error-path fixtures of tests/tools/kiln_cli_test.cc:
- unsupported.onnx: a Relu (supported) followed by operators kiln does not import (Unique, two
  NonMaxSuppression nodes, a custom-domain op): the one error message lists each with its nodes;
- bad_node.onnx: supported operators, but an Add whose operand shapes do not broadcast: the
  error names the node.

Run from the repository root: /usr/bin/python3 tests/tools/onnx/make_fixtures.py
"""
import os

import onnx
from onnx import TensorProto, helper

here = os.path.dirname(os.path.abspath(__file__))
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4])
scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 4])
out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
nodes = [
    helper.make_node("Relu", ["x"], ["boxes"], name="relu0"),
    helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel1"], name="nms_a"),
    helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel2"], name="nms_b"),
    helper.make_node("Unique", ["x"], ["top"], name="unique0"),
    helper.make_node("Thing", ["top"], ["out"], name="custom0", domain="com.example"),
]
graph = helper.make_graph(nodes, "unsupported", [x, scores], [out])
model = helper.make_model(graph, producer_name="make_fixtures.py",
                          opset_imports=[helper.make_opsetid("", 13),
                                         helper.make_opsetid("com.example", 1)])
model.ir_version = 8
onnx.save(model, os.path.join(here, "unsupported.onnx"))
print("wrote", os.path.join(here, "unsupported.onnx"))

a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])
b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
graph = helper.make_graph([helper.make_node("Relu", ["a"], ["r"], name="relu0"),
                           helper.make_node("Add", ["r", "b"], ["y"], name="add_mismatch")],
                          "bad_node", [a, b], [y])
model = helper.make_model(graph, producer_name="make_fixtures.py",
                          opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.save(model, os.path.join(here, "bad_node.onnx"))
print("wrote", os.path.join(here, "bad_node.onnx"))
