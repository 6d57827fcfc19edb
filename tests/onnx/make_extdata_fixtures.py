#!/usr/bin/python3
"""ONNX models whose tensors are stored as external data, for tests/onnx/onnx_external_data_test.cc
and tests/tools/kiln_cli_test.cc.

Run with Debian's python3 (python3-onnx 1.12, numpy) from the repository root:

    /usr/bin/python3 tests/onnx/make_extdata_fixtures.py

Both models compute y = Reshape(Relu(x @ w1 + b1) @ w2, shape) * scale for x: f32[2, 8], with
w1, b1, w2 float initializers, `shape` an int64 initializer ([4, 3]) and `scale` the value of a
Constant node (an attribute tensor, external too). The expected output is computed with numpy.

  extdata/one_file  onnx.save_model(..., save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0, convert_attribute=True): every
                    tensor in one file, one after the other (offsets 0, 512, 576, ...).
  extdata/per_file  one file per tensor, written by onnx.external_data_helper with locations of
                    our choosing: w1 in a subfolder (weights/w1.bin), w2 at offset 64 of its file
                    (zeros before it), b1 with its `length` entry removed (the spec's "to the end
                    of the file"), and `shape` (int64) and `scale` (the Constant's) in files of
                    their own.

Each folder has test_data_set_0/input_0.pb and output_0.pb (onnx.numpy_helper). The script also
writes tests/onnx/fuzz/seeds/extdata_one_file, the one_file model and its data file in the fuzz
target's two-part layout (tests/onnx/fuzz/import_fuzz.cc): b"KXD1", the model's length as a
little-endian uint32, the model, the data file.
"""
import os
import shutil
import struct

import numpy as np
import onnx
from onnx import TensorProto, external_data_helper, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "extdata")

rng = np.random.default_rng(20261202)
x = rng.standard_normal((2, 8)).astype(np.float32)
w1 = rng.standard_normal((8, 16)).astype(np.float32)
b1 = rng.standard_normal(16).astype(np.float32)
w2 = rng.standard_normal((16, 6)).astype(np.float32)
shape = np.array([4, 3], dtype=np.int64)
scale = np.array([0.5, -2.0, 3.0], dtype=np.float32)
y = (np.maximum(x @ w1 + b1, 0) @ w2).reshape(shape) * scale


def make_model():
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="add1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="mm2"),
        helper.make_node("Reshape", ["h3", "shape"], ["h4"], name="reshape"),
        helper.make_node("Constant", [], ["scale"], name="scale_const",
                         value=numpy_helper.from_array(scale, "scale")),
        helper.make_node("Mul", ["h4", "scale"], ["y"], name="mul"),
    ]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(shape, "shape")]
    graph = helper.make_graph(
        nodes, "extdata", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], initializer=inits)
    model = helper.make_model(graph, producer_name="make_extdata_fixtures.py",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def write_test_data(folder):
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data)
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y.astype(np.float32), "y").SerializeToString())


def fresh(name):
    # onnx appends to existing data files: start from an empty folder.
    folder = os.path.join(ROOT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return folder


def one_file():
    folder = fresh("one_file")
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(make_model(), path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0, convert_attribute=True)
    write_test_data(folder)
    return folder


def per_file():
    folder = fresh("per_file")
    model = make_model()
    locations = {"w1": ("weights/w1.bin", None), "b1": ("b1.bin", None), "w2": ("w2.bin", 64),
                 "shape": ("shape.bin", None)}
    os.makedirs(os.path.join(folder, "weights"))
    for t in model.graph.initializer:
        location, offset = locations[t.name]
        external_data_helper.set_external_data(t, location, offset)
    const = model.graph.node[5].attribute[0].t
    external_data_helper.set_external_data(const, "scale.bin")
    external_data_helper.write_external_data_tensors(model, folder)
    for t in model.graph.initializer:
        if t.name == "b1":
            keep = [e for e in t.external_data if e.key != "length"]
            del t.external_data[:]
            t.external_data.extend(keep)
    onnx.save_model(model, os.path.join(folder, "model.onnx"))
    write_test_data(folder)
    return folder


def check(folder):
    # onnx's own loader reads the tensors back: the layout is what the spec describes.
    model = onnx.load(os.path.join(folder, "model.onnx"))
    onnx.checker.check_model(model)
    for t in model.graph.initializer:
        assert t.HasField("raw_data"), t.name
    print("wrote", folder)


for f in (one_file(), per_file()):
    check(f)

seeds = os.path.join(HERE, "fuzz", "seeds")
os.makedirs(seeds, exist_ok=True)
with open(os.path.join(ROOT, "one_file", "model.onnx"), "rb") as f:
    model_bytes = f.read()
with open(os.path.join(ROOT, "one_file", "model.onnx.data"), "rb") as f:
    data_bytes = f.read()
with open(os.path.join(seeds, "extdata_one_file"), "wb") as f:
    f.write(b"KXD1" + struct.pack("<I", len(model_bytes)) + model_bytes + data_bytes)
print("wrote", os.path.join(seeds, "extdata_one_file"))
