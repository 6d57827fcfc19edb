// ONNX import: one lowering per ONNX operator (opsets 7-22), onto the IR's primitives
// (docs/ir.md) through the Importer's folding builder wrappers. Each lowering reads its node the
// way the operator's version in the model's opset (Importer::opset()) defines it: an attribute or
// input that the version does not have is an error, not silently ignored. docs/onnx.md is the
// table of what is supported; keep the two in step.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/onnx/import_internal.h"
#include "frontend/onnx/narrow_types.h"

namespace kiln::onnx::internal {
namespace {

using ir::NodeId;
using ir::Op;
using ir::Shape;
using NodeProto = ::onnx::NodeProto;

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// TRY(auto x, expr): x = *expr, or return expr's error.
#define TRY(lhs, expr) TRY_IMPL(KILN_CONCAT(try_, __LINE__), lhs, expr)
#define TRY_IMPL(tmp, lhs, expr)      \
  auto tmp = (expr);                  \
  if (!tmp.ok()) return tmp.status(); \
  lhs = *std::move(tmp)

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }
absl::Status Unsupported(const std::string& msg) { return absl::UnimplementedError(msg); }

absl::StatusOr<int64_t> NormAxis(int64_t axis, int64_t rank, const char* what = "axis") {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    return Bad(absl::StrCat(what, " ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// Versioned node signatures. An attribute that the operator gained in opset `since` is an error in
// an older model (and one it lost in `until` in a newer one): the model is invalid for its opset,
// and guessing what its producer meant could compute something else.
absl::Status AttrSince(const Importer& im, const NodeProto& n, const char* name, int64_t since) {
  if (im.opset() < since && FindAttr(n, name)) {
    return Bad(absl::StrCat("attribute '", name, "' exists from opset ", since,
                            ", but the model imports opset ", im.opset()));
  }
  return absl::OkStatus();
}
absl::Status AttrUntil(const Importer& im, const NodeProto& n, const char* name, int64_t until) {
  if (im.opset() >= until && FindAttr(n, name)) {
    return Bad(absl::StrCat("attribute '", name, "' exists only before opset ", until,
                            ", but the model imports opset ", im.opset()));
  }
  return absl::OkStatus();
}
// Inputs from index `first` on exist only from opset `since` (e.g. Squeeze's axes input, 13).
absl::Status InputsSince(const Importer& im, const NodeProto& n, int first, int64_t since,
                         const char* what) {
  if (im.opset() < since && Importer::NumInputs(n) > first) {
    return Bad(absl::StrCat("input ", first, " (", what, ") exists from opset ", since,
                            ", but the model imports opset ", im.opset()));
  }
  return absl::OkStatus();
}
#define TRY_OK(expr)                          \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (false)

int64_t Product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// A per-channel vector [C] as [1, C, 1, ...] broadcast to `s`.
NodeId PerChannel(Importer& im, NodeId v, const Shape& s) {
  Shape cs(s.size(), 1);
  cs[1] = s[1];
  return im.Broadcast(im.Reshape(v, cs), s);
}

// ---- Elementwise ----------------------------------------------------------------------------

Lowering UnaryOp(Op op) {
  return [op](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId x, im.Input(n, 0));
    im.SetOutput(n, 0, im.Unary(op, x));
    return absl::OkStatus();
  };
}

// A float-only activation written with a function of the input.
Lowering Activation(std::function<NodeId(Importer&, const NodeProto&, NodeId)> f) {
  return [f](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId x, im.Input(n, 0));
    if (!ir::IsFloat(im.dtype(x))) {
      return Bad(absl::StrCat("needs a float input, not ", ir::TypeToString(im.type(x))));
    }
    im.SetOutput(n, 0, f(im, n, x));
    return absl::OkStatus();
  };
}

NodeId Scaled(Importer& im, NodeId x, double s) {
  return s == 1.0 ? x : im.Binary(Op::kMul, x, im.Like(s, x));
}
NodeId Shifted(Importer& im, NodeId x, double s) {
  return s == 0.0 ? x : im.Binary(Op::kAdd, x, im.Like(s, x));
}
NodeId Sigmoid(Importer& im, NodeId x) {
  NodeId e = im.Unary(Op::kExp, im.Unary(Op::kNeg, x));
  return im.Unary(Op::kReciprocal, Shifted(im, e, 1.0));
}
NodeId ClampUnit(Importer& im, NodeId x) {  // min(max(x, 0), 1)
  return im.Binary(Op::kMin, im.Binary(Op::kMax, x, im.Like(0, x)), im.Like(1, x));
}
NodeId ExpM1Scaled(Importer& im, NodeId x, double alpha) {  // alpha * (exp(x) - 1)
  return Scaled(im, Shifted(im, im.Unary(Op::kExp, x), -1.0), alpha);
}

// Add, Sub, Mul, Div and Pow before opset 7 (versions 1 and 6; Pow-1): no numpy broadcasting.
// Without broadcast=1, B has A's shape. With it, B is broadcast to A: B's dims line up with A's
// from `axis` on (absent: suffix-aligned, B's last with A's last), each A's or 1 (the stored
// PyTorch models' size-1 dims), and the result has A's shape. Version 1's consumed_inputs (an
// in-place hint) means nothing to a graph and is ignored; versions 1 take float types only.
absl::StatusOr<std::vector<NodeId>> LegacyBroadcasted(Importer& im, const NodeProto& n, NodeId a,
                                                      NodeId b) {
  TRY_OK(AttrUntil(im, n, "consumed_inputs", n.op_type() == "Pow" ? 1 : 6));
  if (im.dtype(a) != im.dtype(b)) {
    return Bad(absl::StrCat("operand types differ: ", ir::TypeToString(im.type(a)), " and ",
                            ir::TypeToString(im.type(b))));
  }
  if (im.opset() < 6 && !ir::IsFloat(im.dtype(a))) {
    return Bad(absl::StrCat(n.op_type(), " on ", ir::DTypeName(im.dtype(a)),
                            " exists from opset 6, but the model imports opset ", im.opset()));
  }
  const Shape sa = im.shape(a), sb = im.shape(b);
  const bool broadcast = AttrInt(n, "broadcast", 0) != 0;
  if (!broadcast) {
    if (FindAttr(n, "axis")) return Bad("attribute 'axis' is set without broadcast=1");
    if (sa != sb) {
      return Bad(absl::StrCat("A ", ir::ShapeToString(sa), " and B ", ir::ShapeToString(sb),
                              " differ and broadcast is not set (before opset 7 only broadcast=1 "
                              "broadcasts B to A; the model imports opset ",
                              im.opset(), ")"));
    }
    return std::vector<NodeId>{a, b};
  }
  const int64_t ra = static_cast<int64_t>(sa.size()), rb = static_cast<int64_t>(sb.size());
  auto cannot = [&](const std::string& why) {
    return Bad(absl::StrCat("broadcast=1 cannot broadcast B ", ir::ShapeToString(sb), " to A ",
                            ir::ShapeToString(sa), ": ", why));
  };
  if (rb > ra) return cannot("B has the higher rank");
  int64_t axis = ra - rb;
  if (const auto* attr = FindAttr(n, "axis")) {
    if (attr->i() < -ra || attr->i() >= std::max<int64_t>(ra, 1)) {
      return cannot(absl::StrCat("axis ", attr->i(), " is out of range for rank ", ra));
    }
    axis = attr->i() < 0 ? attr->i() + ra : attr->i();
    if (axis + rb > ra) {
      return cannot(absl::StrCat("from axis ", axis, ", B's ", rb, " dims pass A's last"));
    }
  }
  Shape padded(static_cast<size_t>(ra), 1);
  for (int64_t i = 0; i < rb; ++i) {
    const int64_t d = sb[static_cast<size_t>(i)], want = sa[static_cast<size_t>(axis + i)];
    if (d != 1 && d != want) {
      return cannot(absl::StrCat("B's dim ", i, " (", d, ") is neither 1 nor A's dim ", axis + i,
                                 " (", want, ")"));
    }
    padded[static_cast<size_t>(axis + i)] = d;
  }
  return std::vector<NodeId>{a, im.Broadcast(im.Reshape(b, padded), sa)};
}

// The broadcast/axis attributes exist before opset 7 only.
absl::Status NoLegacyBroadcast(const Importer& im, const NodeProto& n) {
  TRY_OK(AttrUntil(im, n, "broadcast", 7));
  TRY_OK(AttrUntil(im, n, "axis", 7));
  return AttrUntil(im, n, "consumed_inputs", 6);
}

// Binary ops with numpy broadcasting; `f` gets the broadcast operands. `legacy`: the operator's
// versions before opset 7 broadcast as LegacyBroadcasted says (Add, Sub, Mul, Div).
Lowering BinaryWith(
    std::function<absl::StatusOr<NodeId>(Importer&, const NodeProto&, NodeId, NodeId)> f,
    bool same_dtype = true, bool legacy = false) {
  return [f, same_dtype, legacy](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId a, im.Input(n, 0));
    TRY(NodeId b, im.Input(n, 1));
    if (legacy && im.opset() < 7) {
      TRY(std::vector<NodeId> ab, LegacyBroadcasted(im, n, a, b));
      TRY(NodeId y, f(im, n, ab[0], ab[1]));
      im.SetOutput(n, 0, y);
      return absl::OkStatus();
    }
    if (legacy) TRY_OK(NoLegacyBroadcast(im, n));
    TRY(std::vector<NodeId> ab, im.Broadcasted({a, b}, same_dtype));
    TRY(NodeId y, f(im, n, ab[0], ab[1]));
    im.SetOutput(n, 0, y);
    return absl::OkStatus();
  };
}

Lowering BinaryOp(Op op, bool legacy = false) {
  return BinaryWith([op](Importer& im, const NodeProto&, NodeId a,
                         NodeId b) -> absl::StatusOr<NodeId> { return im.Binary(op, a, b); },
                    /*same_dtype=*/true, legacy);
}

// Comparison types by version: Equal compares floats from opset 11 (bool and integers before),
// Greater and Less compare integers from 9 (floats only before).
Lowering CompareOp(Op op, const char* name, bool floats_from_11) {
  return BinaryWith([op, name, floats_from_11](Importer& im, const NodeProto&, NodeId a,
                                               NodeId b) -> absl::StatusOr<NodeId> {
    const bool is_float = ir::IsFloat(im.dtype(a));
    if (floats_from_11 ? (is_float && im.opset() < 11) : (!is_float && im.opset() < 9)) {
      return Bad(absl::StrCat(name, " on ", ir::DTypeName(im.dtype(a)), " exists from opset ",
                              floats_from_11 ? 11 : 9, ", but the model imports opset ",
                              im.opset()));
    }
    return im.Binary(op, a, b);
  });
}

// ONNX integer Div truncates toward zero; the IR's floors.
absl::StatusOr<NodeId> Div(Importer& im, const NodeProto&, NodeId a, NodeId b) {
  NodeId q = im.Binary(Op::kDiv, a, b);
  if (!ir::IsInteger(im.dtype(a))) return q;
  NodeId r = im.Binary(Op::kMod, a, b);
  NodeId zero = im.Like(0, a);
  NodeId signs_differ =
      im.Binary(Op::kNe, im.Binary(Op::kLt, a, zero), im.Binary(Op::kLt, b, zero));
  NodeId inexact = im.Binary(Op::kNe, r, zero);
  return im.Select(im.Binary(Op::kAnd, inexact, signs_differ),
                   im.Binary(Op::kAdd, q, im.Like(1, q)), q);
}

absl::StatusOr<NodeId> Mod(Importer& im, const NodeProto& n, NodeId a, NodeId b) {
  const bool fmod = AttrInt(n, "fmod", 0) != 0;
  if (!fmod && ir::IsFloat(im.dtype(a)) && im.opset() < 28) {
    return Bad("fmod must be 1 for floating-point inputs before opset 28 (ONNX's rule)");
  }
  NodeId r = im.Binary(Op::kMod, a, b);  // floored: the divisor's sign
  if (!fmod) return r;
  // C fmod: the dividend's sign. Where the floored remainder is non-zero and its sign differs
  // from the dividend's, it is off by one divisor.
  NodeId zero = im.Like(0, a);
  NodeId fix =
      im.Binary(Op::kAnd, im.Binary(Op::kNe, r, zero),
                im.Binary(Op::kNe, im.Binary(Op::kLt, r, zero), im.Binary(Op::kLt, a, zero)));
  return im.Select(fix, im.Binary(Op::kSub, r, b), r);
}

absl::Status Pow(Importer& im, const NodeProto& n) {
  TRY(NodeId a, im.Input(n, 0));
  TRY(NodeId e, im.Input(n, 1));
  if (im.opset() < 7) {  // Pow-1: broadcast/axis (one float type, as below)
    if (ir::IsFloat(im.dtype(a))) {
      TRY(std::vector<NodeId> ae, LegacyBroadcasted(im, n, a, e));
      a = ae[0], e = ae[1];
    }
  } else {
    TRY_OK(AttrUntil(im, n, "broadcast", 7));
    TRY_OK(AttrUntil(im, n, "axis", 7));
  }
  const ir::DType t = im.dtype(a);
  if (im.opset() < 12 && (!ir::IsFloat(t) || im.dtype(e) != t)) {
    return Bad(absl::StrCat(
        "base ", ir::TypeToString(im.type(a)), " and exponent ", ir::TypeToString(im.type(e)),
        ": before opset 12 both are one float type (the model imports opset ", im.opset(), ")"));
  }
  // The exponent may have another type than the base; the result has the base's.
  ir::DType work = ir::IsFloat(t) ? t : ir::DType::kF64;
  TRY(std::vector<NodeId> ab, im.Broadcasted({im.Cast(a, work), im.Cast(e, work)}));
  NodeId y = im.Binary(Op::kPow, ab[0], ab[1]);
  if (work != t) y = im.Cast(im.Unary(Op::kRound, y), t);
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

Lowering Variadic(Op op, bool mean = false) {
  return [op, mean](Importer& im, const NodeProto& n) -> absl::Status {
    std::vector<NodeId> xs;
    for (int i = 0; i < Importer::NumInputs(n); ++i) {
      TRY(NodeId x, im.Input(n, i));
      xs.push_back(x);
    }
    if (xs.empty()) return Bad("needs at least one input");
    if (im.opset() < 12 && !ir::IsFloat(im.dtype(xs[0]))) {  // Max/Min take integers from 12
      return Bad(absl::StrCat("needs float inputs before opset 12 (the model imports opset ",
                              im.opset(), ")"));
    }
    if (im.opset() < 8) {  // version 6: all inputs of one shape, no broadcasting
      for (NodeId x : xs) {
        if (im.shape(x) != im.shape(xs[0])) {
          return Bad(absl::StrCat("inputs of shapes ", ir::ShapeToString(im.shape(xs[0])), " and ",
                                  ir::ShapeToString(im.shape(x)),
                                  " differ; broadcasting exists from opset 8, but the model "
                                  "imports opset ",
                                  im.opset()));
        }
      }
    }
    TRY(xs, im.Broadcasted(xs));
    NodeId y = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) y = im.Binary(op, y, xs[i]);
    if (mean && xs.size() > 1) {
      y = im.Binary(Op::kDiv, y, im.Like(static_cast<double>(xs.size()), y));
    }
    im.SetOutput(n, 0, y);
    return absl::OkStatus();
  };
}

absl::Status Clip(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  NodeId y = x;
  TRY_OK(InputsSince(im, n, 1, 11, "min"));
  TRY_OK(AttrUntil(im, n, "min", 11));
  TRY_OK(AttrUntil(im, n, "max", 11));
  if (im.opset() < 11) {
    // Version 6: float attributes; absent ones leave that side unbounded.
    if (!ir::IsFloat(im.dtype(x))) return Bad("before opset 11, Clip takes float inputs only");
    if (FindAttr(n, "min")) y = im.Binary(Op::kMax, y, im.Like(AttrFloat(n, "min", 0), x));
    if (FindAttr(n, "max")) y = im.Binary(Op::kMin, y, im.Like(AttrFloat(n, "max", 0), x));
    im.SetOutput(n, 0, y);
    return absl::OkStatus();
  }
  if (Importer::HasInput(n, 1)) {
    TRY(NodeId lo, im.Input(n, 1));
    TRY(lo, im.BroadcastTo(im.Cast(lo, im.dtype(x)), im.shape(x)));
    y = im.Binary(Op::kMax, y, lo);
  }
  if (Importer::HasInput(n, 2)) {
    TRY(NodeId hi, im.Input(n, 2));
    TRY(hi, im.BroadcastTo(im.Cast(hi, im.dtype(x)), im.shape(x)));
    y = im.Binary(Op::kMin, y, hi);
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

absl::Status PRelu(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId slope, im.Input(n, 1));
  TRY_OK(AttrUntil(im, n, "consumed_inputs", 6));
  if (im.opset() < 7) {
    // PRelu-1, -6: a slope of one value, one per channel (X's axis 1: the stored PyTorch
    // models' PReLU(num_parameters=C)), or one per element; numpy broadcasting from 7.
    // (Version 1's consumed_inputs is ignored.)
    const Shape xs = im.shape(x), ss = im.shape(slope);
    const int64_t count = im.type(slope).num_elements();
    if (im.dtype(slope) != im.dtype(x)) return Bad("X and slope types differ");
    if (count == 1) {
      slope = im.Broadcast(im.Reshape(slope, Shape(xs.size(), 1)), xs);
    } else if (ss.size() == 1 && xs.size() >= 2 && ss[0] == xs[1]) {
      slope = PerChannel(im, slope, xs);
    } else if (ss != xs) {
      return Bad(absl::StrCat("slope ", ir::ShapeToString(ss), " for X ", ir::ShapeToString(xs),
                              ": before opset 7 the slope has one value, one per channel (X's "
                              "dim 1) or X's shape (the model imports opset ",
                              im.opset(), ")"));
    }
  }
  TRY(slope, im.BroadcastTo(slope, im.shape(x)));
  NodeId neg = im.Binary(Op::kLt, x, im.Like(0, x));
  im.SetOutput(n, 0, im.Select(neg, im.Binary(Op::kMul, x, slope), x));
  return absl::OkStatus();
}

absl::Status Where(Importer& im, const NodeProto& n) {
  TRY(NodeId c, im.Input(n, 0));
  TRY(NodeId x, im.Input(n, 1));
  TRY(NodeId y, im.Input(n, 2));
  if (im.dtype(c) != ir::DType::kBool) return Bad("condition must be bool");
  TRY(std::vector<NodeId> v, im.Broadcasted({c, x, y}, /*same_dtype=*/false));
  if (im.dtype(v[1]) != im.dtype(v[2])) return Bad("X and Y types differ");
  im.SetOutput(n, 0, im.Select(v[0], v[1], v[2]));
  return absl::OkStatus();
}

absl::Status Identity(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  im.SetOutput(n, 0, x);
  return absl::OkStatus();
}

absl::Status Dropout(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  // Version 7/10: a `ratio` attribute (inference ignores it); 12: ratio and training_mode inputs.
  // (is_test went away in 7: inference is the only mode before 12.)
  TRY_OK(InputsSince(im, n, 1, 12, "ratio"));
  TRY_OK(AttrUntil(im, n, "ratio", 12));
  TRY_OK(AttrUntil(im, n, "is_test", 7));
  double ratio = 0.5;
  if (Importer::HasInput(n, 1)) {
    TRY(ir::TensorData r, im.ConstInput(n, 1));
    if (r.num_elements() != 1) return Bad("ratio must be a scalar");
    ratio = r.GetDouble(0);
  }
  if (Importer::HasInput(n, 2)) {
    TRY(ir::TensorData training, im.ConstInput(n, 2));
    if (training.num_elements() != 1) return Bad("training_mode must be a scalar");
    // Training drops each element with probability `ratio` (and scales the kept ones by
    // 1 / (1 - ratio)): only ratio 0, which keeps every element, has a deterministic outcome.
    if (training.GetDouble(0) != 0 && ratio != 0) {
      return Unsupported(absl::StrCat(
          "training_mode=true with ratio ", ratio,
          " drops elements at random, which kiln does not do (ratio 0 or inference only)"));
    }
  }
  im.SetOutput(n, 0, x);
  // The mask keeps every element in inference: bool from opset 10, the input's type before.
  const ir::DType mask = im.opset() >= 10 ? ir::DType::kBool : im.dtype(x);
  if (Importer::HasOutput(n, 1)) im.SetOutput(n, 1, im.Full(1, mask, im.shape(x)));
  return absl::OkStatus();
}

// ---- Narrow types (narrow_types.h): values held in f32, i8 or u8, rounded here ---------------

// x rounded to nearest, ties to even, onto a narrow float format's grid; NaN, overflow and the
// sign of zero as ONNX's Cast tables say. The binade is found by comparing |x| with each power of
// two the format has (a dozen to thirty selects in one fused kernel) rather than by log2, so the
// quantum, the division by it and the rounding are all exact.
NodeId RoundToNarrowFloat(Importer& im, NodeId x, const NarrowType& t, bool saturate) {
  using S = NarrowType::Specials;
  saturate = saturate || t.specials == S::kFiniteOnly;  // float4 has nothing to overflow to
  x = im.Cast(x, im.dtype(x) == ir::DType::kF64 ? ir::DType::kF64 : ir::DType::kF32);
  NodeId a = im.Unary(Op::kAbs, x);
  NodeId max = im.Like(t.max_finite, a);
  if (saturate) a = im.Select(im.Binary(Op::kGt, a, max), max, a);  // inf too; NaN stays
  NodeId quantum = im.Like(std::ldexp(1.0, t.min_exponent - t.mantissa_bits), a);
  // Up to the binade past the largest finite value: what rounds into it overflows.
  const int top = std::ilogb(t.max_finite) + 1;
  for (int k = t.min_exponent + 1; k <= top; ++k) {
    quantum = im.Select(im.Binary(Op::kGe, a, im.Like(std::ldexp(1.0, k), a)),
                        im.Like(std::ldexp(1.0, k - t.mantissa_bits), a), quantum);
  }
  NodeId r = im.Binary(Op::kMul, im.Unary(Op::kRound, im.Binary(Op::kDiv, a, quantum)), quantum);
  if (!saturate) {
    const double overflow = t.specials == S::kIeee ? std::numeric_limits<double>::infinity()
                                                   : std::numeric_limits<double>::quiet_NaN();
    r = im.Select(im.Binary(Op::kGt, r, max), im.Like(overflow, r), r);
  }
  NodeId zero = im.Like(0.0, x);
  NodeId y = im.Select(im.Binary(Op::kLt, x, zero), im.Unary(Op::kNeg, r), r);
  if (t.specials == S::kFnuz) {
    y = im.Select(im.Binary(Op::kEq, y, zero), zero, y);  // one zero: -0 and tiny negatives → +0
  } else {
    y = im.Select(im.Binary(Op::kEq, x, zero), x, y);  // -0 stays -0
  }
  if (t.specials == S::kFiniteOnly) {  // NaN → -0, as ONNX's reference (ml_dtypes) casts it
    y = im.Select(im.Binary(Op::kNe, x, x), im.Like(-0.0, y), y);
  }
  return im.Cast(y, ir::DType::kF32);
}

// x into a narrow integer type: floats truncate and saturate (kiln's casts; ONNX leaves
// out-of-range values undefined), integers keep their low bits (ONNX's rule for fixed point).
NodeId ToNarrowInt(Importer& im, NodeId x, const NarrowType& t) {
  const ir::DType d = im.dtype(x);
  NodeId v;
  if (ir::IsFloat(d)) {
    v = im.Cast(x, ir::DType::kI32);
    v = im.Binary(Op::kMin, im.Binary(Op::kMax, v, im.Like(static_cast<double>(t.min_int), v)),
                  im.Like(static_cast<double>(t.max_int), v));
  } else if (d == ir::DType::kBool) {
    v = x;
  } else {
    // Floored modulo in x's own dtype is in [0, 2^bits) for every sign; then two's complement.
    const double span = std::ldexp(1.0, t.bits);
    v = im.Cast(im.Binary(Op::kMod, x, im.Like(span, x)), ir::DType::kI32);
    if (t.min_int < 0) {
      v = im.Select(im.Binary(Op::kGt, v, im.Like(static_cast<double>(t.max_int), v)),
                    im.Binary(Op::kSub, v, im.Like(span, v)), v);
    }
  }
  return im.Cast(v, t.held);
}

// Cast (and CastLike) to `narrow` when set, else to `to`.
absl::Status CastTo(Importer& im, const NodeProto& n, NodeId x, const NarrowType* narrow,
                    ir::DType to) {
  if (narrow == nullptr) {
    im.SetOutput(n, 0, im.Cast(x, to));
    im.SetOutputNarrowType(n, 0, nullptr);
    return absl::OkStatus();
  }
  NodeId y;
  if (narrow->specials == NarrowType::Specials::kExponentOnly) {
    return Unsupported(absl::StrCat("casting to ", narrow->name,
                                    " is not supported (kiln reads it and casts from it)"));
  }
  if (narrow->is_float) {
    y = RoundToNarrowFloat(im, x, *narrow, AttrInt(n, "saturate", 1) != 0);
  } else {
    y = ToNarrowInt(im, x, *narrow);
  }
  im.SetOutput(n, 0, y);
  im.SetOutputNarrowType(n, 0, narrow);
  return absl::OkStatus();
}

absl::Status Cast(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  // saturate (19) affects float8 targets only.
  TRY_OK(AttrSince(im, n, "saturate", 19));
  const auto to = static_cast<int32_t>(AttrInt(n, "to", 0));
  TRY(ir::DType d, HeldDTypeFromOnnx(to, "attribute 'to'"));
  return CastTo(im, n, x, FindNarrowType(to), d);
}

absl::Status CastLike(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY_OK(AttrSince(im, n, "saturate", 19));
  TRY(NodeId like, im.Input(n, 1));
  return CastTo(im, n, x, im.InputNarrowType(n, 1), im.dtype(like));
}

absl::Status IsInf(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (!ir::IsFloat(im.dtype(x))) return Bad("needs a float input");
  const double inf = std::numeric_limits<double>::infinity();
  NodeId pos = im.Binary(Op::kEq, x, im.Like(inf, x));
  NodeId neg = im.Binary(Op::kEq, x, im.Like(-inf, x));
  const bool p = AttrInt(n, "detect_positive", 1) != 0, q = AttrInt(n, "detect_negative", 1) != 0;
  NodeId y = p && q ? im.Binary(Op::kOr, pos, neg)
             : p    ? pos
             : q    ? neg
                    : im.Full(0, ir::DType::kBool, im.shape(x));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// ---- Constants and shapes --------------------------------------------------------------------

absl::Status Constant(Importer& im, const NodeProto& n) {
  if (n.attribute_size() != 1) return Bad("needs exactly one attribute");
  const auto& a = n.attribute(0);
  // value (1), sparse_value (11), value_float(s)/value_int(s)/value_string(s) (12).
  if (a.name() != "value" && a.name() != "sparse_value") {
    TRY_OK(AttrSince(im, n, a.name().c_str(), 12));
  }
  TRY_OK(AttrSince(im, n, "sparse_value", 11));
  ir::TensorData t;
  if (a.name() == "value") {
    TRY(t, TensorFromProto(a.t(), "attribute 'value'"));
  } else if (a.name() == "value_float") {
    t = ir::TensorData::FromVector(ir::DType::kF32, {}, std::vector<float>{a.f()});
  } else if (a.name() == "value_floats") {
    std::vector<float> v(a.floats().begin(), a.floats().end());
    t = ir::TensorData::FromVector(ir::DType::kF32, {static_cast<int64_t>(v.size())}, v);
  } else if (a.name() == "value_int") {
    t = ir::TensorData(ir::DType::kI64, {});
    t.SetInt64(0, a.i());
  } else if (a.name() == "value_ints") {
    t = ir::TensorData(ir::DType::kI64, {a.ints_size()});
    for (int i = 0; i < a.ints_size(); ++i) t.SetInt64(i, a.ints(i));
  } else {
    return Unsupported(absl::StrCat("attribute '", a.name(), "' is not supported"));
  }
  im.SetOutput(n, 0, im.Const(std::move(t)));
  if (a.name() == "value") im.SetOutputNarrowType(n, 0, FindNarrowType(a.t().data_type()));
  return absl::OkStatus();
}

ir::TensorData Int64Vector(const std::vector<int64_t>& v) {
  ir::TensorData t(ir::DType::kI64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.SetInt64(static_cast<int64_t>(i), v[i]);
  return t;
}

absl::Status ShapeOp(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY_OK(AttrSince(im, n, "start", 15));
  TRY_OK(AttrSince(im, n, "end", 15));
  const Shape s = im.shape(x);
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t start = AttrInt(n, "start", 0), end = AttrInt(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  im.SetOutput(n, 0, im.Const(Int64Vector(Shape(s.begin() + start, s.begin() + end))));
  return absl::OkStatus();
}

absl::Status Size(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  ir::TensorData t(ir::DType::kI64, {});
  t.SetInt64(0, im.type(x).num_elements());
  im.SetOutput(n, 0, im.Const(std::move(t)));
  return absl::OkStatus();
}

absl::StatusOr<Shape> ShapeFromInts(const std::vector<int64_t>& v) {
  int64_t count = 1;
  for (int64_t d : v) {
    if (d < 0 || d > (int64_t{1} << 31) || (d != 0 && count > (int64_t{1} << 31) / d)) {
      return Bad(absl::StrCat("bad shape [", absl::StrJoin(v, ","), "]"));
    }
    count *= d;
  }
  return Shape(v);
}

absl::Status ConstantOfShape(Importer& im, const NodeProto& n) {
  TRY(std::vector<int64_t> dims, im.ConstInts(n, 0));
  TRY(Shape s, ShapeFromInts(dims));
  ir::DType d = ir::DType::kF32;
  double v = 0;
  if (const auto* a = FindAttr(n, "value")) {
    TRY(ir::TensorData t, TensorFromProto(a->t(), "attribute 'value'"));
    if (t.num_elements() != 1) return Bad("attribute 'value' must have one element");
    d = t.dtype();
    v = t.GetDouble(0);
    im.SetOutputNarrowType(n, 0, FindNarrowType(a->t().data_type()));
  }
  im.SetOutput(n, 0, im.Full(v, d, s));
  return absl::OkStatus();
}

absl::Status Range(Importer& im, const NodeProto& n) {
  TRY(ir::TensorData start, im.ConstInput(n, 0));
  TRY(ir::TensorData limit, im.ConstInput(n, 1));
  TRY(ir::TensorData delta, im.ConstInput(n, 2));
  if (start.num_elements() != 1 || limit.num_elements() != 1 || delta.num_elements() != 1) {
    return Bad("start, limit and delta must be scalars");
  }
  const ir::DType d = start.dtype();
  const bool integer = ir::IsInteger(d);
  double s = start.GetDouble(0), l = limit.GetDouble(0), dl = delta.GetDouble(0);
  if (dl == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(dl)) {
    return Bad("delta must be non-zero and all of start, limit, delta finite");
  }
  double count = std::max(std::ceil((l - s) / dl), 0.0);
  if (count > (1 << 24)) return Bad(absl::StrCat("Range of ", count, " elements is too large"));
  ir::TensorData t(d, {static_cast<int64_t>(count)});
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
    if (integer) {
      t.SetInt64(i, start.GetInt64(0) + i * delta.GetInt64(0));
    } else {
      t.SetDouble(i, s + static_cast<double>(i) * dl);
    }
  }
  im.SetOutput(n, 0, im.Const(std::move(t)));
  return absl::OkStatus();
}

absl::Status EyeLike(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (im.rank(x) != 2) return Bad("needs a 2-D input");
  ir::DType d = im.dtype(x);
  if (const auto* a = FindAttr(n, "dtype")) {
    TRY(d, DTypeFromOnnx(static_cast<int32_t>(a->i()), "attribute 'dtype'"));
  }
  const int64_t k = AttrInt(n, "k", 0);
  const Shape s = im.shape(x);
  if (im.type(x).num_elements() > (1 << 24)) return Unsupported("EyeLike above 2^24 elements");
  ir::TensorData t(d, s);
  for (int64_t i = 0; i < s[0]; ++i) {
    if (i + k >= 0 && i + k < s[1]) t.SetDouble(i * s[1] + i + k, 1);
  }
  im.SetOutput(n, 0, im.Const(std::move(t)));
  return absl::OkStatus();
}

// ---- Movement ----------------------------------------------------------------------------------

absl::Status Reshape(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(std::vector<int64_t> dims, im.ConstInts(n, 1));
  TRY_OK(AttrSince(im, n, "allowzero", 14));
  const bool allowzero = AttrInt(n, "allowzero", 0) != 0;
  const Shape in = im.shape(x);
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allowzero) {
      if (i >= in.size())
        return Bad(absl::StrCat("shape entry ", i, " is 0 but the input has rank ", in.size()));
      dims[i] = in[i];
    }
    if (dims[i] == -1) {
      if (infer >= 0) return Bad("more than one -1 in the shape");
      infer = static_cast<int>(i);
      continue;
    }
    if (dims[i] < 0 || dims[i] > (int64_t{1} << 31)) {
      return Bad(absl::StrCat("bad shape entry ", dims[i]));
    }
    known *= dims[i];
    if (known > (int64_t{1} << 31)) return Bad("shape too large");
  }
  const int64_t count = im.type(x).num_elements();
  if (infer >= 0) {
    if (known == 0 || count % known != 0) {
      return Bad(absl::StrCat("cannot reshape ", ir::TypeToString(im.type(x)), " to [",
                              absl::StrJoin(dims, ","), "]"));
    }
    dims[static_cast<size_t>(infer)] = count / known;
  }
  TRY(Shape s, ShapeFromInts(dims));
  if (ir::NumElements(s) != count) {
    return Bad(absl::StrCat("cannot reshape ", ir::TypeToString(im.type(x)), " to ",
                            ir::ShapeToString(s)));
  }
  im.SetOutput(n, 0, im.Reshape(x, s));
  return absl::OkStatus();
}

// Negative axes before opset 11, where the definitions mostly say nothing of them: kiln takes
// them where onnx's checker (full_check) and strict shape inference do (Split, Concat, Slice-1's
// axes, Gather's axis and indices, the reductions; onnxruntime runs them too) and refuses them
// for Squeeze-1, Unsqueeze-1 (whose shape inference ignores a negative axis: the rank comes out
// wrong) and Flatten-1/-9 (whose shape inference rejects one).
absl::Status NoNegativeAxisBefore11(const Importer& im, const std::vector<int64_t>& axes) {
  for (int64_t a : axes) {
    if (a < 0 && im.opset() < 11) {
      return Bad(absl::StrCat("negative axis ", a,
                              " exists from opset 11 (onnx's shape inference does not take it "
                              "before), but the model imports opset ",
                              im.opset()));
    }
  }
  return absl::OkStatus();
}

absl::Status Flatten(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  const int64_t r = im.rank(x);
  int64_t axis = AttrInt(n, "axis", 1);
  if (axis < -r || axis > r) return Bad(absl::StrCat("axis ", axis, " out of range"));
  TRY_OK(NoNegativeAxisBefore11(im, {axis}));
  if (axis < 0) axis += r;
  const Shape s = im.shape(x);
  im.SetOutput(n, 0,
               im.Reshape(x, {Product(s, 0, static_cast<size_t>(axis)),
                              Product(s, static_cast<size_t>(axis), s.size())}));
  return absl::OkStatus();
}

absl::Status Transpose(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  const int64_t r = im.rank(x);
  std::vector<int64_t> perm;
  if (auto p = AttrInts(n, "perm")) {
    perm = *p;
  } else {
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<bool> seen(static_cast<size_t>(r), false);
  if (static_cast<int64_t>(perm.size()) != r) return Bad("perm has the wrong length");
  for (int64_t& p : perm) {
    TRY(p, NormAxis(p, r, "perm entry"));
    if (seen[static_cast<size_t>(p)]) return Bad("perm is not a permutation");
    seen[static_cast<size_t>(p)] = true;
  }
  im.SetOutput(n, 0, im.Permute(x, perm));
  return absl::OkStatus();
}

// Axes from input `i` from opset `since` on, from attribute "axes" before (Squeeze/Unsqueeze and
// ReduceSum: 13, the other reductions: 18).
absl::StatusOr<std::optional<std::vector<int64_t>>> AxesOf(Importer& im, const NodeProto& n, int i,
                                                           int64_t since) {
  TRY_OK(InputsSince(im, n, i, since, "axes"));
  TRY_OK(AttrUntil(im, n, "axes", since));
  std::optional<std::vector<int64_t>> axes;
  if (Importer::HasInput(n, i)) {
    TRY(std::vector<int64_t> v, im.ConstInts(n, i));
    axes = v;
  } else {
    axes = AttrInts(n, "axes");
  }
  return axes;
}

absl::StatusOr<std::vector<int64_t>> NormAxes(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& a : axes) {
    TRY(a, NormAxis(a, rank));
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return Bad("repeated axis");
  return axes;
}

absl::Status Squeeze(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(auto axes_opt, AxesOf(im, n, 1, 13));
  if (axes_opt) TRY_OK(NoNegativeAxisBefore11(im, *axes_opt));
  const Shape s = im.shape(x);
  std::vector<int64_t> axes;
  if (axes_opt) {
    TRY(axes, NormAxes(*axes_opt, im.rank(x)));
  } else {
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 1) axes.push_back(static_cast<int64_t>(i));
    }
  }
  Shape out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end()) {
      if (s[i] != 1) return Bad(absl::StrCat("cannot squeeze axis ", i, " of size ", s[i]));
    } else {
      out.push_back(s[i]);
    }
  }
  im.SetOutput(n, 0, im.Reshape(x, out));
  return absl::OkStatus();
}

absl::Status Unsqueeze(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(auto axes_opt, AxesOf(im, n, 1, 13));
  if (!axes_opt) return Bad("axes are missing");
  TRY_OK(NoNegativeAxisBefore11(im, *axes_opt));
  const Shape s = im.shape(x);
  const int64_t out_rank = im.rank(x) + static_cast<int64_t>(axes_opt->size());
  TRY(std::vector<int64_t> axes, NormAxes(*axes_opt, out_rank));
  Shape out;
  size_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      out.push_back(1);
    } else {
      out.push_back(s[k++]);
    }
  }
  im.SetOutput(n, 0, im.Reshape(x, out));
  return absl::OkStatus();
}

absl::Status Concat(Importer& im, const NodeProto& n) {
  std::vector<NodeId> xs;
  for (int i = 0; i < Importer::NumInputs(n); ++i) {
    if (!Importer::HasInput(n, i)) continue;
    TRY(NodeId x, im.Input(n, i));
    xs.push_back(x);
  }
  if (xs.empty()) return Bad("needs inputs");
  if (!FindAttr(n, "axis")) return Bad("attribute 'axis' is missing (required from opset 4)");
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 0), im.rank(xs[0])));
  // Empty operands are dropped (the IR accepts them, but they only cost a copy).
  std::vector<NodeId> kept;
  for (NodeId x : xs) {
    if (im.type(x).num_elements() > 0) kept.push_back(x);
  }
  if (kept.empty()) kept.push_back(xs[0]);
  if (kept.size() == 1 && xs.size() > 1) {
    // Still check that all agree, through the IR's rule.
    im.SetOutput(n, 0, im.Concat(xs, axis));
  } else {
    im.SetOutput(n, 0, im.Concat(kept, axis));
  }
  return absl::OkStatus();
}

absl::Status Split(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 0), im.rank(x)));
  const int64_t dim = im.shape(x)[static_cast<size_t>(axis)];
  const int64_t outs = n.output_size();
  // `split` is an attribute before 13, an input from 13; 18 adds num_outputs, where an uneven
  // axis gives a smaller last chunk (before 18, equal parts must divide the axis).
  TRY_OK(InputsSince(im, n, 1, 13, "split"));
  TRY_OK(AttrUntil(im, n, "split", 13));
  TRY_OK(AttrSince(im, n, "num_outputs", 18));
  std::vector<int64_t> sizes;
  if (Importer::HasInput(n, 1)) {
    if (FindAttr(n, "num_outputs")) return Bad("has both a split input and num_outputs");
    TRY(sizes, im.ConstInts(n, 1));
  } else if (auto s = AttrInts(n, "split")) {
    sizes = *s;
  } else if (const auto* no = FindAttr(n, "num_outputs")) {
    if (no->i() != outs) {
      return Bad(absl::StrCat("num_outputs is ", no->i(), ", but the node has ", outs, " outputs"));
    }
    if (outs <= 0) return Bad("num_outputs must be positive");
    const int64_t chunk = (dim + outs - 1) / outs;
    for (int64_t i = 0; i < outs; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  } else {
    if (outs <= 0) return Bad("no outputs");
    if (im.opset() >= 18) return Bad("needs a split input or num_outputs (opset 18)");
    if (dim % outs != 0) {
      return Bad(absl::StrCat("an axis of ", dim, " does not split into ", outs, " equal parts"));
    }
    sizes.assign(static_cast<size_t>(outs), dim / outs);
  }
  if (static_cast<int64_t>(sizes.size()) != outs) {
    return Bad(absl::StrCat("split has ", sizes.size(), " sizes for ", outs, " outputs"));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0 || s > (int64_t{1} << 31)) return Bad("bad split size");
    total += s;
  }
  if (total != dim) return Bad(absl::StrCat("split sizes sum to ", total, ", the axis has ", dim));
  int64_t at = 0;
  for (int64_t i = 0; i < outs; ++i) {
    std::vector<int64_t> starts(static_cast<size_t>(im.rank(x)), 0);
    std::vector<int64_t> limits = im.shape(x);
    starts[static_cast<size_t>(axis)] = at;
    limits[static_cast<size_t>(axis)] = at + sizes[static_cast<size_t>(i)];
    im.SetOutput(n, static_cast<int>(i), im.Slice(x, starts, limits));
    at += sizes[static_cast<size_t>(i)];
  }
  return absl::OkStatus();
}

absl::Status SliceOp(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  // Before 10: attributes starts, ends and axes (no steps); from 10: inputs.
  TRY_OK(InputsSince(im, n, 1, 10, "starts"));
  for (const char* a : {"starts", "ends", "axes"}) TRY_OK(AttrUntil(im, n, a, 10));
  std::vector<int64_t> starts, ends;
  const int64_t r = im.rank(x);
  std::vector<int64_t> axes, steps;
  if (im.opset() < 10) {
    auto s = AttrInts(n, "starts"), e = AttrInts(n, "ends");
    if (!s || !e) return Bad("attributes 'starts' and 'ends' are required before opset 10");
    starts = *s;
    ends = *e;
    if (auto a = AttrInts(n, "axes")) {
      axes = *a;
    } else {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    steps.assign(starts.size(), 1);
  } else {
    TRY(starts, im.ConstInts(n, 1));
    TRY(ends, im.ConstInts(n, 2));
    if (Importer::HasInput(n, 3)) {
      TRY(axes, im.ConstInts(n, 3));
    } else {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (Importer::HasInput(n, 4)) {
      TRY(steps, im.ConstInts(n, 4));
    } else {
      steps.assign(starts.size(), 1);
    }
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return Bad("starts, ends, axes and steps differ in length");
  }
  const Shape s = im.shape(x);
  std::vector<int64_t> lo(static_cast<size_t>(r), 0), hi = s, st(static_cast<size_t>(r), 1);
  std::vector<int64_t> flip;
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    TRY(int64_t a, NormAxis(axes[i], r));
    if (seen[static_cast<size_t>(a)]) return Bad("repeated axis");
    seen[static_cast<size_t>(a)] = true;
    const int64_t d = s[static_cast<size_t>(a)];
    const int64_t step = steps[i];
    if (step == 0) return Bad("step 0");
    // Clamp like ONNX (starts/ends may be huge, e.g. INT64_MAX, or negative).
    int64_t b = starts[i], e = ends[i];
    if (step > 0) {
      b = std::clamp<int64_t>(b < 0 ? std::max<int64_t>(b, -d) + d : b, 0, d);
      e = std::clamp<int64_t>(e < 0 ? std::max<int64_t>(e, -d) + d : e, 0, d);
      lo[static_cast<size_t>(a)] = b;
      hi[static_cast<size_t>(a)] = std::max(b, e);
      st[static_cast<size_t>(a)] = step;
    } else {
      // Negative step: starts clamp to [0, d-1], ends to [-1, d-1]; read the flipped axis.
      b = b < 0 ? b + d : b;
      e = e < 0 ? e + d : e;
      b = std::clamp<int64_t>(b, -1, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      if (ends[i] < -d) e = -1;
      const int64_t fb = d - 1 - b, fe = d - 1 - e;  // on the flipped axis: [fb, fe)
      lo[static_cast<size_t>(a)] = std::clamp<int64_t>(fb, 0, d);
      hi[static_cast<size_t>(a)] =
          std::max(lo[static_cast<size_t>(a)], std::clamp<int64_t>(fe, 0, d));
      st[static_cast<size_t>(a)] = step == std::numeric_limits<int64_t>::min() ? d + 1 : -step;
      if (d > 0) flip.push_back(a);
    }
    // A stride beyond the axis reads one element at most.
    if (st[static_cast<size_t>(a)] > d) st[static_cast<size_t>(a)] = std::max<int64_t>(d, 1);
  }
  std::sort(flip.begin(), flip.end());
  NodeId y = flip.empty() ? x : im.Fold(im.b().Flip(x, flip));
  im.SetOutput(n, 0, im.Slice(y, lo, hi, st));
  return absl::OkStatus();
}

absl::Status Expand(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(std::vector<int64_t> dims, im.ConstInts(n, 1));
  TRY(Shape target, ShapeFromInts(dims));
  TRY(Shape out, Importer::BroadcastShape(im.shape(x), target));
  TRY(NodeId y, im.BroadcastTo(x, out));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

absl::Status Tile(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(std::vector<int64_t> reps, im.ConstInts(n, 1));
  const Shape s = im.shape(x);
  if (reps.size() != s.size()) return Bad("repeats must have one entry per axis");
  Shape inter, target, out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (reps[i] < 0 || reps[i] > (int64_t{1} << 31)) return Bad("bad repeat");
    inter.push_back(1);
    inter.push_back(s[i]);
    target.push_back(reps[i]);
    target.push_back(s[i]);
    out.push_back(reps[i] * s[i]);
  }
  TRY(out, ShapeFromInts(out));
  im.SetOutput(n, 0, im.Reshape(im.Broadcast(im.Reshape(x, inter), target), out));
  return absl::OkStatus();
}

absl::Status Pad(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  const int64_t r = im.rank(x);
  // Version 2: attributes pads and value; 11: inputs pads and constant_value; 18: the axes input
  // (pads then has two entries per listed axis); 19: mode "wrap".
  TRY_OK(InputsSince(im, n, 1, 11, "pads"));
  TRY_OK(InputsSince(im, n, 3, 18, "axes"));
  TRY_OK(AttrUntil(im, n, "pads", 11));
  TRY_OK(AttrUntil(im, n, "value", 11));
  std::vector<int64_t> pads;
  double value = 0;
  if (im.opset() < 11) {
    auto p = AttrInts(n, "pads");
    if (!p) return Bad("attribute 'pads' is required before opset 11");
    pads = *p;
    value = AttrFloat(n, "value", 0.0f);
  } else {
    TRY(pads, im.ConstInts(n, 1));
    if (Importer::HasInput(n, 2)) {
      TRY(ir::TensorData v, im.ConstInput(n, 2));
      if (v.num_elements() != 1) return Bad("constant_value must be a scalar");
      value = v.GetDouble(0);
    }
  }
  if (Importer::HasInput(n, 3)) {
    TRY(std::vector<int64_t> axes, im.ConstInts(n, 3));
    if (pads.size() != 2 * axes.size()) {
      return Bad(absl::StrCat("pads has ", pads.size(), " entries for ", axes.size(), " axes"));
    }
    std::vector<int64_t> full(static_cast<size_t>(2 * r), 0);
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (size_t i = 0; i < axes.size(); ++i) {
      TRY(int64_t a, NormAxis(axes[i], r));
      if (seen[static_cast<size_t>(a)]) return Bad("repeated axis");
      seen[static_cast<size_t>(a)] = true;
      full[static_cast<size_t>(a)] = pads[i];
      full[static_cast<size_t>(a + r)] = pads[i + axes.size()];
    }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * r) return Bad("pads must have 2 * rank entries");
  const std::string mode = AttrString(n, "mode", "constant");
  if (mode == "wrap" && im.opset() < 19) {
    return Bad(
        absl::StrCat("mode 'wrap' exists from opset 19, but the model imports opset ", im.opset()));
  }
  const Shape s = im.shape(x);
  // Negative pads crop first.
  std::vector<int64_t> starts(static_cast<size_t>(r), 0), limits = s, lo(static_cast<size_t>(r)),
                                                          hi(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    int64_t b = pads[static_cast<size_t>(i)], e = pads[static_cast<size_t>(i + r)];
    const int64_t d = s[static_cast<size_t>(i)];
    if (b < -d || e < -d || b > (1 << 24) || e > (1 << 24) || b + e < -d) {
      return Bad(
          absl::StrCat("pads [", absl::StrJoin(pads, ","), "] do not fit ", ir::ShapeToString(s)));
    }
    starts[static_cast<size_t>(i)] = std::max<int64_t>(-b, 0);
    limits[static_cast<size_t>(i)] = d - std::max<int64_t>(-e, 0);
    lo[static_cast<size_t>(i)] = std::max<int64_t>(b, 0);
    hi[static_cast<size_t>(i)] = std::max<int64_t>(e, 0);
  }
  NodeId y = im.Slice(x, starts, limits);
  if (mode == "constant") {
    bool any = false;
    for (int64_t i = 0; i < r; ++i)
      any = any || lo[static_cast<size_t>(i)] || hi[static_cast<size_t>(i)];
    if (any) y = im.Fold(im.b().Pad(y, lo, hi, value));
  } else if (mode == "edge" || mode == "reflect") {
    for (int64_t a = 0; a < r; ++a) {
      const int64_t l = lo[static_cast<size_t>(a)], h = hi[static_cast<size_t>(a)];
      if (l == 0 && h == 0) continue;
      const Shape cur = im.shape(y);
      const int64_t d = cur[static_cast<size_t>(a)];
      if (d == 0 || (mode == "reflect" && (l >= d || h >= d))) {
        return Bad(
            absl::StrCat("mode ", mode, " pads axis ", a, " of size ", d, " by ", l, "/", h));
      }
      auto part = [&](int64_t b, int64_t e) {
        std::vector<int64_t> st(cur.size(), 0), li = cur;
        st[static_cast<size_t>(a)] = b;
        li[static_cast<size_t>(a)] = e;
        return im.Slice(y, st, li);
      };
      std::vector<NodeId> pieces;
      if (l > 0) {
        if (mode == "edge") {
          Shape t = cur;
          t[static_cast<size_t>(a)] = l;
          pieces.push_back(im.Broadcast(part(0, 1), t));
        } else {
          pieces.push_back(im.Fold(im.b().Flip(part(1, l + 1), {a})));
        }
      }
      pieces.push_back(y);
      if (h > 0) {
        if (mode == "edge") {
          Shape t = cur;
          t[static_cast<size_t>(a)] = h;
          pieces.push_back(im.Broadcast(part(d - 1, d), t));
        } else {
          pieces.push_back(im.Fold(im.b().Flip(part(d - 1 - h, d - 1), {a})));
        }
      }
      y = im.Concat(pieces, a);
    }
  } else if (mode == "wrap") {
    // Position i of the padded axis (-lo <= i < d + hi) takes element i mod d: the runs of
    // consecutive elements, concatenated.
    for (int64_t a = 0; a < r; ++a) {
      const int64_t l = lo[static_cast<size_t>(a)], h = hi[static_cast<size_t>(a)];
      if (l == 0 && h == 0) continue;
      const Shape cur = im.shape(y);
      const int64_t d = cur[static_cast<size_t>(a)];
      if (d == 0) return Bad(absl::StrCat("mode wrap pads axis ", a, " of size 0"));
      if ((l + h) / d > 64) return Unsupported("mode wrap repeating an axis more than 64 times");
      std::vector<NodeId> pieces;
      for (int64_t i = -l; i < d + h;) {
        const int64_t b = ((i % d) + d) % d, e = std::min(d, b + (d + h - i));
        std::vector<int64_t> st(cur.size(), 0), li = cur;
        st[static_cast<size_t>(a)] = b;
        li[static_cast<size_t>(a)] = e;
        pieces.push_back(im.Slice(y, st, li));
        i += e - b;
      }
      y = im.Concat(pieces, a);
    }
  } else {
    return Bad(absl::StrCat("bad mode '", mode, "'"));
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// x[..., idx[k], ...] along `axis` for constant indices (already in range).
NodeId GatherConst(Importer& im, NodeId x, int64_t axis, const std::vector<int64_t>& idx) {
  const Shape s = im.shape(x);
  const size_t a = static_cast<size_t>(axis);
  const int64_t k = static_cast<int64_t>(idx.size());
  // A contiguous range is a slice.
  bool contiguous = k > 0;
  for (int64_t i = 1; i < k && contiguous; ++i)
    contiguous = idx[static_cast<size_t>(i)] == idx[0] + i;
  if (contiguous) {
    std::vector<int64_t> st(s.size(), 0), li = s;
    st[a] = idx[0];
    li[a] = idx[0] + k;
    return im.Slice(x, st, li);
  }
  const int64_t p = Product(s, 0, a), q = Product(s, a + 1, s.size());
  NodeId flat = im.Reshape(x, {p, s[a], q});
  ir::TensorData t(ir::DType::kI64, {1, k, 1});
  for (int64_t i = 0; i < k; ++i) t.SetInt64(i, idx[static_cast<size_t>(i)]);
  NodeId index = im.Broadcast(im.Const(std::move(t)), {p, k, q});
  NodeId g = im.Fold(im.b().Gather(flat, index, 1));
  Shape out = s;
  out[a] = k;
  return im.Reshape(g, out);
}

absl::Status Gather(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId ind, im.Input(n, 1));
  if (!ir::IsInteger(im.dtype(ind))) return Bad("indices must be integers");
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 0), im.rank(x)));
  const Shape s = im.shape(x);
  const size_t a = static_cast<size_t>(axis);
  const int64_t d = s[a];
  const Shape is = im.shape(ind);
  Shape out(s.begin(), s.begin() + axis);
  out.insert(out.end(), is.begin(), is.end());
  out.insert(out.end(), s.begin() + axis + 1, s.end());
  if (std::optional<ir::TensorData> known = im.KnownValue(ind)) {
    std::vector<int64_t> idx = known->ToInt64s();
    for (int64_t& i : idx) {
      if (i < -d || i >= d)
        return Bad(absl::StrCat("index ", i, " is out of range for axis size ", d));
      if (i < 0) i += d;
    }
    im.SetOutput(n, 0, im.Reshape(GatherConst(im, x, axis, idx), out));
    return absl::OkStatus();
  }
  const int64_t p = Product(s, 0, a), q = Product(s, a + 1, s.size());
  const int64_t k = im.type(ind).num_elements();
  NodeId fixed = im.Select(im.Binary(Op::kLt, ind, im.Like(0, ind)),
                           im.Binary(Op::kAdd, ind, im.Like(static_cast<double>(d), ind)), ind);
  NodeId index = im.Broadcast(im.Reshape(fixed, {1, k, 1}), {p, k, q});
  NodeId g = im.Fold(im.b().Gather(im.Reshape(x, {p, d, q}), index, 1));
  im.SetOutput(n, 0, im.Reshape(g, out));
  return absl::OkStatus();
}

// GatherND as one gather: data viewed as [B, M, R] (B the batch_dims' product, M the indexed
// dims', R the rest), the last index axis turned into a flat row index over the M rows.
absl::Status GatherND(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId ind, im.Input(n, 1));
  if (im.dtype(ind) != ir::DType::kI64) return Bad("indices must be int64");
  TRY_OK(AttrSince(im, n, "batch_dims", 12));
  const int64_t b = AttrInt(n, "batch_dims", 0);
  const Shape ds = im.shape(x), is = im.shape(ind);
  const auto r = static_cast<int64_t>(ds.size()), q = static_cast<int64_t>(is.size());
  if (q < 1 || r < 1) return Bad("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(q, r)) {
    return Bad(absl::StrCat("batch_dims ", b, " must be below the ranks of data (", r,
                            ") and indices (", q, ")"));
  }
  const int64_t k = is.back();
  if (k < 1 || k > r - b) {
    return Bad(absl::StrCat("the last indices dimension (", k, ") must be 1 to ", r - b,
                            " for data ", ir::ShapeToString(ds), " and batch_dims ", b));
  }
  for (int64_t i = 0; i < b; ++i) {
    if (ds[static_cast<size_t>(i)] != is[static_cast<size_t>(i)]) {
      return Bad(absl::StrCat("batch dimension ", i, " differs: data ", ir::ShapeToString(ds),
                              ", indices ", ir::ShapeToString(is)));
    }
  }
  const auto ub = static_cast<size_t>(b), uk = static_cast<size_t>(k);
  const int64_t batch = Product(ds, 0, ub), rows = Product(ds, ub, ub + uk),
                rest = Product(ds, ub + uk, ds.size()), count = Product(is, ub, is.size() - 1);
  NodeId idx = im.Reshape(ind, {batch, count, k});
  NodeId flat = im.Full(0, ir::DType::kI64, {batch, count, 1});
  int64_t stride = rows;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t dim = ds[ub + static_cast<size_t>(j)];
    stride /= dim;
    NodeId part = im.Slice(idx, {0, 0, j}, {batch, count, j + 1});
    part = im.Select(im.Binary(Op::kLt, part, im.Like(0, part)),
                     im.Binary(Op::kAdd, part, im.Like(static_cast<double>(dim), part)), part);
    flat = im.Binary(Op::kAdd, flat,
                     im.Binary(Op::kMul, part, im.Like(static_cast<double>(stride), part)));
  }
  Shape out(is.begin(), is.end() - 1);
  out.insert(out.end(), ds.begin() + b + k, ds.end());
  NodeId g = im.Fold(im.b().Gather(im.Reshape(x, {batch, rows, rest}),
                                   im.Broadcast(flat, {batch, count, rest}), 1));
  im.SetOutput(n, 0, im.Reshape(g, out));
  return absl::OkStatus();
}

absl::Status GatherElements(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId ind, im.Input(n, 1));
  if (!ir::IsInteger(im.dtype(ind))) return Bad("indices must be integers");
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 0), im.rank(x)));
  const double d = static_cast<double>(im.shape(x)[static_cast<size_t>(axis)]);
  NodeId fixed = im.Select(im.Binary(Op::kLt, ind, im.Like(0, ind)),
                           im.Binary(Op::kAdd, ind, im.Like(d, ind)), ind);
  im.SetOutput(n, 0, im.Fold(im.b().Gather(x, fixed, axis)));
  return absl::OkStatus();
}

absl::Status Trilu(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (im.rank(x) < 2) return Bad("needs rank >= 2");
  int64_t k = 0;
  if (Importer::HasInput(n, 1)) {
    TRY(ir::TensorData kt, im.ConstInput(n, 1));
    if (kt.num_elements() != 1) return Bad("k must be a scalar");
    k = kt.GetInt64(0);
  }
  const bool upper = AttrInt(n, "upper", 1) != 0;
  const Shape s = im.shape(x);
  const int64_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  if (rows * cols > (1 << 24)) return Unsupported("Trilu on matrices above 2^24 elements");
  ir::TensorData mask(ir::DType::kBool, {rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      mask.SetDouble(i * cols + j, upper ? j - i >= k : j - i <= k);
  }
  TRY(NodeId m, im.BroadcastTo(im.Const(std::move(mask)), s));
  im.SetOutput(n, 0, im.Select(m, x, im.Like(0, x)));
  return absl::OkStatus();
}

absl::Status CumSum(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(ir::TensorData at, im.ConstInput(n, 1));
  if (at.num_elements() != 1) return Bad("axis must be a scalar");
  TRY(int64_t axis, NormAxis(at.GetInt64(0), im.rank(x)));
  const bool exclusive = AttrInt(n, "exclusive", 0) != 0, reverse = AttrInt(n, "reverse", 0) != 0;
  const int64_t r = im.rank(x), d = im.shape(x)[static_cast<size_t>(axis)];
  if (d > 4096) return Unsupported("CumSum along an axis longer than 4096");
  // Move the axis last, multiply by a 0/1 matrix M[j][i] = (element j counts towards output i).
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) {
    if (i != axis) perm.push_back(i);
  }
  perm.push_back(axis);
  std::vector<int64_t> inverse(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) inverse[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
  ir::TensorData m(im.dtype(x), {d, d});
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t i = 0; i < d; ++i) {
      bool in = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
      m.SetDouble(j * d + i, in ? 1 : 0);
    }
  }
  NodeId moved = im.Permute(x, perm);
  Shape ms = im.shape(moved);
  NodeId flat = im.Reshape(moved, {Product(ms, 0, ms.size() - 1), d});
  NodeId y = im.Reshape(im.Fold(im.b().MatMul(flat, im.Const(std::move(m)))), ms);
  im.SetOutput(n, 0, im.Permute(y, inverse));
  return absl::OkStatus();
}

absl::Status DepthToSpace(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (im.rank(x) != 4) return Bad("needs a 4-D input");
  TRY_OK(AttrSince(im, n, "mode", 11));  // DCR only before 11
  const int64_t bs = AttrInt(n, "blocksize", 0);
  const Shape s = im.shape(x);
  if (bs <= 0 || bs > (1 << 15) || s[1] % (bs * bs) != 0) return Bad("bad blocksize");
  const int64_t c = s[1] / (bs * bs);
  const std::string mode = AttrString(n, "mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return Bad(absl::StrCat("bad mode '", mode, "'"));
  NodeId y;
  if (mode == "DCR") {
    y = im.Permute(im.Reshape(x, {s[0], bs, bs, c, s[2], s[3]}), {0, 3, 4, 1, 5, 2});
  } else {
    y = im.Permute(im.Reshape(x, {s[0], c, bs, bs, s[2], s[3]}), {0, 1, 4, 2, 5, 3});
  }
  im.SetOutput(n, 0, im.Reshape(y, {s[0], c, s[2] * bs, s[3] * bs}));
  return absl::OkStatus();
}

absl::Status SpaceToDepth(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (im.rank(x) != 4) return Bad("needs a 4-D input");
  const int64_t bs = AttrInt(n, "blocksize", 0);
  const Shape s = im.shape(x);
  if (bs <= 0 || bs > (1 << 15) || s[2] % bs != 0 || s[3] % bs != 0) return Bad("bad blocksize");
  // mode (opset 28): DCR, the order before 28, puts the block's row and column before the
  // channel in the output's depth; CRD the channel first.
  TRY_OK(AttrSince(im, n, "mode", 28));
  const std::string mode = AttrString(n, "mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return Bad(absl::StrCat("bad mode '", mode, "'"));
  const std::vector<int64_t> perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4}
                                                  : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
  NodeId y = im.Permute(im.Reshape(x, {s[0], s[1], s[2] / bs, bs, s[3] / bs, bs}), perm);
  im.SetOutput(n, 0, im.Reshape(y, {s[0], s[1] * bs * bs, s[2] / bs, s[3] / bs}));
  return absl::OkStatus();
}

// ---- Reductions --------------------------------------------------------------------------------

enum class Red { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

Lowering Reduction(Red kind) {
  return [kind](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId x, im.Input(n, 0));
    const int64_t r = im.rank(x);
    // Axes are an input from opset 13 for ReduceSum (18 for the others), with
    // noop_with_empty_axes; an attribute before.
    const int64_t since = kind == Red::kSum ? 13 : 18;
    TRY(std::optional<std::vector<int64_t>> axes_opt, AxesOf(im, n, 1, since));
    TRY_OK(AttrSince(im, n, "noop_with_empty_axes", since));
    if (axes_opt && axes_opt->empty()) axes_opt.reset();
    if (!axes_opt && AttrInt(n, "noop_with_empty_axes", 0) != 0) {
      im.SetOutput(n, 0, x);
      return absl::OkStatus();
    }
    std::vector<int64_t> axes;
    if (axes_opt) {
      TRY(axes, NormAxes(*axes_opt, r));
    } else {
      for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    }
    const bool as_bool = im.dtype(x) == ir::DType::kBool;
    if (as_bool) {
      // ReduceMax/ReduceMin-20 take bool: any and all, as uint8 (an empty set's max is false,
      // its min true: uint8's 0 and 255).
      if (kind != Red::kMax && kind != Red::kMin) return Bad("bool inputs are not supported");
      if (im.opset() < 20) {
        return Bad(absl::StrCat("bool inputs exist from opset 20, but the model imports opset ",
                                im.opset()));
      }
      x = im.Cast(x, ir::DType::kU8);
    }
    int64_t count = 1;
    for (int64_t a : axes) count *= im.shape(x)[static_cast<size_t>(a)];
    NodeId y = ir::kInvalidNode;
    switch (kind) {
      case Red::kSum:
        y = im.Reduce(Op::kReduceSum, x, axes);
        break;
      case Red::kMean:
        y = im.Reduce(Op::kReduceSum, x, axes);
        y = im.Binary(Op::kDiv, y, im.Like(static_cast<double>(count), y));
        break;
      case Red::kMax:
        y = im.Reduce(Op::kReduceMax, x, axes);
        break;
      case Red::kMin:
        y = im.Reduce(Op::kReduceMin, x, axes);
        break;
      case Red::kProd:
        y = im.Reduce(Op::kReduceProd, x, axes);
        break;
      case Red::kL1:
        y = im.Reduce(Op::kReduceSum, im.Unary(Op::kAbs, x), axes);
        break;
      case Red::kL2:
        y = im.Unary(Op::kSqrt, im.Reduce(Op::kReduceSum, im.Binary(Op::kMul, x, x), axes));
        break;
      case Red::kSumSquare:
        y = im.Reduce(Op::kReduceSum, im.Binary(Op::kMul, x, x), axes);
        break;
      case Red::kLogSum:
        y = im.Unary(Op::kLog, im.Reduce(Op::kReduceSum, x, axes));
        break;
      case Red::kLogSumExp: {
        NodeId m = im.Reduce(Op::kReduceMax, x, axes);
        // A -inf maximum (all -inf) would give nan from -inf - -inf: use 0 there.
        NodeId finite = im.Binary(Op::kEq, m, m);
        NodeId inf = im.Binary(Op::kEq, m, im.Like(-std::numeric_limits<double>::infinity(), m));
        NodeId mm =
            im.Select(im.Binary(Op::kAnd, finite, im.Unary(Op::kNot, inf)), m, im.Like(0, m));
        NodeId e = im.Unary(Op::kExp, im.Binary(Op::kSub, x, im.Broadcast(mm, im.shape(x))));
        y = im.Binary(Op::kAdd, im.Unary(Op::kLog, im.Reduce(Op::kReduceSum, e, axes)), mm);
        break;
      }
    }
    if (AttrInt(n, "keepdims", 1) == 0) {
      Shape out;
      for (int64_t i = 0; i < r; ++i) {
        if (std::find(axes.begin(), axes.end(), i) == axes.end()) {
          out.push_back(im.shape(x)[static_cast<size_t>(i)]);
        }
      }
      y = im.Reshape(y, out);
    }
    if (as_bool) y = im.Cast(y, ir::DType::kBool);
    im.SetOutput(n, 0, y);
    return absl::OkStatus();
  };
}

Lowering ArgReduce(Op op) {
  return [op](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId x, im.Input(n, 0));
    TRY_OK(AttrSince(im, n, "select_last_index", 12));
    TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 0), im.rank(x)));
    const int64_t d = im.shape(x)[static_cast<size_t>(axis)];
    NodeId y;
    if (AttrInt(n, "select_last_index", 0) != 0) {
      // The last extreme = d - 1 - (the first extreme of the reversed axis).
      NodeId first = im.Fold(im.b().ArgReduce(op, im.Fold(im.b().Flip(x, {axis})), axis));
      y = im.Binary(Op::kSub, im.Like(static_cast<double>(d - 1), first), first);
    } else {
      y = im.Fold(im.b().ArgReduce(op, x, axis));
    }
    if (AttrInt(n, "keepdims", 1) == 0) {
      Shape out = im.shape(y);
      out.erase(out.begin() + axis);
      y = im.Reshape(y, out);
    }
    im.SetOutput(n, 0, y);
    return absl::OkStatus();
  };
}

// TopK: the first k of kiln's stable sort along the axis, so ties keep the lower index first, as
// ONNX specifies; largest sorts the flipped axis and flips back (ties still in index order). NaN
// counts as the largest value (sort's order). K is an attribute before opset 10, an input from
// 10; `largest` and `sorted` exist from 11 (always the largest, sorted, before).
absl::Status TopK(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY_OK(InputsSince(im, n, 1, 10, "K"));
  TRY_OK(AttrUntil(im, n, "k", 10));
  TRY_OK(AttrSince(im, n, "largest", 11));
  TRY_OK(AttrSince(im, n, "sorted", 11));
  std::vector<int64_t> k;
  if (im.opset() < 10) {
    const auto* a = FindAttr(n, "k");
    if (!a) return Bad("attribute 'k' is required before opset 10");
    k = {a->i()};
  } else {
    TRY(k, im.ConstInts(n, 1));
  }
  if (k.size() != 1) return Bad("K must hold one value");
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", -1), im.rank(x)));
  const int64_t size = im.shape(x)[static_cast<size_t>(axis)];
  if (k[0] < 0 || k[0] > size) {
    return Bad(absl::StrCat("K = ", k[0], " is outside [0, ", size, "] for axis ", axis));
  }
  const bool largest = AttrInt(n, "largest", 1) != 0;
  ir::Attrs attrs;
  attrs.axes = {axis};
  const NodeId in = largest ? im.Fold(im.b().Flip(x, {axis})) : x;
  NodeId values = im.Fold(im.b().Emit(Op::kSort, {in}, attrs));
  NodeId indices = im.Fold(im.b().Emit(Op::kArgsort, {in}, attrs));
  if (largest) {
    values = im.Fold(im.b().Flip(values, {axis}));
    indices = im.Fold(im.b().Flip(indices, {axis}));
    indices = im.Binary(Op::kSub, im.Like(static_cast<double>(size - 1), indices), indices);
  }
  std::vector<int64_t> starts(static_cast<size_t>(im.rank(x)), 0);
  Shape limits = im.shape(x);
  limits[static_cast<size_t>(axis)] = k[0];
  im.SetOutput(n, 0, im.Fold(im.b().Slice(values, starts, limits)));
  if (Importer::HasOutput(n, 1)) im.SetOutput(n, 1, im.Fold(im.b().Slice(indices, starts, limits)));
  return absl::OkStatus();
}

// softmax / log-softmax / hardmax. From opset 13 along one axis (default -1); before 13 the input
// is coerced to 2-D at `axis` (default 1): [prod(dims before), prod(dims from axis)], the result
// computed over the flattened second axis and reshaped back.
enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

Lowering SoftmaxOp(SoftmaxKind kind) {
  return [kind](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId input, im.Input(n, 0));
    if (!ir::IsFloat(im.dtype(input))) return Bad("needs a float input");
    const bool coerce = im.opset() < 13;
    const int64_t r = im.rank(input);
    TRY(int64_t axis, NormAxis(AttrInt(n, "axis", coerce ? 1 : -1), r));
    NodeId x = input;
    if (coerce) {
      const Shape in = im.shape(input);
      x = im.Reshape(input, {Product(in, 0, static_cast<size_t>(axis)),
                             Product(in, static_cast<size_t>(axis), in.size())});
      axis = 1;
    }
    const Shape s = im.shape(x);
    NodeId m = im.Broadcast(im.Reduce(Op::kReduceMax, x, {axis}), s);
    NodeId y;
    if (kind == SoftmaxKind::kHardmax) {
      NodeId arg = im.Broadcast(im.Fold(im.b().ArgReduce(Op::kArgMax, x, axis)), s);
      NodeId iota = im.b().Iota({ir::DType::kI64, s}, axis);
      y = im.Cast(im.Binary(Op::kEq, iota, arg), im.dtype(x));
    } else {
      NodeId shifted = im.Binary(Op::kSub, x, m);
      NodeId e = im.Unary(Op::kExp, shifted);
      NodeId sum = im.Broadcast(im.Reduce(Op::kReduceSum, e, {axis}), s);
      y = kind == SoftmaxKind::kSoftmax ? im.Binary(Op::kDiv, e, sum)
                                        : im.Binary(Op::kSub, shifted, im.Unary(Op::kLog, sum));
    }
    im.SetOutput(n, 0, im.Reshape(y, im.shape(input)));
    return absl::OkStatus();
  };
}

// ---- Contractions ------------------------------------------------------------------------------

// numpy's matmul: 1-D operands are promoted and their axis dropped, batch axes broadcast. With
// `accumulate` the operands are integers multiplied exactly in that dtype (matmul {accumulate}).
absl::StatusOr<NodeId> MatMulND(Importer& im, NodeId a, NodeId b,
                                std::optional<ir::DType> accumulate = std::nullopt) {
  bool drop_m = false, drop_n = false;
  if (im.rank(a) == 0 || im.rank(b) == 0) return Bad("MatMul needs operands of rank >= 1");
  if (im.rank(a) == 1) {
    a = im.Reshape(a, {1, im.shape(a)[0]});
    drop_m = true;
  }
  if (im.rank(b) == 1) {
    b = im.Reshape(b, {im.shape(b)[0], 1});
    drop_n = true;
  }
  if (!accumulate && im.dtype(a) != im.dtype(b)) return Bad("operand types differ");
  Shape sa = im.shape(a), sb = im.shape(b);
  const auto product = [&](NodeId x, NodeId y) {
    return accumulate ? im.b().IntegerMatMul(x, y, *accumulate) : im.b().MatMul(x, y);
  };
  const int64_t m = sa[sa.size() - 2], k = sa.back(), kb = sb[sb.size() - 2], nn = sb.back();
  if (k != kb) {
    return Bad(absl::StrCat("contracting dimensions differ: ", ir::ShapeToString(sa), " x ",
                            ir::ShapeToString(sb)));
  }
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  NodeId y;
  Shape batch;
  if (batch_b.empty()) {
    // [batch..., M, K] x [K, N]: one 2-D product over the flattened rows (no copy of b).
    batch = batch_a;
    y = product(im.Reshape(a, {Product(sa, 0, sa.size() - 1), k}), b);
  } else {
    TRY(batch, Importer::BroadcastShape(batch_a, batch_b));
    Shape ta = batch, tb = batch;
    ta.insert(ta.end(), {m, k});
    tb.insert(tb.end(), {k, nn});
    TRY(a, im.BroadcastTo(a, ta));
    TRY(b, im.BroadcastTo(b, tb));
    y = product(a, b);
  }
  y = im.Fold(y);
  Shape out = batch;
  if (!drop_m) out.push_back(m);
  if (!drop_n) out.push_back(nn);
  return im.Reshape(y, out);
}

absl::StatusOr<std::optional<NodeId>> QdqMatMul(Importer& im, const NodeProto& n);

absl::Status MatMul(Importer& im, const NodeProto& n) {
  TRY(std::optional<NodeId> int8, QdqMatMul(im, n));
  if (int8.has_value()) {
    im.SetOutput(n, 0, *int8);
    return absl::OkStatus();
  }
  TRY(NodeId a, im.Input(n, 0));
  TRY(NodeId b, im.Input(n, 1));
  TRY(NodeId y, MatMulND(im, a, b));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

absl::Status Gemm(Importer& im, const NodeProto& n) {
  TRY(NodeId a, im.Input(n, 0));
  TRY(NodeId b, im.Input(n, 1));
  if (im.rank(a) != 2 || im.rank(b) != 2) return Bad("A and B must be 2-D");
  if (AttrInt(n, "transA", 0)) a = im.Permute(a, {1, 0});
  if (AttrInt(n, "transB", 0)) b = im.Permute(b, {1, 0});
  TRY(NodeId y, MatMulND(im, a, b));
  if (im.opset() < 11 && !Importer::HasInput(n, 2)) {
    return Bad(absl::StrCat("input 2 (C) is required before opset 11 (the model imports opset ",
                            im.opset(), ")"));
  }
  const double alpha = AttrFloat(n, "alpha", 1.0f), beta = AttrFloat(n, "beta", 1.0f);
  y = Scaled(im, y, alpha);
  // Before opset 7 (Gemm-1, -6), C is (M, N) unless broadcast=1; numpy-style from 7.
  TRY_OK(AttrUntil(im, n, "broadcast", 7));
  const bool broadcast_c = im.opset() >= 7 || AttrInt(n, "broadcast", 0) != 0;
  if (Importer::HasInput(n, 2) && !broadcast_c) {
    TRY(NodeId c, im.Input(n, 2));
    if (im.shape(c) != im.shape(y)) {
      return Bad(absl::StrCat("C ", ir::ShapeToString(im.shape(c)), " is not (M, N) ",
                              ir::ShapeToString(im.shape(y)),
                              " and broadcast is not set (before opset 7 only broadcast=1 "
                              "broadcasts C; the model imports opset ",
                              im.opset(), ")"));
    }
  }
  if (Importer::HasInput(n, 2) && beta != 0) {
    TRY(NodeId c, im.Input(n, 2));
    TRY(c, im.BroadcastTo(c, im.shape(y)));
    y = im.Binary(Op::kAdd, y, Scaled(im, c, beta));
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// Window geometry of Conv / pools on the spatial axes.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, low, high;
  /// ceil_mode's overhang, included in `high` (padding that is not the model's).
  std::vector<int64_t> overhang;
};

absl::StatusOr<Window> GetWindow(const NodeProto& n, const Shape& spatial,
                                 const std::vector<int64_t>& kernel, bool ceil_mode) {
  const size_t k = spatial.size();
  Window w;
  w.kernel = kernel;
  w.strides = AttrInts(n, "strides").value_or(std::vector<int64_t>(k, 1));
  w.dilations = AttrInts(n, "dilations").value_or(std::vector<int64_t>(k, 1));
  std::vector<int64_t> pads = AttrInts(n, "pads").value_or(std::vector<int64_t>(2 * k, 0));
  if (w.kernel.size() != k || w.strides.size() != k || w.dilations.size() != k ||
      pads.size() != 2 * k) {
    return Bad(
        absl::StrCat("kernel_shape/strides/dilations/pads do not match ", k, " spatial axes"));
  }
  for (size_t i = 0; i < k; ++i) {
    if (w.kernel[i] < 1 || w.strides[i] < 1 || w.dilations[i] < 1 || pads[i] < 0 ||
        pads[i + k] < 0 || w.kernel[i] > (1 << 20) || w.strides[i] > (1 << 20) ||
        w.dilations[i] > (1 << 20) || pads[i] > (1 << 20) || pads[i + k] > (1 << 20)) {
      return Bad("bad kernel_shape, strides, dilations or pads");
    }
  }
  const std::string auto_pad = AttrString(n, "auto_pad", "NOTSET");
  w.low.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(k));
  w.high.assign(pads.begin() + static_cast<std::ptrdiff_t>(k), pads.end());
  w.overhang.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t dk = (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t out = (spatial[i] + w.strides[i] - 1) / w.strides[i];
      const int64_t total = std::max<int64_t>((out - 1) * w.strides[i] + dk - spatial[i], 0);
      const int64_t small = total / 2;
      w.low[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.high[i] = total - w.low[i];
    } else if (auto_pad == "VALID") {
      w.low[i] = w.high[i] = 0;
    } else if (auto_pad != "NOTSET") {
      return Bad(absl::StrCat("bad auto_pad '", auto_pad, "'"));
    }
    const int64_t span = spatial[i] + w.low[i] + w.high[i];
    if (span < dk) {
      return Bad(absl::StrCat("the window (", dk, ") does not fit spatial axis ", i, " of size ",
                              spatial[i], " plus padding"));
    }
    if (ceil_mode) {
      // PyTorch's rule: ceil, but the last window must start inside the input or left padding.
      int64_t out = (span - dk + w.strides[i] - 1) / w.strides[i] + 1;
      if ((out - 1) * w.strides[i] >= spatial[i] + w.low[i]) --out;
      w.overhang[i] = std::max<int64_t>(0, (out - 1) * w.strides[i] + dk - span);
      w.high[i] += w.overhang[i];
    }
  }
  return w;
}

// The IR conv attributes of a Conv / ConvInteger / QLinearConv node on X and W.
absl::StatusOr<ir::Attrs> ConvNodeAttrs(Importer& im, const NodeProto& n, NodeId x, NodeId wt) {
  if (im.rank(x) < 3 || im.rank(wt) != im.rank(x)) return Bad("X and W must have equal rank >= 3");
  const Shape xs = im.shape(x), ws = im.shape(wt);
  Shape spatial(xs.begin() + 2, xs.end());
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  if (auto ks = AttrInts(n, "kernel_shape"); ks && *ks != kernel) {
    return Bad("kernel_shape differs from W's shape");
  }
  TRY(Window w, GetWindow(n, spatial, kernel, false));
  ir::Attrs attrs;
  attrs.strides = w.strides;
  attrs.low = w.low;
  attrs.high = w.high;
  attrs.dilation = w.dilations;
  attrs.groups = AttrInt(n, "group", 1);
  return attrs;
}

absl::StatusOr<std::optional<NodeId>> QdqConv(Importer& im, const NodeProto& n);

absl::Status Conv(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId wt, im.Input(n, 1));
  const Shape ws = im.shape(wt);
  TRY(std::optional<NodeId> int8, QdqConv(im, n));
  NodeId y;
  if (int8.has_value()) {
    y = *int8;
  } else {
    TRY(ir::Attrs attrs, ConvNodeAttrs(im, n, x, wt));
    y = im.Fold(im.b().Conv(x, wt, attrs));
  }
  if (Importer::HasInput(n, 2)) {
    TRY(NodeId bias, im.Input(n, 2));
    Shape bs(static_cast<size_t>(im.rank(x)), 1);
    bs[1] = ws[0];
    if (im.type(bias).num_elements() != ws[0])
      return Bad("B must have one value per output channel");
    y = im.Binary(Op::kAdd, y, im.Broadcast(im.Reshape(bias, bs), im.shape(y)));
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

absl::Status ConvTranspose(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId wt, im.Input(n, 1));
  if (im.rank(x) < 3 || im.rank(wt) != im.rank(x)) return Bad("X and W must have equal rank >= 3");
  const Shape xs = im.shape(x), ws = im.shape(wt);
  const size_t k = xs.size() - 2;
  const int64_t g = AttrInt(n, "group", 1);
  if (g < 1 || xs[1] != ws[0] || ws[0] % g != 0)
    return Bad("W's first axis must be X's channels, divisible by group");
  const int64_t cg = ws[0] / g, og = ws[1], out_c = og * g;
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  auto strides = AttrInts(n, "strides").value_or(std::vector<int64_t>(k, 1));
  auto dil = AttrInts(n, "dilations").value_or(std::vector<int64_t>(k, 1));
  auto pads = AttrInts(n, "pads").value_or(std::vector<int64_t>(2 * k, 0));
  auto outpad = AttrInts(n, "output_padding").value_or(std::vector<int64_t>(k, 0));
  if (strides.size() != k || dil.size() != k || pads.size() != 2 * k || outpad.size() != k) {
    return Bad("strides/dilations/pads/output_padding do not match the spatial axes");
  }
  const std::string auto_pad = AttrString(n, "auto_pad", "NOTSET");
  auto out_shape = AttrInts(n, "output_shape");
  for (size_t i = 0; i < k; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || strides[i] > (1 << 20) || dil[i] > (1 << 20) ||
        pads[i] < -(1 << 20) || pads[i] > (1 << 20) || pads[i + k] < -(1 << 20) ||
        pads[i + k] > (1 << 20) || outpad[i] < 0 || kernel[i] > (1 << 20) ||
        outpad[i] > (1 << 20)) {
      return Bad("bad strides, dilations, pads or output_padding");
    }
    const int64_t dk = (kernel[i] - 1) * dil[i] + 1;
    int64_t target = -1;
    if (out_shape) {
      if (out_shape->size() != k && out_shape->size() != k + 2) return Bad("bad output_shape");
      target = (*out_shape)[out_shape->size() - k + i];
      if (target < 0 || target > (1 << 30)) return Bad("bad output_shape");
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      target = xs[i + 2] * strides[i];
    }
    if (target >= 0) {
      // A negative total (an output_shape longer than the full transposed convolution) pads the
      // end with zeros: the halves round down, as in the spec's Python (//), not toward zero.
      const int64_t total = strides[i] * (xs[i + 2] - 1) + outpad[i] + dk - target;
      const int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      if (auto_pad == "SAME_UPPER") {
        pads[i] = half;
        pads[i + k] = total - half;
      } else {
        pads[i] = total - half;
        pads[i + k] = half;
      }
    }
  }
  // W [C, O/g, k...] → [O, C/g, k...] with the kernel flipped: an ordinary convolution of the
  // input dilated by the strides.
  Shape w5 = {g, cg, og};
  w5.insert(w5.end(), kernel.begin(), kernel.end());
  std::vector<int64_t> perm = {0, 2, 1};
  for (size_t i = 0; i < k; ++i) perm.push_back(static_cast<int64_t>(3 + i));
  Shape wk = {out_c, cg};
  wk.insert(wk.end(), kernel.begin(), kernel.end());
  NodeId w2 = im.Reshape(im.Permute(im.Reshape(wt, w5), perm), wk);
  std::vector<int64_t> flip;
  for (size_t i = 0; i < k; ++i) flip.push_back(static_cast<int64_t>(2 + i));
  w2 = im.Fold(im.b().Flip(w2, flip));
  ir::Attrs attrs;
  attrs.strides.assign(k, 1);
  attrs.dilation = dil;
  attrs.input_dilation = strides;
  attrs.groups = g;
  std::vector<int64_t> crop_lo(k, 0), crop_hi(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t edge = dil[i] * (kernel[i] - 1);
    int64_t lo = edge - pads[i], hi = edge - pads[i + k] + outpad[i];
    crop_lo[i] = std::max<int64_t>(-lo, 0);
    crop_hi[i] = std::max<int64_t>(-hi, 0);
    attrs.low.push_back(std::max<int64_t>(lo, 0));
    attrs.high.push_back(std::max<int64_t>(hi, 0));
  }
  NodeId y = im.Fold(im.b().Conv(x, w2, attrs));
  if (!im.b().status().ok()) return absl::OkStatus();
  Shape ys = im.shape(y);
  std::vector<int64_t> st(ys.size(), 0), li = ys;
  for (size_t i = 0; i < k; ++i) {
    st[i + 2] = crop_lo[i];
    li[i + 2] = ys[i + 2] - crop_hi[i];
    if (li[i + 2] < st[i + 2]) return Bad("pads remove the whole output");
  }
  y = im.Slice(y, st, li);
  if (Importer::HasInput(n, 2)) {
    TRY(NodeId bias, im.Input(n, 2));
    if (im.type(bias).num_elements() != out_c)
      return Bad("B must have one value per output channel");
    Shape bs(xs.size(), 1);
    bs[1] = out_c;
    y = im.Binary(Op::kAdd, y, im.Broadcast(im.Reshape(bias, bs), im.shape(y)));
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// BatchNormalization. Versions 1 and 6 (is_test: 0, the default, is training; spatial;
// version 1's consumed_inputs is ignored), 7 (spatial; outputs 1-4 mean, var, saved_mean,
// saved_var mean training), 9 (no spatial), 14 (training_mode; outputs 1-2 running_mean and
// running_var, only with training_mode=1), 15 (types). In training, Y is normalized with the
// batch's statistics (mean and population variance over every axis but the channel's; with
// spatial=0 over the batch axis only), and the running statistics are
// input * momentum + batch's * (1 - momentum), as ONNX's reference computes them.
absl::Status BatchNorm(Importer& im, const NodeProto& n) {
  TRY_OK(AttrSince(im, n, "training_mode", 14));
  TRY_OK(AttrUntil(im, n, "spatial", 9));
  TRY_OK(AttrUntil(im, n, "is_test", 7));
  TRY_OK(AttrUntil(im, n, "consumed_inputs", 6));
  // Training: is_test=0 before opset 7; outputs past Y in 7-13; training_mode=1 from 14.
  bool training = false;
  if (im.opset() < 7) {
    training = AttrInt(n, "is_test", 0) == 0;
  } else if (im.opset() >= 14) {
    training = AttrInt(n, "training_mode", 0) != 0;
  }
  const int max_outputs = im.opset() >= 14 ? 3 : 5;
  for (int o = 1; o < n.output_size(); ++o) {
    if (!Importer::HasOutput(n, o)) continue;
    if (o >= max_outputs) return Bad(absl::StrCat("has no output ", o));
    if (im.opset() >= 7 && im.opset() < 14) {
      // Versions 7 and 9 say only "training mode" for these (saved_var's meaning differs
      // between frameworks: a variance or an inverse standard deviation).
      return Unsupported(absl::StrCat(
          "output ", o, " ('", n.output(o),
          "') exists only in training (before opset 14: any output past Y), which kiln "
          "does not support before opset 14"));
    }
    if (!training) {
      return Bad(absl::StrCat("output ", o, " ('", n.output(o), "') exists only in training (",
                              im.opset() >= 14 ? "training_mode=1" : "is_test=0", ")"));
    }
  }
  TRY(NodeId x, im.Input(n, 0));
  // spatial=0 (opset 1-8): statistics per activation, shaped like one sample [C, D1, ...].
  const bool spatial = AttrInt(n, "spatial", 1) != 0;
  if (im.rank(x) < 2) return Bad("needs rank >= 2");
  if (!ir::IsFloat(im.dtype(x))) return Bad("needs a float input");
  const Shape xs = im.shape(x);
  const Shape per = spatial ? Shape{xs[1]} : Shape(xs.begin() + 1, xs.end());
  std::vector<NodeId> p;
  for (int i = 1; i <= 4; ++i) {
    TRY(NodeId v, im.Input(n, i));
    if (im.type(v).num_elements() != ir::NumElements(per)) {
      return Bad(absl::StrCat("input ", i, " must have ", ir::ShapeToString(per), " values",
                              spatial ? " (one per channel)" : " (spatial=0: one per activation)"));
    }
    p.push_back(im.Reshape(im.Cast(v, im.dtype(x)), per));
  }
  const double eps = AttrFloat(n, "epsilon", 1e-5f);
  const Shape s = im.shape(x);
  // [C] or [C, D1, ...] to x's shape.
  auto expand = [&](NodeId v) {
    if (spatial) return PerChannel(im, v, s);
    Shape one = per;
    one.insert(one.begin(), 1);
    return im.Broadcast(im.Reshape(v, one), s);
  };
  if (training) {
    std::vector<int64_t> axes = {0};
    if (spatial) {
      for (int64_t i = 2; i < im.rank(x); ++i) axes.push_back(i);
    }
    double count = 1;
    for (int64_t ax : axes) count *= static_cast<double>(s[static_cast<size_t>(ax)]);
    NodeId mean = im.Reshape(Scaled(im, im.Reduce(Op::kReduceSum, x, axes), 1.0 / count), per);
    NodeId d = im.Binary(Op::kSub, x, expand(mean));
    NodeId var = im.Reshape(
        Scaled(im, im.Reduce(Op::kReduceSum, im.Binary(Op::kMul, d, d), axes), 1.0 / count), per);
    NodeId a = im.Binary(Op::kMul, p[0], im.Unary(Op::kRsqrt, Shifted(im, var, eps)));
    im.SetOutput(n, 0, im.Binary(Op::kAdd, im.Binary(Op::kMul, d, expand(a)), expand(p[1])));
    const double momentum = AttrFloat(n, "momentum", 0.9f);
    auto running = [&](NodeId input, NodeId batch) {
      return im.Binary(Op::kAdd, Scaled(im, input, momentum), Scaled(im, batch, 1.0 - momentum));
    };
    // Outputs 1 and 2 have the inputs' shapes (the running statistics' values, updated).
    TRY(NodeId in_mean, im.Input(n, 3));
    TRY(NodeId in_var, im.Input(n, 4));
    if (Importer::HasOutput(n, 1)) {
      im.SetOutput(n, 1, im.Reshape(running(p[2], mean), im.shape(in_mean)));
    }
    if (Importer::HasOutput(n, 2)) {
      im.SetOutput(n, 2, im.Reshape(running(p[3], var), im.shape(in_var)));
    }
    if (Importer::HasOutput(n, 3)) im.SetOutput(n, 3, mean);  // saved_mean, saved_var (1, 6)
    if (Importer::HasOutput(n, 4)) im.SetOutput(n, 4, var);
    return absl::OkStatus();
  }
  // y = x * a + c with a = scale / sqrt(var + eps), c = B - mean * a: two ops per element, and
  // the [C] vectors fold away when the statistics are constants.
  NodeId a = im.Binary(Op::kMul, p[0], im.Unary(Op::kRsqrt, Shifted(im, p[3], eps)));
  NodeId c = im.Binary(Op::kSub, p[1], im.Binary(Op::kMul, p[2], a));
  im.SetOutput(n, 0, im.Binary(Op::kAdd, im.Binary(Op::kMul, x, expand(a)), expand(c)));
  return absl::OkStatus();
}

absl::Status InstanceNorm(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId scale, im.Input(n, 1));
  TRY(NodeId bias, im.Input(n, 2));
  if (im.rank(x) < 3) return Bad("needs rank >= 3");
  const Shape s = im.shape(x);
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < im.rank(x); ++i) axes.push_back(i);
  const double count = static_cast<double>(Product(s, 2, s.size()));
  const double eps = AttrFloat(n, "epsilon", 1e-5f);
  NodeId mean = im.Broadcast(Scaled(im, im.Reduce(Op::kReduceSum, x, axes), 1.0 / count), s);
  NodeId d = im.Binary(Op::kSub, x, mean);
  NodeId var = Scaled(im, im.Reduce(Op::kReduceSum, im.Binary(Op::kMul, d, d), axes), 1.0 / count);
  NodeId inv = im.Broadcast(im.Unary(Op::kRsqrt, Shifted(im, var, eps)), s);
  NodeId y = im.Binary(Op::kMul, im.Binary(Op::kMul, d, inv), PerChannel(im, scale, s));
  im.SetOutput(n, 0, im.Binary(Op::kAdd, y, PerChannel(im, bias, s)));
  return absl::OkStatus();
}

absl::Status LayerNorm(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId scale, im.Input(n, 1));
  if (!ir::IsFloat(im.dtype(x))) return Bad("needs a float input");
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", -1), im.rank(x)));
  // stash_type: the statistics' type and precision (float by default); the normalized values
  // are cast back to X's type before the scale and bias, as the ONNX function does.
  TRY(ir::DType stash,
      DTypeFromOnnx(static_cast<int32_t>(AttrInt(n, "stash_type", 1)), "attribute 'stash_type'"));
  if (!ir::IsFloat(stash)) return Bad("stash_type must be a float type");
  const ir::DType t = im.dtype(x);
  x = im.Cast(x, stash);
  const Shape s = im.shape(x);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < im.rank(x); ++i) axes.push_back(i);
  const double count = static_cast<double>(Product(s, static_cast<size_t>(axis), s.size()));
  const double eps = AttrFloat(n, "epsilon", 1e-5f);
  NodeId mean_r = Scaled(im, im.Reduce(Op::kReduceSum, x, axes), 1.0 / count);
  NodeId mean = im.Broadcast(mean_r, s);
  NodeId d = im.Binary(Op::kSub, x, mean);
  NodeId var = Scaled(im, im.Reduce(Op::kReduceSum, im.Binary(Op::kMul, d, d), axes), 1.0 / count);
  NodeId inv_r = im.Unary(Op::kRsqrt, Shifted(im, var, eps));
  NodeId inv = im.Broadcast(inv_r, s);
  TRY(NodeId sc, im.BroadcastTo(scale, s));
  NodeId y = im.Binary(Op::kMul, im.Cast(im.Binary(Op::kMul, d, inv), t), sc);
  // Mean and InvStdDev keep the reduced axes as 1s.
  im.SetOutput(n, 1, mean_r);
  im.SetOutput(n, 2, inv_r);
  if (Importer::HasInput(n, 2)) {
    TRY(NodeId bias, im.Input(n, 2));
    TRY(bias, im.BroadcastTo(bias, s));
    y = im.Binary(Op::kAdd, y, bias);
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

absl::Status LpNorm(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", -1), im.rank(x)));
  const int64_t p = AttrInt(n, "p", 2);
  NodeId norm;
  if (p == 1) {
    norm = im.Reduce(Op::kReduceSum, im.Unary(Op::kAbs, x), {axis});
  } else if (p == 2) {
    norm = im.Unary(Op::kSqrt, im.Reduce(Op::kReduceSum, im.Binary(Op::kMul, x, x), {axis}));
  } else {
    return Bad("p must be 1 or 2");
  }
  // A zero vector stays zero (0/0 would be NaN), as in ONNX's reference and onnxruntime.
  NodeId safe = im.Select(im.Binary(Op::kEq, norm, im.Like(0, norm)), im.Like(1, norm), norm);
  im.SetOutput(n, 0, im.Binary(Op::kDiv, x, im.Broadcast(safe, im.shape(x))));
  return absl::OkStatus();
}

// MaxPool's Indices output (opset 8): for each output, the flat index into X of the window's
// first maximum (in the window's row-major order; padding never counts), over X's elements in
// row-major order, or with storage_order=1 the spatial axes in column-major order (the batch and
// channel offsets stay row-major, as ONNX's reference computes them). One strided slice of the
// padded input per kernel offset: X as double padded with -inf, and the indices padded with -1.
absl::StatusOr<NodeId> MaxPoolIndices(Importer& im, const NodeProto& n, NodeId x, NodeId y,
                                      const Window& w) {
  const int64_t order = AttrInt(n, "storage_order", 0);
  if (order != 0 && order != 1) return Bad("storage_order must be 0 or 1");
  const Shape s = im.shape(x), ys = im.shape(y);
  const size_t r = s.size(), k = r - 2;
  int64_t offsets = 1;
  for (int64_t kd : w.kernel) {
    offsets *= kd;
    if (offsets > 256) {
      return Unsupported("MaxPool's Indices output for windows above 256 elements");
    }
  }
  // The flat index of each element of X.
  std::vector<int64_t> stride(r);
  int64_t step = 1;
  for (size_t i = r; i-- > 2;) {  // spatial axes, row-major
    stride[i] = step;
    step *= s[i];
  }
  if (order == 1) {
    step = 1;
    for (size_t i = 2; i < r; ++i) {  // column-major
      stride[i] = step;
      step *= s[i];
    }
  }
  stride[1] = step;
  stride[0] = step * s[1];
  const ir::TensorType it{ir::DType::kI64, s};
  NodeId index = im.Full(0, ir::DType::kI64, s);
  for (size_t i = 0; i < r; ++i) {
    if (s[i] == 1) continue;
    NodeId along = im.Fold(im.b().Iota(it, static_cast<int64_t>(i)));
    index = im.Binary(
        Op::kAdd, index,
        im.Binary(Op::kMul, along, im.Full(static_cast<double>(stride[i]), ir::DType::kI64, s)));
  }
  std::vector<int64_t> lo(r, 0), hi(r, 0);
  for (size_t i = 0; i < k; ++i) lo[i + 2] = w.low[i], hi[i + 2] = w.high[i];
  NodeId xp = im.Fold(
      im.b().Pad(im.Cast(x, ir::DType::kF64), lo, hi, -std::numeric_limits<double>::infinity()));
  NodeId ip = im.Fold(im.b().Pad(index, lo, hi, -1));
  NodeId want = im.Cast(y, ir::DType::kF64);
  NodeId best = im.Full(-1, ir::DType::kI64, ys);
  // The kernel offsets in reverse row-major order, so that the first match is kept last.
  for (int64_t o = offsets - 1; o >= 0; --o) {
    std::vector<int64_t> starts(r, 0), limits = ys, strides(r, 1);
    for (size_t i = k, rest = static_cast<size_t>(o); i-- > 0;) {
      const int64_t kd = w.kernel[i];
      const int64_t at = static_cast<int64_t>(rest) % kd;
      rest /= static_cast<size_t>(kd);
      starts[i + 2] = at * w.dilations[i];
      limits[i + 2] = starts[i + 2] + (ys[i + 2] - 1) * w.strides[i] + 1;
      strides[i + 2] = w.strides[i];
    }
    NodeId xo = im.Slice(xp, starts, limits, strides), io = im.Slice(ip, starts, limits, strides);
    NodeId hit =
        im.Binary(Op::kAnd, im.Binary(Op::kEq, xo, want), im.Binary(Op::kGe, io, im.Like(0, io)));
    best = im.Select(hit, io, best);
  }
  return best;
}

Lowering Pool(bool max) {
  return [max](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId x, im.Input(n, 0));
    if (im.rank(x) < 3) return Bad("needs rank >= 3");
    // MaxPool: storage_order (8), ceil_mode and dilations (10); AveragePool: ceil_mode (10),
    // dilations (19).
    if (max) TRY_OK(AttrSince(im, n, "storage_order", 8));
    TRY_OK(AttrSince(im, n, "ceil_mode", 10));
    TRY_OK(AttrSince(im, n, "dilations", max ? 10 : 19));
    const Shape s = im.shape(x);
    Shape spatial(s.begin() + 2, s.end());
    auto kernel = AttrInts(n, "kernel_shape");
    if (!kernel) return Bad("kernel_shape is missing");
    const bool ceil_mode = AttrInt(n, "ceil_mode", 0) != 0;
    TRY(Window w, GetWindow(n, spatial, *kernel, ceil_mode));
    ir::Attrs a;
    a.window = {1, 1};
    a.strides = {1, 1};
    a.low = {0, 0};
    a.high = {0, 0};
    a.dilation = {1, 1};
    for (size_t i = 0; i < spatial.size(); ++i) {
      a.window.push_back(w.kernel[i]);
      a.strides.push_back(w.strides[i]);
      a.low.push_back(w.low[i]);
      a.high.push_back(w.high[i]);
      a.dilation.push_back(w.dilations[i]);
    }
    if (max) {
      NodeId y = im.Fold(im.b().WindowReduce(Op::kWindowMax, x, a));
      im.SetOutput(n, 0, y);
      if (n.output_size() > 2) return Bad("MaxPool has two outputs");
      if (Importer::HasOutput(n, 1)) {
        TRY(NodeId indices, MaxPoolIndices(im, n, x, y, w));
        im.SetOutput(n, 1, indices);
      }
      return absl::OkStatus();
    }
    NodeId sum = im.Fold(im.b().WindowReduce(Op::kWindowSum, x, a));
    if (!im.b().status().ok()) return absl::OkStatus();
    // The divisor per output position: the window's (dilated) taps inside the input (plus the
    // explicit pads with count_include_pad, never the ceil_mode overhang), as a window sum of ones.
    const bool include_pad = AttrInt(n, "count_include_pad", 0) != 0;
    Shape ones_shape = {1, 1};
    ir::Attrs ca = a;
    for (size_t i = 0; i < spatial.size(); ++i) {
      if (include_pad) {  // ones over input + explicit pads; only the overhang is zero
        ones_shape.push_back(spatial[i] + w.low[i] + w.high[i] - w.overhang[i]);
        ca.low[i + 2] = 0;
        ca.high[i + 2] = w.overhang[i];
      } else {
        ones_shape.push_back(spatial[i]);
      }
    }
    NodeId count =
        im.Fold(im.b().WindowReduce(Op::kWindowSum, im.Full(1, im.dtype(x), ones_shape), ca));
    im.SetOutput(n, 0, im.Binary(Op::kDiv, sum, im.Broadcast(count, im.shape(sum))));
    return absl::OkStatus();
  };
}

Lowering GlobalPool(bool max) {
  return [max](Importer& im, const NodeProto& n) -> absl::Status {
    TRY(NodeId x, im.Input(n, 0));
    if (im.rank(x) < 3) return Bad("needs rank >= 3");
    std::vector<int64_t> axes;
    for (int64_t i = 2; i < im.rank(x); ++i) axes.push_back(i);
    const Shape s = im.shape(x);
    NodeId y = im.Reduce(max ? Op::kReduceMax : Op::kReduceSum, x, axes);
    if (!max) y = Scaled(im, y, 1.0 / static_cast<double>(Product(s, 2, s.size())));
    im.SetOutput(n, 0, y);
    return absl::OkStatus();
  };
}

// ---- Resize ------------------------------------------------------------------------------------

// How Resize / Upsample map an output coordinate to an input one.
struct ResizeRule {
  std::string mode;          // nearest, linear or cubic
  std::string ctm;           // coordinate_transformation_mode
  std::string nearest_mode;  // floor, ceil, round_prefer_floor/ceil, or legacy (see below)
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;  // linear and cubic: widen the filter when downscaling (opset 18)
  // tf_crop_and_resize: the region of each axis (roi's start and end, in [0, 1] of the input's
  // extent), and the value of outputs that fall outside the input.
  std::vector<double> roi_start, roi_end;
  double extrapolation_value = 0;
};

// The weight of a tap at distance d from the sampled position, for the filters of linear and
// cubic resizing: the triangle, and Keys' cubic convolution with the spec's coefficient A (-0.75
// as PyTorch's bicubic, -0.5 as TensorFlow's).
double ResizeFilter(bool cubic, double a, double d) {
  d = std::abs(d);
  if (!cubic) return std::max(0.0, 1 - d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

// Resizes x to `out`, axis by axis; scales[a] is the scale the coordinate transformation of axis a
// uses (out/in for sizes, or the given scale). nearest_mode "legacy" is Upsample's and Resize-10's
// rule, which the spec leaves unwritten: floor when enlarging, ceil when shrinking, over
// asymmetric coordinates (onnxruntime's, and what PyTorch's exporter of these opsets expects).
absl::StatusOr<NodeId> Interpolate(Importer& im, NodeId x, const Shape& out,
                                   const std::vector<double>& scales, const ResizeRule& rule) {
  const Shape s = im.shape(x);
  const size_t r = s.size();
  const std::string& ctm = rule.ctm;
  const std::string& nearest_mode = rule.nearest_mode;
  NodeId y = x;
  for (size_t a = 0; a < r; ++a) {
    const int64_t in = s[a], o = out[a];
    const bool crop = ctm == "tf_crop_and_resize";
    const bool whole = !crop || (rule.roi_start[a] == 0.0 && rule.roi_end[a] == 1.0);
    if (in == o && scales[a] == 1.0 && whole) continue;
    if (o > (1 << 24)) return Unsupported("Resize to an axis longer than 2^24");
    if (in == 0) return Bad("cannot resize an empty axis");
    auto original = [&](int64_t i) -> double {
      const double xo = static_cast<double>(i), sc = scales[a];
      if (ctm == "half_pixel") return (xo + 0.5) / sc - 0.5;
      if (ctm == "half_pixel_symmetric") {
        const double adjustment = static_cast<double>(o) / (sc * static_cast<double>(in));
        const double center = static_cast<double>(in) / 2;
        return center * (1 - adjustment) + (xo + 0.5) / sc - 0.5;
      }
      if (ctm == "pytorch_half_pixel") return o > 1 ? (xo + 0.5) / sc - 0.5 : 0.0;
      if (ctm == "align_corners") {
        // The resized length is in * scale, which need not be a whole number when the model
        // gives scales (ONNX's reference and onnxruntime), not the output's length.
        const double resized = static_cast<double>(in) * sc;
        return resized == 1.0 ? 0.0 : xo * static_cast<double>(in - 1) / (resized - 1);
      }
      if (ctm == "asymmetric") return xo / sc;
      if (ctm == "tf_half_pixel_for_nn") return (xo + 0.5) / sc;
      if (crop) {
        // The region [start, end] of the input's extent (in - 1) sampled at the output's
        // in * scale points (ONNX's reference: the centre of the region for one point).
        const double start = rule.roi_start[a], end = rule.roi_end[a];
        const double extent = static_cast<double>(in - 1), width = static_cast<double>(in) * sc;
        const double offset = start * extent;
        if (width == 1.0) return (end - start) * extent / 2 + offset;
        return xo * (end - start) * extent / (width - 1) + offset;
      }
      return xo / sc;
    };
    // tf_crop_and_resize: outputs whose source falls outside the input take extrapolation_value.
    std::vector<bool> outside(static_cast<size_t>(o), false);
    bool any_outside = false;
    if (crop) {
      for (int64_t i = 0; i < o; ++i) {
        const double xf = original(i);
        outside[static_cast<size_t>(i)] = xf < 0 || xf > static_cast<double>(in - 1);
        any_outside = any_outside || outside[static_cast<size_t>(i)];
      }
    }
    if (rule.mode == "nearest") {
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < o; ++i) {
        const double xf = original(i);
        double v;
        if (nearest_mode == "floor") {
          v = std::floor(xf);
        } else if (nearest_mode == "ceil") {
          v = std::ceil(xf);
        } else if (nearest_mode == "round_prefer_ceil") {
          v = std::floor(xf + 0.5);
        } else if (nearest_mode == "round_prefer_floor") {
          v = xf == std::floor(xf) + 0.5 ? std::floor(xf) : std::round(xf);
        } else if (nearest_mode == "legacy") {
          v = scales[a] < 1 ? std::ceil(xf) : std::floor(xf);
        } else {
          return Bad(absl::StrCat("bad nearest_mode '", nearest_mode, "'"));
        }
        idx.push_back(std::clamp<int64_t>(static_cast<int64_t>(v), 0, in - 1));
      }
      // An integer upscale that repeats each element is a broadcast, not a gather.
      const int64_t rep = o % in == 0 ? o / in : 0;
      bool repeat = rep > 0;
      for (int64_t i = 0; repeat && i < o; ++i) repeat = idx[static_cast<size_t>(i)] == i / rep;
      const Shape cur = im.shape(y);
      if (repeat) {
        Shape split(cur.begin(), cur.begin() + static_cast<std::ptrdiff_t>(a) + 1);
        split.push_back(1);
        split.insert(split.end(), cur.begin() + static_cast<std::ptrdiff_t>(a) + 1, cur.end());
        Shape wide = split;
        wide[a + 1] = rep;
        Shape res = cur;
        res[a] = o;
        y = im.Reshape(im.Broadcast(im.Reshape(y, split), wide), res);
      } else {
        y = GatherConst(im, y, static_cast<int64_t>(a), idx);
      }
    } else if (rule.mode == "cubic" || (rule.antialias && scales[a] < 1)) {
      // Weighted taps, one gather each (indices clamped: the spec's edge padding), as ONNX's
      // reference computes them: the filter (support 1 for linear, 2 for cubic) is widened by
      // 1/scale when antialiasing a downscale, and its weights then normalised; exclude_outside
      // drops the taps outside the input and renormalises the rest.
      const bool cubic = rule.mode == "cubic";
      const double scale = rule.antialias ? std::min(scales[a], 1.0) : 1.0;
      const double support = cubic ? 2.0 : 1.0;
      const int64_t first = static_cast<int64_t>(std::floor(-support / scale)) + 1;
      const int64_t count = 2 - 2 * first;
      if (count > 64) return Unsupported("Resize with antialias downscaling by more than 1/32");
      std::vector<std::vector<int64_t>> taps(static_cast<size_t>(count));
      std::vector<std::vector<double>> weights(static_cast<size_t>(count));
      for (int64_t i = 0; i < o; ++i) {
        const double xf = original(i);
        const double f = std::floor(xf);
        std::vector<double> w(static_cast<size_t>(count));
        double total = 0, kept = 0;
        for (int64_t k = 0; k < count; ++k) {
          const double t = f + static_cast<double>(first + k);
          double v = ResizeFilter(cubic, rule.cubic_coeff_a, (t - xf) * scale);
          total += v;
          if (rule.exclude_outside && (t < 0 || t > static_cast<double>(in - 1))) v = 0;
          kept += v;
          w[static_cast<size_t>(k)] = v;
        }
        const double norm = rule.exclude_outside ? kept : (rule.antialias ? total : 1.0);
        for (int64_t k = 0; k < count; ++k) {
          const double t =
              std::clamp(f + static_cast<double>(first + k), 0.0, static_cast<double>(in - 1));
          taps[static_cast<size_t>(k)].push_back(static_cast<int64_t>(t));
          weights[static_cast<size_t>(k)].push_back(norm != 0 ? w[static_cast<size_t>(k)] / norm
                                                              : 0.0);
        }
      }
      NodeId sum = ir::kInvalidNode;
      for (int64_t k = 0; k < count; ++k) {
        NodeId g = GatherConst(im, y, static_cast<int64_t>(a), taps[static_cast<size_t>(k)]);
        Shape ws(im.shape(g).size(), 1);
        ws[a] = o;
        ir::TensorData wd(im.dtype(y), ws);
        for (int64_t i = 0; i < o; ++i) {
          wd.SetDouble(i, weights[static_cast<size_t>(k)][static_cast<size_t>(i)]);
        }
        NodeId term = im.Binary(Op::kMul, g, im.Broadcast(im.Const(std::move(wd)), im.shape(g)));
        sum = k == 0 ? term : im.Binary(Op::kAdd, sum, term);
      }
      y = sum;
    } else {
      std::vector<int64_t> i0, i1;
      std::vector<double> wt;
      for (int64_t i = 0; i < o; ++i) {
        double xf = std::clamp(original(i), 0.0, static_cast<double>(in - 1));
        int64_t f = static_cast<int64_t>(std::floor(xf));
        i0.push_back(f);
        i1.push_back(std::min(f + 1, in - 1));
        wt.push_back(xf - static_cast<double>(f));
      }
      NodeId lo = GatherConst(im, y, static_cast<int64_t>(a), i0);
      NodeId hi = GatherConst(im, y, static_cast<int64_t>(a), i1);
      Shape ws(im.shape(lo).size(), 1);
      ws[a] = o;
      ir::TensorData wd(im.dtype(y), ws);
      for (int64_t i = 0; i < o; ++i) wd.SetDouble(i, wt[static_cast<size_t>(i)]);
      NodeId w = im.Broadcast(im.Const(std::move(wd)), im.shape(lo));
      y = im.Binary(Op::kAdd, lo, im.Binary(Op::kMul, im.Binary(Op::kSub, hi, lo), w));
    }
    if (any_outside) {
      Shape ms(im.shape(y).size(), 1);
      ms[a] = o;
      ir::TensorData md(ir::DType::kBool, ms);
      for (int64_t i = 0; i < o; ++i) md.SetDouble(i, outside[static_cast<size_t>(i)] ? 1 : 0);
      y = im.Select(im.Broadcast(im.Const(std::move(md)), im.shape(y)),
                    im.Like(rule.extrapolation_value, y), y);
    }
  }
  return y;
}

// Resize by version: 10 (inputs X, scales; attribute mode; legacy coordinates), 11 (X, roi,
// scales, sizes; coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
// extrapolation_value), 13 (roi and scales optional, tf_half_pixel_for_nn gone), 18
// (antialias, axes, keep_aspect_ratio_policy), 19 (half_pixel_symmetric). Modes nearest and
// linear; cubic, tf_crop_and_resize (roi, extrapolation_value) and antialias.
absl::Status Resize(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  const Shape s = im.shape(x);
  const int64_t v = im.opset();
  const size_t r = s.size();
  for (const char* a : {"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                        "extrapolation_value", "nearest_mode"}) {
    TRY_OK(AttrSince(im, n, a, 11));
  }
  for (const char* a : {"antialias", "axes", "keep_aspect_ratio_policy"}) {
    TRY_OK(AttrSince(im, n, a, 18));
  }
  if (v < 11 && Importer::NumInputs(n) > 2) {
    return Bad(absl::StrCat("has ", Importer::NumInputs(n),
                            " inputs; before opset 11 Resize takes X and scales only (the model "
                            "imports opset ",
                            v, ")"));
  }
  ResizeRule rule;
  rule.mode = AttrString(n, "mode", "nearest");
  if (rule.mode != "nearest" && rule.mode != "linear" && (rule.mode != "cubic" || v < 11)) {
    return Bad(absl::StrCat("bad mode '", rule.mode, "'",
                            v < 11 ? " (Resize-10 has nearest and linear)" : ""));
  }
  rule.cubic_coeff_a = AttrFloat(n, "cubic_coeff_a", -0.75f);
  rule.exclude_outside = AttrInt(n, "exclude_outside", 0) != 0;
  if (v < 11) {
    rule.ctm = "asymmetric";
    rule.nearest_mode = "legacy";
  } else {
    rule.ctm = AttrString(n, "coordinate_transformation_mode", "half_pixel");
    rule.nearest_mode = AttrString(n, "nearest_mode", "round_prefer_floor");
    const bool known = rule.ctm == "half_pixel" || rule.ctm == "pytorch_half_pixel" ||
                       rule.ctm == "align_corners" || rule.ctm == "asymmetric" ||
                       rule.ctm == "tf_crop_and_resize" ||
                       (rule.ctm == "tf_half_pixel_for_nn" && v < 13) ||
                       (rule.ctm == "half_pixel_symmetric" && v >= 19);
    if (!known) {
      return Bad(absl::StrCat("coordinate_transformation_mode '", rule.ctm,
                              "' is not defined in opset ", v,
                              " (tf_half_pixel_for_nn is in 11-12, half_pixel_symmetric from "
                              "19)"));
    }
  }
  // The axes the scales / sizes refer to (18): all by default.
  std::vector<int64_t> axes;
  if (auto a = AttrInts(n, "axes")) {
    TRY(axes, NormAxes(*a, static_cast<int64_t>(r)));
    if (axes.size() != a->size()) return Bad("repeated axis");
    axes.clear();
    for (int64_t ax : *a) axes.push_back(ax < 0 ? ax + static_cast<int64_t>(r) : ax);
  } else {
    for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  const std::string policy = AttrString(n, "keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller") {
    return Bad(absl::StrCat("bad keep_aspect_ratio_policy '", policy, "'"));
  }
  std::vector<double> scales(r, 1.0);
  Shape out = s;
  const int scales_input = v < 11 ? 1 : 2;
  std::vector<int64_t> sizes;
  if (v >= 11 && Importer::HasInput(n, 3)) {
    TRY(sizes, im.ConstInts(n, 3));
  }
  std::optional<ir::TensorData> given;
  if (Importer::HasInput(n, scales_input)) {
    TRY(ir::TensorData st, im.ConstInput(n, scales_input));
    if (st.num_elements() > 0) given = std::move(st);
  } else if (v < 13) {
    return Bad(absl::StrCat("input ", scales_input, " (scales) is required before opset 13"));
  }
  if (given && !sizes.empty()) return Bad("has both scales and sizes");
  if (!sizes.empty()) {
    if (sizes.size() != axes.size()) {
      return Bad(absl::StrCat("sizes has ", sizes.size(), " entries for ", axes.size(), " axes"));
    }
    for (int64_t z : sizes) {
      if (z < 0 || z > (1 << 24)) return Bad(absl::StrCat("bad size ", z));
    }
    if (policy == "stretch") {
      for (size_t i = 0; i < axes.size(); ++i) {
        const size_t d = static_cast<size_t>(axes[i]);
        out[d] = sizes[i];
        scales[d] = s[d] == 0 ? 1.0 : static_cast<double>(out[d]) / static_cast<double>(s[d]);
      }
    } else {
      // One scale for all the axes, the largest that fits (not_larger) or the smallest that
      // covers (not_smaller); sizes round half up.
      double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
      for (size_t i = 0; i < axes.size(); ++i) {
        const size_t d = static_cast<size_t>(axes[i]);
        if (s[d] == 0) return Bad("cannot resize an empty axis");
        const double q = static_cast<double>(sizes[i]) / static_cast<double>(s[d]);
        scale = policy == "not_larger" ? std::min(scale, q) : std::max(scale, q);
      }
      for (int64_t ax : axes) {
        const size_t d = static_cast<size_t>(ax);
        out[d] = static_cast<int64_t>(std::floor(scale * static_cast<double>(s[d]) + 0.5));
        scales[d] = scale;
      }
    }
  } else if (given) {
    if (given->num_elements() != static_cast<int64_t>(axes.size())) {
      return Bad(absl::StrCat("scales has ", given->num_elements(), " entries for ", axes.size(),
                              " axes"));
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      const size_t d = static_cast<size_t>(axes[i]);
      scales[d] = given->GetDouble(static_cast<int64_t>(i));
      if (!(scales[d] > 0) || scales[d] > (1 << 16)) return Bad("scales must be positive");
      out[d] = static_cast<int64_t>(std::floor(static_cast<double>(s[d]) * scales[d]));
    }
  } else {
    return Bad("needs scales or sizes");
  }
  TRY(out, ShapeFromInts(out));
  if (rule.ctm == "tf_crop_and_resize") {
    // roi (input 1): starts then ends, for every axis or (18) for the listed axes; the others
    // keep [0, 1].
    if (!Importer::HasInput(n, 1)) return Bad("tf_crop_and_resize needs the roi input");
    TRY(ir::TensorData roi, im.ConstInput(n, 1));
    if (roi.num_elements() != 2 * static_cast<int64_t>(axes.size())) {
      return Bad(absl::StrCat("roi has ", roi.num_elements(), " entries for ", axes.size(),
                              " axes (starts, then ends)"));
    }
    rule.roi_start.assign(r, 0.0);
    rule.roi_end.assign(r, 1.0);
    const auto count = static_cast<int64_t>(axes.size());
    for (int64_t i = 0; i < count; ++i) {
      const auto d = static_cast<size_t>(axes[static_cast<size_t>(i)]);
      rule.roi_start[d] = roi.GetDouble(i);
      rule.roi_end[d] = roi.GetDouble(i + count);
      if (!std::isfinite(rule.roi_start[d]) || !std::isfinite(rule.roi_end[d])) {
        return Bad("roi must be finite");
      }
    }
    rule.extrapolation_value = AttrFloat(n, "extrapolation_value", 0.0f);
  }
  rule.antialias = AttrInt(n, "antialias", 0) != 0 && rule.mode != "nearest";
  TRY(NodeId y, Interpolate(im, x, out, scales, rule));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// Upsample (7: a `scales` attribute; 9: a scales input; removed in 10): Resize-10's rule, with
// scales >= 1.
absl::Status Upsample(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY_OK(InputsSince(im, n, 1, 9, "scales"));
  TRY_OK(AttrUntil(im, n, "scales", 9));
  const Shape s = im.shape(x);
  std::vector<double> scales;
  if (im.opset() < 9) {
    const auto* a = FindAttr(n, "scales");
    if (!a) return Bad("attribute 'scales' is required before opset 9");
    scales.assign(a->floats().begin(), a->floats().end());
  } else {
    TRY(ir::TensorData st, im.ConstInput(n, 1));
    for (int64_t i = 0; i < st.num_elements(); ++i) scales.push_back(st.GetDouble(i));
  }
  if (scales.size() != s.size()) {
    return Bad(absl::StrCat("scales has ", scales.size(), " entries for rank ", s.size()));
  }
  Shape out = s;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!(scales[i] >= 1) || scales[i] > (1 << 16)) {
      return Bad(absl::StrCat("scale ", scales[i], " of axis ", i, " must be >= 1 (Upsample)"));
    }
    out[i] = static_cast<int64_t>(std::floor(static_cast<double>(s[i]) * scales[i]));
  }
  TRY(out, ShapeFromInts(out));
  ResizeRule rule;
  rule.mode = AttrString(n, "mode", "nearest");
  rule.ctm = "asymmetric";
  rule.nearest_mode = "legacy";
  if (rule.mode != "nearest" && rule.mode != "linear") {
    return Bad(absl::StrCat("bad mode '", rule.mode, "' (Upsample has nearest and linear)"));
  }
  TRY(NodeId y, Interpolate(im, x, out, scales, rule));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// ---- Einsum ------------------------------------------------------------------------------------

// An operand of an einsum with one letter per axis.
struct Term {
  NodeId node;
  std::string letters;
};

// Sums away the letters of `t` that are not in `keep`.
Term SumAway(Importer& im, Term t, const std::string& keep) {
  std::vector<int64_t> axes;
  std::string rest;
  Shape out;
  for (size_t i = 0; i < t.letters.size(); ++i) {
    if (keep.find(t.letters[i]) == std::string::npos) {
      axes.push_back(static_cast<int64_t>(i));
    } else {
      rest += t.letters[i];
      out.push_back(im.shape(t.node)[i]);
    }
  }
  if (axes.empty()) return t;
  return {im.Reshape(im.Reduce(Op::kReduceSum, t.node, axes), out), rest};
}

// Permutes `t` into the letter order `order` (a permutation of t.letters).
NodeId Arrange(Importer& im, const Term& t, const std::string& order) {
  std::vector<int64_t> perm;
  for (char c : order) perm.push_back(static_cast<int64_t>(t.letters.find(c)));
  return im.Permute(t.node, perm);
}

// a x b keeping the letters in `keep`: batch letters (in both, kept), contracted (in both, not
// kept), left-only and right-only, as one batched matmul [batch, L, K] x [batch, K, R].
absl::StatusOr<Term> Contract(Importer& im, Term a, Term b, const std::string& keep) {
  std::string both_keep, contract, left, right;
  for (char c : a.letters) {
    bool in_b = b.letters.find(c) != std::string::npos;
    bool kept = keep.find(c) != std::string::npos;
    if (in_b) {
      const int64_t da = im.shape(a.node)[a.letters.find(c)],
                    db = im.shape(b.node)[b.letters.find(c)];
      if (da != db)
        return Bad(absl::StrCat("letter '", std::string(1, c), "' has sizes ", da, " and ", db));
      (kept ? both_keep : contract) += c;
    } else {
      left += c;
    }
  }
  for (char c : b.letters) {
    if (a.letters.find(c) == std::string::npos) right += c;
  }
  auto size_of = [&](const std::string& letters, const Term& t) {
    int64_t p = 1;
    for (char c : letters) p *= im.shape(t.node)[t.letters.find(c)];
    return p;
  };
  const int64_t nb = size_of(both_keep, a), nl = size_of(left, a), nk = size_of(contract, a),
                nr = size_of(right, b);
  Shape out_shape;
  for (char c : both_keep + left) out_shape.push_back(im.shape(a.node)[a.letters.find(c)]);
  for (char c : right) out_shape.push_back(im.shape(b.node)[b.letters.find(c)]);
  NodeId x = im.Reshape(Arrange(im, a, both_keep + left + contract), {nb, nl, nk});
  NodeId y = im.Reshape(Arrange(im, b, both_keep + contract + right), {nb, nk, nr});
  NodeId r = im.Fold(im.b().MatMul(x, y));
  return Term{im.Reshape(r, out_shape), both_keep + left + right};
}

// The diagonal of a term whose letter repeats (x_ii): the second occurrence is masked to the
// identity and summed away, until every letter is once in the term.
absl::StatusOr<Term> Diagonals(Importer& im, Term t) {
  for (size_t k = 0; k < t.letters.size(); ++k) {
    const size_t j = t.letters.find(t.letters[k]);
    if (j == k) continue;
    const Shape s = im.shape(t.node);
    if (s[j] != s[k]) {
      return Bad(absl::StrCat("letter '", std::string(1, t.letters[k]), "' has sizes ", s[j],
                              " and ", s[k], " in one operand"));
    }
    const int64_t d = s[j];
    if (d > 4096) return Unsupported("Einsum diagonals longer than 4096");
    Shape ms(s.size(), 1);
    ms[j] = ms[k] = d;
    ir::TensorData eye(ir::DType::kBool, {d, d});
    for (int64_t i = 0; i < d; ++i) eye.SetDouble(i * d + i, 1);
    NodeId mask = im.Broadcast(im.Reshape(im.Const(std::move(eye)), ms), s);
    NodeId kept = im.Select(mask, t.node, im.Like(0, t.node));
    Shape out = s;
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(k));
    std::string letters = t.letters;
    letters.erase(k, 1);
    return Diagonals(
        im, {im.Reshape(im.Reduce(Op::kReduceSum, kept, {static_cast<int64_t>(k)}), out), letters});
  }
  return t;
}

absl::Status Einsum(Importer& im, const NodeProto& n) {
  std::string eq;
  for (char c : AttrString(n, "equation", "")) {
    if (c != ' ') eq += c;
  }
  const size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow), out;
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(terms.size()) != Importer::NumInputs(n)) {
    return Bad(absl::StrCat("equation '", eq, "' has ", terms.size(), " operands, the node ",
                            Importer::NumInputs(n)));
  }
  std::vector<NodeId> xs;
  for (size_t i = 0; i < terms.size(); ++i) {
    TRY(NodeId x, im.Input(n, static_cast<int>(i)));
    xs.push_back(x);
  }
  // An ellipsis stands for the operand's dims that no letter names, right-aligned across the
  // operands (numpy broadcasting); each of those dims becomes a letter the equation does not
  // use. Without "->", the output is the ellipsis' dims, then the letters that occur once.
  std::string spare;
  for (char c = 'A'; c <= 'Z'; ++c) {
    if (eq.find(c) == std::string::npos) spare += c;
  }
  for (char c = 'a'; c <= 'z'; ++c) {
    if (eq.find(c) == std::string::npos) spare += c;
  }
  size_t ellipsis_rank = 0;
  bool has_ellipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    const size_t at = terms[i].find("...");
    if (at == std::string::npos) continue;
    has_ellipsis = true;
    if (terms[i].find("...", at + 1) != std::string::npos ||
        terms[i].find('.', at + 3) != std::string::npos) {
      return Bad(absl::StrCat("bad equation '", eq, "'"));
    }
    const int64_t named = static_cast<int64_t>(terms[i].size()) - 3;
    if (im.rank(xs[i]) < named) {
      return Bad(absl::StrCat("operand ", i, " has rank ", im.rank(xs[i]), ", its term '", terms[i],
                              "' ", named, " letters"));
    }
    ellipsis_rank = std::max(ellipsis_rank, static_cast<size_t>(im.rank(xs[i]) - named));
  }
  if (ellipsis_rank > spare.size()) return Unsupported("an ellipsis of too many dims");
  const std::string dots = spare.substr(0, ellipsis_rank);
  for (size_t i = 0; i < terms.size(); ++i) {
    const size_t at = terms[i].find("...");
    if (at == std::string::npos) continue;
    const size_t k = static_cast<size_t>(im.rank(xs[i])) - (terms[i].size() - 3);
    terms[i].replace(at, 3, dots.substr(dots.size() - k));
  }
  std::map<char, int> count;
  for (const auto& t : terms) {
    for (char c : t) {
      if (!std::isalpha(static_cast<unsigned char>(c)))
        return Bad(absl::StrCat("bad equation '", eq, "'"));
      ++count[c];
    }
  }
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (const size_t at = out.find("..."); at != std::string::npos) {
      if (!has_ellipsis) return Bad(absl::StrCat("bad equation '", eq, "'"));
      out.replace(at, 3, dots);
    }
    for (char c : out) {
      if (!count.count(c))
        return Bad(absl::StrCat("output letter '", std::string(1, c), "' is in no operand"));
      if (std::count(out.begin(), out.end(), c) != 1) {
        return Bad(absl::StrCat("output letter '", std::string(1, c), "' repeats"));
      }
    }
  } else {
    out = dots;
    for (const auto& [c, k] : count) {
      if (k == 1 && dots.find(c) == std::string::npos) out += c;
    }
  }
  // Each letter's size: equal in every operand, or 1 where another is larger (broadcast).
  std::map<char, int64_t> size;
  std::vector<Term> ops;
  for (size_t i = 0; i < terms.size(); ++i) {
    NodeId x = xs[i];
    if (static_cast<int64_t>(terms[i].size()) != im.rank(x)) {
      return Bad(absl::StrCat("operand ", i, " has rank ", im.rank(x), ", its term '", terms[i],
                              "' ", terms[i].size(), " letters"));
    }
    TRY(Term t, Diagonals(im, {x, terms[i]}));
    for (size_t j = 0; j < t.letters.size(); ++j) {
      const int64_t d = im.shape(t.node)[j];
      auto [it, fresh] = size.emplace(t.letters[j], d);
      if (!fresh && it->second != d && d != 1 && it->second != 1) {
        return Bad(absl::StrCat("letter '", std::string(1, t.letters[j]), "' has sizes ",
                                it->second, " and ", d));
      }
      it->second = std::max(it->second, d);
    }
    ops.push_back(t);
  }
  for (Term& t : ops) {
    Shape want;
    for (char c : t.letters) want.push_back(size[c]);
    t.node = im.Broadcast(t.node, want);
  }
  // Left to right: each step keeps the letters the output or a later operand needs.
  auto needed_after = [&](size_t i) {
    std::string keep = out;
    for (size_t j = i + 1; j < ops.size(); ++j) keep += ops[j].letters;
    return keep;
  };
  Term acc = SumAway(im, ops[0], needed_after(0) + (ops.size() > 1 ? ops[1].letters : ""));
  for (size_t i = 1; i < ops.size(); ++i) {
    Term next = SumAway(im, ops[i], needed_after(i) + acc.letters);
    TRY(acc, Contract(im, acc, next, needed_after(i)));
  }
  acc = SumAway(im, acc, out);
  im.SetOutput(n, 0, Arrange(im, acc, out));
  return absl::OkStatus();
}

// ---- Issue 15: LRN, Gelu, Mish, scatters, quantization, Compress ------------------------------

// LRN across channels (x is [N, C, D1, ...]): the window of `size` channels around c is
// [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)], clipped to the input, as a window_sum
// of the squares padded with zeros; y = x / (bias + alpha / size * sum)^beta.
absl::Status Lrn(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (!ir::IsFloat(im.dtype(x))) {
    return Bad(absl::StrCat("needs a float input, not ", ir::TypeToString(im.type(x))));
  }
  if (im.rank(x) < 3) return Bad("needs an input of rank >= 3 ([N, C, D1, ...])");
  const int64_t size = AttrInt(n, "size", 0);
  if (size < 1 || size > (1 << 20)) {
    return Bad(absl::StrCat("attribute 'size' must be a positive integer, not ", size));
  }
  const double alpha = AttrFloat(n, "alpha", 1e-4f), beta = AttrFloat(n, "beta", 0.75f),
               bias = AttrFloat(n, "bias", 1.0f);
  const size_t r = static_cast<size_t>(im.rank(x));
  ir::Attrs a;
  a.window.assign(r, 1);
  a.strides.assign(r, 1);
  a.low.assign(r, 0);
  a.high.assign(r, 0);
  a.dilation.assign(r, 1);
  a.window[1] = size;
  a.low[1] = (size - 1) / 2;
  a.high[1] = size - 1 - a.low[1];
  NodeId sum = im.Fold(im.b().WindowReduce(Op::kWindowSum, im.Binary(Op::kMul, x, x), a));
  NodeId base = Shifted(im, Scaled(im, sum, alpha / static_cast<double>(size)), bias);
  NodeId denom = beta == 1.0 ? base : im.Binary(Op::kPow, base, im.Like(beta, base));
  im.SetOutput(n, 0, im.Binary(Op::kDiv, x, denom));
  return absl::OkStatus();
}

// Gelu (opset 20): x * Phi(x) with the exact erf form, or the tanh approximation.
absl::Status Gelu(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (!ir::IsFloat(im.dtype(x))) {
    return Bad(absl::StrCat("needs a float input, not ", ir::TypeToString(im.type(x))));
  }
  const std::string approximate = AttrString(n, "approximate", "none");
  NodeId inner;
  if (approximate == "none") {
    inner = im.Unary(Op::kErf, Scaled(im, x, 1.0 / std::sqrt(2.0)));
  } else if (approximate == "tanh") {
    NodeId cube = im.Binary(Op::kMul, im.Binary(Op::kMul, x, x), x);
    NodeId arg = im.Binary(Op::kAdd, x, Scaled(im, cube, 0.044715));
    inner = im.Unary(Op::kTanh, Scaled(im, arg, std::sqrt(2.0 / 3.14159265358979323846)));
  } else {
    return Bad(
        absl::StrCat("attribute 'approximate' must be 'none' or 'tanh', not '", approximate, "'"));
  }
  im.SetOutput(n, 0, Scaled(im, im.Binary(Op::kMul, x, Shifted(im, inner, 1.0)), 0.5));
  return absl::OkStatus();
}

// Mish (opset 18): x * tanh(softplus(x)), softplus written without overflow.
absl::Status Mish(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  if (!ir::IsFloat(im.dtype(x))) {
    return Bad(absl::StrCat("needs a float input, not ", ir::TypeToString(im.type(x))));
  }
  NodeId e = im.Unary(Op::kExp, im.Unary(Op::kNeg, im.Unary(Op::kAbs, x)));
  NodeId softplus = im.Binary(Op::kAdd, im.Binary(Op::kMax, x, im.Like(0, x)),
                              im.Unary(Op::kLog, Shifted(im, e, 1.0)));
  im.SetOutput(n, 0, im.Binary(Op::kMul, x, im.Unary(Op::kTanh, softplus)));
  return absl::OkStatus();
}

enum class ScatterRed { kNone, kAdd, kMul, kMax, kMin };

// The `reduction` attribute, checked against the opset that introduced it (add/mul in 16,
// max/min in 18).
absl::StatusOr<ScatterRed> ScatterReduction(Importer& im, const NodeProto& n) {
  const std::string r = AttrString(n, "reduction", "none");
  ScatterRed red;
  int64_t since;
  if (r == "none") return ScatterRed::kNone;
  if (r == "add") {
    red = ScatterRed::kAdd, since = 16;
  } else if (r == "mul") {
    red = ScatterRed::kMul, since = 16;
  } else if (r == "max") {
    red = ScatterRed::kMax, since = 18;
  } else if (r == "min") {
    red = ScatterRed::kMin, since = 18;
  } else {
    return Bad(absl::StrCat("bad reduction '", r, "' (none, add, mul, max, min)"));
  }
  if (im.opset() < since) {
    return Bad(absl::StrCat("reduction '", r, "' needs opset ", since, " (the model imports opset ",
                            im.opset(), ")"));
  }
  return red;
}

// ScatterElements along `axis` with in-range i64 indices (`index` and `src` of one shape, no
// larger than x off the axis). none and add go through the IR's scatter_add (none: where any
// index hits, the scattered sum; ONNX leaves duplicate indices undefined there); mul, max and
// min compare every index with every position along the axis (x's elements × index's axis
// length of work), as the IR has no other scatter.
absl::StatusOr<NodeId> ScatterAlong(Importer& im, NodeId x, NodeId index, NodeId src, int64_t axis,
                                    ScatterRed red) {
  const Shape xs = im.shape(x), is = im.shape(index);
  if (im.shape(src) != is) {
    return Bad(absl::StrCat("updates ", ir::TypeToString(im.type(src)),
                            " must have the indices' shape ", ir::ShapeToString(is)));
  }
  if (im.dtype(src) != im.dtype(x)) {
    return Bad(absl::StrCat("updates ", ir::TypeToString(im.type(src)), " and data ",
                            ir::TypeToString(im.type(x)), " differ in type"));
  }
  if (is.size() != xs.size()) {
    return Bad(absl::StrCat("indices ", ir::ShapeToString(is), " and data ", ir::ShapeToString(xs),
                            " differ in rank"));
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (static_cast<int64_t>(i) != axis && is[i] > xs[i]) {
      return Bad(absl::StrCat("indices ", ir::ShapeToString(is), " exceed data ",
                              ir::ShapeToString(xs), " on axis ", i));
    }
  }
  if (ir::NumElements(is) == 0) return x;
  const ir::DType t = im.dtype(x);
  // scatter_add takes no bool: scatter bools as u8 0/1 (max = or, min = and, mul = and).
  const bool is_bool = t == ir::DType::kBool;
  NodeId xw = is_bool ? im.Cast(x, ir::DType::kU8) : x;
  NodeId uw = is_bool ? im.Cast(src, ir::DType::kU8) : src;
  NodeId y;
  if (red == ScatterRed::kAdd) {
    if (is_bool) return Unsupported("reduction 'add' on bool data is not supported");
    y = im.Fold(im.b().ScatterAdd(xw, index, uw, axis));
  } else if (red == ScatterRed::kNone) {
    NodeId hits = im.Fold(im.b().ScatterAdd(im.Full(0, ir::DType::kI32, xs), index,
                                            im.Full(1, ir::DType::kI32, is), axis));
    NodeId hit = im.Binary(Op::kGt, hits, im.Like(0, hits));
    NodeId vals = im.Fold(im.b().ScatterAdd(im.Like(0, xw), index, uw, axis));
    y = im.Select(hit, vals, xw);
  } else {
    const int64_t r = static_cast<int64_t>(xs.size());
    const int64_t d = xs[static_cast<size_t>(axis)], k = is[static_cast<size_t>(axis)];
    if (ir::NumElements(xs) > (int64_t{1} << 28) / std::max<int64_t>(k, 1)) {
      return Unsupported(absl::StrCat("reduction mul/max/min costs data × index-axis elements; ",
                                      ir::ShapeToString(xs), " × ", k, " is above 2^28"));
    }
    // The axis last: x [off..., d], index/src [off'..., k] padded off the axis to x's extent
    // (index -1 matches no position), then compared as [off..., d, k] and reduced over k.
    std::vector<int64_t> perm, inverse(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) {
      if (i != axis) perm.push_back(i);
    }
    perm.push_back(axis);
    for (int64_t i = 0; i < r; ++i) inverse[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
    NodeId xp = im.Permute(xw, perm), ip = im.Permute(index, perm), up = im.Permute(uw, perm);
    const Shape xps = im.shape(xp), ips = im.shape(ip);
    std::vector<int64_t> low(static_cast<size_t>(r), 0), high(static_cast<size_t>(r), 0);
    bool pad = false;
    for (size_t i = 0; i + 1 < static_cast<size_t>(r); ++i) {
      high[i] = xps[i] - ips[i];
      pad = pad || high[i] > 0;
    }
    if (pad) {
      ip = im.Fold(im.b().Pad(ip, low, high, -1));
      up = im.Fold(im.b().Pad(up, low, high, 0));
    }
    Shape off(xps.begin(), xps.end() - 1);
    Shape big = off, one_k = off;
    big.insert(big.end(), {d, k});
    one_k.insert(one_k.end(), {1, k});
    NodeId pos = im.b().Iota({ir::DType::kI64, big}, r - 1);
    NodeId match = im.Binary(Op::kEq, im.Broadcast(im.Reshape(ip, one_k), big), pos);
    const double inf = std::numeric_limits<double>::infinity();
    const double identity = red == ScatterRed::kMul ? 1.0 : red == ScatterRed::kMax ? -inf : inf;
    const Op reduce = red == ScatterRed::kMul   ? Op::kReduceProd
                      : red == ScatterRed::kMax ? Op::kReduceMax
                                                : Op::kReduceMin;
    const Op combine = red == ScatterRed::kMul   ? Op::kMul
                       : red == ScatterRed::kMax ? Op::kMax
                                                 : Op::kMin;
    NodeId ub = im.Broadcast(im.Reshape(up, one_k), big);
    NodeId vals = im.Select(match, ub, im.Full(identity, im.dtype(ub), big));
    NodeId reduced = im.Reshape(im.Reduce(reduce, vals, {r}), xps);
    y = im.Permute(im.Binary(combine, xp, reduced), inverse);
  }
  return is_bool ? im.Cast(y, ir::DType::kBool) : y;
}

// Indices as i64 with negative values counted from the end of an axis of `size`.
NodeId NonNegativeIndex(Importer& im, NodeId index, NodeId size) {
  NodeId i = im.Cast(index, ir::DType::kI64);
  return im.Select(im.Binary(Op::kLt, i, im.Like(0, i)), im.Binary(Op::kAdd, i, size), i);
}

// Import-time range check of constant indices (a run-time scatter would only see the linear
// index of ScatterND, where an out-of-range component can land on another element).
absl::Status CheckKnownIndices(Importer& im, NodeId index, const Shape& dims) {
  std::optional<ir::TensorData> known = im.KnownValue(index);
  if (!known || dims.empty()) return absl::OkStatus();
  const std::vector<int64_t> v = known->ToInt64s();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t d = dims[i % dims.size()];
    if (v[i] < -d || v[i] >= d) {
      return Bad(absl::StrCat("index ", v[i], " (element ", i, " of the indices) is out of range ",
                              "for an axis of size ", d));
    }
  }
  return absl::OkStatus();
}

// ScatterElements (opsets 11-18) and the deprecated Scatter (9-10, no reduction).
absl::Status ScatterElements(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId index, im.Input(n, 1));
  TRY(NodeId src, im.Input(n, 2));
  if (!ir::IsInteger(im.dtype(index))) return Bad("indices must be integers");
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 0), im.rank(x)));
  TRY(ScatterRed red, ScatterReduction(im, n));
  const int64_t d = im.shape(x)[static_cast<size_t>(axis)];
  // An index tensor checks against one axis: every element against d.
  if (absl::Status s = CheckKnownIndices(im, index, {d}); !s.ok()) return s;
  NodeId fixed = NonNegativeIndex(
      im, index, im.Full(static_cast<double>(d), ir::DType::kI64, im.shape(index)));
  TRY(NodeId y, ScatterAlong(im, x, fixed, src, axis, red));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// ScatterND: indices [q..., k] address data's first k axes; each update is data[k:]-shaped.
// Lowered as ScatterElements on data viewed as [prod(dims[:k]), prod(dims[k:])] with each
// update's row index (the linearized index tuple) broadcast along the row.
absl::Status ScatterND(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId index, im.Input(n, 1));
  TRY(NodeId src, im.Input(n, 2));
  if (!ir::IsInteger(im.dtype(index))) return Bad("indices must be integers");
  TRY(ScatterRed red, ScatterReduction(im, n));
  const Shape xs = im.shape(x), is = im.shape(index);
  if (is.empty()) return Bad("indices must have rank >= 1");
  const int64_t k = is.back();
  if (k > static_cast<int64_t>(xs.size())) {
    return Bad(absl::StrCat("indices ", ir::ShapeToString(is), " address ", k,
                            " axes of data of rank ", xs.size()));
  }
  Shape q(is.begin(), is.end() - 1), want = q;
  want.insert(want.end(), xs.begin() + k, xs.end());
  if (im.shape(src) != want) {
    return Bad(absl::StrCat("updates ", ir::TypeToString(im.type(src)), " must have shape ",
                            ir::ShapeToString(want), " (indices.shape[:-1] + data.shape[", k,
                            ":])"));
  }
  const Shape lead(xs.begin(), xs.begin() + k);
  if (absl::Status s = CheckKnownIndices(im, index, lead); !s.ok()) return s;
  const int64_t m = Product(xs, 0, static_cast<size_t>(k)),
                rest = Product(xs, static_cast<size_t>(k), xs.size()), u = ir::NumElements(q);
  ir::TensorData dims(ir::DType::kI64, {1, k}), strides(ir::DType::kI64, {1, k});
  for (int64_t j = k - 1, stride = 1; j >= 0; --j) {
    dims.SetInt64(j, lead[static_cast<size_t>(j)]);
    strides.SetInt64(j, stride);
    stride *= lead[static_cast<size_t>(j)];
  }
  NodeId tuples = im.Reshape(im.Cast(index, ir::DType::kI64), {u, k});
  NodeId fixed = NonNegativeIndex(im, tuples, im.Broadcast(im.Const(std::move(dims)), {u, k}));
  NodeId row = im.Reduce(
      Op::kReduceSum,
      im.Binary(Op::kMul, fixed, im.Broadcast(im.Const(std::move(strides)), {u, k})), {1});
  TRY(NodeId y, ScatterAlong(im, im.Reshape(x, {m, rest}), im.Broadcast(row, {u, rest}),
                             im.Reshape(src, {u, rest}), 0, red));
  im.SetOutput(n, 0, im.Reshape(y, xs));
  return absl::OkStatus();
}

// A quantization scale or zero point broadcast to x's shape: per tensor (a scalar or a
// one-element 1-D tensor), per axis (1-D along `axis`, opset 13+) or blocked (opset 21's
// block_size B: x's shape but ceil(D / B) along `axis`, each value repeated B times there).
absl::StatusOr<NodeId> QuantParam(Importer& im, const NodeProto& n, NodeId p, NodeId x,
                                  const char* what) {
  TRY_OK(AttrSince(im, n, "block_size", 21));
  const int64_t block = AttrInt(n, "block_size", 0);
  if (block < 0 || block > (int64_t{1} << 30)) {
    return Bad(absl::StrCat("bad block_size ", block));
  }
  const Shape xs = im.shape(x), ps = im.shape(p);
  const int64_t count = im.type(p).num_elements();
  if (block == 0 && (ps.empty() || (ps.size() == 1 && count == 1))) {
    return im.Broadcast(im.Reshape(p, Shape(xs.size(), 1)), xs);
  }
  if (im.opset() < 13) return Bad(absl::StrCat(what, " must be a scalar before opset 13"));
  if (xs.empty()) {
    return Bad(absl::StrCat(what, " ", ir::TypeToString(im.type(p)),
                            " must be a scalar for a scalar input"));
  }
  TRY(int64_t axis, NormAxis(AttrInt(n, "axis", 1), im.rank(x)));
  const auto ax = static_cast<size_t>(axis);
  if (block > 0) {
    Shape want = xs;
    want[ax] = (xs[ax] + block - 1) / block;
    if (ps != want) {
      return Bad(absl::StrCat(what, " ", ir::TypeToString(im.type(p)), " must have shape ",
                              ir::ShapeToString(want), " for blocks of ", block, " along axis ",
                              axis, " of ", ir::TypeToString(im.type(x))));
    }
    if (want[ax] * block > (int64_t{1} << 31)) return Bad("block_size is too large");
    // [.., S, ..] -> [.., S, 1, ..] -> [.., S, B, ..] -> [.., S * B, ..] -> the first D.
    Shape split = ps;
    split.insert(split.begin() + axis + 1, 1);
    Shape wide = split;
    wide[ax + 1] = block;
    Shape merged = ps;
    merged[ax] = want[ax] * block;
    NodeId r = im.Reshape(im.Broadcast(im.Reshape(p, split), wide), merged);
    std::vector<int64_t> starts(xs.size(), 0);
    return im.Slice(r, starts, std::vector<int64_t>(xs.begin(), xs.end()));
  }
  if (ps.size() != 1) {
    return Bad(absl::StrCat(what, " ", ir::TypeToString(im.type(p)),
                            ": a scalar or 1-D (per axis) without block_size"));
  }
  if (count != xs[ax]) {
    return Bad(absl::StrCat(what, " has ", count, " values, but axis ", axis, " of ",
                            ir::TypeToString(im.type(x)), " has ", xs[ax]));
  }
  Shape shape(xs.size(), 1);
  shape[ax] = count;
  return im.Broadcast(im.Reshape(p, shape), xs);
}

// QuantizeLinear: saturate(round_half_even(x / scale) + zero_point) into uint8, int8, uint16,
// int16 or a 4- or 2-bit integer; into a float8 or float4 type, x / scale + zero_point rounded onto
// its grid (saturating unless `saturate` is 0). The division is in float (double for double x)
// before opset 23; from 23 (x and y_scale may differ) in y_scale's type, or `precision`'s.
absl::Status QuantizeLinear(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId scale, im.Input(n, 1));
  if (!ir::IsFloat(im.dtype(scale))) return Bad("y_scale must be a float tensor");
  TRY_OK(AttrSince(im, n, "precision", 23));
  TRY_OK(AttrSince(im, n, "output_dtype", 21));
  TRY_OK(AttrSince(im, n, "saturate", 19));
  ir::DType out = ir::DType::kU8;
  const NarrowType* narrow = nullptr;
  NodeId zp = ir::kInvalidNode;
  if (Importer::HasInput(n, 2)) {
    TRY(zp, im.Input(n, 2));
    out = im.dtype(zp);
    narrow = im.InputNarrowType(n, 2);
  }
  if (const auto* a = FindAttr(n, "output_dtype"); a && a->i() != 0) {
    const auto code = static_cast<int32_t>(a->i());
    TRY(ir::DType d, HeldDTypeFromOnnx(code, "attribute 'output_dtype'"));
    if (zp != ir::kInvalidNode && (d != out || FindNarrowType(code) != narrow)) {
      return Bad("attribute 'output_dtype' differs from y_zero_point's type");
    }
    out = d;
    narrow = FindNarrowType(code);
  }
  const bool to_float = narrow != nullptr && narrow->is_float;
  if (narrow != nullptr && narrow->specials == NarrowType::Specials::kExponentOnly) {
    return Unsupported(absl::StrCat("quantizing to ", narrow->name, " is not supported"));
  }
  if (!to_float && (!ir::IsInteger(out) || ir::DTypeSize(out) > 2)) {
    return Unsupported(absl::StrCat("quantizing to ", ir::DTypeName(out),
                                    " is not supported (kiln quantizes to 16-, 8-, 4- and 2-bit "
                                    "integers, float8 and float4)"));
  }
  ir::DType work = im.dtype(x) == ir::DType::kF64 ? ir::DType::kF64 : ir::DType::kF32;
  if (im.opset() >= 23) {
    work = im.dtype(scale);
    if (const auto* a = FindAttr(n, "precision"); a && a->i() != 0) {
      TRY(work, DTypeFromOnnx(static_cast<int32_t>(a->i()), "attribute 'precision'"));
      if (!ir::IsFloat(work)) return Bad("attribute 'precision' must be a float type");
    }
  }
  NodeId xw = im.Cast(x, work);
  TRY(NodeId s, QuantParam(im, n, im.Cast(scale, work), xw, "y_scale"));
  NodeId q = im.Binary(Op::kDiv, xw, s);
  if (!to_float) q = im.Unary(Op::kRound, q);
  // The zero point and the clamp in float or double: 16-bit integers are exact in both.
  const ir::DType acc = work == ir::DType::kF64 ? ir::DType::kF64 : ir::DType::kF32;
  q = im.Cast(q, acc);
  if (zp != ir::kInvalidNode) {
    TRY(NodeId z, QuantParam(im, n, im.Cast(zp, acc), q, "y_zero_point"));
    q = im.Binary(Op::kAdd, q, z);
  }
  if (to_float) {
    im.SetOutput(n, 0, RoundToNarrowFloat(im, q, *narrow, AttrInt(n, "saturate", 1) != 0));
  } else {
    const double bits = static_cast<double>(ir::DTypeSize(out) * 8);
    const double lo = narrow                     ? static_cast<double>(narrow->min_int)
                      : ir::IsSignedInteger(out) ? -std::exp2(bits - 1)
                                                 : 0.0;
    const double hi = narrow                     ? static_cast<double>(narrow->max_int)
                      : ir::IsSignedInteger(out) ? std::exp2(bits - 1) - 1
                                                 : std::exp2(bits) - 1;
    q = im.Binary(Op::kMin, im.Binary(Op::kMax, q, im.Like(lo, q)), im.Like(hi, q));
    im.SetOutput(n, 0, im.Cast(q, out));
  }
  im.SetOutputNarrowType(n, 0, narrow);
  return absl::OkStatus();
}

// DequantizeLinear: (x - zero_point) * scale, in the scale's type (float, or float16/bfloat16
// from opset 19); from opset 23 in `output_dtype`'s when set (the scale is cast to it first).
absl::Status DequantizeLinear(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId scale, im.Input(n, 1));
  const NarrowType* narrow = im.InputNarrowType(n, 0);
  if (!ir::IsInteger(im.dtype(x)) && narrow == nullptr) {
    return Bad(absl::StrCat("x must be quantized integers or a float8/float4 type, not ",
                            ir::TypeToString(im.type(x))));
  }
  if (!ir::IsFloat(im.dtype(scale))) return Bad("x_scale must be a float tensor");
  TRY_OK(AttrSince(im, n, "output_dtype", 23));
  ir::DType t = im.dtype(scale);
  if (const auto* a = FindAttr(n, "output_dtype"); a && a->i() != 0) {
    TRY(t, DTypeFromOnnx(static_cast<int32_t>(a->i()), "attribute 'output_dtype'"));
    if (!ir::IsFloat(t)) return Bad("attribute 'output_dtype' must be a float type");
    scale = im.Cast(scale, t);
  }
  // int32 inputs can exceed float's 24-bit integers; 8- and 16-bit ones cannot.
  const ir::DType work =
      t == ir::DType::kF64 || ir::DTypeSize(im.dtype(x)) > 2 ? ir::DType::kF64 : ir::DType::kF32;
  NodeId xw = im.Cast(x, work);
  if (Importer::HasInput(n, 2)) {
    TRY(NodeId zp, im.Input(n, 2));
    if (im.dtype(zp) != im.dtype(x) || im.InputNarrowType(n, 2) != narrow) {
      return Bad("x_zero_point's type differs from x's");
    }
    TRY(NodeId z, QuantParam(im, n, im.Cast(zp, work), xw, "x_zero_point"));
    xw = im.Binary(Op::kSub, xw, z);
  }
  TRY(NodeId s, QuantParam(im, n, im.Cast(scale, work), xw, "x_scale"));
  im.SetOutput(n, 0, im.Cast(im.Binary(Op::kMul, xw, s), t));
  // 8-bit integers with an f32 scale (a scalar or per axis, no blocks) also run as an integer
  // contraction when a MatMul or Conv reads them (QdqMatMul, QdqConv).
  const ir::DType xd = im.dtype(x);
  if ((xd == ir::DType::kU8 || xd == ir::DType::kI8) && narrow == nullptr && t == ir::DType::kF32 &&
      im.dtype(scale) == ir::DType::kF32 && AttrInt(n, "block_size", 0) == 0 &&
      im.rank(scale) <= 1) {
    Importer::Dequantized record;
    record.x = x;
    record.scale = scale;
    if (Importer::HasInput(n, 2)) {
      TRY(record.zero_point, im.Input(n, 2));
    }
    const int64_t axis = AttrInt(n, "axis", 1);
    record.axis = axis < 0 ? axis + im.rank(x) : axis;
    im.SetDequantized(n, 0, record);
  }
  return absl::OkStatus();
}

// ---- Integer contractions: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, and QDQ
// MatMul / Conv. Each becomes matmul / conv {accumulate=i32} (docs/ir.md) of the 8-bit operands,
// or of their differences from the zero points in i16 (which holds them exactly), so the CPU
// backend runs them on its int8 GEMM.

// `p` (a scalar, or a 1-D tensor of x.shape[axis] values) broadcast to x's shape.
absl::StatusOr<NodeId> AlongAxis(Importer& im, NodeId p, NodeId x, int64_t axis, const char* what) {
  const Shape xs = im.shape(x);
  const int64_t count = im.type(p).num_elements();
  if (im.rank(p) == 0 || (im.rank(p) == 1 && count == 1)) {
    return im.Broadcast(im.Reshape(p, Shape(xs.size(), 1)), xs);
  }
  if (im.rank(p) != 1 || axis < 0 || axis >= static_cast<int64_t>(xs.size()) ||
      count != xs[static_cast<size_t>(axis)]) {
    return Bad(absl::StrCat(what, " ", ir::TypeToString(im.type(p)),
                            " must be a scalar or have one value per index of axis ", axis, " of ",
                            ir::TypeToString(im.type(x))));
  }
  Shape shape(xs.size(), 1);
  shape[static_cast<size_t>(axis)] = count;
  return im.Broadcast(im.Reshape(p, shape), xs);
}

// An 8-bit operand x minus its zero point (scalar or along `axis`; kInvalidNode: none), in i16,
// which holds every difference; x itself when there is no zero point or it is all zeros.
absl::StatusOr<NodeId> ShiftedOperand(Importer& im, NodeId x, NodeId zero_point, int64_t axis,
                                      const char* what) {
  const ir::DType d = im.dtype(x);
  if (d != ir::DType::kU8 && d != ir::DType::kI8) {
    return Bad(absl::StrCat(what, " must be uint8 or int8, not ", ir::TypeToString(im.type(x))));
  }
  if (zero_point == ir::kInvalidNode) return x;
  if (im.dtype(zero_point) != d) {
    return Bad(absl::StrCat(what, "'s zero point is ", ir::DTypeName(im.dtype(zero_point)),
                            ", its operand ", ir::DTypeName(d)));
  }
  if (std::optional<ir::TensorData> known = im.KnownValue(zero_point)) {
    bool zero = true;
    for (int64_t i = 0; i < known->num_elements(); ++i) zero = zero && known->GetInt64(i) == 0;
    if (zero) return x;
  }
  TRY(NodeId z, AlongAxis(im, im.Cast(zero_point, ir::DType::kI16), x, axis, what));
  return im.Binary(Op::kSub, im.Cast(x, ir::DType::kI16), z);
}

absl::StatusOr<NodeId> OptionalInput(Importer& im, const NodeProto& n, int i) {
  if (!Importer::HasInput(n, i)) return ir::kInvalidNode;
  return im.Input(n, i);
}

// MatMulInteger: (A - a_zero_point) x (B - b_zero_point) in int32; a_zero_point a scalar or one
// per row of a 2-D A, b_zero_point a scalar or one per column of B.
absl::Status MatMulInteger(Importer& im, const NodeProto& n) {
  TRY(NodeId a, im.Input(n, 0));
  TRY(NodeId b, im.Input(n, 1));
  TRY(NodeId za, OptionalInput(im, n, 2));
  TRY(NodeId zb, OptionalInput(im, n, 3));
  TRY(NodeId sa, ShiftedOperand(im, a, za, im.rank(a) - 2, "A"));
  TRY(NodeId sb, ShiftedOperand(im, b, zb, im.rank(b) - 1, "B"));
  TRY(NodeId y, MatMulND(im, sa, sb, ir::DType::kI32));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// ConvInteger: conv(x - x_zero_point, w - w_zero_point) in int32 (padding reads 0 after the
// shift); w_zero_point a scalar or one per output channel.
absl::Status ConvInteger(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId w, im.Input(n, 1));
  TRY(ir::Attrs attrs, ConvNodeAttrs(im, n, x, w));
  TRY(NodeId zx, OptionalInput(im, n, 2));
  TRY(NodeId zw, OptionalInput(im, n, 3));
  TRY(NodeId sx, ShiftedOperand(im, x, zx, 1, "x"));
  TRY(NodeId sw, ShiftedOperand(im, w, zw, 0, "w"));
  attrs.accumulate = ir::DType::kI32;
  im.SetOutput(n, 0, im.Fold(im.b().Conv(sx, sw, attrs)));
  return absl::OkStatus();
}

// The requantisation of QLinearMatMul / QLinearConv as ONNX's reference computes it: the i32
// result times a_scale * b_scale / y_scale (in the scales' type) in double, plus y_zero_point,
// rounded half to even, saturated to y_zero_point's type.
absl::StatusOr<NodeId> Requantize(Importer& im, NodeId acc, NodeId multiplier,
                                  NodeId y_zero_point) {
  const ir::DType out = im.dtype(y_zero_point);
  if (out != ir::DType::kU8 && out != ir::DType::kI8) {
    return Bad(absl::StrCat("y_zero_point must be uint8 or int8, not ", ir::DTypeName(out)));
  }
  NodeId d =
      im.Binary(Op::kMul, im.Cast(acc, ir::DType::kF64), im.Cast(multiplier, ir::DType::kF64));
  TRY(NodeId z, AlongAxis(im, im.Cast(y_zero_point, ir::DType::kF64), d, 0, "y_zero_point"));
  d = im.Unary(Op::kRound, im.Binary(Op::kAdd, d, z));
  const double lo = out == ir::DType::kU8 ? 0 : -128, hi = out == ir::DType::kU8 ? 255 : 127;
  d = im.Binary(Op::kMin, im.Binary(Op::kMax, d, im.Like(lo, d)), im.Like(hi, d));
  return im.Cast(d, out);
}

// The scales' product a_scale (along a_axis of the result) * b_scale (along b_axis) / y_scale,
// broadcast to `like`'s shape, in the scales' float type.
absl::StatusOr<NodeId> Multiplier(Importer& im, NodeId a_scale, int64_t a_axis, NodeId b_scale,
                                  int64_t b_axis, NodeId y_scale, NodeId like) {
  const ir::DType t = im.dtype(a_scale);
  for (NodeId s : {a_scale, b_scale, y_scale}) {
    if (!ir::IsFloat(im.dtype(s)) || im.dtype(s) != t) {
      return Bad("the scales must be float tensors of one type");
    }
  }
  const NodeId shape_of = im.Like(0, im.Cast(like, t));
  TRY(NodeId a, AlongAxis(im, a_scale, shape_of, a_axis, "a_scale"));
  TRY(NodeId b, AlongAxis(im, b_scale, shape_of, b_axis, "b_scale"));
  TRY(NodeId y, AlongAxis(im, y_scale, shape_of, 0, "y_scale"));
  return im.Binary(Op::kDiv, im.Binary(Op::kMul, a, b), y);
}

// QLinearMatMul: requantised (a - a_zero_point) x (b - b_zero_point); a's parameters a scalar or
// one per row of a 2-D a, b's a scalar or one per column.
absl::Status QLinearMatMul(Importer& im, const NodeProto& n) {
  TRY(NodeId a, im.Input(n, 0));
  TRY(NodeId a_scale, im.Input(n, 1));
  TRY(NodeId a_zp, im.Input(n, 2));
  TRY(NodeId b, im.Input(n, 3));
  TRY(NodeId b_scale, im.Input(n, 4));
  TRY(NodeId b_zp, im.Input(n, 5));
  TRY(NodeId y_scale, im.Input(n, 6));
  TRY(NodeId y_zp, im.Input(n, 7));
  TRY(NodeId sa, ShiftedOperand(im, a, a_zp, im.rank(a) - 2, "a"));
  TRY(NodeId sb, ShiftedOperand(im, b, b_zp, im.rank(b) - 1, "b"));
  TRY(NodeId acc, MatMulND(im, sa, sb, ir::DType::kI32));
  const int64_t r = im.rank(acc);
  TRY(NodeId m, Multiplier(im, a_scale, std::max<int64_t>(0, r - 2), b_scale, r - 1, y_scale, acc));
  TRY(NodeId y, Requantize(im, acc, m, y_zp));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// QLinearConv: requantised conv(x - x_zero_point, w - w_zero_point) + B (int32, per channel);
// w's parameters a scalar or one per output channel.
absl::Status QLinearConv(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId x_scale, im.Input(n, 1));
  TRY(NodeId x_zp, im.Input(n, 2));
  TRY(NodeId w, im.Input(n, 3));
  TRY(NodeId w_scale, im.Input(n, 4));
  TRY(NodeId w_zp, im.Input(n, 5));
  TRY(NodeId y_scale, im.Input(n, 6));
  TRY(NodeId y_zp, im.Input(n, 7));
  TRY(ir::Attrs attrs, ConvNodeAttrs(im, n, x, w));
  TRY(NodeId sx, ShiftedOperand(im, x, x_zp, 1, "x"));
  TRY(NodeId sw, ShiftedOperand(im, w, w_zp, 0, "w"));
  attrs.accumulate = ir::DType::kI32;
  NodeId acc = im.Fold(im.b().Conv(sx, sw, attrs));
  if (Importer::HasInput(n, 8)) {
    TRY(NodeId bias, im.Input(n, 8));
    if (im.dtype(bias) != ir::DType::kI32) return Bad("B must be int32");
    TRY(NodeId along, AlongAxis(im, bias, acc, 1, "B"));
    acc = im.Binary(Op::kAdd, acc, along);
  }
  TRY(NodeId m, Multiplier(im, x_scale, 0, w_scale, 1, y_scale, acc));
  TRY(NodeId y, Requantize(im, acc, m, y_zp));
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

// A MatMul of two DequantizeLinear outputs of 8-bit integers, a's scale a scalar, b's a scalar
// or one per column: sa * sb * ((a - za) x (b - zb)), the integer product exact and scaled once
// (as onnxruntime runs QDQ models), rather than a float product of the dequantised values.
absl::StatusOr<std::optional<NodeId>> QdqMatMul(Importer& im, const NodeProto& n) {
  const Importer::Dequantized* a = im.InputDequantized(n, 0);
  const Importer::Dequantized* b = im.InputDequantized(n, 1);
  if (a == nullptr || b == nullptr || im.rank(a->x) < 2 || im.rank(b->x) < 2) {
    return std::optional<NodeId>();
  }
  const int64_t rb = im.rank(b->x);
  if (im.type(a->scale).num_elements() != 1 ||
      (im.type(b->scale).num_elements() != 1 && b->axis != rb - 1)) {
    return std::optional<NodeId>();
  }
  TRY(NodeId sa, ShiftedOperand(im, a->x, a->zero_point, 0, "a"));
  TRY(NodeId sb, ShiftedOperand(im, b->x, b->zero_point, rb - 1, "b"));
  TRY(NodeId acc, MatMulND(im, sa, sb, ir::DType::kI32));
  const NodeId y = im.Cast(acc, ir::DType::kF32);
  // One scale after the other, each a broadcast vector: the CPU backend's int8 GEMM applies
  // both in its epilogue.
  TRY(NodeId a_scale, AlongAxis(im, a->scale, y, 0, "x_scale"));
  TRY(NodeId b_scale, AlongAxis(im, b->scale, y, im.rank(y) - 1, "x_scale"));
  return std::optional<NodeId>(im.Binary(Op::kMul, im.Binary(Op::kMul, y, a_scale), b_scale));
}

// A Conv of DequantizeLinear outputs (x per tensor, w per tensor or per output channel), as
// QdqMatMul.
absl::StatusOr<std::optional<NodeId>> QdqConv(Importer& im, const NodeProto& n) {
  const Importer::Dequantized* x = im.InputDequantized(n, 0);
  const Importer::Dequantized* w = im.InputDequantized(n, 1);
  if (x == nullptr || w == nullptr || im.type(x->scale).num_elements() != 1 ||
      (im.type(w->scale).num_elements() != 1 && w->axis != 0)) {
    return std::optional<NodeId>();
  }
  TRY(ir::Attrs attrs, ConvNodeAttrs(im, n, x->x, w->x));
  TRY(NodeId sx, ShiftedOperand(im, x->x, x->zero_point, 1, "x"));
  TRY(NodeId sw, ShiftedOperand(im, w->x, w->zero_point, 0, "w"));
  attrs.accumulate = ir::DType::kI32;
  const NodeId y = im.Cast(im.Fold(im.b().Conv(sx, sw, attrs)), ir::DType::kF32);
  TRY(NodeId x_scale, AlongAxis(im, x->scale, y, 1, "x_scale"));
  TRY(NodeId w_scale, AlongAxis(im, w->scale, y, 1, "x_scale"));
  return std::optional<NodeId>(im.Binary(Op::kMul, im.Binary(Op::kMul, y, x_scale), w_scale));
}

// Compress with a condition known at import time (the selected positions are then constant);
// a condition computed from model inputs would make the output's shape data-dependent, which
// ConstInput refuses like every other operand kiln needs at import time.
absl::Status Compress(Importer& im, const NodeProto& n) {
  TRY(NodeId x, im.Input(n, 0));
  TRY(NodeId c, im.Input(n, 1));
  TRY(const ir::TensorData cond, im.ConstInput(n, 1, "the condition selects the output's length"));
  if (im.rank(c) != 1) return Bad("condition must be 1-D");
  NodeId src = x;
  int64_t axis = 0;
  if (FindAttr(n, "axis")) {
    TRY(axis, NormAxis(AttrInt(n, "axis", 0), im.rank(x)));
  } else {
    src = im.Reshape(x, {im.type(x).num_elements()});
  }
  const Shape s = im.shape(src);
  const int64_t d = s[static_cast<size_t>(axis)];
  if (cond.num_elements() > d) {
    return Bad(absl::StrCat("condition has ", cond.num_elements(), " values, the axis ", d));
  }
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < cond.num_elements(); ++i) {
    if (cond.GetDouble(i) != 0) idx.push_back(i);
  }
  NodeId y;
  if (idx.empty()) {
    std::vector<int64_t> zeros(s.size(), 0);
    Shape limits = s;
    limits[static_cast<size_t>(axis)] = 0;
    y = im.Slice(src, zeros, limits);
  } else {
    y = GatherConst(im, src, axis, idx);
  }
  im.SetOutput(n, 0, y);
  return absl::OkStatus();
}

}  // namespace

const std::map<std::string, Lowering>& Lowerings() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, Lowering>;
    auto& m = *t;
    // Elementwise, one IR op.
    const std::pair<const char*, Op> unary[] = {
        {"Neg", Op::kNeg},     {"Abs", Op::kAbs},
        {"Sign", Op::kSign},   {"Exp", Op::kExp},
        {"Log", Op::kLog},     {"Sqrt", Op::kSqrt},
        {"Sin", Op::kSin},     {"Cos", Op::kCos},
        {"Tanh", Op::kTanh},   {"Erf", Op::kErf},
        {"Floor", Op::kFloor}, {"Ceil", Op::kCeil},
        {"Round", Op::kRound}, {"Reciprocal", Op::kReciprocal},
        {"Not", Op::kNot}};
    for (const auto& [name, op] : unary) m[name] = UnaryOp(op);
    const std::pair<const char*, Op> binary[] = {
        {"Add", Op::kAdd},        {"Sub", Op::kSub},
        {"Mul", Op::kMul},        {"Equal", Op::kEq},
        {"Less", Op::kLt},        {"Greater", Op::kGt},
        {"LessOrEqual", Op::kLe}, {"GreaterOrEqual", Op::kGe},
        {"And", Op::kAnd},        {"Or", Op::kOr},
        {"Xor", Op::kXor}};
    for (const auto& [name, op] : binary) m[name] = BinaryOp(op);
    for (const auto& [name, op] :
         {std::pair<const char*, Op>{"Add", Op::kAdd}, {"Sub", Op::kSub}, {"Mul", Op::kMul}}) {
      m[name] = BinaryOp(op, /*legacy=*/true);
    }
    m["Equal"] = CompareOp(Op::kEq, "Equal", true);
    m["Less"] = CompareOp(Op::kLt, "Less", false);
    m["Greater"] = CompareOp(Op::kGt, "Greater", false);
    m["Div"] = BinaryWith(Div, /*same_dtype=*/true, /*legacy=*/true);
    m["Mod"] = BinaryWith(Mod);
    m["Pow"] = Pow;
    m["Sum"] = Variadic(Op::kAdd);
    m["Mean"] = Variadic(Op::kAdd, /*mean=*/true);
    m["Max"] = Variadic(Op::kMax);
    m["Min"] = Variadic(Op::kMin);
    // Activations.
    m["Relu"] = [](Importer& im, const NodeProto& n) -> absl::Status {
      TRY(NodeId x, im.Input(n, 0));
      im.SetOutput(n, 0, im.Binary(Op::kMax, x, im.Like(0, x)));
      return absl::OkStatus();
    };
    m["LeakyRelu"] = Activation([](Importer& im, const NodeProto& n, NodeId x) {
      return im.Select(im.Binary(Op::kGe, x, im.Like(0, x)), x,
                       Scaled(im, x, AttrFloat(n, "alpha", 0.01f)));
    });
    m["Elu"] = Activation([](Importer& im, const NodeProto& n, NodeId x) {
      return im.Select(im.Binary(Op::kGt, x, im.Like(0, x)), x,
                       ExpM1Scaled(im, x, AttrFloat(n, "alpha", 1.0f)));
    });
    m["Selu"] = Activation([](Importer& im, const NodeProto& n, NodeId x) {
      const double alpha = AttrFloat(n, "alpha", 1.67326319217681884765625f);
      const double gamma = AttrFloat(n, "gamma", 1.05070102214813232421875f);
      return Scaled(
          im, im.Select(im.Binary(Op::kGt, x, im.Like(0, x)), x, ExpM1Scaled(im, x, alpha)), gamma);
    });
    m["Celu"] = Activation([](Importer& im, const NodeProto& n, NodeId x) {
      const double alpha = AttrFloat(n, "alpha", 1.0f);
      NodeId neg = ExpM1Scaled(im, Scaled(im, x, 1.0 / alpha), alpha);
      return im.Binary(Op::kAdd, im.Binary(Op::kMax, x, im.Like(0, x)),
                       im.Binary(Op::kMin, neg, im.Like(0, x)));
    });
    m["ThresholdedRelu"] = Activation([](Importer& im, const NodeProto& n, NodeId x) {
      return im.Select(im.Binary(Op::kGt, x, im.Like(AttrFloat(n, "alpha", 1.0f), x)), x,
                       im.Like(0, x));
    });
    m["Sigmoid"] =
        Activation([](Importer& im, const NodeProto&, NodeId x) { return Sigmoid(im, x); });
    m["HardSigmoid"] = Activation([](Importer& im, const NodeProto& n, NodeId x) {
      return ClampUnit(
          im, Shifted(im, Scaled(im, x, AttrFloat(n, "alpha", 0.2f)), AttrFloat(n, "beta", 0.5f)));
    });
    m["HardSwish"] = Activation([](Importer& im, const NodeProto&, NodeId x) {
      return im.Binary(Op::kMul, x, ClampUnit(im, Shifted(im, Scaled(im, x, 1.0 / 6.0), 0.5)));
    });
    m["Softplus"] = Activation([](Importer& im, const NodeProto&, NodeId x) {
      // max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|.
      NodeId e = im.Unary(Op::kExp, im.Unary(Op::kNeg, im.Unary(Op::kAbs, x)));
      return im.Binary(Op::kAdd, im.Binary(Op::kMax, x, im.Like(0, x)),
                       im.Unary(Op::kLog, Shifted(im, e, 1.0)));
    });
    m["Softsign"] = Activation([](Importer& im, const NodeProto&, NodeId x) {
      return im.Binary(Op::kDiv, x, Shifted(im, im.Unary(Op::kAbs, x), 1.0));
    });
    m["Tan"] = Activation([](Importer& im, const NodeProto&, NodeId x) {
      return im.Binary(Op::kDiv, im.Unary(Op::kSin, x), im.Unary(Op::kCos, x));
    });
    m["Sinh"] = Activation([](Importer& im, const NodeProto&, NodeId x) {
      return Scaled(
          im, im.Binary(Op::kSub, im.Unary(Op::kExp, x), im.Unary(Op::kExp, im.Unary(Op::kNeg, x))),
          0.5);
    });
    m["Cosh"] = Activation([](Importer& im, const NodeProto&, NodeId x) {
      return Scaled(
          im, im.Binary(Op::kAdd, im.Unary(Op::kExp, x), im.Unary(Op::kExp, im.Unary(Op::kNeg, x))),
          0.5);
    });
    m["IsNaN"] = Activation(
        [](Importer& im, const NodeProto&, NodeId x) { return im.Binary(Op::kNe, x, x); });
    m["IsInf"] = IsInf;
    m["PRelu"] = PRelu;
    m["Clip"] = Clip;
    m["Where"] = Where;
    m["Identity"] = Identity;
    m["Dropout"] = Dropout;
    m["Cast"] = Cast;
    m["CastLike"] = CastLike;
    // Constants and shapes.
    m["Constant"] = Constant;
    m["Shape"] = ShapeOp;
    m["Size"] = Size;
    m["ConstantOfShape"] = ConstantOfShape;
    m["Range"] = Range;
    m["EyeLike"] = EyeLike;
    // Movement and indexing.
    m["Reshape"] = Reshape;
    m["Flatten"] = Flatten;
    m["Transpose"] = Transpose;
    m["Squeeze"] = Squeeze;
    m["Unsqueeze"] = Unsqueeze;
    m["Concat"] = Concat;
    m["Split"] = Split;
    m["Slice"] = SliceOp;
    m["Expand"] = Expand;
    m["Tile"] = Tile;
    m["Pad"] = Pad;
    m["Gather"] = Gather;
    m["GatherElements"] = GatherElements;
    m["GatherND"] = GatherND;
    m["Trilu"] = Trilu;
    m["CumSum"] = CumSum;
    m["DepthToSpace"] = DepthToSpace;
    m["SpaceToDepth"] = SpaceToDepth;
    // Reductions.
    m["ReduceSum"] = Reduction(Red::kSum);
    m["ReduceMean"] = Reduction(Red::kMean);
    m["ReduceMax"] = Reduction(Red::kMax);
    m["ReduceMin"] = Reduction(Red::kMin);
    m["ReduceProd"] = Reduction(Red::kProd);
    m["ReduceL1"] = Reduction(Red::kL1);
    m["ReduceL2"] = Reduction(Red::kL2);
    m["ReduceSumSquare"] = Reduction(Red::kSumSquare);
    m["ReduceLogSum"] = Reduction(Red::kLogSum);
    m["ReduceLogSumExp"] = Reduction(Red::kLogSumExp);
    m["ArgMax"] = ArgReduce(Op::kArgMax);
    m["ArgMin"] = ArgReduce(Op::kArgMin);
    m["TopK"] = TopK;
    m["Softmax"] = SoftmaxOp(SoftmaxKind::kSoftmax);
    m["LogSoftmax"] = SoftmaxOp(SoftmaxKind::kLogSoftmax);
    m["Hardmax"] = SoftmaxOp(SoftmaxKind::kHardmax);
    // Networks.
    m["MatMul"] = MatMul;
    m["Gemm"] = Gemm;
    m["Conv"] = Conv;
    m["ConvTranspose"] = ConvTranspose;
    m["BatchNormalization"] = BatchNorm;
    m["InstanceNormalization"] = InstanceNorm;
    m["LayerNormalization"] = LayerNorm;
    m["LpNormalization"] = LpNorm;
    m["MaxPool"] = Pool(true);
    m["AveragePool"] = Pool(false);
    m["GlobalAveragePool"] = GlobalPool(false);
    m["GlobalMaxPool"] = GlobalPool(true);
    m["Resize"] = Resize;
    m["Upsample"] = Upsample;
    m["Einsum"] = Einsum;
    // Issue 15.
    m["LRN"] = Lrn;
    m["Gelu"] = Gelu;
    m["Mish"] = Mish;
    m["ScatterElements"] = ScatterElements;
    m["Scatter"] = ScatterElements;
    m["ScatterND"] = ScatterND;
    m["QuantizeLinear"] = QuantizeLinear;
    m["DequantizeLinear"] = DequantizeLinear;
    m["MatMulInteger"] = MatMulInteger;
    m["ConvInteger"] = ConvInteger;
    m["QLinearMatMul"] = QLinearMatMul;
    m["QLinearConv"] = QLinearConv;
    m["Compress"] = Compress;
    return t;
  }();
  return *table;
}

}  // namespace kiln::onnx::internal
