#!/usr/bin/python3
"""Single-operator ONNX models at opsets 6 to 28, for the importer's versioned rules
(tests/onnx/onnx_import_test.cc, OnnxOpsets).

    /usr/bin/python3 tests/onnx/make_opset_fixtures.py

Debian's python3-onnx (1.12) and numpy only. Each case is one node at a given default-domain
opset, saved as tests/onnx/opsets/<case>/model.onnx with its inputs and expected outputs in the
ONNX test-data layout (test_data_set_0/*.pb), like make_op_fixtures.py's ops/. The expected
outputs come from numpy code written here from the operator's definition in onnx/docs/Changelog.md
for that version (attribute vs input forms, Softmax's 2-D coercion before 13, Split's uneven last
chunk, Resize's coordinate transformations, ...), independently of kiln. onnx.checker checks the
models up to opset 17 (what onnx 1.12 knows); later ones are written unchecked.

Inputs that kiln needs at import time (axes, pads, scales, ...) are initializers; the others are
graph inputs.
"""
import os
import shutil

import numpy as np
from onnx import TensorProto

from node_fixture import write_node_case

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opsets")
rng = np.random.default_rng(7)
CASES = []


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*values):
    return np.array(values, dtype=np.int64)


def case(name, op, opset, inputs, expected, attrs=None, consts=None):
    """inputs: (name, array) graph inputs, (name, None) for an initializer from `consts`, or
    (None, None) for an omitted optional input. expected: one array or a list (one per output)."""
    CASES.append(dict(name=name, op=op, opset=opset, inputs=inputs, attrs=attrs or {},
                      consts=consts or {},
                      expected=expected if isinstance(expected, list) else [expected]))


def build(c):
    expected = [np.asarray(e) for e in c["expected"]]
    expected = [e.astype(np.float32) if e.dtype == np.float64 else e for e in expected]
    # The IR version released with the opset (onnx/helper.py's VERSION_TABLE); 4 for 7-9 so that
    # initializers need not be listed as graph inputs.
    v = c["opset"]
    ir_version = (4 if v < 10 else 5 if v < 11 else 6 if v < 12 else 7 if v < 15 else
                  8 if v < 19 else 9 if v < 21 else 10)
    write_node_case(ROOT, c, expected, "kiln make_opset_fixtures.py", ir_version, check=v <= 17)


# ---- Reference code, from the operator definitions ----------------------------------------------

def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def coerced(fn, x, axis):
    """Softmax-1/11 family: x as 2-D [prod(dims before axis), prod(dims from axis)], fn over
    axis 1, reshaped back."""
    axis = axis + x.ndim if axis < 0 else axis
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1)
    return fn(flat).reshape(x.shape)


def hardmax_rows(x2):
    out = np.zeros_like(x2)
    out[np.arange(x2.shape[0]), np.argmax(x2, axis=1)] = 1
    return out


def resize_ref(x, out_shape, scales, ctm, mode, nearest):
    """Resize written from the Changelog's formulas, axis by axis (separable for nearest and
    linear). nearest 'legacy': Upsample/Resize-10's floor (enlarging) / ceil (shrinking)."""
    y = x.astype(np.float64)
    for a in range(x.ndim):
        n_in, n_out, sc = x.shape[a], out_shape[a], scales[a]
        if n_in == n_out and sc == 1.0:
            continue
        xo = np.arange(n_out, dtype=np.float64)
        if ctm == "asymmetric":
            xi = xo / sc
        elif ctm == "half_pixel":
            xi = (xo + 0.5) / sc - 0.5
        elif ctm == "pytorch_half_pixel":
            xi = (xo + 0.5) / sc - 0.5 if n_out > 1 else np.zeros(n_out)
        elif ctm == "align_corners":
            xi = xo * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
        elif ctm == "tf_half_pixel_for_nn":
            xi = (xo + 0.5) / sc
        elif ctm == "half_pixel_symmetric":
            adjustment = n_out / (sc * n_in)
            center = n_in / 2
            offset = center * (1 - adjustment)
            xi = offset + (xo + 0.5) / sc - 0.5
        else:
            raise ValueError(ctm)
        if mode == "nearest":
            if nearest == "legacy":
                idx = np.ceil(xi) if sc < 1 else np.floor(xi)
            elif nearest == "floor":
                idx = np.floor(xi)
            elif nearest == "ceil":
                idx = np.ceil(xi)
            elif nearest == "round_prefer_ceil":
                idx = np.floor(xi + 0.5)
            else:  # round_prefer_floor
                idx = np.ceil(xi - 0.5)
            idx = np.clip(idx, 0, n_in - 1).astype(np.int64)
            y = np.take(y, idx, axis=a)
        else:
            xi = np.clip(xi, 0, n_in - 1)
            lo = np.floor(xi).astype(np.int64)
            hi = np.minimum(lo + 1, n_in - 1)
            w = (xi - lo).reshape([-1 if i == a else 1 for i in range(x.ndim)])
            y = np.take(y, lo, axis=a) * (1 - w) + np.take(y, hi, axis=a) * w
    return y.astype(x.dtype)


# ---- Opset 7 (and 8): attribute forms ----------------------------------------------------------
x = f32(2, 3, 4)
ux = f32(1, 2, 2, 3)
case("upsample7_nearest", "Upsample", 7, [("x", ux)],
     np.repeat(np.repeat(ux, 2, axis=2), 3, axis=3), {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]})
case("upsample7_linear", "Upsample", 7, [("x", ux)],
     resize_ref(ux, (1, 2, 4, 6), [1, 1, 2, 2], "asymmetric", "linear", None),
     {"mode": "linear", "scales": [1.0, 1.0, 2.0, 2.0]})
case("upsample7_nearest_fractional", "Upsample", 7, [("x", ux)],
     resize_ref(ux, (1, 2, 3, 7), [1, 1, 1.5, 2.5], "asymmetric", "nearest", "legacy"),
     {"scales": [1.0, 1.0, 1.5, 2.5]})
case("softmax7_coerced", "Softmax", 7, [("x", x * 3)], coerced(lambda a: softmax(a, 1), x * 3, 1))
case("logsoftmax7_coerced_axis2", "LogSoftmax", 7, [("x", x * 3)],
     coerced(lambda a: np.log(softmax(a, 1)), x * 3, 2), {"axis": 2})
tie_free = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, :, ::-1] * np.float32(0.5) + f32(2, 3, 4, lo=0, hi=0.1)
case("hardmax7_coerced", "Hardmax", 7, [("x", tie_free)], coerced(hardmax_rows, tie_free, 1))
case("unsqueeze7_attr", "Unsqueeze", 7, [("x", f32(2, 3))], None, {"axes": [0, 3]})
CASES[-1]["expected"] = [CASES[-1]["inputs"][0][1].reshape(1, 2, 3, 1)]
x1 = f32(2, 1, 3, 1)
case("squeeze7_attr", "Squeeze", 7, [("x", x1)], x1.reshape(2, 3, 1), {"axes": [1]})
case("reduce_sum7_attr", "ReduceSum", 7, [("x", x)], x.sum(axis=(0, 2)), {"axes": [0, 2], "keepdims": 0})
case("reduce_mean7_attr", "ReduceMean", 7, [("x", x)], x.mean(axis=1, keepdims=True), {"axes": [1]})
case("reduce_max7_all", "ReduceMax", 7, [("x", x)], x.max(keepdims=True))
px = f32(1, 2, 3, 4)
case("pad7_attr", "Pad", 7, [("x", px)], np.pad(px, ((0, 0), (1, 0), (2, 1), (0, 3)), constant_values=1.5),
     {"pads": [0, 1, 2, 0, 0, 0, 1, 3], "value": 1.5})
case("pad7_reflect", "Pad", 7, [("x", px)], np.pad(px, ((0, 0), (0, 0), (1, 1), (2, 0)), mode="reflect"),
     {"pads": [0, 0, 1, 2, 0, 0, 1, 0], "mode": "reflect"})
case("clip7_attr", "Clip", 7, [("x", x)], np.clip(x, -0.5, 0.75), {"min": -0.5, "max": 0.75})
case("clip7_max_only", "Clip", 7, [("x", x)], np.minimum(x, 0.25), {"max": 0.25})
sx = f32(5, 6, 4)
case("slice7_attr", "Slice", 7, [("x", sx)], sx[1:4, :, -3:100],
     {"starts": [1, -3], "ends": [4, 100], "axes": [0, 2]})
case("slice7_attr_default_axes", "Slice", 7, [("x", sx)], sx[0:2, 2:5], {"starts": [0, 2], "ends": [2, 5]})
tk = np.array([[1, 5, 3, 4], [8, 2, 6, 0]], np.float32)
case("topk7_attr", "TopK", 7, [("x", tk)],
     [np.array([[5, 4], [8, 6]], np.float32), np.array([[1, 3], [0, 2]], np.int64)], {"k": 2})
sp = f32(4, 6)
case("split7_attr", "Split", 7, [("x", sp)], [sp[:, :1], sp[:, 1:6]], {"axis": 1, "split": [1, 5]})
case("split7_equal", "Split", 7, [("x", sp)], list(np.split(sp, 2, axis=0)))
case("dropout7_mask_is_float", "Dropout", 7, [("x", x)], [x, np.ones_like(x)], {"ratio": 0.3})
bnx = f32(2, 3, 2, 2)
bp = [f32(3, 2, 2), f32(3, 2, 2), f32(3, 2, 2), f32(3, 2, 2, lo=0.5, hi=2)]
case("batchnorm7_spatial0", "BatchNormalization", 7,
     [("x", bnx), ("s", None), ("b", None), ("m", None), ("v", None)],
     (bnx - bp[2]) / np.sqrt(bp[3] + 1e-3) * bp[0] + bp[1], {"spatial": 0, "epsilon": 1e-3},
     consts=dict(zip("sbmv", bp)))
ga, gb, gc = f32(3, 4), f32(4, 5), f32(5)
case("gemm7_c_required", "Gemm", 7, [("a", ga), ("b", gb), ("c", gc)], 2.0 * ga @ gb + 0.5 * gc,
     {"alpha": 2.0, "beta": 0.5})
v1, v2 = f32(2, 3), f32(2, 3)
case("max7_same_shapes", "Max", 7, [("a", v1), ("b", v2)], np.maximum(v1, v2))
case("sum8_broadcast", "Sum", 8, [("a", v1), ("b", f32(3))], None)
CASES[-1]["expected"] = [v1 + CASES[-1]["inputs"][1][1]]
case("flatten7", "Flatten", 7, [("x", x)], x.reshape(2, 12))
case("concat7", "Concat", 7, [("a", x), ("b", f32(2, 1, 4))], None, {"axis": 1})
CASES[-1]["expected"] = [np.concatenate([x, CASES[-1]["inputs"][1][1]], 1)]
ci = np.array([[1, 2, 2], [0, 1, 3]], np.int32)
case("equal7_int", "Equal", 7, [("a", ci), ("b", np.array([1, 1, 3], np.int32))], ci == np.array([1, 1, 3]))
case("pow7", "Pow", 7, [("a", f32(2, 3, lo=0.5, hi=2)), ("b", f32(3))], None)
CASES[-1]["expected"] = [np.power(CASES[-1]["inputs"][0][1], CASES[-1]["inputs"][1][1])]

# ---- Opset 9 and 10 ------------------------------------------------------------------------------
case("upsample9_scales_input", "Upsample", 9, [("x", ux), ("s", None)],
     np.repeat(ux, 2, axis=3), consts={"s": np.array([1, 1, 1, 2], np.float32)})
bs = [f32(3), f32(3), f32(3), f32(3, lo=0.5, hi=2)]
case("batchnorm9", "BatchNormalization", 9, [("x", bnx), ("s", None), ("b", None), ("m", None), ("v", None)],
     (bnx - bs[2].reshape(1, 3, 1, 1)) / np.sqrt(bs[3].reshape(1, 3, 1, 1) + 1e-5) * bs[0].reshape(1, 3, 1, 1)
     + bs[1].reshape(1, 3, 1, 1), consts=dict(zip("sbmv", bs)))
rx = f32(1, 1, 4, 6)
case("resize10_nearest", "Resize", 10, [("x", rx), ("s", None)],
     resize_ref(rx, (1, 1, 6, 15), [1, 1, 1.5, 2.5], "asymmetric", "nearest", "legacy"),
     consts={"s": np.array([1, 1, 1.5, 2.5], np.float32)})
case("resize10_nearest_down", "Resize", 10, [("x", rx), ("s", None)],
     resize_ref(rx, (1, 1, 2, 4), [1, 1, 0.5, 0.7], "asymmetric", "nearest", "legacy"),
     consts={"s": np.array([1, 1, 0.5, 0.7], np.float32)})
case("resize10_linear", "Resize", 10, [("x", rx), ("s", None)],
     resize_ref(rx, (1, 1, 8, 9), [1, 1, 2, 1.5], "asymmetric", "linear", None),
     {"mode": "linear"}, consts={"s": np.array([1, 1, 2, 1.5], np.float32)})
case("slice10_inputs_steps", "Slice", 10, [("x", sx), ("s", None), ("e", None), ("a", None), ("st", None)],
     sx[:, 5:0:-2], consts={"s": i64(5), "e": i64(0), "a": i64(1), "st": i64(-2)})
case("topk10_k_input", "TopK", 10, [("x", tk), ("k", None)],
     [np.array([[5], [8]], np.float32), np.array([[1], [0]], np.int64)], consts={"k": i64(1)})
case("dropout10_mask_is_bool", "Dropout", 10, [("x", x)], [x, np.ones(x.shape, bool)])

# ---- Opsets 11 to 13 -----------------------------------------------------------------------------
case("resize11_tf_half_pixel_for_nn", "Resize", 11, [("x", rx), ("r", None), ("s", None)],
     resize_ref(rx, (1, 1, 6, 9), [1, 1, 1.5, 1.5], "tf_half_pixel_for_nn", "nearest", "round_prefer_floor"),
     {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
     consts={"r": np.zeros(0, np.float32), "s": np.array([1, 1, 1.5, 1.5], np.float32)})
case("resize11_sizes_empty_scales", "Resize", 11, [("x", rx), ("r", None), ("s", None), ("z", None)],
     resize_ref(rx, (1, 1, 3, 8), [1, 1, 3 / 4, 8 / 6], "half_pixel", "linear", None),
     {"mode": "linear"}, consts={"r": np.zeros(0, np.float32), "s": np.zeros(0, np.float32),
                                 "z": i64(1, 1, 3, 8)})
case("clip11_inputs", "Clip", 11, [("x", x), ("lo", None), ("hi", None)], np.clip(x, -1.0, 0.5),
     consts={"lo": np.float32(-1.0), "hi": np.float32(0.5)})
case("pad11_inputs", "Pad", 11, [("x", px), ("p", None), ("v", None)],
     np.pad(px, ((0, 0), (0, 0), (1, 1), (0, 2)), constant_values=-2.0),
     consts={"p": i64(0, 0, 1, 0, 0, 0, 1, 2), "v": np.float32(-2.0)})
case("split11_negative_axis", "Split", 11, [("x", sp)], [sp[:, :2], sp[:, 2:]], {"axis": -1, "split": [2, 4]})
case("softmax11_coerced_negative_axis", "Softmax", 11, [("x", x * 3)],
     coerced(lambda a: softmax(a, 1), x * 3, -2), {"axis": -2})
case("dropout12_inputs", "Dropout", 12, [("x", x), ("r", None), ("t", None)], [x, np.ones(x.shape, bool)],
     consts={"r": np.float32(0.2), "t": np.array(False)})
case("softmax13_one_axis", "Softmax", 13, [("x", x * 3)], softmax(x * 3, 1), {"axis": 1})
case("split13_input", "Split", 13, [("x", sp), ("s", None)], [sp[:3], sp[3:]], consts={"s": i64(3, 1)})
case("squeeze13_input", "Squeeze", 13, [("x", x1), ("a", None)], x1.reshape(2, 1, 3), consts={"a": i64(-1)})
case("reduce_sum13_noop_empty", "ReduceSum", 13, [("x", x)], x, {"noop_with_empty_axes": 1})
case("reduce_mean13_attr", "ReduceMean", 13, [("x", x)], x.mean(axis=-1), {"axes": [-1], "keepdims": 0})

# ---- Opsets 18 to 22 -----------------------------------------------------------------------------
case("reduce_mean18_input", "ReduceMean", 18, [("x", x), ("a", None)], x.mean(axis=(0, 2), keepdims=True),
     consts={"a": i64(0, -1)})
case("reduce_max18_noop_empty", "ReduceMax", 18, [("x", x)], x, {"noop_with_empty_axes": 1})
case("reduce_l2_18_all", "ReduceL2", 18, [("x", x)], np.sqrt((x * x).sum(keepdims=True)))
s7 = f32(7, 3)
case("split18_num_outputs_uneven", "Split", 18, [("x", s7)], [s7[:3], s7[3:6], s7[6:]], {"num_outputs": 3})
case("pad18_axes_input", "Pad", 18, [("x", px), ("p", None), (None, None), ("a", None)],
     np.pad(px, ((0, 0), (0, 0), (0, 0), (2, 1))), consts={"p": i64(2, 1), "a": i64(-1)})
case("resize18_axes_not_larger", "Resize", 18, [("x", rx), (None, None), (None, None), ("z", None)],
     resize_ref(rx, (1, 1, 6, 9), [1, 1, 1.5, 1.5], "half_pixel", "nearest", "round_prefer_floor"),
     {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}, consts={"z": i64(7, 9)})
case("resize18_axes_not_smaller", "Resize", 18, [("x", rx), (None, None), (None, None), ("z", None)],
     resize_ref(rx, (1, 1, 7, 11), [1, 1, 1.75, 1.75], "asymmetric", "linear", None),
     {"axes": [3, 2], "keep_aspect_ratio_policy": "not_smaller", "mode": "linear",
      "coordinate_transformation_mode": "asymmetric"}, consts={"z": i64(9, 7)})
case("resize19_half_pixel_symmetric", "Resize", 19, [("x", rx), (None, None), ("s", None)],
     resize_ref(rx, (1, 1, 9, 8), [1, 1, 2.3, 1.4], "half_pixel_symmetric", "linear", None),
     {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
     consts={"s": np.array([1, 1, 2.3, 1.4], np.float32)})
case("cast19_saturate", "Cast", 19, [("x", x * 3)], (x * 3).astype(np.int64), {"to": TensorProto.INT64, "saturate": 1})
case("reduce_min20_input", "ReduceMin", 20, [("x", x), ("a", None)], x.min(axis=1), {"keepdims": 0},
     consts={"a": i64(1)})
case("softmax22", "Softmax", 22, [("x", x * 3)], softmax(x * 3, -1))
case("batchnorm22", "BatchNormalization", 22, [("x", bnx), ("s", None), ("b", None), ("m", None), ("v", None)],
     (bnx - bs[2].reshape(1, 3, 1, 1)) / np.sqrt(bs[3].reshape(1, 3, 1, 1) + 1e-5) * bs[0].reshape(1, 3, 1, 1)
     + bs[1].reshape(1, 3, 1, 1), {"momentum": 0.8}, consts=dict(zip("sbmv", bs)))
case("resize22_nearest_sizes", "Resize", 22, [("x", rx), (None, None), (None, None), ("z", None)],
     resize_ref(rx, (1, 1, 5, 4), [1, 1, 5 / 4, 4 / 6], "half_pixel", "nearest", "round_prefer_ceil"),
     {"nearest_mode": "round_prefer_ceil"}, consts={"z": i64(1, 1, 5, 4)})


# ---- Older and newer opsets than kiln's definitions (7 to 22) ----------------------------------
# They import where the version the model's opset selects is the one of the nearest of opsets 7
# and 22, up to new element types and attributes the node leaves unset
# (frontend/onnx/operator_versions.h). Drawn after every case above, which stay byte-identical.
def conv2d(x, w, stride, pad):
    n, c, h, wd = x.shape
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    y = np.zeros((n, w.shape[0], oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return y.astype(np.float32)


ox = f32(2, 3, 4)
cvx, cvw = f32(1, 2, 5, 5), f32(3, 2, 3, 3)
case("relu6", "Relu", 6, [("x", ox)], np.maximum(ox, 0))
case("conv6_strides_pads", "Conv", 6, [("x", cvx), ("w", None)], conv2d(cvx, cvw, 2, 1),
     {"strides": [2, 2], "pads": [1, 1, 1, 1]}, consts={"w": cvw})
case("softmax6_coerced", "Softmax", 6, [("x", ox * 3)], coerced(lambda a: softmax(a, 1), ox * 3, 1))
case("transpose23", "Transpose", 23, [("x", ox)], ox.transpose(2, 0, 1), {"perm": [2, 0, 1]})
case("cast24_no_round_mode", "Cast", 24, [("x", ox * 3)], (ox * 3).astype(np.int32),
     {"to": TensorProto.INT32})
case("reshape25", "Reshape", 25, [("x", ox), ("s", None)], ox.reshape(4, 6), consts={"s": i64(4, -1)})
case("relu28", "Relu", 28, [("x", ox)], np.maximum(ox, 0))
case("softmax28", "Softmax", 28, [("x", ox * 3)], softmax(ox * 3, -1))


# ---- Definitions before opset 7 that kiln implements too (operator_versions.cc) ---------------
# Add/Sub/Mul/Div-1 and -6, Pow-1: B has A's shape, or broadcast=1 lines B's dims up with A's
# from `axis` (default: suffix-aligned), each A's or 1. Gemm-1/-6: C is (M, N) unless
# broadcast=1. PRelu-1/-6: one slope, one per channel (axis 1) or one per element.
# BatchNormalization-1/-6: is_test=1 inference, is_test=0 (default) training.
la, lb = f32(2, 3, 4, 5), f32(3, 4)
case("add6_broadcast_axis", "Add", 6, [("a", la), ("b", lb)], la + lb[None, :, :, None],
     {"broadcast": 1, "axis": 1})
sa, sb = f32(2, 3, 4), f32(1, 4)
case("sub6_broadcast_suffix_size1", "Sub", 6, [("a", sa), ("b", sb)], sa - sb, {"broadcast": 1})
ma, mb = f32(2, 3), f32(2, 3)
case("mul1_consumed_inputs", "Mul", 1, [("a", ma), ("b", mb)], ma * mb, {"consumed_inputs": [0, 0]})
da, db = f32(2, 3), f32(2, 1, lo=0.5, hi=2)
case("div6_broadcast_axis0", "Div", 6, [("a", da), ("b", db)], da / db, {"broadcast": 1, "axis": 0})
pa, pb = f32(2, 3, lo=0.5, hi=2), f32(3)
case("pow1_broadcast", "Pow", 6, [("a", pa), ("b", pb)], np.power(pa, pb), {"broadcast": 1})
g6a, g6b, g6c = f32(3, 5), f32(4, 5), f32(4)
case("gemm6_broadcast", "Gemm", 6, [("a", g6a), ("b", g6b), ("c", g6c)], g6a @ g6b.T + 0.5 * g6c,
     {"broadcast": 1, "transB": 1, "beta": 0.5})
prx, prs = f32(2, 3, 4), f32(3)
case("prelu6_per_channel", "PRelu", 6, [("x", prx), ("s", None)],
     np.where(prx < 0, prx * prs[None, :, None], prx), consts={"s": prs})
b6x, b6s, b6b, b6m, b6v = f32(2, 3, 4), f32(3), f32(3), f32(3), f32(3, lo=0.5, hi=2)


def bn_ref(x, s, b, m, v, eps=1e-5):
    sh = (1, -1) + (1,) * (x.ndim - 2)
    return s.reshape(sh) * (x - m.reshape(sh)) / np.sqrt(v.reshape(sh) + eps) + b.reshape(sh)


case("batchnorm6_is_test", "BatchNormalization", 6,
     [("x", b6x), ("s", None), ("b", None), ("m", None), ("v", None)],
     bn_ref(b6x, b6s, b6b, b6m, b6v), {"is_test": 1},
     consts={"s": b6s, "b": b6b, "m": b6m, "v": b6v})
bm, bv = b6x.mean(axis=(0, 2)), b6x.var(axis=(0, 2))
case("batchnorm6_training", "BatchNormalization", 6,
     [("x", b6x), ("s", None), ("b", None), ("m", None), ("v", None)],
     [bn_ref(b6x, b6s, b6b, bm, bv), b6m * 0.8 + bm * 0.2, b6v * 0.8 + bv * 0.2, bm, bv],
     {"momentum": 0.8}, consts={"s": b6s, "b": b6b, "m": b6m, "v": b6v})

# Pad-19's wrap mode, pads longer than the axis (the input repeats): position i of an axis of d
# takes element i mod d (numpy 2's np.pad; numpy 1's wraps such pads otherwise).
wx = f32(2, 3)
case("pad19_wrap_repeats", "Pad", 19, [("x", wx), ("p", None)],
     wx[np.ix_(np.arange(-1, 5) % 2, np.arange(-4, 5) % 3)], {"mode": "wrap"},
     consts={"p": i64(1, 4, 3, 2)})


def maxpool_with_indices(x, k, stride, pad, dil, order):
    """MaxPool's Y and Indices (opset 8+): the first maximum of each window, in-bounds only; the
    flat index row-major, or with storage_order=1 column-major over the spatial axes."""
    n_, c_, h_, w_ = x.shape
    oh = (h_ + 2 * pad - (k - 1) * dil - 1) // stride + 1
    ow = (w_ + 2 * pad - (k - 1) * dil - 1) // stride + 1
    y = np.zeros((n_, c_, oh, ow), x.dtype)
    idx = np.zeros((n_, c_, oh, ow), np.int64)
    for n in range(n_):
        for c in range(c_):
            for i in range(oh):
                for j in range(ow):
                    best, at = None, -1
                    for a in range(k):
                        for b in range(k):
                            h, w = i * stride - pad + a * dil, j * stride - pad + b * dil
                            if 0 <= h < h_ and 0 <= w < w_ and (best is None or x[n, c, h, w] > best):
                                best = x[n, c, h, w]
                                at = (n * c_ + c) * h_ * w_ + (h * w_ + w if order == 0 else h + w * h_)
                    y[n, c, i, j], idx[n, c, i, j] = best, at
    return [y, idx]


# MaxPool's Indices output with ties (small integers), padding, strides and dilations.
mpx = rng.integers(-2, 3, size=(2, 2, 5, 6)).astype(np.float32)
case("maxpool12_indices", "MaxPool", 12, [("x", mpx)], maxpool_with_indices(mpx, 3, 2, 1, 1, 0),
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
case("maxpool12_indices_storage_order_dilations", "MaxPool", 12, [("x", mpx)],
     maxpool_with_indices(mpx, 2, 1, 1, 2, 1),
     {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 2], "storage_order": 1})


# Einsum's ellipsis (broadcast, right-aligned; implicit output: the ellipsis first) and diagonals.
ea, eb = f32(2, 1, 3, 4), f32(5, 4, 2)
case("einsum12_ellipsis_broadcast", "Einsum", 12, [("a", ea), ("b", eb)],
     np.einsum("...ij,...jk->...ik", ea, eb), {"equation": "...ij,...jk->...ik"})
ed = f32(3, 4, 4)
case("einsum12_ellipsis_trace_implicit", "Einsum", 12, [("a", ed)], np.einsum("...ii", ed),
     {"equation": "...ii"})
ec, ee = f32(3, 3, 4), f32(4, 2)
case("einsum12_diagonal", "Einsum", 12, [("a", ec), ("b", ee)], np.einsum("iij,jk->ik", ec, ee),
     {"equation": "iij,jk->ik"})


# Negative axes before opset 11, where onnx 1.23.2's checker (full_check) and strict shape
# inference take them (as onnxruntime does): Split-2 (test_GLU of ONNX's pytorch-operator suite
# is a Split at opset 6 with axis -1), Concat-4, Slice-1's axes, Gather-1's axis and indices, the
# reductions' axes. (Squeeze-1, Unsqueeze-1 and Flatten-1/-9 with negative axes fail onnx's shape
# inference; kiln refuses them: OnnxErrors.NegativeAxesBeforeOpset11.)
nx = f32(2, 3, 4)
case("split6_negative_axis", "Split", 6, [("x", nx)], list(np.split(nx, 2, axis=-1)), {"axis": -1})
nb = f32(2, 3, 1)
case("concat6_negative_axis", "Concat", 6, [("a", nx), ("b", nb)], np.concatenate([nx, nb], -1),
     {"axis": -1})
case("slice7_negative_axes", "Slice", 7, [("x", nx)], nx[:, 1:3, 1:],
     {"starts": [1, 1], "ends": [100, 3], "axes": [-1, -2]})
case("reduce_sum7_negative_axes", "ReduceSum", 7, [("x", nx)], nx.sum(axis=(0, 2)),
     {"axes": [-1, 0], "keepdims": 0})
case("reduce_max10_negative_axis", "ReduceMax", 10, [("x", nx)], nx.max(axis=1, keepdims=True),
     {"axes": [-2]})
case("gather7_negative_indices", "Gather", 7, [("x", nx), ("i", None)], np.take(nx, [-1, 0, -3], axis=1),
     {"axis": 1}, consts={"i": i64(-1, 0, -3)})
case("gather10_negative_axis", "Gather", 10, [("x", nx), ("i", None)], np.take(nx, [[3, -4], [-1, 1]], axis=-1),
     {"axis": -1}, consts={"i": np.array([[3, -4], [-1, 1]], np.int64)})


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    lines = ["# case op opset"]
    for c in CASES:
        build(c)
        lines.append(f"{c['name']} {c['op']} {c['opset']}")
    with open(os.path.join(ROOT, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(CASES)} cases, opsets {sorted({c['opset'] for c in CASES})}")


if __name__ == "__main__":
    main()
