#include "codegen/legalize.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "codegen/kernel_rewriter.h"
#include "codegen/scalar_limits.h"

namespace kiln::codegen {
namespace {

constexpr ScalarType kBool = ScalarType::kBool;

// The unsigned type of a signed type's width.
ScalarType UnsignedOf(ScalarType type) {
  switch (type) {
    case ScalarType::kI8:
      return ScalarType::kU8;
    case ScalarType::kI16:
      return ScalarType::kU16;
    case ScalarType::kI32:
      return ScalarType::kU32;
    default:
      return ScalarType::kU64;
  }
}

// Whether integer type `from` has values below / above the range of integer type `to`.
bool ReachesBelow(ScalarType from, ScalarType to) {
  if (!IsSignedType(from)) return false;  // unsigned and bool sources never go below 0
  if (!IsSignedType(to)) return true;
  return BitWidth(from) > BitWidth(to);
}
bool ReachesAbove(ScalarType from, ScalarType to) {
  if (from == kBool) return false;
  const int from_bits = BitWidth(from) - (IsSignedType(from) ? 1 : 0);  // magnitude bits
  const int to_bits = BitWidth(to) - (IsSignedType(to) ? 1 : 0);
  return from_bits > to_bits;
}

bool IsIntegerDivMod(const Expr& e) {
  return (e.op == ExprOp::kDiv || e.op == ExprOp::kMod) && !IsFloatType(e.type);
}

// Casts that are not a single conversion instruction (see legalize.h).
bool IsCompoundCast(ScalarType from, ScalarType to, const LegalizeOptions& options) {
  if (from == to) return false;
  if (to == kBool || from == kBool) return true;
  if (IsFloatType(from)) return !IsFloatType(to);  // float -> int saturates
  if (!IsFloatType(to)) return true;               // int -> int saturates
  return to == ScalarType::kF32 && BitWidth(from) == 64 && options.float64;
}

// Rebuilds the expression DAG in demand order (see kernel_rewriter.h), emitting the compound
// forms as their expansions.
class Legalizer : public KernelRewriter {
 public:
  Legalizer(const Kernel& kernel, const LegalizeOptions& options)
      : KernelRewriter(kernel), options_(options) {}

 private:
  ValueId Rewrite(const Expr& e) override {
    if (IsIntegerDivMod(e)) {
      const ValueId a = Get(e.operands[0]), b = Get(e.operands[1]);
      return e.op == ExprOp::kDiv ? Div(a, b) : Mod(a, b);
    }
    if (e.op == ExprOp::kCast &&
        IsCompoundCast(input().expr(e.operands[0]).type, e.type, options_)) {
      return Cast(Get(e.operands[0]), e.type);
    }
    return Copy(e);
  }

  ValueId Zero(ScalarType type) {
    return IsFloatType(type) ? FloatConst(type, 0.0) : IntConst(type, 0);
  }
  ValueId One(ScalarType type) {
    return IsFloatType(type) ? FloatConst(type, 1.0) : IntConst(type, 1);
  }

  // ---- Division ---------------------------------------------------------------------------------

  // Floored division; a zero divisor gives 0, INT_MIN / -1 wraps.
  ValueId Div(ValueId a, ValueId b) {
    const ScalarType type = TypeOf(a);
    if (!IsSignedType(type)) return Bin(ExprOp::kUDiv, a, b);
    const ScalarType u = UnsignedOf(type);
    const ValueId zero = Zero(type);
    const ValueId a_negative = Cmp(ExprOp::kLt, a, zero);
    const ValueId b_negative = Cmp(ExprOp::kLt, b, zero);
    // |x| in the unsigned type: -INT_MIN wraps to INT_MIN, whose bits are 2^(bits-1).
    const ValueId ua = Op(ExprOp::kWrap, u, {Sel(a_negative, Un(ExprOp::kNeg, a), a)});
    const ValueId ub = Op(ExprOp::kWrap, u, {Sel(b_negative, Un(ExprOp::kNeg, b), b)});
    const ValueId magnitude = Op(ExprOp::kWrap, type, {Bin(ExprOp::kUDiv, ua, ub)});
    const ValueId inexact = Cmp(ExprOp::kNe, Bin(ExprOp::kURem, ua, ub), Zero(u));
    const ValueId signs_differ = Bin(ExprOp::kXor, a_negative, b_negative);
    // Signs differ: -(|a| / |b|), one further down when inexact (floor, not truncation).
    const ValueId down = Bin(ExprOp::kAdd, magnitude, Sel(inexact, One(type), zero));
    return Sel(signs_differ, Un(ExprOp::kNeg, down), magnitude);
  }

  // Floored modulo (the divisor's sign); a zero divisor gives 0 (and -1 gives 0 by the formula).
  ValueId Mod(ValueId a, ValueId b) {
    const ScalarType type = TypeOf(a);
    if (!IsSignedType(type)) return Bin(ExprOp::kURem, a, b);
    const ValueId rest = Bin(ExprOp::kSub, a, Bin(ExprOp::kMul, Div(a, b), b));
    return Sel(Cmp(ExprOp::kEq, b, Zero(type)), Zero(type), rest);
  }

  // ---- Casts ------------------------------------------------------------------------------------

  ValueId Cast(ValueId x, ScalarType to) {
    const ScalarType from = TypeOf(x);
    if (to == kBool) return Cmp(ExprOp::kNe, x, Zero(from));
    if (from == kBool) {
      if (IsFloatType(to)) return Sel(x, One(to), Zero(to));
      return Op(ExprOp::kWrap, to, {x});
    }
    if (IsFloatType(to)) {  // A 64-bit integer to f32: through f64, as the interpreter does.
      return Op(ExprOp::kCast, to, {Op(ExprOp::kCast, ScalarType::kF64, {x})});
    }
    if (IsFloatType(from)) return FloatToInt(x, to);
    // Integer to integer, saturating: clamp in the source type, then truncate or extend.
    const IntLimits limits = LimitsOf(to);
    ValueId v = x;
    if (ReachesBelow(from, to)) v = Bin(ExprOp::kMax, v, IntConst(from, limits.lo_bits));
    if (ReachesAbove(from, to)) v = Bin(ExprOp::kMin, v, IntConst(from, limits.hi_bits));
    return Op(ExprOp::kWrap, to, {v});
  }

  // Truncation toward zero, saturating at the target's limits, NaN to 0. The range test uses
  // lo = -2^(bits-1) (0 unsigned) and hi = 2^(bits-1) (2^bits unsigned), exact in f32 and f64.
  ValueId FloatToInt(ValueId x, ScalarType to) {
    const ScalarType from = TypeOf(x);
    const int bits = BitWidth(to);
    const bool is_signed = IsSignedType(to);
    const ValueId lo = FloatConst(from, is_signed ? -std::ldexp(1.0, bits - 1) : 0.0);
    const ValueId hi = FloatConst(from, std::ldexp(1.0, bits - (is_signed ? 1 : 0)));
    const ValueId in_range = Bin(ExprOp::kAnd, Cmp(ExprOp::kGe, x, lo), Cmp(ExprOp::kLt, x, hi));
    const ValueId converted = Op(ExprOp::kConvert, to, {Sel(in_range, x, Zero(from))});
    const IntLimits limits = LimitsOf(to);
    const ValueId saturated =
        Sel(Cmp(ExprOp::kGe, x, hi), IntConst(to, limits.hi_bits),
            Sel(Cmp(ExprOp::kLt, x, lo), IntConst(to, limits.lo_bits), Zero(to)));  // NaN: 0
    return Sel(in_range, converted, saturated);
  }

  const LegalizeOptions options_;
};

}  // namespace

bool IsLegal(const Kernel& kernel, const Expr& expr, const LegalizeOptions& options) {
  if (IsIntegerDivMod(expr)) return false;
  return !(expr.op == ExprOp::kCast &&
           IsCompoundCast(kernel.expr(expr.operands[0]).type, expr.type, options));
}

bool NeedsLegalization(const Kernel& kernel, const LegalizeOptions& options) {
  for (const Expr& e : kernel.exprs) {
    if (!IsLegal(kernel, e, options)) return true;
  }
  return false;
}

Kernel Legalize(Kernel kernel, const LegalizeOptions& options) {
  if (!NeedsLegalization(kernel, options)) return kernel;
  return Legalizer(kernel, options).Run();
}

}  // namespace kiln::codegen
