#!/usr/bin/python3
"""Single-operator ONNX models for tests/onnx/onnx_import_test.cc (OnnxOps).

    /usr/bin/python3 tests/onnx/make_op_fixtures.py           # numpy/PyTorch oracles only
    /work/venv-onnx/bin/python tests/onnx/make_op_fixtures.py --ort   # also cross-check

Each case is one node made with onnx.helper, saved as tests/onnx/ops/<case>/model.onnx with its
inputs and expected outputs in the ONNX test-data layout (test_data_set_0/*.pb). The expected
outputs come from numpy or PyTorch code written here, independently of kiln and of onnxruntime;
ops/oracles.txt records each case's oracle. With --ort (a venv with onnxruntime from PyPI; never
needed by `make test`), onnxruntime runs every model too and must agree with the oracle within
1e-4 relative error; the file then also records "ort=agree" per case.

Inputs that ONNX needs at import time (shapes, axes, pads, ...) are initializers; the others
are graph inputs.
"""
import math
import os
import shutil
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops")
rng = np.random.default_rng(13)
CASES = []


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*values):
    return np.array(values, dtype=np.int64)


def T(x):
    return torch.from_numpy(np.ascontiguousarray(x))


def case(name, op, inputs, expected, attrs=None, consts=None, opset=13, oracle="numpy",
         n_outputs=None):
    """inputs: list of (name, array) graph inputs (None name → an omitted optional input);
    consts: {name: array} initializers, referenced by name in `inputs` as (name, None)."""
    CASES.append(dict(name=name, op=op, inputs=inputs, expected=expected, attrs=attrs or {},
                      consts=consts or {}, opset=opset, oracle=oracle))


def build(c):
    folder = os.path.join(ROOT, c["name"])
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    expected = c["expected"] if isinstance(c["expected"], list) else [c["expected"]]
    expected = [np.asarray(e) for e in expected]
    in_names, graph_inputs, feeds = [], [], []
    inits = []
    for nm, arr in c["inputs"]:
        if nm is None:
            in_names.append("")
            continue
        in_names.append(nm)
        if arr is None:
            inits.append(numpy_helper.from_array(np.asarray(c["consts"][nm]), nm))
        else:
            arr = np.asarray(arr)
            graph_inputs.append(helper.make_tensor_value_info(
                nm, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(arr.dtype)], list(arr.shape)))
            feeds.append((nm, arr))
    out_names = [f"y{i}" for i in range(len(expected))]
    outputs = [helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(e.dtype)], list(e.shape))
               for n, e in zip(out_names, expected)]
    node = helper.make_node(c["op"], in_names, out_names, name=c["name"], **c["attrs"])
    graph = helper.make_graph([node], c["name"], graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", c["opset"])],
                              producer_name="kiln make_op_fixtures.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for i, (nm, arr) in enumerate(feeds):
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr, nm).SerializeToString())
    for i, e in enumerate(expected):
        with open(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(e, out_names[i]).SerializeToString())
    return folder, feeds, expected


def ort_check(folder, feeds, expected):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(feeds))
    for g, e in zip(got, expected):
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"differ: {g.dtype}{list(g.shape)} vs {e.dtype}{list(e.shape)}"
        if e.dtype.kind == "f":
            scale = np.max(np.abs(e[np.isfinite(e)]), initial=0.0)
            ok = np.isclose(g, e, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)
        else:
            ok = g == e
        if not np.all(ok):
            return f"differ: max |diff| {np.max(np.abs(g.astype(np.float64) - e))}"
    return "agree"


# ---- Elementwise -------------------------------------------------------------------------------
x = f32(2, 3, 4)
xp = f32(2, 3, 4, lo=0.1, hi=3.0)
for op, fn, inp in [("Abs", np.abs, x), ("Neg", np.negative, x), ("Exp", np.exp, x),
                    ("Log", np.log, xp), ("Sqrt", np.sqrt, xp), ("Sin", np.sin, x),
                    ("Cos", np.cos, x), ("Tanh", np.tanh, x), ("Floor", np.floor, x * 3),
                    ("Ceil", np.ceil, x * 3), ("Reciprocal", np.reciprocal, xp),
                    ("Sign", np.sign, np.round(x))]:
    case(op.lower(), op, [("x", inp)], fn(inp).astype(np.float32))
case("erf", "Erf", [("x", x)], torch.erf(T(x)).numpy(), oracle="torch")
r = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], np.float32)
case("round", "Round", [("x", r)], np.round(r))  # half to even
b1 = rng.uniform(size=(3, 4)) > 0.5
b2 = rng.uniform(size=(3, 4)) > 0.5
case("not", "Not", [("x", b1)], np.logical_not(b1))

a, bb = f32(2, 3, 4), f32(4)
case("add_broadcast", "Add", [("a", a), ("b", bb)], a + bb)
a2, b2f = f32(2, 1, 4), f32(3, 1)
case("sub_broadcast", "Sub", [("a", a2), ("b", b2f)], a2 - b2f)
case("mul", "Mul", [("a", a), ("b", f32(2, 3, 4))], None)
CASES[-1]["expected"] = CASES[-1]["inputs"][0][1] * CASES[-1]["inputs"][1][1]
dv = f32(2, 3, lo=0.5, hi=2)
case("div", "Div", [("a", f32(2, 3)), ("b", dv)], None)
CASES[-1]["expected"] = CASES[-1]["inputs"][0][1] / dv
ia = i64(7, -7, 7, -7, 0, 9).reshape(2, 3)
ib = i64(2, 2, -2, -2, 3, 4).reshape(2, 3)
case("div_int", "Div", [("a", ia), ("b", ib)], np.trunc(ia / ib).astype(np.int64))
case("mod_int", "Mod", [("a", ia), ("b", ib)], np.mod(ia, ib))
fa, fb = f32(3, 4) * 3, f32(3, 4, lo=0.5, hi=2) * np.sign(f32(3, 4))
case("fmod_float", "Mod", [("a", fa), ("b", fb)], np.fmod(fa, fb), attrs={"fmod": 1})
pb = f32(3, 4, lo=0.2, hi=2)
case("pow", "Pow", [("a", pb), ("b", f32(3, 4))], None)
CASES[-1]["expected"] = np.power(pb, CASES[-1]["inputs"][1][1]).astype(np.float32)
case("pow_int_exponent", "Pow", [("a", f32(3, 4)), ("b", None)], None, consts={"b": i64(3)})
CASES[-1]["expected"] = np.power(CASES[-1]["inputs"][0][1], 3).astype(np.float32)

ca, cb = rng.integers(0, 3, (3, 4)), rng.integers(0, 3, (4,))
for op, fn in [("Equal", np.equal), ("Less", np.less), ("Greater", np.greater),
               ("LessOrEqual", np.less_equal), ("GreaterOrEqual", np.greater_equal)]:
    case(op.lower(), op, [("a", ca.astype(np.int64)), ("b", cb.astype(np.int64))],
         fn(ca, cb), opset=16)
for op, fn in [("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)]:
    case(op.lower(), op, [("a", b1), ("b", b2)], fn(b1, b2))

v1, v2, v3 = f32(2, 3), f32(3), f32(1, 3)
case("sum3", "Sum", [("a", v1), ("b", v2), ("c", v3)], v1 + v2 + v3)
case("mean3", "Mean", [("a", v1), ("b", v2), ("c", v3)], ((v1 + v2 + v3) / 3).astype(np.float32))
case("max2", "Max", [("a", v1), ("b", v2)], np.maximum(v1, v2))
case("min3", "Min", [("a", v1), ("b", v2), ("c", v3)], np.minimum(np.minimum(v1, v2), v3))

# ---- Activations (PyTorch as the oracle) ---------------------------------------------------------
xt = T(x)
case("relu", "Relu", [("x", x)], F.relu(xt).numpy(), oracle="torch")
case("leaky_relu", "LeakyRelu", [("x", x)], F.leaky_relu(xt, 0.1).numpy(), {"alpha": 0.1}, oracle="torch")
case("elu", "Elu", [("x", x)], F.elu(xt, 0.7).numpy(), {"alpha": 0.7}, oracle="torch")
case("selu", "Selu", [("x", x)], F.selu(xt).numpy(), oracle="torch")
case("celu", "Celu", [("x", x)], F.celu(xt, 1.5).numpy(), {"alpha": 1.5}, opset=13, oracle="torch")
case("thresholded_relu", "ThresholdedRelu", [("x", x)], F.threshold(xt, 0.5, 0.0).numpy(),
     {"alpha": 0.5}, oracle="torch")
case("sigmoid", "Sigmoid", [("x", x * 4)], torch.sigmoid(T(x * 4)).numpy(), oracle="torch")
case("hard_sigmoid", "HardSigmoid", [("x", x * 3)],
     np.clip(0.2 * x * 3 + 0.5, 0, 1).astype(np.float32))
case("hard_swish", "HardSwish", [("x", x * 3)], F.hardswish(T(x * 3)).numpy(), opset=14, oracle="torch")
case("softplus", "Softplus", [("x", x * 10)], F.softplus(T(x * 10)).numpy(), oracle="torch")
case("softsign", "Softsign", [("x", x)], F.softsign(xt).numpy(), oracle="torch")
case("tan", "Tan", [("x", x * 0.7)], np.tan(x * 0.7))
case("sinh", "Sinh", [("x", x)], np.sinh(x))
case("cosh", "Cosh", [("x", x)], np.cosh(x))
nanx = np.array([1.0, np.nan, -np.inf, np.inf, 0.0], np.float32)
case("isnan", "IsNaN", [("x", nanx)], np.isnan(nanx))
case("isinf_positive", "IsInf", [("x", nanx)], np.isposinf(nanx), {"detect_negative": 0})
slope = f32(3, 1, lo=0, hi=0.5)
case("prelu", "PRelu", [("x", x), ("s", slope)], np.where(x < 0, x * slope, x))
case("clip", "Clip", [("x", x), ("lo", None), ("hi", None)], np.clip(x, -0.5, 1.0),
     consts={"lo": np.float32(-0.5), "hi": np.float32(1.0)})
case("clip_max_only", "Clip", [("x", x), (None, None), ("hi", None)], np.minimum(x, 0.25),
     consts={"hi": np.float32(0.25)})
cond = rng.uniform(size=(3, 1)) > 0.5
case("where", "Where", [("c", cond), ("a", f32(2, 3, 4)), ("b", f32(4))], None)
CASES[-1]["expected"] = np.where(cond, CASES[-1]["inputs"][1][1], CASES[-1]["inputs"][2][1])
case("identity", "Identity", [("x", x)], x)
case("dropout_inference", "Dropout", [("x", x)], x)
case("cast_to_int", "Cast", [("x", x * 3)], (x * 3).astype(np.int64), {"to": TensorProto.INT64})
case("cast_to_bool", "Cast", [("x", np.round(x))], np.round(x).astype(bool), {"to": TensorProto.BOOL})
case("castlike", "CastLike", [("x", ia), ("like", f32(1))], ia.astype(np.float32), opset=15)

# ---- Shapes and constants ----------------------------------------------------------------------
case("shape_slice", "Shape", [("x", x)], i64(3, 4), {"start": 1}, opset=15)
case("size", "Size", [("x", x)], np.array(24, np.int64))
case("constant_of_shape", "ConstantOfShape", [("s", None)], np.full((2, 3), 1.5, np.float32),
     {"value": numpy_helper.from_array(np.array([1.5], np.float32))}, consts={"s": i64(2, 3)})
case("range", "Range", [("s", None), ("l", None), ("d", None)], np.arange(1.0, -2.0, -0.5, dtype=np.float32),
     consts={"s": np.float32(1.0), "l": np.float32(-2.0), "d": np.float32(-0.5)})
case("eyelike", "EyeLike", [("x", f32(3, 4))], np.eye(3, 4, k=1, dtype=np.float32), {"k": 1})

# ---- Movement ----------------------------------------------------------------------------------
case("reshape_zero_minus_one", "Reshape", [("x", x), ("s", None)], x.reshape(2, 12), consts={"s": i64(0, -1)})
case("flatten", "Flatten", [("x", x)], x.reshape(6, 4), {"axis": -1})
case("transpose", "Transpose", [("x", x)], x.transpose(2, 0, 1), {"perm": [2, 0, 1]})
x1 = f32(2, 1, 3, 1)
case("squeeze_axes_input", "Squeeze", [("x", x1), ("a", None)], x1.reshape(2, 3, 1), consts={"a": i64(1)})
case("squeeze_all", "Squeeze", [("x", x1)], x1.reshape(2, 3))
case("unsqueeze", "Unsqueeze", [("x", f32(2, 3)), ("a", None)], None, consts={"a": i64(-1, 0)})
CASES[-1]["expected"] = CASES[-1]["inputs"][0][1].reshape(1, 2, 3, 1)
c1, c2 = f32(2, 3), f32(2, 5)
case("concat", "Concat", [("a", c1), ("b", c2)], np.concatenate([c1, c2], 1), {"axis": -1})
sx = f32(7, 2)
case("split_sizes", "Split", [("x", sx), ("s", None)], [sx[:2], sx[2:7]], consts={"s": i64(2, 5)})
case("split_equal", "Split", [("x", f32(2, 6))], None, {"axis": 1})
CASES[-1]["expected"] = np.split(CASES[-1]["inputs"][0][1], 3, axis=1)
sl = f32(5, 6, 4)
case("slice_steps_large_ends", "Slice", [("x", sl), ("s", None), ("e", None), ("a", None), ("st", None)],
     sl[:, 1:9223372036854775807:2, -3:], consts={"s": i64(1, -3), "e": i64(9223372036854775807, 100),
                                                  "a": i64(1, 2), "st": i64(2, 1)})
case("slice_negative_step", "Slice", [("x", sl), ("s", None), ("e", None), ("a", None), ("st", None)],
     sl[::-2, 4:0:-1], consts={"s": i64(-1, 4), "e": i64(-9223372036854775807, 0), "a": i64(0, 1),
                              "st": i64(-2, -1)})
case("expand", "Expand", [("x", f32(3, 1)), ("s", None)], None, consts={"s": i64(2, 1, 4)})
CASES[-1]["expected"] = np.broadcast_to(CASES[-1]["inputs"][0][1], (2, 3, 4)).copy()
case("tile", "Tile", [("x", f32(2, 3)), ("r", None)], None, consts={"r": i64(2, 3)})
CASES[-1]["expected"] = np.tile(CASES[-1]["inputs"][0][1], (2, 3))
px = f32(1, 2, 4, 5)
case("pad_constant", "Pad", [("x", px), ("p", None), ("v", None)],
     np.pad(px, ((0, 0), (0, 0), (1, 2), (2, 0)), constant_values=0.5)[:, :, :, :],
     consts={"p": i64(0, 0, 1, 2, 0, 0, 2, 0), "v": np.float32(0.5)})
case("pad_negative", "Pad", [("x", px), ("p", None)], np.pad(px, ((0, 0), (0, 0), (1, 0), (1, 0)))[:, :, :, :-1],
     consts={"p": i64(0, 0, 1, 1, 0, 0, 0, -1)})
case("pad_reflect", "Pad", [("x", px), ("p", None)], np.pad(px, ((0, 0), (0, 0), (2, 1), (1, 3)), mode="reflect"),
     {"mode": "reflect"}, consts={"p": i64(0, 0, 2, 1, 0, 0, 1, 3)})
case("pad_edge", "Pad", [("x", px), ("p", None)], np.pad(px, ((0, 0), (1, 0), (2, 1), (0, 3)), mode="edge"),
     {"mode": "edge"}, consts={"p": i64(0, 1, 2, 0, 0, 0, 1, 3)})
gx = f32(5, 4, 3)
gi = np.array([[0, -1], [2, 4], [1, 1]], np.int64)
case("gather_input_indices", "Gather", [("x", gx), ("i", gi)], np.take(gx, np.where(gi < 0, gi + 5, gi), 0))
case("gather_const_axis1", "Gather", [("x", gx), ("i", None)], np.take(gx, [3, 0, 0], 1), {"axis": 1},
     consts={"i": i64(3, 0, -4)})
case("gather_scalar", "Gather", [("x", gx), ("i", None)], gx[:, :, 2], {"axis": -1},
     consts={"i": np.array(-1, np.int64)})
ge_i = rng.integers(-3, 3, (5, 2, 3)).astype(np.int64)
case("gather_elements", "GatherElements", [("x", gx), ("i", ge_i)],
     np.take_along_axis(gx, np.where(ge_i < 0, ge_i + 4, ge_i), 1), {"axis": 1})
tx = f32(2, 4, 5)
case("trilu_lower", "Trilu", [("x", tx), ("k", None)], np.tril(tx, -1), {"upper": 0}, opset=14,
     consts={"k": np.array(-1, np.int64)})
case("trilu_upper", "Trilu", [("x", tx)], np.triu(tx), opset=14)
cx = f32(3, 4)
rev = np.flip(np.cumsum(np.flip(cx, 1), 1), 1)
case("cumsum_exclusive_reverse", "CumSum", [("x", cx), ("a", None)], (rev - cx).astype(np.float32),
     {"exclusive": 1, "reverse": 1}, consts={"a": np.array(1, np.int64)})
case("cumsum", "CumSum", [("x", cx), ("a", None)], np.cumsum(cx, 0).astype(np.float32),
     consts={"a": np.array(0, np.int64)})
dx = f32(1, 8, 2, 3)
case("depth_to_space_crd", "DepthToSpace", [("x", dx)], F.pixel_shuffle(T(dx), 2).numpy(),
     {"blocksize": 2, "mode": "CRD"}, oracle="torch")
dcr = dx.reshape(1, 2, 2, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 4, 6)
case("depth_to_space_dcr", "DepthToSpace", [("x", dx)], dcr, {"blocksize": 2})
sx2 = f32(1, 2, 4, 6)
case("space_to_depth", "SpaceToDepth", [("x", sx2)],
     sx2.reshape(1, 2, 2, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(1, 8, 2, 3), {"blocksize": 2})

# ---- Reductions ----------------------------------------------------------------------------------
case("reduce_sum_axes_input", "ReduceSum", [("x", x), ("a", None)], x.sum(axis=(0, 2)),
     {"keepdims": 0}, consts={"a": i64(0, -1)})
case("reduce_sum_all", "ReduceSum", [("x", x)], x.sum(keepdims=True))
case("reduce_mean", "ReduceMean", [("x", x)], x.mean(axis=1, keepdims=True), {"axes": [1]})
case("reduce_max", "ReduceMax", [("x", x)], x.max(axis=(1, 2)), {"axes": [-1, 1], "keepdims": 0})
case("reduce_min", "ReduceMin", [("x", x)], x.min(axis=0, keepdims=True), {"axes": [0]})
case("reduce_prod", "ReduceProd", [("x", x)], x.prod(axis=2, keepdims=True), {"axes": [2]})
case("reduce_l1", "ReduceL1", [("x", x)], np.abs(x).sum(axis=2, keepdims=True), {"axes": [2]})
case("reduce_l2", "ReduceL2", [("x", x)], np.sqrt((x * x).sum(axis=2, keepdims=True)), {"axes": [2]})
case("reduce_sum_square", "ReduceSumSquare", [("x", x)], (x * x).sum(axis=1), {"axes": [1], "keepdims": 0})
case("reduce_log_sum", "ReduceLogSum", [("x", xp)], np.log(xp.sum(axis=1, keepdims=True)), {"axes": [1]})
case("reduce_log_sum_exp", "ReduceLogSumExp", [("x", x * 20)],
     torch.logsumexp(T(x * 20), dim=2, keepdim=True).numpy(), {"axes": [2]}, oracle="torch")
tie = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 5]], np.float32)
case("argmax", "ArgMax", [("x", tie)], np.argmax(tie, 1).reshape(3, 1), {"axis": 1})
case("argmax_last", "ArgMax", [("x", tie)], (3 - np.argmax(tie[:, ::-1], 1)).reshape(3, 1),
     {"axis": 1, "select_last_index": 1})
case("argmin", "ArgMin", [("x", tie)], np.argmin(tie, 0), {"axis": 0, "keepdims": 0})

# ---- Softmax family ----------------------------------------------------------------------------
case("softmax_axis1", "Softmax", [("x", x * 5)], torch.softmax(T(x * 5), 1).numpy(), {"axis": 1}, oracle="torch")
case("log_softmax", "LogSoftmax", [("x", x * 5)], torch.log_softmax(T(x * 5), -1).numpy(), oracle="torch")
hm = np.zeros_like(tie)
hm[np.arange(3), np.argmax(tie, 1)] = 1
case("hardmax", "Hardmax", [("x", tie)], hm)

# ---- Contractions ------------------------------------------------------------------------------
ma, mb = f32(2, 1, 3, 4), f32(5, 4, 2)
case("matmul_broadcast", "MatMul", [("a", ma), ("b", mb)], np.matmul(ma, mb))
mv = f32(4)
case("matmul_vector", "MatMul", [("a", f32(2, 3, 4)), ("b", mv)], None)
CASES[-1]["expected"] = np.matmul(CASES[-1]["inputs"][0][1], mv)
case("matmul_weight", "MatMul", [("a", f32(2, 3, 4)), ("b", None)], None, consts={"b": f32(4, 6)})
CASES[-1]["expected"] = np.matmul(CASES[-1]["inputs"][0][1], CASES[-1]["consts"]["b"])
ga, gb, gc = f32(4, 3), f32(5, 4), f32(5)
case("gemm_trans_alpha_beta", "Gemm", [("a", ga), ("b", gb), ("c", gc)],
     (0.5 * ga.T @ gb.T + 2.0 * gc).astype(np.float32),
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0})

cvx, cvw, cvb = f32(2, 4, 9, 8), f32(6, 2, 3, 2), f32(6)
conv_ref = F.conv2d(F.pad(T(cvx), (0, 1, 1, 2)), T(cvw), T(cvb), stride=(2, 1), dilation=(1, 2), groups=2)
case("conv_groups_strides_pads_dilations", "Conv", [("x", cvx), ("w", None), ("b", None)], conv_ref.numpy(),
     {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]},
     consts={"w": cvw, "b": cvb}, oracle="torch")
sw = f32(3, 4, 3, 3)
# SAME_UPPER with stride 2 on 9x8: total pads (2, 1) → (1, 1) and (0, 1).
case("conv_same_upper", "Conv", [("x", cvx), ("w", None)],
     F.conv2d(F.pad(T(cvx), (0, 1, 1, 1)), T(sw), stride=2).numpy(),
     {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, consts={"w": sw}, oracle="torch")
c1x, c1w = f32(2, 3, 10), f32(4, 3, 3)
case("conv1d", "Conv", [("x", c1x), ("w", None)], F.conv1d(T(c1x), T(c1w), padding=1).numpy(),
     {"pads": [1, 1]}, consts={"w": c1w}, oracle="torch")
ctx, ctw, ctb = f32(1, 4, 3, 4), f32(4, 3, 3, 2), f32(6)
case("conv_transpose", "ConvTranspose", [("x", ctx), ("w", None), ("b", None)],
     F.conv_transpose2d(T(ctx), T(ctw), T(ctb), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                        groups=2).numpy(),
     {"group": 2, "strides": [2, 3], "pads": [1, 0, 1, 0], "output_padding": [1, 2]},
     consts={"w": ctw, "b": ctb}, oracle="torch")
bnx = f32(2, 3, 4, 5)
bn_s, bn_b, bn_m, bn_v = f32(3), f32(3), f32(3), f32(3, lo=0.5, hi=2)
case("batchnorm", "BatchNormalization", [("x", bnx), ("s", None), ("b", None), ("m", None), ("v", None)],
     F.batch_norm(T(bnx), T(bn_m), T(bn_v), T(bn_s), T(bn_b), False, 0.1, 1e-3).numpy(),
     {"epsilon": 1e-3}, consts={"s": bn_s, "b": bn_b, "m": bn_m, "v": bn_v}, opset=15, oracle="torch")
plx = f32(2, 3, 9, 10)
case("maxpool_ceil_pads_dilations", "MaxPool", [("x", plx)],
     F.max_pool2d(T(plx), 3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True).numpy(),
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 2], "ceil_mode": 1},
     oracle="torch")
case("avgpool_exclude_pad", "AveragePool", [("x", plx)],
     F.avg_pool2d(T(plx), (3, 2), stride=(2, 3), padding=(1, 1), count_include_pad=False).numpy(),
     {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 1]}, oracle="torch")
case("avgpool_include_pad_ceil", "AveragePool", [("x", plx)],
     F.avg_pool2d(T(plx), 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True).numpy(),
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
     oracle="torch")
case("global_average_pool", "GlobalAveragePool", [("x", plx)], plx.mean(axis=(2, 3), keepdims=True))
case("global_max_pool", "GlobalMaxPool", [("x", plx)], plx.max(axis=(2, 3), keepdims=True))
lnx, lns, lnb = f32(2, 3, 4), f32(3, 4), f32(4)
case("layer_norm_axis_minus2", "LayerNormalization", [("x", lnx), ("s", None), ("b", None)],
     (F.layer_norm(T(lnx), (3, 4), T(lns), None, 1e-5) + T(lnb)).numpy(),
     {"axis": -2}, consts={"s": lns, "b": lnb}, opset=17, oracle="torch")
inx, ins, inb = f32(2, 3, 5, 4), f32(3), f32(3)
case("instance_norm", "InstanceNormalization", [("x", inx), ("s", None), ("b", None)],
     F.instance_norm(T(inx), weight=T(ins), bias=T(inb), eps=1e-5).numpy(),
     consts={"s": ins, "b": inb}, oracle="torch")
case("lp_norm", "LpNormalization", [("x", x)], F.normalize(xt, p=2.0, dim=1, eps=0).numpy(),
     {"axis": 1, "p": 2}, oracle="torch")
rx = f32(1, 2, 3, 4)
case("resize_nearest_scales", "Resize", [("x", rx), (None, None), ("s", None)],
     F.interpolate(T(rx), scale_factor=2, mode="nearest").numpy(),
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     consts={"s": np.array([1, 1, 2, 2], np.float32)}, oracle="torch")


def nearest_half_pixel_ceil(n_in, n_out):
    """ONNX half_pixel + round_prefer_ceil source indices, written out from the spec."""
    x = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    return np.clip(np.floor(x + 0.5), 0, n_in - 1).astype(int)


case("resize_nearest_sizes_half_pixel", "Resize", [("x", rx), (None, None), (None, None), ("z", None)],
     rx[:, :, nearest_half_pixel_ceil(3, 6), :][:, :, :, nearest_half_pixel_ceil(4, 7)],
     {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, consts={"z": i64(1, 2, 6, 7)})
case("resize_linear_align_corners", "Resize", [("x", rx), (None, None), (None, None), ("z", None)],
     F.interpolate(T(rx), size=(5, 7), mode="bilinear", align_corners=True).numpy(),
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, consts={"z": i64(1, 2, 5, 7)},
     oracle="torch")
case("resize_linear_pytorch_half_pixel", "Resize", [("x", rx), (None, None), (None, None), ("z", None)],
     F.interpolate(T(rx), size=(5, 7), mode="bilinear", align_corners=False).numpy(),
     {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, consts={"z": i64(1, 2, 5, 7)},
     oracle="torch")


# ---- Einsum (numpy.einsum as the oracle) ---------------------------------------------------------
for name, eq, shapes in [("einsum_attention", "bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
                         ("einsum_outer", "i,j->ij", [(3,), (4,)]),
                         ("einsum_implicit_matvec", "ij,j", [(3, 4), (4,)]),
                         ("einsum_transpose_sum", "ijk->ki", [(2, 3, 4)]),
                         ("einsum_three", "ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)])]:
    arrays = [f32(*sh) for sh in shapes]
    case(name, "Einsum", [(f"x{i}", a) for i, a in enumerate(arrays)],
         np.einsum(eq, *arrays).astype(np.float32), {"equation": eq}, opset=13)


def main():
    use_ort = "--ort" in sys.argv
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    lines = ["# case op opset oracle" + (" onnxruntime" if use_ort else "")]
    disagree = []
    for c in CASES:
        if isinstance(c["expected"], list):
            c["expected"] = [np.asarray(e).astype(np.asarray(e).dtype) for e in c["expected"]]
        else:
            e = np.asarray(c["expected"])
            if e.dtype == np.float64:
                e = e.astype(np.float32)
            c["expected"] = e
        folder, feeds, expected = build(c)
        line = f"{c['name']} {c['op']} {c['opset']} {c['oracle']}"
        if use_ort:
            verdict = ort_check(folder, feeds, expected)
            line += " ort=" + verdict.split(":")[0]
            if verdict != "agree":
                disagree.append(f"{c['name']}: {verdict}")
        lines.append(line)
    with open(os.path.join(ROOT, "oracles.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(CASES)} cases, {len({c['op'] for c in CASES})} operators")
    for d in disagree:
        print("onnxruntime disagrees:", d)


if __name__ == "__main__":
    main()
