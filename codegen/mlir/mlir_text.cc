// MLIR text export (mlir_text.h). Every SSA name comes from one counter, so names are unique
// across nested regions (MLIR rejects redefinitions); values are written in node order.
#include "codegen/mlir/mlir_text.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/kernel_ir.h"
#include "codegen/scalar_limits.h"
#include "ir/dtype.h"
#include "ir/tensor_data.h"
#include "ir/verifier.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;

constexpr MlirExportRule kRules[] = {
    {Op::kParameter, "func.func argument"},
    {Op::kConstant, "arith.constant dense<\"0x...\">"},
    {Op::kFill, "arith.constant (splat)"},
    {Op::kIota, "linalg.generic (linalg.index)"},
    {Op::kRandomUniform, ""},
    {Op::kRandomNormal, ""},
    {Op::kNeg, "linalg.generic: arith.negf / arith.subi"},
    {Op::kAbs, "linalg.generic: math.absf / math.absi"},
    {Op::kSign, "linalg.generic: arith.cmpf/cmpi + arith.select"},
    {Op::kExp, "linalg.generic: math.exp"},
    {Op::kLog, "linalg.generic: math.log"},
    {Op::kSqrt, "linalg.generic: math.sqrt"},
    {Op::kRsqrt, "linalg.generic: math.rsqrt"},
    {Op::kSin, "linalg.generic: math.sin"},
    {Op::kCos, "linalg.generic: math.cos"},
    {Op::kTanh, "linalg.generic: math.tanh"},
    {Op::kErf, "linalg.generic: math.erf"},
    {Op::kFloor, "linalg.generic: math.floor"},
    {Op::kCeil, "linalg.generic: math.ceil"},
    {Op::kRound, "linalg.generic: math.roundeven"},
    {Op::kReciprocal, "linalg.generic: arith.divf"},
    {Op::kNot, "linalg.generic: arith.xori"},
    {Op::kAdd, "linalg.generic: arith.addf / arith.addi"},
    {Op::kSub, "linalg.generic: arith.subf / arith.subi"},
    {Op::kMul, "linalg.generic: arith.mulf / arith.muli"},
    {Op::kDiv, "linalg.generic: arith.divf / arith.floordivsi / arith.divui (+ zero guards)"},
    {Op::kPow, "linalg.generic: math.powf"},
    {Op::kMax, "linalg.generic: arith.cmpf + arith.select (NaN-propagating) / arith.maxsi / maxui"},
    {Op::kMin, "linalg.generic: arith.cmpf + arith.select (NaN-propagating) / arith.minsi / minui"},
    {Op::kMod, "linalg.generic: arith.remf / remsi / remui + sign fix-ups"},
    {Op::kEq, "linalg.generic: arith.cmpf oeq / arith.cmpi eq"},
    {Op::kNe, "linalg.generic: arith.cmpf une / arith.cmpi ne"},
    {Op::kLt, "linalg.generic: arith.cmpf olt / arith.cmpi slt, ult"},
    {Op::kLe, "linalg.generic: arith.cmpf ole / arith.cmpi sle, ule"},
    {Op::kGt, "linalg.generic: arith.cmpf ogt / arith.cmpi sgt, ugt"},
    {Op::kGe, "linalg.generic: arith.cmpf oge / arith.cmpi sge, uge"},
    {Op::kAnd, "linalg.generic: arith.andi"},
    {Op::kOr, "linalg.generic: arith.ori"},
    {Op::kXor, "linalg.generic: arith.xori"},
    {Op::kSelect, "linalg.generic: arith.select"},
    {Op::kCast,
     "linalg.generic: arith.extf/truncf/sitofp/uitofp/fptosi/fptoui/extsi/extui/trunci "
     "(+ saturation)"},
    {Op::kReduceSum, "linalg.fill + linalg.generic (reduction)"},
    {Op::kReduceProd, "linalg.fill + linalg.generic (reduction)"},
    {Op::kReduceMax, "linalg.fill + linalg.generic (reduction)"},
    {Op::kReduceMin, "linalg.fill + linalg.generic (reduction)"},
    {Op::kArgMax, "linalg.fill + linalg.generic (reduction, two results)"},
    {Op::kArgMin, "linalg.fill + linalg.generic (reduction, two results)"},
    {Op::kReshape, "tensor.collapse_shape + tensor.expand_shape"},
    {Op::kPermute, "linalg.transpose"},
    {Op::kBroadcast, "linalg.generic (constant 0 in the input map)"},
    {Op::kSlice, "tensor.extract_slice"},
    {Op::kPad, "tensor.pad"},
    {Op::kConcat, "tensor.empty + tensor.insert_slice"},
    {Op::kFlip, "linalg.generic (N - 1 - d in the input map)"},
    {Op::kGather, "linalg.generic with tensor.extract"},
    {Op::kScatterAdd, "scf.for nest with tensor.extract / tensor.insert"},
    {Op::kMatMul, "linalg.fill + linalg.generic (reduction)"},
    {Op::kConv, "tensor.insert_slice (input dilation) + tensor.pad + linalg.generic"},
    {Op::kWindowSum, "tensor.pad + linalg.generic over a window-shaped tensor.empty"},
    {Op::kWindowMax, "tensor.pad + linalg.generic over a window-shaped tensor.empty"},
    {Op::kSort, ""},
    {Op::kArgsort, ""},
};
static_assert(std::size(kRules) == std::size(ir::kAllOps), "one MLIR row per IR op");

// MLIR's integer types are signless: uN is iN (its ops pick the unsigned forms) and bool is
// i1. Every other dtype's name (base/dtype.h) is already its MLIR spelling.
const char* ElemType(DType d) {
  switch (d) {
    case DType::kU8:
      return "i8";
    case DType::kU16:
      return "i16";
    case DType::kU32:
      return "i32";
    case DType::kU64:
      return "i64";
    case DType::kBool:
      return "i1";
    default:
      return ir::DTypeName(d);
  }
}

// Unsigned integers and bool take MLIR's unsigned op forms (maxui, cmpi ult, uitofp, ...).
bool IsUnsignedForm(DType d) { return ir::IsUnsignedInteger(d) || d == DType::kBool; }

// The smallest and largest value of an integer dtype as int64 bit patterns (u64's maximum is -1).
IntLimits Limits(DType d) { return LimitsOf(ComputeType(d)); }

int Bits(DType d) { return static_cast<int>(ir::DTypeSize(d)) * 8; }

std::string TensorType(DType d, const ir::Shape& shape) {
  std::string s = "tensor<";
  for (int64_t dim : shape) absl::StrAppend(&s, dim, "x");
  return absl::StrCat(s, ElemType(d), ">");
}
std::string TensorType(const ir::TensorType& t) { return TensorType(t.dtype, t.shape); }

std::string Hex(const std::byte* data, size_t size) {
  static const char* digits = "0123456789ABCDEF";
  std::string s = "0x";
  for (size_t i = 0; i < size; ++i) {
    const auto b = static_cast<unsigned>(data[i]);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// A scalar attribute literal of dtype d holding `value` (stored as under docs/ir.md "Dtypes"):
// floats as their bit pattern in hex, integers in decimal, bools as true/false.
std::string IntLiteral(DType d, int64_t v);

std::string ScalarLiteral(DType d, double value) {
  ir::TensorData t(d, {});
  t.SetDouble(0, value);
  if (ir::IsBool(d)) return t.GetInt64(0) != 0 ? "true" : "false";
  if (ir::IsInteger(d)) {
    return IntLiteral(d, t.GetInt64(0));
  }
  std::string hex = "0x";
  const size_t size = static_cast<size_t>(ir::DTypeSize(d));
  char buf[3];
  for (size_t i = size; i-- > 0;) {  // most significant byte first
    std::snprintf(buf, sizeof(buf), "%02X", static_cast<unsigned>(t.data()[i]));
    hex += buf;
  }
  return hex;
}

// MLIR prints and parses signless integer literals as signed: an unsigned value is written as
// the signed number with its bits.
std::string IntLiteral(DType d, int64_t v) {
  switch (d) {
    case DType::kU8:
      return absl::StrCat(static_cast<int8_t>(static_cast<uint8_t>(v)));
    case DType::kU16:
      return absl::StrCat(static_cast<int16_t>(static_cast<uint16_t>(v)));
    case DType::kU32:
      return absl::StrCat(static_cast<int32_t>(static_cast<uint32_t>(v)));
    default:
      return absl::StrCat(v);
  }
}

// "affine_map<(d0, d1) -> (d0, 0)>" from the result expressions.
std::string Map(size_t dims, const std::vector<std::string>& results) {
  std::vector<std::string> ds;
  for (size_t i = 0; i < dims; ++i) ds.push_back(absl::StrCat("d", i));
  return absl::StrCat("affine_map<(", absl::StrJoin(ds, ", "), ") -> (",
                      absl::StrJoin(results, ", "), ")>");
}
std::string IdentityMap(size_t dims) {
  std::vector<std::string> rs;
  for (size_t i = 0; i < dims; ++i) rs.push_back(absl::StrCat("d", i));
  return Map(dims, rs);
}

class Writer {
 public:
  explicit Writer(const ir::Graph& graph) : graph_(graph) {}

  absl::StatusOr<std::string> Run(const MlirExportOptions& options);

 private:
  struct Operand {
    std::string name;
    std::string type;  // tensor type
    std::string map;
    DType dtype;
  };
  using Body = std::function<std::vector<std::string>(const std::vector<std::string>& args)>;

  std::string Fresh() { return absl::StrCat("%v", counter_++); }
  void Line(const std::string& s) { absl::StrAppend(&out_, indent_, s, "\n"); }

  // A scalar op line: returns its result.
  std::string S(const std::string& text) {
    const std::string r = Fresh();
    Line(absl::StrCat(r, " = ", text));
    return r;
  }
  std::string Const(DType d, double v) {
    if (ir::IsBool(d)) return ConstInt(d, v != 0);
    return S(absl::StrCat("arith.constant ", ScalarLiteral(d, v), " : ", ElemType(d)));
  }
  std::string ConstInt(DType d, int64_t v) {
    if (ir::IsBool(d)) return S(absl::StrCat("arith.constant ", v ? "true" : "false"));
    return S(absl::StrCat("arith.constant ", IntLiteral(d, v), " : ", ElemType(d)));
  }
  std::string Index(int64_t v) { return S(absl::StrCat("arith.constant ", v, " : index")); }
  std::string Sel(const std::string& c, const std::string& a, const std::string& b, DType d) {
    return S(absl::StrCat("arith.select ", c, ", ", a, ", ", b, " : ", ElemType(d)));
  }
  std::string Bin(const char* op, const std::string& a, const std::string& b, DType d) {
    return S(absl::StrCat(op, " ", a, ", ", b, " : ", ElemType(d)));
  }
  std::string Un(const char* op, const std::string& a, DType d) {
    return S(absl::StrCat(op, " ", a, " : ", ElemType(d)));
  }
  std::string CmpF(const char* pred, const std::string& a, const std::string& b, DType d) {
    return S(absl::StrCat("arith.cmpf ", pred, ", ", a, ", ", b, " : ", ElemType(d)));
  }
  std::string CmpI(const char* pred, const std::string& a, const std::string& b, DType d) {
    return S(absl::StrCat("arith.cmpi ", pred, ", ", a, ", ", b, " : ", ElemType(d)));
  }
  std::string Conv(const char* op, const std::string& a, DType from, DType to) {
    return S(absl::StrCat(op, " ", a, " : ", ElemType(from), " to ", ElemType(to)));
  }

  std::string Empty(const std::string& type) { return S(absl::StrCat("tensor.empty() : ", type)); }
  // A tensor of `type` filled with the scalar `value_name`.
  std::string FillTensor(const std::string& value, DType d, const std::string& type) {
    const std::string e = Empty(type);
    return S(absl::StrCat("linalg.fill ins(", value, " : ", ElemType(d), ") outs(", e, " : ", type,
                          ") -> ", type));
  }

  // linalg.generic with `ins` and one output per `outs` entry (inits given); returns the results.
  std::vector<std::string> Generic(const std::vector<Operand>& ins,
                                   const std::vector<Operand>& outs,
                                   const std::vector<std::string>& iterators, const Body& body);
  // An elementwise generic over operands of one shape with result type `result`.
  std::string Elementwise(const std::vector<NodeId>& operands, const ir::TensorType& result,
                          const Body& body);

  // Scalar semantics.
  std::string ScalarOp(Op op, DType in, DType out, const std::vector<std::string>& a);
  std::string ScalarCast(const std::string& x, DType from, DType to);
  std::string MaxMin(bool is_max, const std::string& a, const std::string& b, DType d);
  std::string Identity(Op op, DType d);  // reduction identity as a scalar constant

  absl::StatusOr<std::string> EmitNode(NodeId id);
  std::string Reshape(const std::string& x, const ir::TensorType& from, const ir::Shape& to);
  std::string ToIndex(const std::string& v, DType d) {
    std::string x = v;
    // index_cast sign-extends: narrower unsigned values are zero-extended first.
    const bool widen = ir::IsUnsignedInteger(d) && d != DType::kU64;
    if (widen) x = Conv("arith.extui", x, d, DType::kI64);
    return S(absl::StrCat("arith.index_cast ", x, " : ", ElemType(widen ? DType::kI64 : d),
                          " to index"));
  }
  std::string PadTensor(const std::string& x, const ir::TensorType& t,
                        const std::vector<int64_t>& low, const std::vector<int64_t>& high,
                        const std::string& value, ir::Shape* padded);

  const ir::Graph& graph_;
  std::string out_;
  std::string indent_ = "    ";
  int64_t counter_ = 0;
  std::vector<std::string> names_;
};

std::vector<std::string> Writer::Generic(const std::vector<Operand>& ins,
                                         const std::vector<Operand>& outs,
                                         const std::vector<std::string>& iterators,
                                         const Body& body) {
  std::vector<std::string> maps, in_names, in_types, out_names, out_types, iters;
  for (const Operand& o : ins) {
    maps.push_back(o.map);
    in_names.push_back(o.name);
    in_types.push_back(o.type);
  }
  for (const Operand& o : outs) {
    maps.push_back(o.map);
    out_names.push_back(o.name);
    out_types.push_back(o.type);
  }
  for (const std::string& it : iterators) iters.push_back(absl::StrCat("\"", it, "\""));
  std::vector<std::string> results;
  std::string lhs;
  const std::string base = Fresh();
  if (outs.size() == 1) {
    lhs = base;
    results.push_back(base);
  } else {
    lhs = absl::StrCat(base, ":", outs.size());
    for (size_t i = 0; i < outs.size(); ++i) results.push_back(absl::StrCat(base, "#", i));
  }
  std::string head =
      absl::StrCat(lhs, " = linalg.generic {indexing_maps = [", absl::StrJoin(maps, ", "),
                   "], iterator_types = [", absl::StrJoin(iters, ", "), "]}");
  if (!ins.empty()) {
    absl::StrAppend(&head, " ins(", absl::StrJoin(in_names, ", "), " : ",
                    absl::StrJoin(in_types, ", "), ")");
  }
  absl::StrAppend(&head, " outs(", absl::StrJoin(out_names, ", "), " : ",
                  absl::StrJoin(out_types, ", "), ") {");
  Line(head);
  std::vector<std::string> args, arg_decls;
  for (const Operand& o : ins) {
    args.push_back(Fresh());
    arg_decls.push_back(absl::StrCat(args.back(), ": ", ElemType(o.dtype)));
  }
  for (const Operand& o : outs) {
    args.push_back(Fresh());
    arg_decls.push_back(absl::StrCat(args.back(), ": ", ElemType(o.dtype)));
  }
  Line(absl::StrCat("^bb0(", absl::StrJoin(arg_decls, ", "), "):"));
  const std::string saved = indent_;
  indent_ += "  ";
  std::vector<std::string> yielded = body(args);
  std::vector<std::string> yield_types;
  for (const Operand& o : outs) yield_types.push_back(ElemType(o.dtype));
  Line(absl::StrCat("linalg.yield ", absl::StrJoin(yielded, ", "), " : ",
                    absl::StrJoin(yield_types, ", ")));
  indent_ = saved;
  Line(outs.size() == 1 ? absl::StrCat("} -> ", out_types[0])
                        : absl::StrCat("} -> (", absl::StrJoin(out_types, ", "), ")"));
  return results;
}

std::string Writer::Elementwise(const std::vector<NodeId>& operands, const ir::TensorType& result,
                                const Body& body) {
  const size_t rank = result.shape.size();
  const std::string map = IdentityMap(rank);
  std::vector<Operand> ins;
  for (NodeId id : operands) {
    const ir::TensorType& t = graph_.node(id).type;
    ins.push_back({names_[static_cast<size_t>(id)], TensorType(t), map, t.dtype});
  }
  const std::string type = TensorType(result);
  const std::string init = Empty(type);
  return Generic(ins, {{init, type, map, result.dtype}}, std::vector<std::string>(rank, "parallel"),
                 body)[0];
}

std::string Writer::MaxMin(bool is_max, const std::string& a, const std::string& b, DType d) {
  if (ir::IsFloat(d)) {
    // NaN-propagating: a if a is NaN, else the larger (a NaN b loses every comparison → b).
    const std::string better = CmpF(is_max ? "ogt" : "olt", a, b, d);
    const std::string pick = Sel(better, a, b, d);
    return Sel(CmpF("uno", a, a, d), a, pick, d);
  }
  const bool u = IsUnsignedForm(d);
  return Bin(is_max ? (u ? "arith.maxui" : "arith.maxsi") : (u ? "arith.minui" : "arith.minsi"), a,
             b, d);
}

std::string Writer::ScalarCast(const std::string& x, DType from, DType to) {
  if (from == to) return x;
  if (ir::IsBool(to)) {
    if (ir::IsFloat(from)) return CmpF("une", x, Const(from, 0), from);
    return CmpI("ne", x, ConstInt(from, 0), from);
  }
  if (ir::IsBool(from)) {
    return ir::IsFloat(to) ? Conv("arith.uitofp", x, from, to) : Conv("arith.extui", x, from, to);
  }
  if (ir::IsFloat(from) && ir::IsFloat(to)) {
    if (Bits(from) < Bits(to)) return Conv("arith.extf", x, from, to);
    if (Bits(from) > Bits(to)) return Conv("arith.truncf", x, from, to);
    // f16 <-> bf16: exactly to f32, then one rounding.
    return Conv("arith.truncf", Conv("arith.extf", x, from, DType::kF32), DType::kF32, to);
  }
  if (ir::IsFloat(to)) {
    return Conv(IsUnsignedForm(from) ? "arith.uitofp" : "arith.sitofp", x, from, to);
  }
  if (ir::IsInteger(from)) {
    // Saturating (docs/ir.md): widen exactly, or clamp in the source type and truncate.
    const bool from_u = ir::IsUnsignedInteger(from), to_u = ir::IsUnsignedInteger(to);
    if (Bits(to) > Bits(from)) {
      std::string v = Conv(from_u ? "arith.extui" : "arith.extsi", x, from, to);
      // A negative signed value becomes 0 in an unsigned target.
      if (!from_u && to_u) v = Bin("arith.maxsi", v, ConstInt(to, 0), to);
      return v;
    }
    const IntLimits to_limits = Limits(to);
    std::string v = x;
    if (from_u) {
      // Only the top can be out of range; equal widths differ only for a signed target.
      if (!to_u)
        v = Bin("arith.minui", v, ConstInt(from, to_limits.hi_bits), from);
      else if (Bits(to) < Bits(from)) {
        v = Bin("arith.minui", v, ConstInt(from, to_limits.hi_bits), from);
      }
    } else {
      v = Bin("arith.maxsi", v, ConstInt(from, to_limits.lo_bits), from);
      // An unsigned target as wide as the source holds every non-negative source value.
      if (!(to_u && Bits(to) == Bits(from))) {
        v = Bin("arith.minsi", v, ConstInt(from, to_limits.hi_bits), from);
      }
    }
    return Bits(to) == Bits(from) ? v : Conv("arith.trunci", v, from, to);
  }
  // Float → integer: NaN → 0, saturate, otherwise truncate toward zero. f16/bf16 compare in f32
  // (exactly), where the bounds (powers of two) are representable.
  std::string f = x;
  DType fd = from;
  if (from == DType::kF16 || from == DType::kBF16) {
    f = Conv("arith.extf", x, from, DType::kF32);
    fd = DType::kF32;
  }
  const bool u = ir::IsUnsignedInteger(to);
  const double lo = u ? 0.0 : -std::ldexp(1.0, Bits(to) - 1);
  const double hi_excl = std::ldexp(1.0, u ? Bits(to) : Bits(to) - 1);
  const std::string nan = CmpF("uno", f, f, fd);
  const std::string over = CmpF("oge", f, Const(fd, hi_excl), fd);
  const std::string under = CmpF("ole", f, Const(fd, lo), fd);
  const std::string bad =
      Bin("arith.ori", Bin("arith.ori", nan, over, DType::kBool), under, DType::kBool);
  const std::string safe = Sel(bad, Const(fd, 0), f, fd);
  std::string v = Conv(u ? "arith.fptoui" : "arith.fptosi", safe, fd, to);
  const int64_t lo_i = Limits(to).lo_bits;
  const int64_t hi_i = Limits(to).hi_bits;
  v = Sel(under, ConstInt(to, lo_i), v, to);
  v = Sel(over, ConstInt(to, hi_i), v, to);
  return Sel(nan, ConstInt(to, 0), v, to);
}

std::string Writer::ScalarOp(Op op, DType d, DType out, const std::vector<std::string>& a) {
  const bool f = ir::IsFloat(d);
  const bool u = IsUnsignedForm(d);
  switch (op) {
    case Op::kNeg:
      return f ? Un("arith.negf", a[0], d) : Bin("arith.subi", ConstInt(d, 0), a[0], d);
    case Op::kAbs:
      if (f) return Un("math.absf", a[0], d);
      return u ? a[0] : Un("math.absi", a[0], d);
    case Op::kSign: {
      if (f) {
        const std::string gt = CmpF("ogt", a[0], Const(d, 0), d);
        const std::string lt = CmpF("olt", a[0], Const(d, 0), d);
        std::string v = Sel(CmpF("uno", a[0], a[0], d), a[0], Const(d, 0), d);
        v = Sel(lt, Const(d, -1), v, d);
        return Sel(gt, Const(d, 1), v, d);
      }
      if (u) return Sel(CmpI("ne", a[0], ConstInt(d, 0), d), ConstInt(d, 1), ConstInt(d, 0), d);
      const std::string gt = CmpI("sgt", a[0], ConstInt(d, 0), d);
      const std::string lt = CmpI("slt", a[0], ConstInt(d, 0), d);
      return Sel(gt, ConstInt(d, 1), Sel(lt, ConstInt(d, -1), ConstInt(d, 0), d), d);
    }
    case Op::kExp:
      return Un("math.exp", a[0], d);
    case Op::kLog:
      return Un("math.log", a[0], d);
    case Op::kSqrt:
      return Un("math.sqrt", a[0], d);
    case Op::kRsqrt:
      return Un("math.rsqrt", a[0], d);
    case Op::kSin:
      return Un("math.sin", a[0], d);
    case Op::kCos:
      return Un("math.cos", a[0], d);
    case Op::kTanh:
      return Un("math.tanh", a[0], d);
    case Op::kErf:
      return Un("math.erf", a[0], d);
    case Op::kFloor:
      return Un("math.floor", a[0], d);
    case Op::kCeil:
      return Un("math.ceil", a[0], d);
    case Op::kRound:
      return Un("math.roundeven", a[0], d);
    case Op::kReciprocal:
      return Bin("arith.divf", Const(d, 1), a[0], d);
    case Op::kNot:
      return Bin("arith.xori", a[0], ConstInt(d, -1), d);
    case Op::kAdd:
      return Bin(f ? "arith.addf" : "arith.addi", a[0], a[1], d);
    case Op::kSub:
      return Bin(f ? "arith.subf" : "arith.subi", a[0], a[1], d);
    case Op::kMul:
      return Bin(f ? "arith.mulf" : "arith.muli", a[0], a[1], d);
    case Op::kPow:
      return Bin("math.powf", a[0], a[1], d);
    case Op::kMax:
    case Op::kMin:
      return MaxMin(op == Op::kMax, a[0], a[1], d);
    case Op::kDiv:
    case Op::kMod: {
      if (f && op == Op::kDiv) return Bin("arith.divf", a[0], a[1], d);
      if (f) {  // Python's float %: fmod, then the divisor's sign
        const std::string r = Bin("arith.remf", a[0], a[1], d);
        const std::string zero = Const(d, 0);
        const std::string nonzero = CmpF("une", r, zero, d);
        const std::string r_neg = CmpF("olt", r, zero, d);
        const std::string b_neg = CmpF("olt", a[1], zero, d);
        const std::string fix =
            Bin("arith.andi", nonzero, Bin("arith.xori", r_neg, b_neg, DType::kBool), DType::kBool);
        const std::string fixed = Sel(fix, Bin("arith.addf", r, a[1], d), r, d);
        const std::string signed_zero = Sel(b_neg, Const(d, -0.0), zero, d);
        return Sel(CmpF("oeq", r, zero, d), signed_zero, fixed, d);
      }
      // Integers: b == 0 gives 0; b == -1 (signed) gives -a / 0 without the overflow trap.
      const std::string zero = ConstInt(d, 0);
      const std::string b_zero = CmpI("eq", a[1], zero, d);
      std::string bad = b_zero, b_minus_one;
      if (!u) {
        b_minus_one = CmpI("eq", a[1], ConstInt(d, -1), d);
        bad = Bin("arith.ori", b_zero, b_minus_one, DType::kBool);
      }
      const std::string safe = Sel(bad, ConstInt(d, 1), a[1], d);
      if (op == Op::kDiv) {
        std::string q = Bin(u ? "arith.divui" : "arith.floordivsi", a[0], safe, d);
        if (!u) q = Sel(b_minus_one, Bin("arith.subi", zero, a[0], d), q, d);
        return Sel(b_zero, zero, q, d);
      }
      if (u) return Bin("arith.remui", a[0], safe, d);
      const std::string r = Bin("arith.remsi", a[0], safe, d);
      const std::string nonzero = CmpI("ne", r, zero, d);
      const std::string differ =
          Bin("arith.xori", CmpI("slt", r, zero, d), CmpI("slt", safe, zero, d), DType::kBool);
      const std::string fix = Bin("arith.andi", nonzero, differ, DType::kBool);
      return Sel(fix, Bin("arith.addi", r, safe, d), r, d);
    }
    case Op::kEq:
    case Op::kNe:
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe: {
      const int i = static_cast<int>(op) - static_cast<int>(Op::kEq);
      static const char* kFloat[] = {"oeq", "une", "olt", "ole", "ogt", "oge"};
      static const char* kSignedP[] = {"eq", "ne", "slt", "sle", "sgt", "sge"};
      static const char* kUnsignedP[] = {"eq", "ne", "ult", "ule", "ugt", "uge"};
      if (f) return CmpF(kFloat[i], a[0], a[1], d);
      return CmpI(u ? kUnsignedP[i] : kSignedP[i], a[0], a[1], d);
    }
    case Op::kAnd:
      return Bin("arith.andi", a[0], a[1], d);
    case Op::kOr:
      return Bin("arith.ori", a[0], a[1], d);
    case Op::kXor:
      return Bin("arith.xori", a[0], a[1], d);
    case Op::kSelect:
      return Sel(a[0], a[1], a[2], out);
    case Op::kCast:
      return ScalarCast(a[0], d, out);
    default:
      return "";
  }
}

std::string Writer::Identity(Op op, DType d) {
  const double inf = std::numeric_limits<double>::infinity();
  switch (op) {
    case Op::kReduceSum:
    case Op::kWindowSum:
    case Op::kMatMul:
    case Op::kConv:
      return ir::IsFloat(d) ? Const(d, 0) : ConstInt(d, 0);
    case Op::kReduceProd:
      return ir::IsFloat(d) ? Const(d, 1) : ConstInt(d, 1);
    case Op::kReduceMax:
    case Op::kArgMax:
    case Op::kWindowMax:
      if (ir::IsFloat(d)) return Const(d, -inf);
      return ConstInt(d, Limits(d).lo_bits);
    default:  // min, argmin
      if (ir::IsFloat(d)) return Const(d, inf);
      return ConstInt(d, Limits(d).hi_bits);
  }
}

// Row-major reshape: collapse to rank 1, expand to the target (rank 0 through [1]).
std::string Writer::Reshape(const std::string& x, const ir::TensorType& from, const ir::Shape& to) {
  if (from.shape == to) return x;
  auto group = [](size_t rank) {
    std::vector<std::string> idx;
    for (size_t i = 0; i < rank; ++i) idx.push_back(absl::StrCat(i));
    return absl::StrCat("[[", absl::StrJoin(idx, ", "), "]]");
  };
  const int64_t n = from.num_elements();
  const std::string flat_type = TensorType(from.dtype, {n});
  std::string flat = x;
  if (from.shape.empty()) {
    flat =
        S(absl::StrCat("tensor.expand_shape ", x, " [] : ", TensorType(from), " into ", flat_type));
  } else if (from.shape.size() > 1) {
    flat = S(absl::StrCat("tensor.collapse_shape ", x, " ", group(from.shape.size()), " : ",
                          TensorType(from), " into ", flat_type));
  }
  const std::string to_type = TensorType(from.dtype, to);
  if (to.empty()) {
    return S(absl::StrCat("tensor.collapse_shape ", flat, " [] : ", flat_type, " into ", to_type));
  }
  if (to.size() == 1) return flat;
  return S(absl::StrCat("tensor.expand_shape ", flat, " ", group(to.size()), " : ", flat_type,
                        " into ", to_type));
}

std::string Writer::PadTensor(const std::string& x, const ir::TensorType& t,
                              const std::vector<int64_t>& low, const std::vector<int64_t>& high,
                              const std::string& value, ir::Shape* padded) {
  *padded = t.shape;
  bool any = false;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    (*padded)[i] += low[i] + high[i];
    any |= low[i] != 0 || high[i] != 0;
  }
  if (!any) return x;
  std::vector<std::string> idx;
  for (size_t i = 0; i < t.shape.size(); ++i) idx.push_back(absl::StrCat(Fresh(), ": index"));
  const std::string r = Fresh();
  Line(absl::StrCat(r, " = tensor.pad ", x, " low[", absl::StrJoin(low, ", "), "] high[",
                    absl::StrJoin(high, ", "), "] {"));
  Line(absl::StrCat("^bb0(", absl::StrJoin(idx, ", "), "):"));
  Line(absl::StrCat("  tensor.yield ", value, " : ", ElemType(t.dtype)));
  Line(absl::StrCat("} : ", TensorType(t), " to ", TensorType(t.dtype, *padded)));
  return r;
}

absl::StatusOr<std::string> Writer::EmitNode(NodeId id) {
  const ir::Node& n = graph_.node(id);
  const ir::Attrs& at = n.attrs;
  const DType d = n.type.dtype;
  const std::string type = TensorType(n.type);
  const size_t rank = n.type.shape.size();
  auto in = [&](size_t i) { return names_[static_cast<size_t>(n.inputs[i])]; };
  auto in_type = [&](size_t i) -> const ir::TensorType& { return graph_.node(n.inputs[i]).type; };
  auto get = [](const std::vector<int64_t>& v, size_t i, int64_t def) {
    return v.empty() ? def : v[i];
  };

  switch (ir::GetOpClass(n.op)) {
    case ir::OpClass::kUnary:
    case ir::OpClass::kBinary:
    case ir::OpClass::kCompare:
    case ir::OpClass::kLogical:
    case ir::OpClass::kSelect:
    case ir::OpClass::kCast: {
      const DType operand = n.op == Op::kSelect ? d : in_type(0).dtype;
      return Elementwise(n.inputs, n.type, [&](const std::vector<std::string>& args) {
        std::vector<std::string> ops(args.begin(), args.end() - 1);
        return std::vector<std::string>{ScalarOp(n.op, operand, d, ops)};
      });
    }
    default:
      break;
  }

  switch (n.op) {
    case Op::kConstant:
    case Op::kFill: {
      if (n.type.num_elements() == 0) return Empty(type);
      if (d == DType::kBool) {
        std::vector<std::string> elems;
        for (int64_t i = 0; i < n.type.num_elements(); ++i) {
          const bool v = n.op == Op::kFill ? at.value != 0 : at.literal->GetInt64(i) != 0;
          elems.push_back(v ? "true" : "false");
          if (n.op == Op::kFill) break;
        }
        const std::string body = n.op == Op::kFill || elems.size() == 1
                                     ? elems[0]
                                     : absl::StrCat("[", absl::StrJoin(elems, ", "), "]");
        if (n.op == Op::kConstant && elems.size() > 1 && rank != 1) {
          // A flat list for a rank-1 tensor, reshaped (nested brackets are not worth writing).
          const std::string flat = S(absl::StrCat("arith.constant dense<", body,
                                                  "> : ", TensorType(d, {n.type.num_elements()})));
          return Reshape(flat, {d, {n.type.num_elements()}}, n.type.shape);
        }
        return S(absl::StrCat("arith.constant dense<", body, "> : ", type));
      }
      // Hex: the row-major bytes, little-endian (one element: a splat).
      std::string hex;
      if (n.op == Op::kFill) {
        ir::TensorData one(d, {});
        one.SetDouble(0, at.value);
        hex = Hex(one.data(), static_cast<size_t>(ir::DTypeSize(d)));
      } else {
        hex =
            Hex(at.literal->data(), static_cast<size_t>(n.type.num_elements() * ir::DTypeSize(d)));
      }
      return S(absl::StrCat("arith.constant dense<\"", hex, "\"> : ", type));
    }
    case Op::kIota: {
      const std::string init = Empty(type);
      return Generic(
          {}, {{init, type, IdentityMap(rank), d}}, std::vector<std::string>(rank, "parallel"),
          [&](const std::vector<std::string>&) {
            const std::string i = S(absl::StrCat("linalg.index ", at.axes[0], " : index"));
            const std::string v = S(absl::StrCat("arith.index_cast ", i, " : index to i64"));
            return std::vector<std::string>{ScalarCast(v, DType::kI64, d)};
          })[0];
    }
    case Op::kReduceSum:
    case Op::kReduceProd:
    case Op::kReduceMax:
    case Op::kReduceMin:
    case Op::kArgMax:
    case Op::kArgMin: {
      const bool arg = n.op == Op::kArgMax || n.op == Op::kArgMin;
      if (at.axes.empty()) return in(0);
      const ir::TensorType& t = in_type(0);
      std::vector<std::string> iters(rank, "parallel"), out_exprs;
      for (size_t i = 0; i < rank; ++i) out_exprs.push_back(absl::StrCat("d", i));
      for (int64_t a : at.axes) {
        iters[static_cast<size_t>(a)] = "reduction";
        out_exprs[static_cast<size_t>(a)] = "0";
      }
      const std::string out_map = Map(rank, out_exprs);
      const std::string value_type = TensorType(t.dtype, n.type.shape);
      const std::string init = FillTensor(Identity(n.op, t.dtype), t.dtype, value_type);
      std::vector<Operand> outs = {{init, value_type, out_map, t.dtype}};
      if (arg)
        outs.push_back(
            {FillTensor(ConstInt(DType::kI64, 0), DType::kI64, type), type, out_map, DType::kI64});
      const std::vector<std::string> r = Generic(
          {{in(0), TensorType(t), IdentityMap(rank), t.dtype}}, outs, iters,
          [&](const std::vector<std::string>& a) -> std::vector<std::string> {
            const DType e = t.dtype;
            switch (n.op) {
              case Op::kReduceSum:
                return {Bin(ir::IsFloat(e) ? "arith.addf" : "arith.addi", a[0], a[1], e)};
              case Op::kReduceProd:
                return {Bin(ir::IsFloat(e) ? "arith.mulf" : "arith.muli", a[0], a[1], e)};
              case Op::kReduceMax:
              case Op::kReduceMin:
                return {MaxMin(n.op == Op::kReduceMax, a[0], a[1], e)};
              default:
                break;
            }
            // argmax/argmin: take a strictly better element, or the first NaN.
            const bool is_max = n.op == Op::kArgMax;
            std::string take;
            if (ir::IsFloat(e)) {
              const std::string better = CmpF(is_max ? "ogt" : "olt", a[0], a[1], e);
              const std::string in_nan = CmpF("uno", a[0], a[0], e);
              const std::string cur_ok = CmpF("ord", a[1], a[1], e);
              take = Bin("arith.andi", Bin("arith.ori", better, in_nan, DType::kBool), cur_ok,
                         DType::kBool);
            } else {
              const bool u = IsUnsignedForm(e);
              take = CmpI(is_max ? (u ? "ugt" : "sgt") : (u ? "ult" : "slt"), a[0], a[1], e);
            }
            const std::string i = S(absl::StrCat("linalg.index ", at.axes[0], " : index"));
            const std::string i64 = S(absl::StrCat("arith.index_cast ", i, " : index to i64"));
            return {Sel(take, a[0], a[1], e), Sel(take, i64, a[2], DType::kI64)};
          });
      return arg ? r[1] : r[0];
    }
    case Op::kReshape:
      return Reshape(in(0), in_type(0), n.type.shape);
    case Op::kPermute: {
      if (rank <= 1) return in(0);
      const std::string init = Empty(type);
      return S(absl::StrCat("linalg.transpose ins(", in(0), " : ", TensorType(in_type(0)),
                            ") outs(", init, " : ", type, ") permutation = [",
                            absl::StrJoin(at.axes, ", "), "]"));
    }
    case Op::kBroadcast:
    case Op::kFlip: {
      std::vector<std::string> exprs;
      for (size_t i = 0; i < rank; ++i) exprs.push_back(absl::StrCat("d", i));
      bool changed = false;
      if (n.op == Op::kBroadcast) {
        for (size_t i = 0; i < rank; ++i) {
          if (in_type(0).shape[i] == 1 && n.type.shape[i] != 1) {
            exprs[i] = "0";
            changed = true;
          }
        }
      } else {
        for (int64_t a : at.axes) {
          const int64_t size = n.type.shape[static_cast<size_t>(a)];
          if (size > 1) {
            exprs[static_cast<size_t>(a)] = absl::StrCat("-d", a, " + ", size - 1);
            changed = true;
          }
        }
      }
      if (!changed) return in(0);
      const std::string init = Empty(type);
      return Generic(
          {{in(0), TensorType(in_type(0)), Map(rank, exprs), d}},
          {{init, type, IdentityMap(rank), d}}, std::vector<std::string>(rank, "parallel"),
          [](const std::vector<std::string>& a) { return std::vector<std::string>{a[0]}; })[0];
    }
    case Op::kSlice: {
      if (rank == 0) return in(0);
      std::vector<int64_t> sizes, strides;
      for (size_t i = 0; i < rank; ++i) {
        sizes.push_back(n.type.shape[i]);
        strides.push_back(get(at.strides, i, 1));
      }
      return S(absl::StrCat("tensor.extract_slice ", in(0), "[", absl::StrJoin(at.starts, ", "),
                            "] [", absl::StrJoin(sizes, ", "), "] [", absl::StrJoin(strides, ", "),
                            "] : ", TensorType(in_type(0)), " to ", type));
    }
    case Op::kPad: {
      if (rank == 0) return in(0);
      ir::Shape padded;
      const std::string value = Const(d, at.value);
      return PadTensor(in(0), in_type(0), at.low, at.high, value, &padded);
    }
    case Op::kConcat: {
      std::string acc = Empty(type);
      const size_t axis = static_cast<size_t>(at.axes[0]);
      int64_t offset = 0;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const ir::TensorType& t = in_type(k);
        std::vector<int64_t> offsets(rank, 0), ones(rank, 1);
        offsets[axis] = offset;
        acc =
            S(absl::StrCat("tensor.insert_slice ", in(k), " into ", acc, "[",
                           absl::StrJoin(offsets, ", "), "] [", absl::StrJoin(t.shape, ", "), "] [",
                           absl::StrJoin(ones, ", "), "] : ", TensorType(t), " into ", type));
        offset += t.shape[axis];
      }
      return acc;
    }
    case Op::kGather: {
      const DType index_d = in_type(1).dtype;
      const std::string init = Empty(type);
      const std::string x = in(0), x_type = TensorType(in_type(0));
      return Generic({{in(1), TensorType(in_type(1)), IdentityMap(rank), index_d}},
                     {{init, type, IdentityMap(rank), d}},
                     std::vector<std::string>(rank, "parallel"),
                     [&](const std::vector<std::string>& a) {
                       std::vector<std::string> pos;
                       for (size_t i = 0; i < rank; ++i) {
                         pos.push_back(static_cast<int64_t>(i) == at.axes[0]
                                           ? ToIndex(a[0], index_d)
                                           : S(absl::StrCat("linalg.index ", i, " : index")));
                       }
                       return std::vector<std::string>{S(absl::StrCat(
                           "tensor.extract ", x, "[", absl::StrJoin(pos, ", "), "] : ", x_type))};
                     })[0];
    }
    case Op::kScatterAdd: {
      const ir::TensorType& it = in_type(1);
      if (it.num_elements() == 0) return in(0);
      const std::string c0 = Index(0), c1 = Index(1);
      std::vector<std::string> ivs, results, accs;
      std::string acc = in(0);
      for (size_t i = 0; i < it.shape.size(); ++i) {
        const std::string bound = Index(it.shape[i]);
        const std::string iv = Fresh(), next_acc = Fresh(), r = Fresh();
        Line(absl::StrCat(r, " = scf.for ", iv, " = ", c0, " to ", bound, " step ", c1,
                          " iter_args(", next_acc, " = ", acc, ") -> (", type, ") {"));
        indent_ += "  ";
        ivs.push_back(iv);
        results.push_back(r);
        acc = next_acc;
      }
      const std::string ivlist = absl::StrJoin(ivs, ", ");
      const std::string idx =
          S(absl::StrCat("tensor.extract ", in(1), "[", ivlist, "] : ", TensorType(it)));
      std::vector<std::string> pos = ivs;
      pos[static_cast<size_t>(at.axes[0])] = ToIndex(idx, it.dtype);
      const std::string poslist = absl::StrJoin(pos, ", ");
      const std::string src =
          S(absl::StrCat("tensor.extract ", in(2), "[", ivlist, "] : ", TensorType(in_type(2))));
      const std::string cur = S(absl::StrCat("tensor.extract ", acc, "[", poslist, "] : ", type));
      const std::string sum = Bin(ir::IsFloat(d) ? "arith.addf" : "arith.addi", cur, src, d);
      std::string yielded =
          S(absl::StrCat("tensor.insert ", sum, " into ", acc, "[", poslist, "] : ", type));
      for (size_t i = it.shape.size(); i-- > 0;) {
        Line(absl::StrCat("scf.yield ", yielded, " : ", type));
        indent_.resize(indent_.size() - 2);
        Line("}");
        yielded = results[i];
      }
      return results[0];
    }
    case Op::kMatMul: {
      const size_t batch = rank - 2;
      const size_t dims = rank + 1;  // batch..., m, n, k
      std::vector<std::string> a_e, b_e, o_e, iters;
      for (size_t i = 0; i < batch; ++i) {
        a_e.push_back(absl::StrCat("d", i));
        b_e.push_back(absl::StrCat("d", i));
      }
      const std::string m = absl::StrCat("d", batch), nn = absl::StrCat("d", batch + 1),
                        k = absl::StrCat("d", batch + 2);
      a_e.push_back(m);
      a_e.push_back(k);
      b_e.push_back(k);
      b_e.push_back(nn);
      for (size_t i = 0; i < rank; ++i) {
        o_e.push_back(absl::StrCat("d", i));
        iters.push_back("parallel");
      }
      iters.push_back("reduction");
      const std::string init = FillTensor(Identity(Op::kMatMul, d), d, type);
      // An integer matmul {accumulate} extends its operands to the result type.
      const DType ad = in_type(0).dtype, bd = in_type(1).dtype;
      return Generic(
          {{in(0), TensorType(in_type(0)), Map(dims, a_e), ad},
           {in(1), TensorType(in_type(1)), Map(dims, b_e), bd}},
          {{init, type, Map(dims, o_e), d}}, iters, [&](const std::vector<std::string>& a) {
            const bool f = ir::IsFloat(d);
            const std::string p = Bin(f ? "arith.mulf" : "arith.muli", ScalarCast(a[0], ad, d),
                                      ScalarCast(a[1], bd, d), d);
            return std::vector<std::string>{Bin(f ? "arith.addf" : "arith.addi", a[2], p, d)};
          })[0];
    }
    case Op::kConv:
    case Op::kWindowSum:
    case Op::kWindowMax: {
      const bool conv = n.op == Op::kConv;
      const ir::TensorType& xt = in_type(0);
      // An integer conv {accumulate} reads operands narrower than its result type d.
      const DType xd = xt.dtype, wd = conv ? in_type(1).dtype : d;
      const size_t spatial = conv ? rank - 2 : rank;
      const size_t first = conv ? 2 : 0;  // first windowed axis of x
      std::string x = in(0);
      ir::TensorType cur = xt;
      // Input dilation (conv only): x inserted with strides into zeros.
      if (conv) {
        ir::Shape dilated = xt.shape;
        std::vector<int64_t> strides(rank, 1);
        bool any = false;
        for (size_t i = 0; i < spatial; ++i) {
          const int64_t f = get(at.input_dilation, i, 1);
          const int64_t s = xt.shape[first + i];
          strides[first + i] = f;
          dilated[first + i] = s == 0 ? 0 : (s - 1) * f + 1;
          any |= f != 1;
        }
        if (any) {
          const std::string zeros = FillTensor(Const(xd, 0), xd, TensorType(xd, dilated));
          std::vector<int64_t> offsets(rank, 0);
          x = S(absl::StrCat("tensor.insert_slice ", x, " into ", zeros, "[",
                             absl::StrJoin(offsets, ", "), "] [", absl::StrJoin(xt.shape, ", "),
                             "] [", absl::StrJoin(strides, ", "), "] : ", TensorType(xt), " into ",
                             TensorType(xd, dilated)));
          cur.shape = dilated;
        }
      }
      std::vector<int64_t> low(rank, 0), high(rank, 0);
      for (size_t i = 0; i < spatial; ++i) {
        low[first + i] = get(at.low, i, 0);
        high[first + i] = get(at.high, i, 0);
      }
      ir::Shape padded;
      const std::string pad_value = Identity(conv ? Op::kConv : n.op, xd);
      x = PadTensor(x, cur, low, high, pad_value, &padded);
      cur.shape = padded;
      // Loop dims: output dims, then (conv) input channel, then the window dims.
      const size_t out_dims = rank;
      const size_t dims = out_dims + (conv ? 1 : 0) + spatial;
      std::vector<std::string> x_e, w_e, o_e, iters;
      for (size_t i = 0; i < out_dims; ++i) {
        o_e.push_back(absl::StrCat("d", i));
        iters.push_back("parallel");
      }
      const size_t kbase = out_dims + (conv ? 1 : 0);
      if (conv) {
        iters.push_back("reduction");
        const int64_t groups = at.groups;
        const int64_t cin_per_group = in_type(1).shape[1];
        const int64_t out_per_group = n.type.shape[1] / groups;
        const std::string c = absl::StrCat("d", out_dims);
        x_e.push_back("d0");
        x_e.push_back(groups == 1 ? c
                                  : absl::StrCat("(d1 floordiv ", out_per_group, ") * ",
                                                 cin_per_group, " + ", c));
        w_e.push_back("d1");
        w_e.push_back(c);
      }
      for (size_t i = 0; i < spatial; ++i) {
        iters.push_back("reduction");
        const std::string o = absl::StrCat("d", first + i), k = absl::StrCat("d", kbase + i);
        x_e.push_back(
            absl::StrCat(o, " * ", get(at.strides, i, 1), " + ", k, " * ", get(at.dilation, i, 1)));
        w_e.push_back(k);
      }
      std::string w = conv ? in(1) : "", w_type = conv ? TensorType(in_type(1)) : "";
      if (!conv) {
        ir::Shape window;
        for (size_t i = 0; i < spatial; ++i) window.push_back(get(at.window, i, 1));
        w_type = TensorType(d, window);
        w = Empty(w_type);  // only its shape matters: the window's loop bounds
      }
      const std::string init =
          FillTensor(Identity(n.op == Op::kWindowMax ? n.op : Op::kConv, d), d, type);
      return Generic(
          {{x, TensorType(cur), Map(dims, x_e), xd}, {w, w_type, Map(dims, w_e), wd}},
          {{init, type, Map(dims, o_e), d}}, iters, [&](const std::vector<std::string>& a) {
            const bool f = ir::IsFloat(d);
            if (n.op == Op::kWindowMax) {
              return std::vector<std::string>{MaxMin(true, a[2], a[0], d)};
            }
            const std::string v = conv ? Bin(f ? "arith.mulf" : "arith.muli",
                                             ScalarCast(a[0], xd, d), ScalarCast(a[1], wd, d), d)
                                       : a[0];
            return std::vector<std::string>{Bin(f ? "arith.addf" : "arith.addi", a[2], v, d)};
          })[0];
    }
    default:
      break;
  }
  return absl::InternalError(absl::StrCat("MLIR export: op ", ir::OpName(n.op), " not handled"));
}

absl::StatusOr<std::string> Writer::Run(const MlirExportOptions& options) {
  names_.assign(static_cast<size_t>(graph_.num_nodes()), "");
  std::vector<std::string> args;
  int64_t arg = 0;
  for (NodeId id : graph_.Parameters()) {
    const ir::Node& p = graph_.node(id);
    names_[static_cast<size_t>(id)] = absl::StrCat("%arg", arg++);
    std::string escaped;
    for (char c : p.attrs.name) {
      if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 ||
          static_cast<unsigned char>(c) >= 0x7f) {
        char buf[4];
        std::snprintf(buf, sizeof(buf), "\\%02X", static_cast<unsigned char>(c));
        escaped += buf;
      } else {
        escaped += c;
      }
    }
    args.push_back(absl::StrCat(names_[static_cast<size_t>(id)], ": ", TensorType(p.type),
                                " {kiln.name = \"", escaped, "\"}"));
  }
  for (NodeId id = 0; id < graph_.num_nodes(); ++id) {
    const ir::Node& n = graph_.node(id);
    if (n.op == Op::kParameter) continue;
    if (n.op == Op::kRandomUniform || n.op == Op::kRandomNormal) {
      const std::string where = ir::LocationToString(n.loc);
      return absl::UnimplementedError(absl::StrCat(
          "MLIR export: no MLIR equivalent for op ", ir::OpName(n.op), " (node %", id, ", ",
          ir::TypeToString(n.type), where.empty() ? "" : absl::StrCat(", ", where),
          "): kiln's Philox4x32-10 stream is not expressed in arith"));
    }
    if (ir::GetOpClass(n.op) == ir::OpClass::kSort) {
      const std::string where = ir::LocationToString(n.loc);
      return absl::UnimplementedError(absl::StrCat(
          "MLIR export: no MLIR equivalent for op ", ir::OpName(n.op), " (node %", id, ", ",
          ir::TypeToString(n.type), where.empty() ? "" : absl::StrCat(", ", where),
          "): upstream linalg has no sort"));
    }
    Line(absl::StrCat("// %", id, " = ", ir::OpName(n.op)));
    absl::StatusOr<std::string> v = EmitNode(id);
    if (!v.ok()) return v.status();
    names_[static_cast<size_t>(id)] = *v;
  }
  std::vector<std::string> results, result_types, result_decls;
  for (const ir::Output& o : graph_.outputs()) {
    results.push_back(names_[static_cast<size_t>(o.node)]);
    const std::string t = TensorType(graph_.node(o.node).type);
    result_types.push_back(t);
    std::string escaped;
    for (char c : o.name) {
      if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 ||
          static_cast<unsigned char>(c) >= 0x7f) {
        char buf[4];
        std::snprintf(buf, sizeof(buf), "\\%02X", static_cast<unsigned char>(c));
        escaped += buf;
      } else {
        escaped += c;
      }
    }
    result_decls.push_back(o.name.empty() ? t
                                          : absl::StrCat(t, " {kiln.name = \"", escaped, "\"}"));
  }
  std::string text = absl::StrCat(
      options.module ? "// Exported by kiln (codegen/mlir/mlir_text.h).\nmodule {\n" : "",
      "  func.func @", options.function_name, "(", absl::StrJoin(args, ", "), ") -> (",
      absl::StrJoin(result_decls, ", "), ") {\n");
  absl::StrAppend(&text, out_);
  if (results.empty()) {
    absl::StrAppend(&text, "    return\n");
  } else {
    absl::StrAppend(&text, "    return ", absl::StrJoin(results, ", "), " : ",
                    absl::StrJoin(result_types, ", "), "\n");
  }
  absl::StrAppend(&text, options.module ? "  }\n}\n" : "  }\n");
  return text;
}

}  // namespace

std::span<const MlirExportRule> MlirExportRules() { return kRules; }

absl::StatusOr<std::string> ExportMlir(const ir::Graph& graph, const MlirExportOptions& options) {
  if (absl::Status s = ir::Verify(graph); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLIR export: the graph does not verify: ", s.message()));
  }
  for (char c : options.function_name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MLIR export: function name \"", options.function_name, "\" is not [A-Za-z0-9_]+"));
    }
  }
  if (options.function_name.empty()) {
    return absl::InvalidArgumentError("MLIR export: empty function name");
  }
  return Writer(graph).Run(options);
}

}  // namespace kiln::codegen
