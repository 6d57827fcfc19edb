// ONNX export (export.h). One Exporter walks the graph in node order and appends, per IR node,
// the ONNX nodes of its ExportRules() row. Helper values get fresh names that cannot collide with
// parameter or output names.
#include "frontend/onnx/export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/float_limits.h"
#include "ir/dtype.h"
#include "ir/ops.h"
#include "ir/verifier.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx {
namespace {

namespace pb = ::onnx;
using ir::DType;
using ir::NodeId;
using ir::Op;

// ---- The table --------------------------------------------------------------------------------

constexpr ExportRule kRules[] = {
    {Op::kParameter, "graph input, or an initializer when ExportOptions::weights has its value",
     ""},
    {Op::kConstant, "initializer", ""},
    {Op::kFill, "initializer (scalar) + Expand", "bf16: expanded as f32, then Cast"},
    {Op::kIota, "Range + Reshape + Expand + the IR cast", ""},
    {Op::kRandomUniform, "",
     "no ONNX equivalent: kiln's random ops are Philox4x32-10 bit-exact, ONNX RandomUniform is "
     "unspecified"},
    {Op::kRandomNormal, "", "no ONNX equivalent (as random_uniform)"},
    {Op::kNeg, "Neg", "u8: Sub(0, x)"},
    {Op::kAbs, "Abs", ""},
    {Op::kSign, "Sign", "floats: + IsNaN + Where (ONNX leaves Sign(NaN) open; the IR keeps NaN)"},
    {Op::kExp, "Exp", ""},
    {Op::kLog, "Log", ""},
    {Op::kSqrt, "Sqrt", ""},
    {Op::kRsqrt, "Sqrt + Reciprocal", "two roundings instead of one"},
    {Op::kSin, "Sin", ""},
    {Op::kCos, "Cos", ""},
    {Op::kTanh, "Tanh", ""},
    {Op::kErf, "Erf", ""},
    {Op::kFloor, "Floor", ""},
    {Op::kCeil, "Ceil", ""},
    {Op::kRound, "Round", ""},
    {Op::kReciprocal, "Reciprocal", ""},
    {Op::kNot, "Not", "integers: Sub(all-ones, x)"},
    {Op::kAdd, "Add", ""},
    {Op::kSub, "Sub", ""},
    {Op::kMul, "Mul", ""},
    {Op::kDiv, "Div",
     "integers: floor division as (a - Mod(a, b)) / b with Where guards for b = 0 and b = -1"},
    {Op::kPow, "Pow", ""},
    {Op::kMax, "Max", "NaN propagation is the runtime's (ONNX does not specify it)"},
    {Op::kMin, "Min", "NaN propagation is the runtime's (ONNX does not specify it)"},
    {Op::kMod, "Mod",
     "floats: Mod(fmod=1) + Where fix-ups to the divisor's sign; integers: Mod(fmod=0) with "
     "guards for b = 0 and b = -1"},
    {Op::kEq, "Equal", ""},
    {Op::kNe, "Equal + Not", ""},
    {Op::kLt, "Less", "bool compared as u8"},
    {Op::kLe, "LessOrEqual", "bool compared as u8"},
    {Op::kGt, "Greater", "bool compared as u8"},
    {Op::kGe, "GreaterOrEqual", "bool compared as u8"},
    {Op::kAnd, "And", "bool only: integer (bitwise) and needs BitwiseAnd (opset 18)"},
    {Op::kOr, "Or", "bool only: integer (bitwise) or needs BitwiseOr (opset 18)"},
    {Op::kXor, "Xor", "bool only: integer (bitwise) xor needs BitwiseXor (opset 18)"},
    {Op::kSelect, "Where", "bool: Or(And(c, x), And(Not(c), y)) (ONNX Runtime has no bool Where)"},
    {Op::kCast, "Cast",
     "float → integer: IsNaN + Clip + Cast + Where (the IR saturates and maps NaN to 0); "
     "narrowing integer casts: Clip + Cast"},
    {Op::kReduceSum, "ReduceSum (keepdims=1)", "u8 summed in i32, then Mod 256; no axes: Identity"},
    {Op::kReduceProd, "ReduceProd (keepdims=1)",
     "u8 multiplied in i32, then Mod 256 (i32 overflow is the runtime's); no axes: Identity"},
    {Op::kReduceMax, "ReduceMax (keepdims=1)", "no axes: Identity"},
    {Op::kReduceMin, "ReduceMin (keepdims=1)", "no axes: Identity"},
    {Op::kArgMax, "ArgMax (keepdims=1)", "NaN handling is the runtime's"},
    {Op::kArgMin, "ArgMin (keepdims=1)", "NaN handling is the runtime's"},
    {Op::kReshape, "Reshape (allowzero=1)", ""},
    {Op::kPermute, "Transpose", ""},
    {Op::kBroadcast, "Expand", ""},
    {Op::kSlice, "Slice", ""},
    {Op::kPad, "Pad (constant)", ""},
    {Op::kConcat, "Concat", ""},
    {Op::kFlip, "Slice (step -1)", ""},
    {Op::kGather, "GatherElements", "u8 indices cast to i64"},
    {Op::kScatterAdd, "ScatterElements (reduction=add)",
     "u8 indices cast to i64; f16/bf16 accumulate in f32"},
    {Op::kMatMul, "MatMul; accumulate: MatMulInteger",
     "u8 multiplied in i32, then Mod 256; accumulate=i32 of u8/i8 operands is MatMulInteger, "
     "other integer operands widen (Cast) to an i32/i64 accumulator for MatMul"},
    {Op::kConv, "Conv; accumulate: ConvInteger",
     "input_dilation: Unsqueeze + Pad + Reshape + Slice per axis before the Conv; bf16 in f32; "
     "i32/u8 in f64 (exact below 2^53); i64 unsupported; accumulate=i32 of u8/i8 operands is "
     "ConvInteger"},
    {Op::kWindowSum, "Transpose/Reshape to [rows, 1, windowed axes...] + Conv with a ones kernel",
     "bf16 in f32; i32/u8 in f64 (exact below 2^53); i64 unsupported"},
    {Op::kWindowMax, "Transpose/Reshape as window_sum + Pad (lowest value) + MaxPool",
     "bf16 in f32, i32 in f64; i64 unsupported; NaN handling is MaxPool's (ONNX Runtime skips "
     "NaN, the IR propagates it)"},
    {Op::kSort, "TopK (k = axis size, largest = 0, sorted = 1): Values",
     "TopK orders ties by index, as sort does; bool in u8, bf16 in f32; NaN placement is the "
     "runtime's"},
    {Op::kArgsort, "TopK (k = axis size, largest = 0, sorted = 1): Indices", "as sort"},
};
static_assert(std::size(kRules) == std::size(ir::kAllOps), "one export row per IR op");

// The elements' bytes (TensorData stores them little-endian and row-major, like raw_data).
std::string RawBytes(const ir::TensorData& t) {
  return std::string(reinterpret_cast<const char*>(t.data()),
                     static_cast<size_t>(t.num_elements() * ir::DTypeSize(t.dtype())));
}

// ---- Dtype helpers ----------------------------------------------------------------------------

int OnnxType(DType d) {
  switch (d) {
    case DType::kF32:
      return pb::TensorProto::FLOAT;
    case DType::kF64:
      return pb::TensorProto::DOUBLE;
    case DType::kF16:
      return pb::TensorProto::FLOAT16;
    case DType::kBF16:
      return pb::TensorProto::BFLOAT16;
    case DType::kI32:
      return pb::TensorProto::INT32;
    case DType::kI64:
      return pb::TensorProto::INT64;
    case DType::kU8:
      return pb::TensorProto::UINT8;
    case DType::kBool:
      return pb::TensorProto::BOOL;
    case DType::kI8:
      return pb::TensorProto::INT8;
    case DType::kI16:
      return pb::TensorProto::INT16;
    case DType::kU16:
      return pb::TensorProto::UINT16;
    case DType::kU32:
      return pb::TensorProto::UINT32;
    case DType::kU64:
      return pb::TensorProto::UINT64;
  }
  return pb::TensorProto::UNDEFINED;
}

// A set of dtypes: what an ONNX op accepts (its type constraint at opset 17).
using DTypeSet = uint32_t;
constexpr DTypeSet Bit(DType d) { return 1u << static_cast<unsigned>(d); }
constexpr DTypeSet kFloat16Up = Bit(DType::kF16) | Bit(DType::kF32) | Bit(DType::kF64);
// bf16 is left out of the arithmetic sets on purpose: ONNX allows it for most ops from opset 13,
// but ONNX Runtime's CPU provider implements almost none of them, so bf16 arithmetic is written
// as f32 (which is also how kiln's CPU backend computes it).
constexpr DTypeSet kFloats = kFloat16Up;
constexpr DTypeSet kSigned = Bit(DType::kI32) | Bit(DType::kI64);
constexpr DTypeSet kNumeric = kFloats | kSigned | Bit(DType::kU8);

// The dtype an op that accepts `allowed` computes a `d` value in: d itself, or the narrowest
// wider type that holds every value of d (for i64 in a float-only op: none).
std::optional<DType> ComputeType(DType d, DTypeSet allowed) {
  if (allowed & Bit(d)) return d;
  std::vector<DType> wider;
  switch (d) {
    case DType::kF16:
    case DType::kBF16:
      wider = {DType::kF32, DType::kF64};
      break;
    case DType::kF32:
      wider = {DType::kF64};
      break;
    case DType::kU8:
      wider = {DType::kI32, DType::kI64, DType::kF32, DType::kF64};
      break;
    case DType::kI32:
      wider = {DType::kI64, DType::kF64};
      break;
    case DType::kBool:
      wider = {DType::kU8, DType::kI32};
      break;
    default:
      break;
  }
  for (DType w : wider) {
    if (allowed & Bit(w)) return w;
  }
  return std::nullopt;
}

// Integer range of an integer dtype other than u64, exactly.
std::pair<int64_t, int64_t> ExactIntLimits(DType d) {
  switch (d) {
    case DType::kI8:
      return {INT8_MIN, INT8_MAX};
    case DType::kI16:
      return {INT16_MIN, INT16_MAX};
    case DType::kI32:
      return {INT32_MIN, INT32_MAX};
    case DType::kI64:
      return {INT64_MIN, INT64_MAX};
    case DType::kU8:
      return {0, UINT8_MAX};
    case DType::kU16:
      return {0, UINT16_MAX};
    case DType::kU32:
      return {0, UINT32_MAX};
    default:
      return {0, 1};
  }
}

// Integer range of an integer dtype (the i64 bounds rounded to doubles).
std::pair<double, double> IntRange(DType d) {
  const auto [lo, hi] = ExactIntLimits(d);
  return {static_cast<double>(lo), static_cast<double>(hi)};
}

// Significand bits and largest finite value of a float dtype.
int Mantissa(DType d) {
  switch (d) {
    case DType::kF16:
      return 11;
    case DType::kBF16:
      return 8;
    case DType::kF32:
      return 24;
    default:
      return 53;
  }
}

// The largest value of float dtype `f` that is <= `hi` (a positive integer bound 2^b - 1 or 255).
double LargestBelow(double hi, DType f) {
  const int b = static_cast<int>(std::ceil(std::log2(hi + 1)));
  double v = b <= Mantissa(f) ? hi : std::ldexp(1.0, b) - std::ldexp(1.0, b - Mantissa(f));
  return std::min(v, base::LargestFinite(f));
}

// ---- The exporter -----------------------------------------------------------------------------

class Exporter {
 public:
  Exporter(const ir::Graph& graph, const ExportOptions& options, pb::GraphProto* out)
      : graph_(graph), options_(options), out_(out) {}

  absl::Status Run();

 private:
  // A fresh value name starting with `hint`.
  std::string Fresh(std::string_view hint) {
    std::string name(hint);
    while (used_.count(name) > 0) name = absl::StrCat(std::string(hint), "_", counter_++);
    used_.insert(name);
    return name;
  }

  // Appends a node and returns its (first) output name, `out` when given.
  std::string Node(const std::string& op_type, const std::vector<std::string>& inputs,
                   std::string out = "", const std::function<void(pb::NodeProto&)>& attrs = {}) {
    if (out.empty()) out = Fresh(absl::StrCat(current_, "_", op_type));
    pb::NodeProto* n = out_->add_node();
    n->set_op_type(op_type);
    n->set_name(Fresh(absl::StrCat("n_", out)));
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(out);
    if (attrs) attrs(*n);
    return out;
  }

  static void IntAttr(pb::NodeProto& n, const char* name, int64_t v) {
    pb::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INT);
    a->set_i(v);
  }
  static void IntsAttr(pb::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
    pb::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void StringAttr(pb::NodeProto& n, const char* name, const std::string& v) {
    pb::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(pb::AttributeProto::STRING);
    a->set_s(v);
  }

  static void FillTensor(const ir::TensorData& t, pb::TensorProto* p) {
    p->set_data_type(OnnxType(t.dtype()));
    for (int64_t d : t.shape()) p->add_dims(d);
    p->set_raw_data(RawBytes(t));
  }

  std::string Initializer(const ir::TensorData& t, std::string name = "") {
    if (name.empty()) name = Fresh(absl::StrCat(current_, "_c"));
    pb::TensorProto* p = out_->add_initializer();
    FillTensor(t, p);
    p->set_name(name);
    return name;
  }
  std::string I64s(const std::vector<int64_t>& v) {
    return Initializer(
        ir::TensorData::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(v.size())}, v));
  }
  // A rank-0 constant of dtype d holding `value` stored as under docs/ir.md "Dtypes".
  std::string Scalar(DType d, double value) {
    ir::TensorData t(d, {});
    t.SetDouble(0, value);
    return Initializer(t);
  }

  // Raw ONNX Cast (wraps for narrowing integer casts, like C).
  // `out` names the result (an Identity when nothing is cast).
  std::string RawCast(const std::string& x, DType from, DType to, const std::string& out = "") {
    if (from == to) return out.empty() ? x : Node("Identity", {x}, out);
    return Node("Cast", {x}, out, [&](pb::NodeProto& n) { IntAttr(n, "to", OnnxType(to)); });
  }
  // The IR's cast (docs/ir.md "Dtypes"): saturating, NaN → 0 for float → integer.
  std::string IrCast(const std::string& x, DType from, DType to, std::string out = "");
  // Brings a value computed in `compute` back to `target`, with the IR's integer wrap-around for
  // integer targets (through i64 when the compute type was a float holding an exact integer).
  std::string FromCompute(const std::string& x, DType compute, DType target,
                          const std::string& out = "") {
    std::string v = x;
    if (ir::IsFloat(compute) && !ir::IsFloat(target)) {
      v = RawCast(v, compute, DType::kI64);
      compute = DType::kI64;
    }
    if (target == DType::kU8 && compute != DType::kU8) {
      // u8 arithmetic wraps modulo 256: reduce explicitly instead of relying on how a runtime
      // narrows integers in Cast.
      v = Node("Mod", {v, Scalar(compute, 256)}, "",
               [](pb::NodeProto& p) { IntAttr(p, "fmod", 0); });
    }
    return RawCast(v, compute, target, out);
  }

  // An op on operands of dtype `d` (the first `cast_inputs` of `inputs`), computed in a dtype
  // the ONNX op accepts, its result named `out`. `own_result_type`: the result's dtype does not
  // follow the operands' (compare → bool, argmax → i64), so it is not cast back.
  absl::StatusOr<std::string> Compute(const std::string& op_type, std::vector<std::string> inputs,
                                      DType d, DTypeSet allowed, const std::string& out,
                                      bool own_result_type = false, size_t cast_inputs = 8,
                                      const std::function<void(pb::NodeProto&)>& attrs = {}) {
    std::optional<DType> c = ComputeType(d, allowed);
    if (!c) return Unsupported(absl::StrCat(op_type, " does not accept ", ir::DTypeName(d)));
    for (size_t i = 0; i < inputs.size() && i < cast_inputs; ++i) {
      inputs[i] = RawCast(inputs[i], d, *c);
    }
    if (own_result_type || *c == d) return Node(op_type, inputs, out, attrs);
    return FromCompute(Node(op_type, inputs, "", attrs), *c, d, out);
  }

  absl::Status Unsupported(const std::string& why) const {
    const ir::Node& n = graph_.node(current_id_);
    std::string where = ir::LocationToString(n.loc);
    return absl::UnimplementedError(absl::StrCat(
        "ONNX export: no ONNX equivalent for op ", ir::OpName(n.op), " (node %", current_id_, ", ",
        ir::TypeToString(n.type), where.empty() ? "" : absl::StrCat(", ", where), "): ", why));
  }

  std::string Name(NodeId id) const { return names_[static_cast<size_t>(id)]; }
  const ir::TensorType& Type(NodeId id) const { return graph_.node(id).type; }

  absl::StatusOr<std::string> EmitNode(NodeId id, const std::string& out);
  absl::StatusOr<std::string> EmitDiv(const ir::Node& n, const std::string& out);
  absl::StatusOr<std::string> EmitMod(const ir::Node& n, const std::string& out);
  absl::StatusOr<std::string> EmitConv(const ir::Node& n, const std::string& out);
  absl::StatusOr<std::string> EmitIntegerMatMul(const ir::Node& n, const std::string& out);
  absl::StatusOr<std::string> EmitWindow(const ir::Node& n, const std::string& out);
  std::string Dilate(const std::string& x, ir::Shape& shape, int64_t axis, int64_t factor, DType d);

  const ir::Graph& graph_;
  const ExportOptions& options_;
  pb::GraphProto* out_;
  std::set<std::string> used_;
  std::vector<std::string> names_;
  int64_t counter_ = 0;
  std::string current_;
  NodeId current_id_ = 0;
};

std::string Exporter::IrCast(const std::string& x, DType from, DType to, std::string out) {
  auto finish = [&](std::string v) { return out.empty() ? v : Node("Identity", {v}, out); };
  if (from == to) return finish(x);
  if (from == DType::kBF16 && !ir::IsFloat(to)) {  // exactly, into a type runtimes compare
    return IrCast(RawCast(x, from, DType::kF32), DType::kF32, to, out);
  }
  if (ir::IsBool(to) || ir::IsFloat(to) || ir::IsBool(from)) {
    return Node("Cast", {x}, out, [&](pb::NodeProto& n) { IntAttr(n, "to", OnnxType(to)); });
  }
  const auto [lo_to, hi_to] = IntRange(to);
  if (ir::IsInteger(from)) {
    const auto [lo_from, hi_from] = IntRange(from);
    if (lo_from >= lo_to && hi_from <= hi_to) {
      return Node("Cast", {x}, out, [&](pb::NodeProto& n) { IntAttr(n, "to", OnnxType(to)); });
    }
    ir::TensorData lo(from, {}), hi(from, {});
    lo.SetDouble(0, std::max(lo_to, lo_from));
    hi.SetDouble(0, std::min(hi_to, hi_from));
    if (to == DType::kI64 || from == DType::kI64) {  // exact bounds beyond 2^53
      lo.SetInt64(0, std::max(ExactIntLimits(to).first, ExactIntLimits(from).first));
      hi.SetInt64(0, std::min(ExactIntLimits(to).second, ExactIntLimits(from).second));
    }
    const std::string clipped = Node("Clip", {x, Initializer(lo), Initializer(hi)});
    return Node("Cast", {clipped}, out, [&](pb::NodeProto& n) { IntAttr(n, "to", OnnxType(to)); });
  }
  // Float → integer: clip to the largest in-range values the source dtype can hold, cast
  // (truncates toward zero), then saturate what lay beyond them and map NaN to 0.
  const double hi_r = LargestBelow(hi_to, from);
  const double lo_r = lo_to == 0 ? 0.0 : std::max(lo_to, -base::LargestFinite(from));
  const std::string clipped = Node("Clip", {x, Scalar(from, lo_r), Scalar(from, hi_r)});
  std::string v = RawCast(clipped, from, to);
  auto int_const = [&](double value) {
    ir::TensorData t(to, {});
    if (to == DType::kI64) {
      t.SetInt64(0, value > 0 ? INT64_MAX : (value < 0 ? INT64_MIN : 0));
    } else {
      t.SetDouble(0, value);
    }
    return Initializer(t);
  };
  if (hi_r < hi_to) {
    v = Node("Where", {Node("Greater", {x, Scalar(from, hi_r)}), int_const(hi_to), v});
  }
  if (lo_r > lo_to) {
    v = Node("Where", {Node("Less", {x, Scalar(from, lo_r)}), int_const(lo_to), v});
  }
  return Node("Where", {Node("IsNaN", {x}), int_const(0), v}, out);
}

absl::StatusOr<std::string> Exporter::EmitDiv(const ir::Node& n, const std::string& out) {
  const DType d = n.type.dtype;
  const std::string a = Name(n.inputs[0]), b = Name(n.inputs[1]);
  if (ir::IsFloat(d)) return Compute("Div", {a, b}, d, kFloats, out);
  // Floor division with the IR's guards: b == 0 → 0, b == -1 → wrapping negation (ONNX's
  // integer Div and Mod trap on both in common runtimes).
  const bool is_signed = d != DType::kU8;
  const std::string zero = Scalar(d, 0), one = Scalar(d, 1);
  const std::string b_zero = Node("Equal", {b, zero});
  std::string bad = b_zero;
  std::string b_minus_one;
  if (is_signed) {
    b_minus_one = Node("Equal", {b, Scalar(d, -1)});
    bad = Node("Or", {b_zero, b_minus_one});
  }
  const std::string safe_b = Node("Where", {bad, one, b});
  const std::string m =
      Node("Mod", {a, safe_b}, "", [](pb::NodeProto& p) { IntAttr(p, "fmod", 0); });
  std::string q = Node("Div", {Node("Sub", {a, m}), safe_b});
  if (is_signed) q = Node("Where", {b_minus_one, Node("Sub", {zero, a}), q});
  return Node("Where", {b_zero, zero, q}, out);
}

absl::StatusOr<std::string> Exporter::EmitMod(const ir::Node& n, const std::string& out) {
  const DType d = n.type.dtype;
  const std::string a = Name(n.inputs[0]), b = Name(n.inputs[1]);
  if (!ir::IsFloat(d)) {
    // Mod(fmod=0) is floored for integers; b == 0 and b == -1 give 0 (a % 1 == 0).
    std::string bad = Node("Equal", {b, Scalar(d, 0)});
    if (d != DType::kU8) bad = Node("Or", {bad, Node("Equal", {b, Scalar(d, -1)})});
    const std::string safe_b = Node("Where", {bad, Scalar(d, 1), b});
    return Node("Mod", {a, safe_b}, out, [](pb::NodeProto& p) { IntAttr(p, "fmod", 0); });
  }
  // Python's float %: r = fmod(a, b); r + b when r != 0 and r, b differ in sign; a zero takes
  // the divisor's sign. bf16 in f32.
  const DType c = d == DType::kBF16 ? DType::kF32 : d;
  const std::string ca = RawCast(a, d, c), cb = RawCast(b, d, c);
  const std::string zero = Scalar(c, 0);
  const std::string r = Node("Mod", {ca, cb}, "", [](pb::NodeProto& p) { IntAttr(p, "fmod", 1); });
  const std::string signs_differ = Node("Xor", {Node("Less", {r, zero}), Node("Less", {cb, zero})});
  const std::string nonzero = Node("Not", {Node("Equal", {r, zero})});
  const std::string fixed =
      Node("Where", {Node("And", {nonzero, signs_differ}), Node("Add", {r, cb}), r});
  const std::string signed_zero = Node("Where", {Node("Less", {cb, zero}), Scalar(c, -0.0), zero});
  const std::string result =
      Node("Where", {Node("Not", {nonzero}), signed_zero, fixed}, c == d ? out : "");
  return c == d ? result : RawCast(result, c, d, out);
}

// Inserts factor - 1 zeros between the elements of `axis`: Unsqueeze after it, Pad that new
// axis to `factor`, merge the two, and cut the trailing zeros.
std::string Exporter::Dilate(const std::string& x, ir::Shape& shape, int64_t axis, int64_t factor,
                             DType d) {
  const size_t a = static_cast<size_t>(axis);
  const int64_t size = shape[a];
  std::string v = Node("Unsqueeze", {x, I64s({axis + 1})});
  const int64_t rank = static_cast<int64_t>(shape.size()) + 1;
  std::vector<int64_t> pads(static_cast<size_t>(2 * rank), 0);
  pads[static_cast<size_t>(rank + axis + 1)] = factor - 1;
  v = Node("Pad", {v, I64s(pads), Scalar(d, 0)});
  shape[a] = size * factor;
  v = Node("Reshape", {v, I64s(shape)}, "", [](pb::NodeProto& p) { IntAttr(p, "allowzero", 1); });
  const int64_t dilated = size == 0 ? 0 : (size - 1) * factor + 1;
  shape[a] = dilated;
  return Node("Slice", {v, I64s({0}), I64s({dilated}), I64s({axis})});
}

bool IsInt8(DType d) { return d == DType::kU8 || d == DType::kI8; }

absl::StatusOr<std::string> Exporter::EmitIntegerMatMul(const ir::Node& n, const std::string& out) {
  const DType d = n.type.dtype, a = Type(n.inputs[0]).dtype, b = Type(n.inputs[1]).dtype;
  if (d == DType::kI32 && IsInt8(a) && IsInt8(b)) {
    return Node("MatMulInteger", {Name(n.inputs[0]), Name(n.inputs[1])}, out);
  }
  // Other operands widen exactly to the accumulator, which ONNX MatMul must take.
  if (d != DType::kI32 && d != DType::kI64) {
    return Unsupported(absl::StrCat("MatMul does not accumulate in ", ir::DTypeName(d)));
  }
  return Node("MatMul", {RawCast(Name(n.inputs[0]), a, d), RawCast(Name(n.inputs[1]), b, d)}, out);
}

absl::StatusOr<std::string> Exporter::EmitConv(const ir::Node& n, const std::string& out) {
  const DType d = n.type.dtype;
  // conv {accumulate=i32} of u8/i8 operands is ConvInteger (no zero points): no casts.
  const bool integer = n.attrs.accumulate.has_value();
  const DType x_d = Type(n.inputs[0]).dtype, w_d = Type(n.inputs[1]).dtype;
  if (integer && !(d == DType::kI32 && IsInt8(x_d) && IsInt8(w_d))) {
    return Unsupported("ConvInteger takes u8/i8 operands and accumulates in i32");
  }
  std::optional<DType> c = integer ? std::optional<DType>(d) : ComputeType(d, kFloat16Up);
  if (!c || d == DType::kI64) return Unsupported("ONNX Conv takes floats; i64 has no exact float");
  std::string x = integer ? Name(n.inputs[0]) : RawCast(Name(n.inputs[0]), d, *c);
  const std::string w = integer ? Name(n.inputs[1]) : RawCast(Name(n.inputs[1]), d, *c);
  ir::Shape shape = Type(n.inputs[0]).shape;
  const size_t spatial = shape.size() - 2;
  const ir::Attrs& at = n.attrs;
  for (size_t i = 0; i < at.input_dilation.size(); ++i) {
    if (at.input_dilation[i] > 1) {
      x = Dilate(x, shape, static_cast<int64_t>(i + 2), at.input_dilation[i], integer ? x_d : *c);
    }
  }
  auto per_axis = [&](const std::vector<int64_t>& v, int64_t def) {
    return v.empty() ? std::vector<int64_t>(spatial, def) : v;
  };
  std::vector<int64_t> pads = per_axis(at.low, 0);
  const std::vector<int64_t> high = per_axis(at.high, 0);
  pads.insert(pads.end(), high.begin(), high.end());
  std::vector<int64_t> kernel(Type(n.inputs[1]).shape.begin() + 2, Type(n.inputs[1]).shape.end());
  const std::string r =
      Node(integer ? "ConvInteger" : "Conv", {x, w}, *c == d ? out : "", [&](pb::NodeProto& p) {
        IntsAttr(p, "kernel_shape", kernel);
        IntsAttr(p, "strides", per_axis(at.strides, 1));
        IntsAttr(p, "pads", pads);
        IntsAttr(p, "dilations", per_axis(at.dilation, 1));
        IntAttr(p, "group", at.groups);
      });
  return *c == d ? r : FromCompute(r, *c, d, out);
}

absl::StatusOr<std::string> Exporter::EmitWindow(const ir::Node& n, const std::string& out) {
  const DType d = n.type.dtype;
  const bool is_max = n.op == Op::kWindowMax;
  const DTypeSet allowed = is_max ? (kFloat16Up | Bit(DType::kU8)) : kFloat16Up;
  std::optional<DType> c = ComputeType(d, allowed);
  if (!c || d == DType::kI64) {
    return Unsupported(absl::StrCat(is_max ? "MaxPool" : "Conv", " does not take i64"));
  }
  const ir::Attrs& at = n.attrs;
  const ir::Shape& in = Type(n.inputs[0]).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  auto get = [](const std::vector<int64_t>& v, int64_t i, int64_t def) {
    return v.empty() ? def : v[static_cast<size_t>(i)];
  };
  // Windowed axes W become the spatial axes of an [rows, 1, W...] tensor; the others, T, the rows.
  std::vector<int64_t> t_axes, w_axes;
  for (int64_t i = 0; i < rank; ++i) {
    const bool trivial = get(at.window, i, 1) == 1 && get(at.strides, i, 1) == 1 &&
                         get(at.low, i, 0) == 0 && get(at.high, i, 0) == 0;
    (trivial ? t_axes : w_axes).push_back(i);
  }
  if (w_axes.empty()) return Node("Identity", {Name(n.inputs[0])}, out);
  std::vector<int64_t> perm = t_axes;
  perm.insert(perm.end(), w_axes.begin(), w_axes.end());
  bool identity_perm = true;
  for (int64_t i = 0; i < rank; ++i) identity_perm &= perm[static_cast<size_t>(i)] == i;
  std::string x = RawCast(Name(n.inputs[0]), d, *c);
  if (!identity_perm) {
    x = Node("Transpose", {x}, "", [&](pb::NodeProto& p) { IntsAttr(p, "perm", perm); });
  }
  int64_t rows = 1;
  for (int64_t a : t_axes) rows *= in[static_cast<size_t>(a)];
  ir::Shape pooled_in = {rows, 1};
  std::vector<int64_t> kernel, strides, dil, low, high;
  for (int64_t a : w_axes) {
    pooled_in.push_back(in[static_cast<size_t>(a)]);
    kernel.push_back(get(at.window, a, 1));
    strides.push_back(get(at.strides, a, 1));
    dil.push_back(get(at.dilation, a, 1));
    low.push_back(get(at.low, a, 0));
    high.push_back(get(at.high, a, 0));
  }
  auto reshape = [&](const std::string& v, const ir::Shape& s) {
    return Node("Reshape", {v, I64s(s)}, "", [](pb::NodeProto& p) { IntAttr(p, "allowzero", 1); });
  };
  x = reshape(x, pooled_in);
  std::string pooled;
  if (is_max) {
    // Pad with the lowest value explicitly: MaxPool's pads must be smaller than the kernel.
    std::vector<int64_t> pads(2, 0);
    pads.insert(pads.end(), low.begin(), low.end());
    pads.push_back(0);
    pads.push_back(0);
    pads.insert(pads.end(), high.begin(), high.end());
    const double lowest =
        ir::IsFloat(*c) ? -std::numeric_limits<double>::infinity() : IntRange(d).first;
    x = Node("Pad", {x, I64s(pads), Scalar(*c, lowest)});
    pooled = Node("MaxPool", {x}, "", [&](pb::NodeProto& p) {
      IntsAttr(p, "kernel_shape", kernel);
      IntsAttr(p, "strides", strides);
      IntsAttr(p, "dilations", dil);
    });
  } else {
    ir::Shape wshape = {1, 1};
    wshape.insert(wshape.end(), kernel.begin(), kernel.end());
    ir::TensorData ones(*c, wshape);
    for (int64_t i = 0; i < ones.num_elements(); ++i) ones.SetDouble(i, 1);
    std::vector<int64_t> pads = low;
    pads.insert(pads.end(), high.begin(), high.end());
    pooled = Node("Conv", {x, Initializer(ones)}, "", [&](pb::NodeProto& p) {
      IntsAttr(p, "kernel_shape", kernel);
      IntsAttr(p, "strides", strides);
      IntsAttr(p, "pads", pads);
      IntsAttr(p, "dilations", dil);
    });
  }
  // Back to [T..., W out...] in the permuted order, then to the original axis order.
  ir::Shape permuted_out;
  for (int64_t a : perm) permuted_out.push_back(n.type.shape[static_cast<size_t>(a)]);
  std::string v = reshape(pooled, permuted_out);
  if (identity_perm) return FromCompute(v, *c, d, out);
  v = FromCompute(v, *c, d);
  std::vector<int64_t> inverse(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) inverse[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
  return Node("Transpose", {v}, out, [&](pb::NodeProto& p) { IntsAttr(p, "perm", inverse); });
}

absl::StatusOr<std::string> Exporter::EmitNode(NodeId id, const std::string& out) {
  const ir::Node& n = graph_.node(id);
  const DType d = n.type.dtype;
  const DType in_d = n.inputs.empty() ? d : Type(n.inputs[0]).dtype;
  std::vector<std::string> ins;
  for (NodeId i : n.inputs) ins.push_back(Name(i));
  const ir::Attrs& at = n.attrs;
  auto simple = [&](const char* op_type, DTypeSet allowed) {
    return Compute(op_type, ins, d, allowed, out);
  };
  if (n.op == Op::kMatMul && at.accumulate.has_value()) return EmitIntegerMatMul(n, out);
  if (n.op == Op::kConv && at.accumulate.has_value()) return EmitConv(n, out);
  // The exporter's wrap-around and range rules are written for u8, i32 and i64 (the dtypes the
  // integer ops of ONNX Runtime's CPU provider cover); the other integer dtypes only travel
  // through ops that move or convert elements.
  for (DType t : {d, in_d}) {
    const bool narrow = t == DType::kI8 || t == DType::kI16 || t == DType::kU16 ||
                        t == DType::kU32 || t == DType::kU64;
    const ir::OpClass c = ir::GetOpClass(n.op);
    const bool moves = c == ir::OpClass::kMovement || (c == ir::OpClass::kCast && t != DType::kU64);
    if (narrow && !moves) {
      return Unsupported(absl::StrCat("exporting ", ir::DTypeName(t),
                                      " arithmetic is not implemented; cast to i32 or i64 first"));
    }
  }
  switch (n.op) {
    case Op::kParameter:
    case Op::kConstant:
      return absl::InternalError("leaves are named, not emitted");
    case Op::kFill: {
      ir::TensorData scalar(d, {});
      scalar.SetDouble(0, at.value);
      if (n.type.rank() == 0) return Node("Identity", {Initializer(scalar)}, out);
      if (d != DType::kBF16) return Node("Expand", {Initializer(scalar), I64s(n.type.shape)}, out);
      // The bf16 value, exact in f32, expanded as f32 (runtimes lack a bf16 Expand).
      const std::string v =
          Node("Expand", {Scalar(DType::kF32, scalar.GetDouble(0)), I64s(n.type.shape)});
      return RawCast(v, DType::kF32, d, out);
    }
    case Op::kIota: {
      const int64_t axis = at.axes[0];
      const int64_t size = n.type.shape[static_cast<size_t>(axis)];
      std::string v =
          Node("Range", {Scalar(DType::kI64, 0), Scalar(DType::kI64, static_cast<double>(size)),
                         Scalar(DType::kI64, 1)});
      ir::Shape s(n.type.shape.size(), 1);
      s[static_cast<size_t>(axis)] = size;
      v = Node("Reshape", {v, I64s(s)}, "", [](pb::NodeProto& p) { IntAttr(p, "allowzero", 1); });
      v = Node("Expand", {v, I64s(n.type.shape)});
      return IrCast(v, DType::kI64, d, out);
    }
    case Op::kRandomUniform:
    case Op::kRandomNormal:
      return Unsupported(
          "kiln's random ops are Philox4x32-10 bit-exact; ONNX's random ops are unspecified");
    case Op::kNeg:
      if (d == DType::kU8) return Node("Sub", {Scalar(d, 0), ins[0]}, out);
      return simple("Neg", kFloats | kSigned);
    case Op::kAbs:
      return simple("Abs", kNumeric);
    case Op::kSign: {
      if (!ir::IsFloat(d)) return simple("Sign", kNumeric);
      // ONNX leaves Sign(NaN) open (ONNX Runtime gives 0); the IR keeps NaN.
      const DType c = *ComputeType(d, kFloats);
      const std::string x = RawCast(ins[0], d, c);
      const std::string r =
          Node("Where", {Node("IsNaN", {x}), x, Node("Sign", {x})}, c == d ? out : "");
      return c == d ? r : FromCompute(r, c, d, out);
    }
    case Op::kExp:
      return simple("Exp", kFloats);
    case Op::kLog:
      return simple("Log", kFloats);
    case Op::kSqrt:
      return simple("Sqrt", kFloats);
    case Op::kRsqrt: {
      std::optional<DType> c = ComputeType(d, kFloats);
      const std::string root = Node("Sqrt", {RawCast(ins[0], d, *c)});
      if (*c == d) return Node("Reciprocal", {root}, out);
      return FromCompute(Node("Reciprocal", {root}), *c, d, out);
    }
    case Op::kSin:
      return simple("Sin", kFloat16Up);
    case Op::kCos:
      return simple("Cos", kFloat16Up);
    case Op::kTanh:
      return simple("Tanh", kFloats);
    case Op::kErf:
      return simple("Erf", kFloats);
    case Op::kFloor:
      return simple("Floor", kFloats);
    case Op::kCeil:
      return simple("Ceil", kFloats);
    case Op::kRound:
      return simple("Round", kFloat16Up);
    case Op::kReciprocal:
      return simple("Reciprocal", kFloats);
    case Op::kNot: {
      if (ir::IsBool(d)) return Node("Not", ins, out);
      // ~x == all-ones - x in two's complement (and 255 - x for u8), without borrows.
      return Node("Sub", {Scalar(d, d == DType::kU8 ? 255 : -1), ins[0]}, out);
    }
    case Op::kAdd:
      return simple("Add", kNumeric);
    case Op::kSub:
      return simple("Sub", kNumeric);
    case Op::kMul:
      return simple("Mul", kNumeric);
    case Op::kDiv:
      return EmitDiv(n, out);
    case Op::kPow:
      return simple("Pow", kFloats);
    case Op::kMax:
      return simple("Max", kNumeric);
    case Op::kMin:
      return simple("Min", kNumeric);
    case Op::kMod:
      return EmitMod(n, out);
    case Op::kEq:
      return Compute("Equal", ins, in_d, kNumeric | Bit(DType::kBool), out, true);
    case Op::kNe: {
      absl::StatusOr<std::string> eq =
          Compute("Equal", ins, in_d, kNumeric | Bit(DType::kBool), "", true);
      if (!eq.ok()) return eq;
      return Node("Not", {*eq}, out);
    }
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: {
      const char* op_type = n.op == Op::kLt   ? "Less"
                            : n.op == Op::kLe ? "LessOrEqual"
                            : n.op == Op::kGt ? "Greater"
                                              : "GreaterOrEqual";
      return Compute(op_type, ins, in_d, kNumeric, out, /*own_result_type=*/true);
    }
    case Op::kAnd:
    case Op::kOr:
    case Op::kXor: {
      const char* op_type = n.op == Op::kAnd ? "And" : n.op == Op::kOr ? "Or" : "Xor";
      if (!ir::IsBool(d)) {
        return Unsupported(absl::StrCat("bitwise ", ir::OpName(n.op), " on ", ir::DTypeName(d),
                                        " needs ONNX Bitwise", op_type, " (opset 18)"));
      }
      return Node(op_type, ins, out);
    }
    case Op::kSelect:
      if (ir::IsBool(d)) {  // ONNX Runtime has no bool Where: (c and x) or (not c and y)
        return Node("Or",
                    {Node("And", {ins[0], ins[1]}), Node("And", {Node("Not", {ins[0]}), ins[2]})},
                    out);
      }
      return Node("Where", ins, out);
    case Op::kCast:
      return IrCast(ins[0], in_d, d, out);
    case Op::kReduceSum:
    case Op::kReduceProd:
    case Op::kReduceMax:
    case Op::kReduceMin: {
      if (at.axes.empty()) return Node("Identity", ins, out);
      const char* op_type = n.op == Op::kReduceSum    ? "ReduceSum"
                            : n.op == Op::kReduceProd ? "ReduceProd"
                            : n.op == Op::kReduceMax  ? "ReduceMax"
                                                      : "ReduceMin";
      const DTypeSet allowed =
          n.op == Op::kReduceSum || n.op == Op::kReduceProd ? kFloats | kSigned : kNumeric;
      if (n.op == Op::kReduceSum) {
        return Compute(op_type, {ins[0], I64s(at.axes)}, d, allowed, out, false, 1,
                       [](pb::NodeProto& p) { IntAttr(p, "keepdims", 1); });
      }
      return Compute(op_type, ins, d, allowed, out, false, 1, [&](pb::NodeProto& p) {
        IntsAttr(p, "axes", at.axes);
        IntAttr(p, "keepdims", 1);
      });
    }
    case Op::kArgMax:
    case Op::kArgMin:
      return Compute(n.op == Op::kArgMax ? "ArgMax" : "ArgMin", ins, in_d, kNumeric, out,
                     /*own_result_type=*/true, 1, [&](pb::NodeProto& p) {
                       IntAttr(p, "axis", at.axes[0]);
                       IntAttr(p, "keepdims", 1);
                       IntAttr(p, "select_last_index", 0);
                     });
    case Op::kReshape:
      return Node("Reshape", {ins[0], I64s(n.type.shape)}, out,
                  [](pb::NodeProto& p) { IntAttr(p, "allowzero", 1); });
    case Op::kPermute:
      return Node("Transpose", ins, out, [&](pb::NodeProto& p) { IntsAttr(p, "perm", at.axes); });
    case Op::kBroadcast:
      return Node("Expand", {ins[0], I64s(n.type.shape)}, out);
    case Op::kSlice: {
      std::vector<int64_t> axes;
      for (size_t i = 0; i < at.starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
      std::vector<int64_t> steps =
          at.strides.empty() ? std::vector<int64_t>(axes.size(), 1) : at.strides;
      return Node("Slice", {ins[0], I64s(at.starts), I64s(at.limits), I64s(axes), I64s(steps)},
                  out);
    }
    case Op::kPad: {
      std::vector<int64_t> pads = at.low;
      pads.insert(pads.end(), at.high.begin(), at.high.end());
      return Node("Pad", {ins[0], I64s(pads), Scalar(d, at.value)}, out);
    }
    case Op::kConcat:
      return Node("Concat", ins, out, [&](pb::NodeProto& p) { IntAttr(p, "axis", at.axes[0]); });
    case Op::kFlip: {
      // Axes of size 0 or 1 are left out: flipping them changes nothing, and ONNX's shape
      // inference gets a negative-step Slice over an empty axis wrong (size 1).
      std::vector<int64_t> axes;
      for (int64_t a : at.axes) {
        if (n.type.shape[static_cast<size_t>(a)] > 1) axes.push_back(a);
      }
      if (axes.empty()) return Node("Identity", ins, out);
      const size_t k = axes.size();
      return Node("Slice",
                  {ins[0], I64s(std::vector<int64_t>(k, -1)),
                   I64s(std::vector<int64_t>(k, std::numeric_limits<int64_t>::min())), I64s(axes),
                   I64s(std::vector<int64_t>(k, -1))},
                  out);
    }
    case Op::kGather:
    case Op::kScatterAdd: {
      const DType index_d = Type(n.inputs[1]).dtype;
      if (index_d == DType::kU8) ins[1] = RawCast(ins[1], index_d, DType::kI64);
      if (n.op == Op::kGather) {
        return Node("GatherElements", ins, out,
                    [&](pb::NodeProto& p) { IntAttr(p, "axis", at.axes[0]); });
      }
      // f16/bf16 accumulate in f32 (ONNX Runtime has no f16 scatter-add either).
      const DType c = d == DType::kF16 || d == DType::kBF16 ? DType::kF32 : d;
      ins[0] = RawCast(ins[0], d, c);
      ins[2] = RawCast(ins[2], d, c);
      const std::string r = Node("ScatterElements", ins, c == d ? out : "", [&](pb::NodeProto& p) {
        IntAttr(p, "axis", at.axes[0]);
        StringAttr(p, "reduction", "add");
      });
      return c == d ? r : RawCast(r, c, d, out);
    }
    case Op::kMatMul:
      return simple("MatMul", kFloats | kSigned);
    case Op::kConv:
      return EmitConv(n, out);
    case Op::kWindowSum:
    case Op::kWindowMax:
      return EmitWindow(n, out);
    case Op::kSort:
    case Op::kArgsort: {
      const std::optional<DType> c = ComputeType(in_d, kNumeric);
      if (!c) return absl::InternalError("no TopK dtype");
      const int64_t axis = at.axes[0];
      const std::string values =
          Node("TopK", {RawCast(ins[0], in_d, *c), I64s({Type(n.inputs[0]).shape[axis]})}, "",
               [&](pb::NodeProto& p) {
                 IntAttr(p, "axis", axis);
                 IntAttr(p, "largest", 0);
                 IntAttr(p, "sorted", 1);
               });
      const std::string indices = Fresh(absl::StrCat(values, "_indices"));
      out_->mutable_node(out_->node_size() - 1)->add_output(indices);
      if (n.op == Op::kArgsort) return Node("Identity", {indices}, out);
      return RawCast(values, *c, in_d, out);
    }
  }
  return absl::InternalError("unknown op");
}

absl::Status Exporter::Run() {
  out_->set_name(options_.graph_name);
  const int32_t count = graph_.num_nodes();
  names_.assign(static_cast<size_t>(count), "");
  // Parameter names first, then the output names, so helpers never take them.
  for (NodeId id : graph_.Parameters()) used_.insert(graph_.node(id).attrs.name);
  std::vector<std::string> output_names;
  std::set<std::string> named_outputs;
  for (const ir::Output& o : graph_.outputs()) {
    if (!o.name.empty()) named_outputs.insert(o.name);
  }
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    const ir::Output& o = graph_.outputs()[i];
    std::string name = o.name;
    if (name.empty()) {
      name = absl::StrCat("output", i);
      while (named_outputs.count(name) > 0 || used_.count(name) > 0) name += "_";
    }
    if (used_.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("ONNX export: output name \"", name,
                                                     "\" is also a parameter name; ONNX needs one "
                                                     "name per value"));
    }
    used_.insert(name);
    output_names.push_back(name);
  }
  // An output of a computed node takes the output's name directly (the first such output).
  std::vector<std::string> direct(static_cast<size_t>(count));
  std::vector<bool> via_identity(graph_.outputs().size(), true);
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    const NodeId id = graph_.outputs()[i].node;
    const Op op = graph_.node(id).op;
    if (op == Op::kParameter || op == Op::kConstant || !direct[static_cast<size_t>(id)].empty()) {
      continue;
    }
    direct[static_cast<size_t>(id)] = output_names[i];
    via_identity[i] = false;
  }

  std::set<std::string> weights_used;
  for (NodeId id = 0; id < count; ++id) {
    const ir::Node& n = graph_.node(id);
    current_id_ = id;
    if (n.op == Op::kParameter) {
      const std::string& name = n.attrs.name;
      names_[static_cast<size_t>(id)] = name;
      auto w = options_.weights.find(name);
      if (w != options_.weights.end()) {
        if (w->second.dtype() != n.type.dtype || w->second.shape() != n.type.shape) {
          return absl::InvalidArgumentError(
              absl::StrCat("ONNX export: weight \"", name, "\" is ",
                           ir::TypeToString({w->second.dtype(), w->second.shape()}),
                           " but the parameter is ", ir::TypeToString(n.type)));
        }
        Initializer(w->second, name);
        weights_used.insert(name);
        continue;
      }
      pb::ValueInfoProto* input = out_->add_input();
      input->set_name(name);
      pb::TypeProto::Tensor* t = input->mutable_type()->mutable_tensor_type();
      t->set_elem_type(OnnxType(n.type.dtype));
      pb::TensorShapeProto* s = t->mutable_shape();
      for (int64_t dim : n.type.shape) s->add_dim()->set_dim_value(dim);
      continue;
    }
    current_ = absl::StrCat("v", id);
    std::string out = direct[static_cast<size_t>(id)];
    if (out.empty()) out = Fresh(current_);
    if (n.op == Op::kConstant) {
      names_[static_cast<size_t>(id)] = Initializer(*n.attrs.literal, out);
      continue;
    }
    absl::StatusOr<std::string> v = EmitNode(id, out);
    if (!v.ok()) return v.status();
    if (*v != out) {
      return absl::InternalError(absl::StrCat("ONNX export: node %", id, " (", ir::OpName(n.op),
                                              ") did not end in its value name"));
    }
    names_[static_cast<size_t>(id)] = out;
    pb::ValueInfoProto* info =
        direct[static_cast<size_t>(id)].empty() ? out_->add_value_info() : nullptr;
    if (info != nullptr) {
      info->set_name(out);
      pb::TypeProto::Tensor* t = info->mutable_type()->mutable_tensor_type();
      t->set_elem_type(OnnxType(n.type.dtype));
      pb::TensorShapeProto* s = t->mutable_shape();
      for (int64_t dim : n.type.shape) s->add_dim()->set_dim_value(dim);
    }
  }
  for (const auto& [name, value] : options_.weights) {
    if (weights_used.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX export: weight \"", name, "\" is not a parameter of the graph"));
    }
  }
  for (size_t i = 0; i < graph_.outputs().size(); ++i) {
    const NodeId id = graph_.outputs()[i].node;
    if (via_identity[i]) {
      current_ = output_names[i];
      Node("Identity", {Name(id)}, output_names[i]);
    }
    pb::ValueInfoProto* o = out_->add_output();
    o->set_name(output_names[i]);
    pb::TypeProto::Tensor* t = o->mutable_type()->mutable_tensor_type();
    t->set_elem_type(OnnxType(Type(id).dtype));
    pb::TensorShapeProto* s = t->mutable_shape();
    for (int64_t dim : Type(id).shape) s->add_dim()->set_dim_value(dim);
  }
  return absl::OkStatus();
}

}  // namespace

std::span<const ExportRule> ExportRules() { return kRules; }

std::string SerializeTensor(const ir::TensorData& value, const std::string& name) {
  pb::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(OnnxType(value.dtype()));
  for (int64_t d : value.shape()) proto.add_dims(d);
  proto.set_raw_data(RawBytes(value));
  return proto.SerializeAsString();
}

absl::StatusOr<std::string> ExportModel(const ir::Graph& graph, const ExportOptions& options) {
  if (options.opset < 16 || options.opset > 17) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX export: opset ", options.opset, " is not supported (16 or 17)"));
  }
  if (absl::Status s = ir::Verify(graph); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX export: the graph does not verify: ", s.message()));
  }
  pb::ModelProto model;
  // IR version 8 is what ONNX 1.12 writes for opsets 16 and 17.
  model.set_ir_version(8);
  model.set_producer_name(options.producer_name);
  model.set_producer_version(options.producer_version);
  pb::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  Exporter exporter(graph, options, model.mutable_graph());
  if (absl::Status s = exporter.Run(); !s.ok()) return s;
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    return absl::InternalError("ONNX export: protobuf serialization failed (model over 2 GiB?)");
  }
  return bytes;
}

absl::Status ExportFile(const ir::Graph& graph, const std::string& path,
                        const ExportOptions& options) {
  absl::StatusOr<std::string> bytes = ExportModel(graph, options);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(), absl::StrCat(path, ": ", bytes.status().message()));
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  file.close();
  if (!file) return absl::InternalError(absl::StrCat(path, ": cannot write the ONNX model"));
  return absl::OkStatus();
}

}  // namespace kiln::onnx
