#include "codegen/legalize.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kiln::codegen {
namespace {

constexpr ScalarType kBool = ScalarType::kBool;

// The unsigned type of a signed type's width.
ScalarType UnsignedOf(ScalarType type) {
  return type == ScalarType::kI32 ? ScalarType::kU32 : ScalarType::kU64;
}

// The smallest and largest value of an integer type, as the bit patterns Expr::int_value holds
// (the u64 maximum is -1).
struct Limits {
  int64_t lo_bits, hi_bits;
};
Limits LimitsOf(ScalarType type) {
  switch (type) {
    case ScalarType::kU8:
      return {0, 255};
    case ScalarType::kI32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case ScalarType::kU32:
      return {0, std::numeric_limits<uint32_t>::max()};
    case ScalarType::kI64:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case ScalarType::kU64:
      return {0, -1};
    default:  // bool
      return {0, 1};
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

// Rebuilds the expression DAG in demand order (as ExpandMath does): a value is emitted after its
// operands when a statement or a later value first needs it; the compound forms are emitted as
// their expansions, so values only they used disappear.
class Legalizer {
 public:
  Legalizer(const Kernel& kernel, const LegalizeOptions& options)
      : in_(kernel), options_(options), remap_(kernel.exprs.size(), kNoValue) {}

  Kernel Run() && {
    Kernel out = in_;
    out.exprs.clear();
    out.body = RemapBlock(in_.body);
    out.exprs = std::move(exprs_);
    return out;
  }

 private:
  std::vector<Stmt> RemapBlock(const std::vector<Stmt>& block) {
    std::vector<Stmt> result;
    result.reserve(block.size());
    for (const Stmt& stmt : block) result.push_back(RemapStmt(stmt));
    return result;
  }

  Stmt RemapStmt(const Stmt& stmt) {
    Stmt out = stmt;
    // Operand order follows execution order: init before the loop, the body, then the value.
    if (stmt.init != kNoValue) out.init = Get(stmt.init);
    out.body = RemapBlock(stmt.body);
    if (stmt.index != kNoValue) out.index = Get(stmt.index);
    if (stmt.value != kNoValue) out.value = Get(stmt.value);
    if (stmt.predicate != kNoValue) out.predicate = Get(stmt.predicate);
    if (stmt.result != kNoValue) out.result = Get(stmt.result);
    return out;
  }

  ValueId Get(ValueId id) {
    ValueId& slot = remap_[static_cast<size_t>(id)];
    if (slot != kNoValue) return slot;
    const Expr& e = in_.expr(id);
    ValueId result;
    if (IsIntegerDivMod(e)) {
      const ValueId a = Get(e.operands[0]), b = Get(e.operands[1]);
      result = e.op == ExprOp::kDiv ? Div(a, b) : Mod(a, b);
    } else if (e.op == ExprOp::kCast &&
               IsCompoundCast(in_.expr(e.operands[0]).type, e.type, options_)) {
      result = Cast(Get(e.operands[0]), e.type);
    } else {
      Expr copy = e;
      for (ValueId& operand : copy.operands) operand = Get(operand);
      result = Append(std::move(copy));
    }
    remap_[static_cast<size_t>(id)] = result;
    return result;
  }

  // ---- Building new expressions ---------------------------------------------------------------

  ValueId Append(Expr e) {
    if (e.op == ExprOp::kConst) {
      uint64_t bits;
      std::memcpy(&bits, &e.float_value, sizeof(bits));
      const auto key = std::make_tuple(e.type, e.int_value, bits);
      if (auto it = constants_.find(key); it != constants_.end()) return it->second;
      const auto id = static_cast<ValueId>(exprs_.size());
      constants_.emplace(key, id);
      exprs_.push_back(std::move(e));
      return id;
    }
    exprs_.push_back(std::move(e));
    return static_cast<ValueId>(exprs_.size() - 1);
  }

  ValueId Int(ScalarType type, int64_t bits) {
    Expr e;
    e.op = ExprOp::kConst;
    e.type = type;
    e.int_value = bits;
    return Append(std::move(e));
  }
  ValueId Float(ScalarType type, double value) {
    Expr e;
    e.op = ExprOp::kConst;
    e.type = type;
    e.float_value =
        type == ScalarType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
    return Append(std::move(e));
  }
  ValueId Zero(ScalarType type) { return IsFloatType(type) ? Float(type, 0.0) : Int(type, 0); }
  ValueId One(ScalarType type) { return IsFloatType(type) ? Float(type, 1.0) : Int(type, 1); }

  ValueId Op(ExprOp op, ScalarType type, std::vector<ValueId> operands) {
    Expr e;
    e.op = op;
    e.type = type;
    e.operands = std::move(operands);
    return Append(std::move(e));
  }
  ScalarType TypeOf(ValueId id) const { return exprs_[static_cast<size_t>(id)].type; }
  ValueId Un(ExprOp op, ValueId a) { return Op(op, TypeOf(a), {a}); }
  ValueId Bin(ExprOp op, ValueId a, ValueId b) { return Op(op, TypeOf(a), {a, b}); }
  ValueId Cmp(ExprOp op, ValueId a, ValueId b) { return Op(op, kBool, {a, b}); }
  ValueId Sel(ValueId c, ValueId t, ValueId f) { return Op(ExprOp::kSelect, TypeOf(t), {c, t, f}); }

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
    const Limits limits = LimitsOf(to);
    ValueId v = x;
    if (ReachesBelow(from, to)) v = Bin(ExprOp::kMax, v, Int(from, limits.lo_bits));
    if (ReachesAbove(from, to)) v = Bin(ExprOp::kMin, v, Int(from, limits.hi_bits));
    return Op(ExprOp::kWrap, to, {v});
  }

  // Truncation toward zero, saturating at the target's limits, NaN to 0. The range test uses
  // lo = -2^(bits-1) (0 unsigned) and hi = 2^(bits-1) (2^bits unsigned), exact in f32 and f64.
  ValueId FloatToInt(ValueId x, ScalarType to) {
    const ScalarType from = TypeOf(x);
    const int bits = BitWidth(to);
    const bool is_signed = IsSignedType(to);
    const ValueId lo = Float(from, is_signed ? -std::ldexp(1.0, bits - 1) : 0.0);
    const ValueId hi = Float(from, std::ldexp(1.0, bits - (is_signed ? 1 : 0)));
    const ValueId in_range = Bin(ExprOp::kAnd, Cmp(ExprOp::kGe, x, lo), Cmp(ExprOp::kLt, x, hi));
    const ValueId converted = Op(ExprOp::kConvert, to, {Sel(in_range, x, Zero(from))});
    const Limits limits = LimitsOf(to);
    const ValueId saturated =
        Sel(Cmp(ExprOp::kGe, x, hi), Int(to, limits.hi_bits),
            Sel(Cmp(ExprOp::kLt, x, lo), Int(to, limits.lo_bits), Zero(to)));  // NaN: 0
    return Sel(in_range, converted, saturated);
  }

  const Kernel& in_;
  const LegalizeOptions options_;
  std::vector<ValueId> remap_;
  std::vector<Expr> exprs_;
  absl::flat_hash_map<std::tuple<ScalarType, int64_t, uint64_t>, ValueId> constants_;
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
