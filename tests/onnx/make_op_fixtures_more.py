#!/usr/bin/python3
"""More single-operator ONNX models for tests/onnx/onnx_import_test.cc (OnnxOps), numpy only.

    /usr/bin/python3 tests/onnx/make_op_fixtures_more.py

Debian's python3-onnx 1.12 and numpy suffice (make_op_fixtures.py also needs PyTorch). Each case
is one node made with onnx.helper, saved as tests/onnx/ops_more/<case>/model.onnx with its inputs
and expected outputs in the ONNX test-data layout (test_data_set_0/*.pb). The expected outputs
come from numpy code written here from the ONNX operator specification, independently of kiln.
ops_more/oracles.txt lists the cases.

python3-onnx 1.12 knows opsets up to 17: models at later opsets (Gelu 20, Mish 18, the scatter
reductions max/min 18) are saved without onnx.checker, and the C++ test accepts exactly the
importer's opset error for them until the importer takes those opsets.
"""
import math
import os
import shutil

import numpy as np

from node_fixture import write_node_case

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_more")
rng = np.random.default_rng(15)
CASES = []
CHECKER_MAX_OPSET = 17


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*values):
    return np.array(values, dtype=np.int64)


def case(name, op, inputs, expected, attrs=None, consts=None, opset=13):
    """inputs: list of (name, array) graph inputs (None name → an omitted optional input);
    consts: {name: array} initializers, referenced by name in `inputs` as (name, None)."""
    CASES.append(dict(name=name, op=op, inputs=inputs, expected=expected, attrs=attrs or {},
                      consts=consts or {}, opset=opset))


def build(c):
    expected = c["expected"] if isinstance(c["expected"], list) else [c["expected"]]
    write_node_case(ROOT, c, [np.asarray(e) for e in expected], "kiln make_op_fixtures_more.py",
                    ir_version=8, check=c["opset"] <= CHECKER_MAX_OPSET)


# ---- LRN (the spec's square sum over a clipped channel window) ----------------------------------
def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    x64 = x.astype(np.float64)
    c = x.shape[1]
    sq = np.zeros_like(x64)
    for ch in range(c):
        lo = max(0, ch - (size - 1) // 2)
        hi = min(c - 1, ch + int(math.ceil((size - 1) / 2)))
        sq[:, ch] = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
    return (x64 / (bias + alpha / size * sq) ** beta).astype(np.float32)


lx = f32(2, 5, 3, 3)
case("lrn_size3_defaults", "LRN", [("x", lx)], lrn(lx, 3), {"size": 3})
case("lrn_size4_attrs", "LRN", [("x", lx * 3)], lrn(lx * 3, 4, alpha=0.02, beta=0.6, bias=2.0),
     {"size": 4, "alpha": 0.02, "beta": 0.6, "bias": 2.0})
case("lrn_1d_size5", "LRN", [("x", f32(1, 4, 6))], None, {"size": 5})
CASES[-1]["expected"] = lrn(CASES[-1]["inputs"][0][1], 5)

# ---- Gelu (opset 20), Mish (opset 18) -----------------------------------------------------------
gx = f32(3, 4, lo=-5, hi=5).astype(np.float32)
erf = np.vectorize(math.erf)
g64 = gx.astype(np.float64)
case("gelu_none", "Gelu", [("x", gx)], (0.5 * g64 * (1 + erf(g64 / math.sqrt(2)))).astype(np.float32),
     opset=20)
case("gelu_tanh", "Gelu", [("x", gx)],
     (0.5 * g64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (g64 + 0.044715 * g64 ** 3)))).astype(np.float32),
     {"approximate": "tanh"}, opset=20)
mx = np.concatenate([f32(10, lo=-6, hi=6), np.array([-100, -30, 30, 100], np.float32)])
case("mish", "Mish", [("x", mx)],
     (mx.astype(np.float64) * np.tanh(np.logaddexp(0, mx.astype(np.float64)))).astype(np.float32),
     opset=18)


# ---- ScatterElements / Scatter / ScatterND (the spec's reference loops) --------------------------
REDUCE = {"none": lambda a, b: b, "add": lambda a, b: a + b, "mul": lambda a, b: a * b,
          "max": max, "min": min}


def scatter_elements(data, indices, updates, axis, reduction="none"):
    out = np.copy(data)
    axis = axis % data.ndim
    for idx in np.ndindex(indices.shape):
        target = list(idx)
        target[axis] = indices[idx]
        target = tuple(target)
        out[target] = REDUCE[reduction](out[target], updates[idx])
    return out


def scatter_nd(data, indices, updates, reduction="none"):
    out = np.copy(data)
    for idx in np.ndindex(indices.shape[:-1]):
        target = tuple(indices[idx])
        if reduction == "none":
            out[target] = updates[idx]
        elif reduction == "add":
            out[target] = out[target] + updates[idx]
        elif reduction == "mul":
            out[target] = out[target] * updates[idx]
        elif reduction == "max":
            out[target] = np.maximum(out[target], updates[idx])
        else:
            out[target] = np.minimum(out[target], updates[idx])
    return out


sd = f32(3, 5)
# Distinct targets per column for "none" (duplicates are undefined there); negative indices.
si = np.array([[1, -3, 2, 0, -1], [-1, 1, 0, 2, 0]], np.int64)
su = f32(2, 5)
case("scatter_elements_none_axis0", "ScatterElements", [("d", sd), ("i", si), ("u", su)],
     scatter_elements(sd, si, su, 0), {"axis": 0})
dup = rng.integers(-5, 5, (2, 4)).astype(np.int64)
dup[0, :2] = [1, 1]  # duplicate targets in one row
su2 = f32(2, 4)
case("scatter_elements_add_dup", "ScatterElements", [("d", sd), ("i", dup), ("u", su2)],
     scatter_elements(sd, dup, su2, -1, "add"), {"axis": -1, "reduction": "add"}, opset=16)
case("scatter_elements_mul_dup", "ScatterElements", [("d", sd), ("i", None), ("u", su2)],
     scatter_elements(sd, dup, su2, 1, "mul"), {"axis": 1, "reduction": "mul"},
     consts={"i": dup}, opset=16)
mm_i = rng.integers(0, 3, (2, 4)).astype(np.int64)
mm_u = f32(2, 4, lo=-3, hi=3)
for red in ["max", "min"]:
    case(f"scatter_elements_{red}", "ScatterElements", [("d", sd), ("i", mm_i), ("u", mm_u)],
         scatter_elements(sd, mm_i, mm_u, 0, red), {"axis": 0, "reduction": red}, opset=18)
bd = rng.uniform(size=(2, 4)) > 0.5
bi = np.array([[3, 0], [1, 2]], np.int64)
bu = np.array([[True, False], [False, True]])
case("scatter_elements_bool", "ScatterElements", [("d", bd), ("i", bi), ("u", bu)],
     scatter_elements(bd, bi, bu, 1), {"axis": 1})
ii = np.array([[2, 0, 1]], np.int64)
iu = np.array([[10, 20, 30]], np.int64)
idata = np.arange(12, dtype=np.int64).reshape(4, 3)
case("scatter_elements_int_max", "ScatterElements", [("d", idata), ("i", ii), ("u", iu)],
     scatter_elements(idata, ii, iu, 0, "max"), {"axis": 0, "reduction": "max"}, opset=18)
case("scatter_deprecated_opset10", "Scatter", [("d", sd), ("i", si), ("u", su)],
     scatter_elements(sd, si, su, 0), {"axis": 0}, opset=10)

nd = f32(4, 3, 2)
ndi = np.array([[2], [-4]], np.int64)
ndu = f32(2, 3, 2)
case("scatter_nd_rows", "ScatterND", [("d", nd), ("i", ndi), ("u", ndu)], scatter_nd(nd, ndi, ndu))
nd2 = f32(4, 4)
ndi2 = np.array([[0, 1], [3, -1], [0, 1], [2, 2]], np.int64)  # (0, 1) twice
ndu2 = f32(4)
case("scatter_nd_add_dup", "ScatterND", [("d", nd2), ("i", ndi2), ("u", ndu2)],
     scatter_nd(nd2, ndi2, ndu2, "add"), {"reduction": "add"}, opset=16)
case("scatter_nd_mul_dup_const", "ScatterND", [("d", nd2), ("i", None), ("u", ndu2)],
     scatter_nd(nd2, ndi2, ndu2, "mul"), {"reduction": "mul"}, consts={"i": ndi2}, opset=16)
ndi3 = np.array([[[1, 0], [2, 1]], [[1, 0], [0, 2]]], np.int64)  # [2, 2, 2]: (1, 0) twice
ndu3 = f32(2, 2, 2, lo=-3, hi=3)
for red in ["max", "min"]:
    case(f"scatter_nd_{red}", "ScatterND", [("d", nd), ("i", ndi3), ("u", ndu3)],
         scatter_nd(nd, ndi3, ndu3, red), {"reduction": red}, opset=18)
ndi4 = np.array([[1, 2, 0], [3, 0, 1]], np.int64)
ndu4 = f32(2)
case("scatter_nd_full_index", "ScatterND", [("d", nd), ("i", ndi4), ("u", ndu4)],
     scatter_nd(nd, ndi4, ndu4))


# ---- QuantizeLinear / DequantizeLinear (the spec's formulas, in float32) ------------------------
def quantize(x, scale, zp, axis=None):
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    q = np.round(x / scale) + zp.astype(np.float32)  # numpy rounds half to even
    return np.clip(q, 0, 255).astype(np.uint8)


def dequantize(x, scale, zp, axis=None):
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((x.astype(np.float32) - zp.astype(np.float32)) * scale).astype(np.float32)


# Exact halves (x / 0.5 = k + 0.5 with k of both parities) and values beyond both ends.
qx = np.concatenate([np.arange(-6, 6, dtype=np.float32) * 0.5 + 0.25,
                     f32(12, lo=-80, hi=80), np.array([-1000, 1000], np.float32)])
qs, qz = np.float32(0.5), np.uint8(128)
case("quantize_per_tensor", "QuantizeLinear", [("x", qx), ("s", None), ("z", None)],
     quantize(qx, qs, qz), consts={"s": qs, "z": qz})
case("quantize_no_zero_point", "QuantizeLinear", [("x", qx), ("s", None)],
     quantize(qx, np.float32(0.25), np.uint8(0)), consts={"s": np.float32(0.25)})
px = f32(2, 3, 4, lo=-3, hi=3)
ps = np.array([0.02, 0.05, 0.1], np.float32)
pz = np.array([0, 100, 255], np.uint8)
case("quantize_per_axis", "QuantizeLinear", [("x", px), ("s", None), ("z", None)],
     quantize(px, ps, pz, 1), consts={"s": ps, "z": pz})
ps2 = np.array([0.01, 0.03, 0.05, 0.2], np.float32)
pz2 = np.array([10, 128, 0, 200], np.uint8)
case("quantize_per_axis_negative", "QuantizeLinear", [("x", px), ("s", None), ("z", None)],
     quantize(px, ps2, pz2, 2), {"axis": -1}, consts={"s": ps2, "z": pz2})
dx = rng.integers(0, 256, (2, 3, 4)).astype(np.uint8)
case("dequantize_per_tensor", "DequantizeLinear", [("x", dx), ("s", None), ("z", None)],
     dequantize(dx, np.float32(0.037), np.uint8(121)),
     consts={"s": np.float32(0.037), "z": np.uint8(121)})
ds = np.array([0.5, 0.01], np.float32)
dz = np.array([3, 250], np.uint8)
case("dequantize_per_axis0", "DequantizeLinear", [("x", dx), ("s", None), ("z", None)],
     dequantize(dx, ds, dz, 0), {"axis": 0}, consts={"s": ds, "z": dz})
dix = rng.integers(-100000, 100000, (3, 4)).astype(np.int32)
case("dequantize_int32", "DequantizeLinear", [("x", dix), ("s", None)],
     (dix.astype(np.float64) * np.float32(0.001)).astype(np.float32),
     consts={"s": np.float32(0.001)})
# A quantized weight read back: the Q/DQ pair of quantization-aware models.
case("dequantize_weight", "DequantizeLinear", [("x", None), ("s", None), ("z", None)],
     dequantize(dx, ps2, pz2, 2), {"axis": 2}, consts={"x": dx, "s": ps2, "z": pz2})

# ---- Compress with a constant condition ---------------------------------------------------------
cx = f32(3, 5, 2)
cond = np.array([True, False, True, True], bool)
case("compress_axis1", "Compress", [("x", cx), ("c", None)], np.compress(cond, cx, axis=1),
     {"axis": 1}, consts={"c": cond})
cond2 = np.array([False, True], bool)
case("compress_axis_negative", "Compress", [("x", cx), ("c", None)], np.compress(cond2, cx, axis=-1),
     {"axis": -1}, consts={"c": cond2})
cond3 = rng.uniform(size=30) > 0.5
case("compress_flat", "Compress", [("x", cx), ("c", None)], np.compress(cond3, cx),
     consts={"c": cond3})

# ---- LayerNormalization's Mean and InvStdDev outputs --------------------------------------------
lnx, lns, lnb = f32(2, 3, 4), f32(4), f32(4)
l64 = lnx.astype(np.float64)
mean = l64.mean(axis=-1, keepdims=True)
inv = 1 / np.sqrt(((l64 - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-3)
case("layer_norm_mean_invstddev", "LayerNormalization", [("x", lnx), ("s", None), ("b", None)],
     [((l64 - mean) * inv * lns + lnb).astype(np.float32), mean.astype(np.float32),
      inv.astype(np.float32)],
     {"epsilon": 1e-3}, consts={"s": lns, "b": lnb}, opset=17)


# ---- Integer contractions (issue #17): the int32 products of the zero-point-shifted operands,
# requantised in double as the specification's reference does (rint, then saturate) ------------
def conv2d_int(x, w, pads=(0, 0, 0, 0), strides=(1, 1), group=1):
    """NCHW cross-correlation of int64 arrays with zero padding (pads: top, left, bottom, right)."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    y = np.zeros((n, o, oh, ow), np.int64)
    og = o // group
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * strides[0]:i * strides[0] + kh,
                          j * strides[1]:j * strides[1] + kw]
                y[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return y


def requantize(acc, multiplier, y_zp):
    d = acc.astype(np.float64) * multiplier.astype(np.float64) + y_zp.astype(np.float64)
    info = np.iinfo(y_zp.dtype)
    return np.clip(np.rint(d), info.min, info.max).astype(y_zp.dtype)


qa = rng.integers(0, 256, (3, 2, 7)).astype(np.uint8)
qa[0, 0, :] = 255
qb = rng.integers(-128, 128, (7, 5)).astype(np.int8)
qb[:, 0] = -128
case("matmul_integer_u8_i8", "MatMulInteger", [("a", qa), ("b", None)],
     (qa.astype(np.int64) @ qb.astype(np.int64)).astype(np.int32), consts={"b": qb}, opset=10)
qa2 = rng.integers(0, 256, (4, 6)).astype(np.uint8)
qb2 = rng.integers(0, 256, (6, 3)).astype(np.uint8)
za2 = np.array([3, 200, 0, 255], np.uint8)  # per row of a
zb2 = np.array([128, 7, 255], np.uint8)  # per column of b
case("matmul_integer_zero_points", "MatMulInteger",
     [("a", qa2), ("b", qb2), ("za", None), ("zb", None)],
     ((qa2.astype(np.int64) - za2[:, None]) @ (qb2.astype(np.int64) - zb2)).astype(np.int32),
     consts={"za": za2, "zb": zb2}, opset=10)
cx8 = rng.integers(0, 256, (2, 4, 6, 5)).astype(np.uint8)
cw8 = rng.integers(-128, 128, (6, 2, 3, 3)).astype(np.int8)
czx = np.uint8(100)
case("conv_integer_groups_pads", "ConvInteger",
     [("x", cx8), ("w", None), ("zx", None)],
     conv2d_int(cx8.astype(np.int64) - 100, cw8.astype(np.int64), (1, 1, 1, 0), group=2)
     .astype(np.int32),
     {"group": 2, "pads": [1, 1, 1, 0]}, consts={"w": cw8, "zx": czx}, opset=10)
ql_a = rng.integers(0, 256, (5, 8)).astype(np.uint8)
ql_b = rng.integers(-128, 128, (8, 4)).astype(np.int8)
ql_as, ql_az = np.float32(0.02), np.uint8(120)
ql_bs, ql_bz = np.array([0.005, 0.01, 0.002, 0.04], np.float32), np.zeros(4, np.int8)
ql_ys, ql_yz = np.float32(0.3), np.uint8(128)
ql_acc = (ql_a.astype(np.int64) - 120) @ ql_b.astype(np.int64)
case("qlinear_matmul_per_column", "QLinearMatMul",
     [("a", ql_a), ("as", None), ("az", None), ("b", None), ("bs", None), ("bz", None),
      ("ys", None), ("yz", None)],
     requantize(ql_acc, ql_as * ql_bs / ql_ys, ql_yz),
     consts={"as": ql_as, "az": ql_az, "b": ql_b, "bs": ql_bs, "bz": ql_bz, "ys": ql_ys,
             "yz": ql_yz}, opset=13)
qs_a = rng.integers(-128, 128, (2, 3, 6)).astype(np.int8)
qs_b = rng.integers(-128, 128, (6, 7)).astype(np.int8)
qs_scale, qs_z = np.float32(0.05), np.int8(-3)
qs_y, qs_yz = np.float32(0.9), np.int8(5)
qs_acc = (qs_a.astype(np.int64) + 3) @ (qs_b.astype(np.int64) + 3)
case("qlinear_matmul_int8_3d", "QLinearMatMul",
     [("a", qs_a), ("as", None), ("az", None), ("b", qs_b), ("bs", None), ("bz", None),
      ("ys", None), ("yz", None)],
     requantize(qs_acc, qs_scale * qs_scale / qs_y, qs_yz),
     consts={"as": qs_scale, "az": qs_z, "bs": qs_scale, "bz": qs_z, "ys": qs_y, "yz": qs_yz},
     opset=10)
qc_x = rng.integers(0, 256, (1, 3, 7, 7)).astype(np.uint8)
qc_w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
qc_xs, qc_xz = np.float32(0.01), np.uint8(50)
qc_ws = np.array([0.02, 0.01, 0.03, 0.005], np.float32)
qc_wz = np.zeros(4, np.int8)
qc_ys, qc_yz = np.float32(0.05), np.uint8(10)
qc_bias = np.array([100, -2000, 0, 30000], np.int32)
qc_acc = conv2d_int(qc_x.astype(np.int64) - 50, qc_w.astype(np.int64), (1, 1, 1, 1), (2, 2)) + \
    qc_bias[None, :, None, None]
case("qlinear_conv_per_channel_bias", "QLinearConv",
     [("x", qc_x), ("xs", None), ("xz", None), ("w", None), ("ws", None), ("wz", None),
      ("ys", None), ("yz", None), ("b", None)],
     requantize(qc_acc, qc_xs * qc_ws[None, :, None, None] / qc_ys, qc_yz),
     {"pads": [1, 1, 1, 1], "strides": [2, 2]},
     consts={"xs": qc_xs, "xz": qc_xz, "w": qc_w, "ws": qc_ws, "wz": qc_wz, "ys": qc_ys,
             "yz": qc_yz, "b": qc_bias}, opset=10)


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    lines = ["# case op opset (oracle: numpy, from the ONNX specification)"]
    for c in CASES:
        if not isinstance(c["expected"], list):
            e = np.asarray(c["expected"])
            c["expected"] = e.astype(np.float32) if e.dtype == np.float64 else e
        build(c)
        lines.append(f"{c['name']} {c['op']} {c['opset']}")
    with open(os.path.join(ROOT, "oracles.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(CASES)} cases, {len({c['op'] for c in CASES})} operators")


if __name__ == "__main__":
    main()
