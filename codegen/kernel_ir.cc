#include "codegen/kernel_ir.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/tensor_data.h"

namespace kiln::codegen {

// ---- Types --------------------------------------------------------------------------------------

const char* ScalarTypeName(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
      return "bool";
    case ScalarType::kU8:
      return "u8";
    case ScalarType::kI32:
      return "i32";
    case ScalarType::kU32:
      return "u32";
    case ScalarType::kI64:
      return "i64";
    case ScalarType::kU64:
      return "u64";
    case ScalarType::kF32:
      return "f32";
    case ScalarType::kF64:
      return "f64";
    case ScalarType::kI8:
      return "i8";
    case ScalarType::kI16:
      return "i16";
    case ScalarType::kU16:
      return "u16";
  }
  return "?";
}

bool IsFloatType(ScalarType type) { return type == ScalarType::kF32 || type == ScalarType::kF64; }

bool IsUnsignedType(ScalarType type) {
  return type == ScalarType::kBool || type == ScalarType::kU8 || type == ScalarType::kU16 ||
         type == ScalarType::kU32 || type == ScalarType::kU64;
}

bool IsSignedType(ScalarType type) {
  return type == ScalarType::kI8 || type == ScalarType::kI16 || type == ScalarType::kI32 ||
         type == ScalarType::kI64;
}

int BitWidth(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
      return 1;
    case ScalarType::kU8:
    case ScalarType::kI8:
      return 8;
    case ScalarType::kI16:
    case ScalarType::kU16:
      return 16;
    case ScalarType::kI32:
    case ScalarType::kU32:
    case ScalarType::kF32:
      return 32;
    default:
      return 64;
  }
}

ScalarType ComputeType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
    case ir::DType::kF16:
    case ir::DType::kBF16:
      return ScalarType::kF32;
    case ir::DType::kF64:
      return ScalarType::kF64;
    case ir::DType::kI32:
      return ScalarType::kI32;
    case ir::DType::kI64:
      return ScalarType::kI64;
    case ir::DType::kU8:
      return ScalarType::kU8;
    case ir::DType::kBool:
      return ScalarType::kBool;
    case ir::DType::kI8:
      return ScalarType::kI8;
    case ir::DType::kI16:
      return ScalarType::kI16;
    case ir::DType::kU16:
      return ScalarType::kU16;
    case ir::DType::kU32:
      return ScalarType::kU32;
    case ir::DType::kU64:
      return ScalarType::kU64;
  }
  return ScalarType::kF32;
}

// ---- Ops ----------------------------------------------------------------------------------------

const char* ExprOpName(ExprOp op) {
  switch (op) {
#define KILN_KERNEL_EXPR_NAME(name, text, arity) \
  case ExprOp::k##name:                          \
    return text;
    KILN_KERNEL_EXPR_OPS(KILN_KERNEL_EXPR_NAME)
#undef KILN_KERNEL_EXPR_NAME
  }
  return "?";
}

int ExprOpArity(ExprOp op) {
  switch (op) {
#define KILN_KERNEL_EXPR_ARITY(name, text, arity) \
  case ExprOp::k##name:                           \
    return arity;
    KILN_KERNEL_EXPR_OPS(KILN_KERNEL_EXPR_ARITY)
#undef KILN_KERNEL_EXPR_ARITY
  }
  return 0;
}

bool IsComparison(ExprOp op) {
  return op == ExprOp::kEq || op == ExprOp::kNe || op == ExprOp::kLt || op == ExprOp::kLe ||
         op == ExprOp::kGt || op == ExprOp::kGe;
}

bool IsTranscendental(ExprOp op) {
  switch (op) {
    case ExprOp::kExp:
    case ExprOp::kLog:
    case ExprOp::kTanh:
    case ExprOp::kErf:
    case ExprOp::kSin:
    case ExprOp::kCos:
    case ExprOp::kPow:
      return true;
    default:
      return false;
  }
}

std::optional<ExprOp> ScalarFormOf(ir::Op op) {
  switch (op) {
#define KILN_SCALAR_FORM(name) \
  case ir::Op::k##name:        \
    return ExprOp::k##name;
    KILN_SCALAR_FORM(Neg)
    KILN_SCALAR_FORM(Abs)
    KILN_SCALAR_FORM(Sign)
    KILN_SCALAR_FORM(Exp)
    KILN_SCALAR_FORM(Log)
    KILN_SCALAR_FORM(Sqrt)
    KILN_SCALAR_FORM(Rsqrt)
    KILN_SCALAR_FORM(Sin)
    KILN_SCALAR_FORM(Cos)
    KILN_SCALAR_FORM(Tanh)
    KILN_SCALAR_FORM(Erf)
    KILN_SCALAR_FORM(Floor)
    KILN_SCALAR_FORM(Ceil)
    KILN_SCALAR_FORM(Round)
    KILN_SCALAR_FORM(Reciprocal)
    KILN_SCALAR_FORM(Not)
    KILN_SCALAR_FORM(Add)
    KILN_SCALAR_FORM(Sub)
    KILN_SCALAR_FORM(Mul)
    KILN_SCALAR_FORM(Div)
    KILN_SCALAR_FORM(Pow)
    KILN_SCALAR_FORM(Max)
    KILN_SCALAR_FORM(Min)
    KILN_SCALAR_FORM(Mod)
    KILN_SCALAR_FORM(Eq)
    KILN_SCALAR_FORM(Ne)
    KILN_SCALAR_FORM(Lt)
    KILN_SCALAR_FORM(Le)
    KILN_SCALAR_FORM(Gt)
    KILN_SCALAR_FORM(Ge)
    KILN_SCALAR_FORM(And)
    KILN_SCALAR_FORM(Or)
    KILN_SCALAR_FORM(Xor)
#undef KILN_SCALAR_FORM
    default:
      return std::nullopt;
  }
}

const char* ReduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return "sum";
    case ReduceKind::kProd:
      return "prod";
    case ReduceKind::kMax:
      return "max";
    case ReduceKind::kMin:
      return "min";
    case ReduceKind::kArgMax:
      return "argmax";
    case ReduceKind::kArgMin:
      return "argmin";
  }
  return "?";
}

const char* ArgRoleName(ArgRole role) {
  switch (role) {
    case ArgRole::kInput:
      return "in";
    case ArgRole::kOutput:
      return "out";
    case ArgRole::kErrorFlag:
      return "error";
  }
  return "?";
}

// ---- Builder ------------------------------------------------------------------------------------

namespace {

using IntRange = std::pair<int64_t, int64_t>;

bool IsIndexType(ScalarType type) { return type == ScalarType::kI64; }

bool IsUnaryFloatOnly(ExprOp op) {
  switch (op) {
    case ExprOp::kExp:
    case ExprOp::kLog:
    case ExprOp::kSqrt:
    case ExprOp::kRsqrt:
    case ExprOp::kSin:
    case ExprOp::kCos:
    case ExprOp::kTanh:
    case ExprOp::kErf:
    case ExprOp::kFloor:
    case ExprOp::kCeil:
    case ExprOp::kRound:
    case ExprOp::kReciprocal:
    case ExprOp::kTrunc:
    case ExprOp::kRoundToF16:
    case ExprOp::kRoundToBF16:
      return true;
    default:
      return false;
  }
}

std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace

KernelBuilder::KernelBuilder(std::string name) {
  kernel_.name = std::move(name);
  var_extents_.push_back(0);  // gid; its extent is set by Finish, ranges use "unknown" for it.
}

ArgId KernelBuilder::AddArg(KernelArg arg) {
  kernel_.args.push_back(std::move(arg));
  return static_cast<ArgId>(kernel_.args.size() - 1);
}

ValueId KernelBuilder::Intern(Expr expr) {
  uint64_t float_bits = 0;
  std::memcpy(&float_bits, &expr.float_value, sizeof(float_bits));
  ExprKey key{expr.op, expr.type, expr.operands, expr.int_value, float_bits, expr.var, expr.arg};
  auto [it, inserted] = interned_.try_emplace(std::move(key), 0);
  if (!inserted) return it->second;
  const auto id = static_cast<ValueId>(kernel_.exprs.size());
  it->second = id;

  // Track the range of integer index values so that index arithmetic can simplify.
  std::optional<IntRange> range;
  const auto operand_range = [&](int i) { return Range(expr.operands[static_cast<size_t>(i)]); };
  switch (expr.op) {
    case ExprOp::kConst:
      if (!IsFloatType(expr.type)) range = IntRange{expr.int_value, expr.int_value};
      break;
    case ExprOp::kVar:
      // Without SetParallelExtent, gid is only known to be non-negative.
      range =
          expr.var == kGid && !gid_extent_known_
              ? IntRange{0, std::numeric_limits<int64_t>::max()}
              : IntRange{0, std::max<int64_t>(0, var_extents_[static_cast<size_t>(expr.var)] - 1)};
      break;
    case ExprOp::kAdd:
    case ExprOp::kMul:
    case ExprOp::kMin:
    case ExprOp::kMax:
      if (IsIndexType(expr.type)) {
        auto a = operand_range(0), b = operand_range(1);
        if (a && b) {
          // Non-negative values saturate at INT64_MAX: index arithmetic never gets there, and
          // "non-negative" is what most simplifications need.
          constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
          const bool non_negative = a->first >= 0 && b->first >= 0;
          if (expr.op == ExprOp::kAdd) {
            auto lo = CheckedAdd(a->first, b->first), hi = CheckedAdd(a->second, b->second);
            if (lo && hi) {
              range = IntRange{*lo, *hi};
            } else if (lo && non_negative) {
              range = IntRange{*lo, kMax};
            }
          } else if (expr.op == ExprOp::kMul) {
            if (non_negative) {
              auto lo = CheckedMul(a->first, b->first), hi = CheckedMul(a->second, b->second);
              if (lo) range = IntRange{*lo, hi ? *hi : kMax};
            }
          } else if (expr.op == ExprOp::kMin) {
            range = IntRange{std::min(a->first, b->first), std::min(a->second, b->second)};
          } else {
            range = IntRange{std::max(a->first, b->first), std::max(a->second, b->second)};
          }
        }
      }
      break;
    case ExprOp::kUDiv:
    case ExprOp::kURem:
      if (IsIndexType(expr.type)) {
        auto a = operand_range(0), b = operand_range(1);
        if (a && b && a->first >= 0 && b->first > 0) {
          range = expr.op == ExprOp::kUDiv ? IntRange{a->first / b->second, a->second / b->first}
                                           : IntRange{0, std::min(a->second, b->second - 1)};
        }
      }
      break;
    case ExprOp::kSelect: {
      auto a = operand_range(1), b = operand_range(2);
      if (a && b) range = IntRange{std::min(a->first, b->first), std::max(a->second, b->second)};
      break;
    }
    case ExprOp::kCast:
    case ExprOp::kWrap:
      if (IsIndexType(expr.type) && !IsFloatType(type(expr.operands[0])) &&
          type(expr.operands[0]) != ScalarType::kU64) {
        range = operand_range(0);
      }
      break;
    default:
      break;
  }
  if (IsComparison(expr.op) || expr.type == ScalarType::kBool) {
    if (!(expr.op == ExprOp::kConst)) range = IntRange{0, 1};
  }
  kernel_.exprs.push_back(std::move(expr));
  ranges_.push_back(range);
  return id;
}

std::optional<std::pair<int64_t, int64_t>> KernelBuilder::Range(ValueId value) const {
  if (value < 0 || static_cast<size_t>(value) >= ranges_.size()) return std::nullopt;
  return ranges_[static_cast<size_t>(value)];
}

std::optional<int64_t> KernelBuilder::ConstantInt(ValueId value) const {
  const Expr& e = expr(value);
  if (e.op != ExprOp::kConst || IsFloatType(e.type)) return std::nullopt;
  return e.int_value;
}

ValueId KernelBuilder::Int(ScalarType type, int64_t value) {
  Expr e;
  e.op = ExprOp::kConst;
  e.type = type;
  switch (type) {
    case ScalarType::kBool:
      value = value != 0 ? 1 : 0;
      break;
    case ScalarType::kU8:
      value = static_cast<int64_t>(static_cast<uint8_t>(value));
      break;
    case ScalarType::kI32:
      value = static_cast<int32_t>(static_cast<uint32_t>(value));
      break;
    case ScalarType::kU32:
      value = static_cast<int64_t>(static_cast<uint32_t>(value));
      break;
    case ScalarType::kI8:
      value = static_cast<int8_t>(static_cast<uint8_t>(value));
      break;
    case ScalarType::kI16:
      value = static_cast<int16_t>(static_cast<uint16_t>(value));
      break;
    case ScalarType::kU16:
      value = static_cast<int64_t>(static_cast<uint16_t>(value));
      break;
    default:
      break;
  }
  e.int_value = value;
  if (IsFloatType(type)) {
    e.int_value = 0;
    e.float_value = static_cast<double>(value);
  }
  return Intern(std::move(e));
}

ValueId KernelBuilder::Float(ScalarType type, double value) {
  if (!IsFloatType(type)) return ConstantOf(type, value);
  Expr e;
  e.op = ExprOp::kConst;
  e.type = type;
  e.float_value = type == ScalarType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
  return Intern(std::move(e));
}

ValueId KernelBuilder::ConstantOf(ScalarType type, double value) {
  switch (type) {
    case ScalarType::kF32:
    case ScalarType::kF64:
      return Float(type, value);
    case ScalarType::kBool:
      return Bool(value != 0);
    case ScalarType::kU8:
      return Int(type, ir::SaturatingCastToInt(value, ir::DType::kU8));
    case ScalarType::kI8:
      return Int(type, ir::SaturatingCastToInt(value, ir::DType::kI8));
    case ScalarType::kI16:
      return Int(type, ir::SaturatingCastToInt(value, ir::DType::kI16));
    case ScalarType::kU16:
      return Int(type, ir::SaturatingCastToInt(value, ir::DType::kU16));
    case ScalarType::kI32:
      return Int(type, ir::SaturatingCastToInt(value, ir::DType::kI32));
    case ScalarType::kI64:
      return Int(type, ir::SaturatingCastToInt(value, ir::DType::kI64));
    case ScalarType::kU32: {
      if (std::isnan(value) || value <= 0) return Int(type, 0);
      if (value >= 4294967295.0) return Int(type, 4294967295LL);
      return Int(type, static_cast<int64_t>(value));
    }
    case ScalarType::kU64: {
      if (std::isnan(value) || value <= 0) return Int(type, 0);
      if (value >= 18446744073709551615.0) return Int(type, -1);
      return Int(type, static_cast<int64_t>(static_cast<uint64_t>(value)));
    }
  }
  return Int(type, 0);
}

void KernelBuilder::SetParallelExtent(int64_t parallel_extent) {
  var_extents_[kGid] = parallel_extent;
  gid_extent_known_ = true;
}

ValueId KernelBuilder::Var(VarId var) {
  const bool known = var != kGid || gid_extent_known_;
  if (known && var >= 0 && static_cast<size_t>(var) < var_extents_.size() &&
      var_extents_[static_cast<size_t>(var)] == 1) {
    return Index(0);  // The only iteration.
  }
  Expr e;
  e.op = ExprOp::kVar;
  e.type = ScalarType::kI64;
  e.var = var;
  return Intern(std::move(e));
}

ValueId KernelBuilder::Load(ArgId arg, ValueId index) {
  Expr e;
  e.op = ExprOp::kLoad;
  e.type = ComputeType(kernel_.args[static_cast<size_t>(arg)].dtype);
  e.operands = {index};
  e.arg = arg;
  return Intern(std::move(e));
}

std::optional<ValueId> KernelBuilder::Simplify(ExprOp op, ScalarType type,
                                               const std::vector<ValueId>& operands) {
  if (op == ExprOp::kSelect) {
    if (auto c = ConstantInt(operands[0])) return *c != 0 ? operands[1] : operands[2];
    if (operands[1] == operands[2]) return operands[1];
    return std::nullopt;
  }
  if (!IsIndexType(type) && !(IsComparison(op) && IsIndexType(this->type(operands[0])))) {
    return std::nullopt;
  }
  if (operands.size() != 2) return std::nullopt;
  const ValueId a = operands[0], b = operands[1];
  const auto ca = ConstantInt(a), cb = ConstantInt(b);
  const auto ra = Range(a), rb = Range(b);
  if (IsComparison(op)) {
    if (!ra || !rb) return std::nullopt;
    std::optional<bool> known;
    switch (op) {
      case ExprOp::kLt:
        if (ra->second < rb->first) known = true;
        if (ra->first >= rb->second) known = false;
        break;
      case ExprOp::kLe:
        if (ra->second <= rb->first) known = true;
        if (ra->first > rb->second) known = false;
        break;
      case ExprOp::kGt:
        if (ra->first > rb->second) known = true;
        if (ra->second <= rb->first) known = false;
        break;
      case ExprOp::kGe:
        if (ra->first >= rb->second) known = true;
        if (ra->second < rb->first) known = false;
        break;
      case ExprOp::kEq:
        if (ra->first == ra->second && rb->first == rb->second && ra->first == rb->first) {
          known = true;
        }
        if (ra->second < rb->first || rb->second < ra->first) known = false;
        break;
      case ExprOp::kNe:
        if (ra->first == ra->second && rb->first == rb->second && ra->first == rb->first) {
          known = false;
        }
        if (ra->second < rb->first || rb->second < ra->first) known = true;
        break;
      default:
        break;
    }
    if (known) return Bool(*known);
    return std::nullopt;
  }
  const auto wrap_add = [](int64_t x, int64_t y) {
    return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
  };
  const auto wrap_mul = [](int64_t x, int64_t y) {
    return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
  };
  // `x * m` with a constant m (either side): {x, m}.
  const auto as_scaled = [&](ValueId v) -> std::optional<std::pair<ValueId, int64_t>> {
    const Expr& e = expr(v);
    if (e.op == ExprOp::kMul) {
      if (auto m = ConstantInt(e.operands[1])) return std::make_pair(e.operands[0], *m);
      if (auto m = ConstantInt(e.operands[0])) return std::make_pair(e.operands[1], *m);
    }
    return std::make_pair(v, int64_t{1});
  };
  switch (op) {
    case ExprOp::kAdd:
      if (ca && cb) return Index(wrap_add(*ca, *cb));
      if (cb && *cb == 0) return a;
      if (ca && *ca == 0) return b;
      // (x / c) * c + x % c = x.
      for (int side = 0; side < 2; ++side) {
        const Expr& mul = expr(side == 0 ? a : b);
        const Expr& rem = expr(side == 0 ? b : a);
        if (mul.op != ExprOp::kMul || rem.op != ExprOp::kURem) continue;
        const Expr& div = expr(mul.operands[0]);
        const auto c = ConstantInt(mul.operands[1]);
        if (div.op == ExprOp::kUDiv && c && ConstantInt(div.operands[1]) == c &&
            ConstantInt(rem.operands[1]) == c && div.operands[0] == rem.operands[0]) {
          return div.operands[0];
        }
      }
      // Constants go right so that (x + c1) + c2 folds.
      if (ca) return Binary(ExprOp::kAdd, b, a);
      if (cb) {
        // Copies: building a constant may reallocate the expression pool.
        const ExprOp a_op = expr(a).op;
        if (a_op == ExprOp::kAdd) {
          const ValueId x = expr(a).operands[0];
          if (auto c2 = ConstantInt(expr(a).operands[1])) {
            const ValueId sum = Index(wrap_add(*c2, *cb));
            return Binary(ExprOp::kAdd, x, sum);
          }
        }
      }
      return std::nullopt;
    case ExprOp::kSub:
      if (ca && cb) return Index(wrap_add(*ca, -*cb));
      if (cb && *cb == 0) return a;
      if (a == b) return Index(0);
      return std::nullopt;
    case ExprOp::kMul:
      if (ca && cb) return Index(wrap_mul(*ca, *cb));
      if ((cb && *cb == 0) || (ca && *ca == 0)) return Index(0);
      if (cb && *cb == 1) return a;
      if (ca && *ca == 1) return b;
      if (ca) return Binary(ExprOp::kMul, b, a);
      if (cb) {
        const ExprOp a_op = expr(a).op;
        if (a_op == ExprOp::kMul) {
          const ValueId x = expr(a).operands[0];
          if (auto c2 = ConstantInt(expr(a).operands[1])) {
            const ValueId product = Index(wrap_mul(*c2, *cb));
            return Binary(ExprOp::kMul, x, product);
          }
        }
      }
      return std::nullopt;
    case ExprOp::kMin:
    case ExprOp::kMax:
      if (a == b) return a;
      if (ra && rb) {
        if (ra->second <= rb->first) return op == ExprOp::kMin ? a : b;
        if (rb->second <= ra->first) return op == ExprOp::kMin ? b : a;
      }
      return std::nullopt;
    case ExprOp::kUDiv:
    case ExprOp::kURem: {
      if (!cb || *cb <= 0) return std::nullopt;
      const int64_t c = *cb;
      if (ca && *ca >= 0) return Index(op == ExprOp::kUDiv ? *ca / c : *ca % c);
      if (!ra || ra->first < 0) return std::nullopt;
      if (c == 1) return op == ExprOp::kUDiv ? a : Index(0);
      if (ra->second < c) return op == ExprOp::kUDiv ? Index(0) : a;
      const Expr ea = expr(a);  // A copy: simplifying may grow the pool.
      // (x * m + y) with m a multiple of c and 0 <= y < c, x >= 0.
      if (ea.op == ExprOp::kAdd || ea.op == ExprOp::kMul) {
        ValueId scaled = a;
        std::optional<ValueId> rest;
        if (ea.op == ExprOp::kAdd) {
          for (int side = 0; side < 2; ++side) {
            auto s = as_scaled(ea.operands[static_cast<size_t>(side)]);
            const auto rr = Range(ea.operands[static_cast<size_t>(1 - side)]);
            const auto rs = Range(s->first);
            if (s->second % c == 0 && rr && rr->first >= 0 && rr->second < c && rs &&
                rs->first >= 0) {
              scaled = ea.operands[static_cast<size_t>(side)];
              rest = ea.operands[static_cast<size_t>(1 - side)];
              break;
            }
          }
          if (!rest) return std::nullopt;
        }
        auto s = as_scaled(scaled);
        const auto rs = Range(s->first);
        if (s->second % c != 0 || !rs || rs->first < 0) return std::nullopt;
        if (op == ExprOp::kURem) return rest ? *rest : Index(0);
        return IMulConst(s->first, s->second / c);
      }
      // (x / c1) / c2 = x / (c1 * c2) for x >= 0.
      if (op == ExprOp::kUDiv && ea.op == ExprOp::kUDiv) {
        if (auto c1 = ConstantInt(ea.operands[1]); c1 && *c1 > 0) {
          if (auto prod = CheckedMul(*c1, c)) return IDivConst(ea.operands[0], *prod);
        }
      }
      // (x % (c * k)) % c = x % c.
      if (op == ExprOp::kURem && ea.op == ExprOp::kURem) {
        if (auto c1 = ConstantInt(ea.operands[1]); c1 && *c1 > 0 && *c1 % c == 0) {
          return IModConst(ea.operands[0], c);
        }
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

ValueId KernelBuilder::Emit(ExprOp op, ScalarType type, std::vector<ValueId> operands) {
  if (auto simplified = Simplify(op, type, operands)) return *simplified;
  Expr e;
  e.op = op;
  e.type = type;
  e.operands = std::move(operands);
  return Intern(std::move(e));
}

ValueId KernelBuilder::Unary(ExprOp op, ValueId x) { return Emit(op, type(x), {x}); }

ValueId KernelBuilder::Binary(ExprOp op, ValueId a, ValueId b) {
  return Emit(op, IsComparison(op) ? ScalarType::kBool : type(a), {a, b});
}

ValueId KernelBuilder::Select(ValueId cond, ValueId on_true, ValueId on_false) {
  return Emit(ExprOp::kSelect, type(on_true), {cond, on_true, on_false});
}

ValueId KernelBuilder::Cast(ValueId x, ScalarType to) {
  if (type(x) == to) return x;
  if (auto c = ConstantInt(x);
      c && !IsFloatType(to) && to != ScalarType::kU64 && type(x) != ScalarType::kU64) {
    return ConstantOf(to, static_cast<double>(*c));  // Exact: the constant is an index.
  }
  return Emit(ExprOp::kCast, to, {x});
}

ValueId KernelBuilder::Wrap(ValueId x, ScalarType to) {
  if (type(x) == to) return x;
  return Emit(ExprOp::kWrap, to, {x});
}

ValueId KernelBuilder::Bitcast(ValueId x, ScalarType to) {
  if (type(x) == to) return x;
  return Emit(ExprOp::kBitcast, to, {x});
}

ValueId KernelBuilder::Fma(ValueId a, ValueId b, ValueId c) {
  return Emit(ExprOp::kFma, type(a), {a, b, c});
}

ValueId KernelBuilder::IDivConst(ValueId a, int64_t c) {
  return Binary(ExprOp::kUDiv, a, Index(c));
}

ValueId KernelBuilder::IModConst(ValueId a, int64_t c) {
  return Binary(ExprOp::kURem, a, Index(c));
}

ValueId KernelBuilder::IClamp(ValueId a, int64_t lo, int64_t hi) {
  return Binary(ExprOp::kMin, Binary(ExprOp::kMax, a, Index(lo)), Index(hi));
}

std::vector<Stmt>& KernelBuilder::CurrentBlock() {
  return open_.empty() ? kernel_.body : open_.back().stmt.body;
}

VarId KernelBuilder::BeginLoop(int64_t extent) {
  const VarId var = kernel_.num_vars++;
  var_extents_.push_back(extent);
  Stmt stmt;
  stmt.kind = StmtKind::kLoop;
  stmt.var = var;
  stmt.extent = extent;
  open_.push_back({std::move(stmt)});
  return var;
}

void KernelBuilder::EndLoop() {
  Stmt stmt = std::move(open_.back().stmt);
  open_.pop_back();
  CurrentBlock().push_back(std::move(stmt));
}

VarId KernelBuilder::BeginReduce(ReduceKind kind, ValueId init, int64_t extent) {
  const VarId var = kernel_.num_vars++;
  var_extents_.push_back(extent);
  Stmt stmt;
  stmt.kind = StmtKind::kReduce;
  stmt.var = var;
  stmt.extent = extent;
  stmt.reduce_kind = kind;
  stmt.init = init;
  open_.push_back({std::move(stmt)});
  return var;
}

ValueId KernelBuilder::EndReduce(ValueId value) {
  Stmt stmt = std::move(open_.back().stmt);
  open_.pop_back();
  Expr acc;
  acc.op = ExprOp::kAccumulator;
  acc.type = (stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin)
                 ? ScalarType::kI64
                 : type(value);
  acc.var = stmt.var;
  stmt.value = value;
  stmt.result = Intern(std::move(acc));
  if (stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin) {
    // The index of the extreme lies in [0, extent).
    ranges_[static_cast<size_t>(stmt.result)] =
        std::make_pair(int64_t{0}, std::max<int64_t>(0, stmt.extent - 1));
  }
  const ValueId result = stmt.result;
  CurrentBlock().push_back(std::move(stmt));
  return result;
}

void KernelBuilder::Let(ValueId value) {
  Stmt stmt;
  stmt.kind = StmtKind::kLet;
  stmt.value = value;
  CurrentBlock().push_back(std::move(stmt));
}

void KernelBuilder::Store(ArgId arg, ValueId index, ValueId value, ValueId predicate) {
  if (predicate != kNoValue) {
    if (auto c = ConstantInt(predicate)) {
      if (*c == 0) return;
      predicate = kNoValue;
    }
  }
  Stmt stmt;
  stmt.kind = StmtKind::kStore;
  stmt.arg = arg;
  stmt.index = index;
  stmt.value = value;
  stmt.predicate = predicate;
  CurrentBlock().push_back(std::move(stmt));
}

Kernel KernelBuilder::Finish(int64_t parallel_extent) && {
  while (!open_.empty()) {
    // Unbalanced Begin/End is a lowering bug; close what is open so VerifyKernel can report it.
    Stmt stmt = std::move(open_.back().stmt);
    open_.pop_back();
    CurrentBlock().push_back(std::move(stmt));
  }
  kernel_.parallel_extent = parallel_extent;
  return std::move(kernel_);
}

// ---- Verifier -----------------------------------------------------------------------------------

namespace {

class Verifier {
 public:
  explicit Verifier(const Kernel& kernel) : kernel_(kernel) {}

  absl::Status Run() {
    if (absl::Status s = CheckArgs(); !s.ok()) return s;
    if (kernel_.parallel_extent < 0) return Error("negative parallel_extent");
    if (kernel_.num_vars < 1) return Error("num_vars < 1");
    defined_.assign(static_cast<size_t>(kernel_.num_vars), false);
    defined_[kGid] = true;
    result_types_.assign(static_cast<size_t>(kernel_.num_vars), std::nullopt);
    // Collect the Reduce result types first (expressions reference accumulators by var).
    CollectReduces(kernel_.body);
    for (size_t i = 0; i < kernel_.exprs.size(); ++i) {
      if (absl::Status s = CheckExpr(static_cast<ValueId>(i)); !s.ok()) return s;
    }
    std::vector<bool> in_scope(2 * static_cast<size_t>(kernel_.num_vars), false);
    in_scope[kGid] = true;
    return CheckBlock(kernel_.body, in_scope);
  }

  // Checks a block whose statements start with `in_scope`; leaves in `in_scope` what is in scope
  // at its end (a Reduce's value sees the accumulators its body defines).
  absl::Status CheckBlock(const std::vector<Stmt>& block, std::vector<bool> in_scope) {
    return CheckBlockInPlace(block, in_scope);
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("kernel ", kernel_.name, ": ", what));
  }

  absl::Status CheckArgs() {
    int last_role = 0;
    int error_flags = 0;
    for (size_t i = 0; i < kernel_.args.size(); ++i) {
      const KernelArg& arg = kernel_.args[i];
      const int role = static_cast<int>(arg.role);
      if (role < last_role) {
        return Error(absl::StrCat("arg", i, " (", ArgRoleName(arg.role),
                                  ") breaks the order inputs, outputs, error flag"));
      }
      last_role = role;
      if (arg.num_elements < 0) return Error(absl::StrCat("arg", i, " has negative size"));
      if (arg.role == ArgRole::kErrorFlag) {
        ++error_flags;
        if (arg.dtype != ir::DType::kI64 || arg.num_elements != 2) {
          return Error(absl::StrCat("arg", i, ": the error flag must be i64[2]"));
        }
      }
    }
    if (error_flags > 1) return Error("more than one error flag");
    return absl::OkStatus();
  }

  void CollectReduces(const std::vector<Stmt>& block) {
    for (const Stmt& stmt : block) {
      if (stmt.kind == StmtKind::kReduce && stmt.var > 0 && stmt.var < kernel_.num_vars &&
          stmt.value >= 0 && static_cast<size_t>(stmt.value) < kernel_.exprs.size()) {
        const bool arg_kind =
            stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin;
        result_types_[static_cast<size_t>(stmt.var)] =
            arg_kind ? ScalarType::kI64 : kernel_.expr(stmt.value).type;
      }
      CollectReduces(stmt.body);
    }
  }

  absl::Status CheckExpr(ValueId id) {
    const Expr& e = kernel_.expr(id);
    const std::string label =
        absl::StrCat("v", id, " = ", ExprOpName(e.op), ".", ScalarTypeName(e.type), ": ");
    if (static_cast<int>(e.operands.size()) != ExprOpArity(e.op)) {
      return Error(label + "wrong operand count");
    }
    std::vector<ScalarType> t;
    for (ValueId operand : e.operands) {
      if (operand < 0 || operand >= id) return Error(label + "operand does not precede its user");
      t.push_back(kernel_.expr(operand).type);
    }
    // deps_: the variables (and accumulators, offset by num_vars) each value depends on.
    std::vector<int32_t> deps;
    for (ValueId operand : e.operands) {
      const auto& d = deps_[static_cast<size_t>(operand)];
      deps.insert(deps.end(), d.begin(), d.end());
    }
    const auto all_same = [&] {
      for (ScalarType x : t) {
        if (x != e.type) return false;
      }
      return true;
    };
    const auto bad_var = [&] { return e.var < 0 || e.var >= kernel_.num_vars; };
    const bool is_float = IsFloatType(e.type);
    const bool is_int = !is_float && e.type != ScalarType::kBool;
    switch (e.op) {
      case ExprOp::kConst:
        break;
      case ExprOp::kVar:
        if (bad_var() || e.type != ScalarType::kI64) return Error(label + "bad variable");
        deps.push_back(e.var);
        break;
      case ExprOp::kAccumulator:
        if (bad_var() || e.var == kGid || !result_types_[static_cast<size_t>(e.var)] ||
            *result_types_[static_cast<size_t>(e.var)] != e.type) {
          return Error(label + "no Reduce of this type defines the accumulator");
        }
        deps.push_back(e.var + kernel_.num_vars);
        break;
      case ExprOp::kLoad:
        if (e.arg < 0 || static_cast<size_t>(e.arg) >= kernel_.args.size()) {
          return Error(label + "bad arg");
        }
        if (t[0] != ScalarType::kI64) return Error(label + "index is not i64");
        if (e.type != ComputeType(kernel_.args[static_cast<size_t>(e.arg)].dtype)) {
          return Error(label + "type differs from the arg's compute type");
        }
        break;
      case ExprOp::kNeg:
      case ExprOp::kAbs:
      case ExprOp::kSign:
        if (!all_same() || e.type == ScalarType::kBool) return Error(label + "bad operand type");
        break;
      case ExprOp::kNot:
        if (!all_same() || is_float) return Error(label + "bad operand type");
        break;
      case ExprOp::kAdd:
      case ExprOp::kSub:
      case ExprOp::kMul:
      case ExprOp::kDiv:
      case ExprOp::kMax:
      case ExprOp::kMin:
      case ExprOp::kMod:
        if (!all_same() || e.type == ScalarType::kBool) return Error(label + "bad operand type");
        break;
      case ExprOp::kPow:
      case ExprOp::kFma:
        if (!all_same() || !is_float) return Error(label + "bad operand type");
        break;
      case ExprOp::kEq:
      case ExprOp::kNe:
      case ExprOp::kLt:
      case ExprOp::kLe:
      case ExprOp::kGt:
      case ExprOp::kGe:
        if (e.type != ScalarType::kBool || t[0] != t[1]) return Error(label + "bad operand type");
        break;
      case ExprOp::kAnd:
      case ExprOp::kOr:
      case ExprOp::kXor:
        if (!all_same() || is_float) return Error(label + "bad operand type");
        break;
      case ExprOp::kSelect:
        if (t[0] != ScalarType::kBool || t[1] != e.type || t[2] != e.type) {
          return Error(label + "bad operand type");
        }
        break;
      case ExprOp::kCast:
        break;
      case ExprOp::kConvert:
        if (!IsFloatType(t[0]) || IsFloatType(e.type) || e.type == ScalarType::kBool) {
          return Error(label + "convert needs a float operand and an integer result");
        }
        break;
      case ExprOp::kWrap:
        if (!is_int || IsFloatType(t[0])) return Error(label + "wrap needs integer types");
        break;
      case ExprOp::kBitcast:
        if (BitWidth(t[0]) != BitWidth(e.type) || BitWidth(e.type) < 32) {
          return Error(label + "bitcast needs equal widths of 32 or 64 bits");
        }
        break;
      case ExprOp::kShl:
      case ExprOp::kShr:
      case ExprOp::kUDiv:
      case ExprOp::kURem:
        if (!all_same() || !is_int) return Error(label + "bad operand type");
        break;
      default:
        if (IsUnaryFloatOnly(e.op) && (!all_same() || !is_float)) {
          return Error(label + "needs a float operand of the result type");
        }
        break;
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    deps_.push_back(std::move(deps));
    return absl::OkStatus();
  }

  absl::Status CheckValue(ValueId id, const std::vector<bool>& in_scope, const char* what) {
    if (id < 0 || static_cast<size_t>(id) >= kernel_.exprs.size()) {
      return Error(absl::StrCat(what, " refers to a missing value ", id));
    }
    for (int32_t dep : deps_[static_cast<size_t>(id)]) {
      if (!in_scope[static_cast<size_t>(dep)]) {
        const bool acc = dep >= kernel_.num_vars;
        return Error(absl::StrCat(what, " uses v", id, ", which depends on ",
                                  acc ? "accumulator " : "variable ",
                                  acc ? dep - kernel_.num_vars : dep, " outside its scope"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckBlockInPlace(const std::vector<Stmt>& block, std::vector<bool>& in_scope) {
    for (const Stmt& stmt : block) {
      switch (stmt.kind) {
        case StmtKind::kLet:
          if (absl::Status s = CheckValue(stmt.value, in_scope, "let"); !s.ok()) return s;
          break;
        case StmtKind::kStore: {
          if (stmt.arg < 0 || static_cast<size_t>(stmt.arg) >= kernel_.args.size() ||
              kernel_.args[static_cast<size_t>(stmt.arg)].role == ArgRole::kInput) {
            return Error(absl::StrCat("store to arg", stmt.arg, ", which is not an output"));
          }
          for (auto [id, what] :
               {std::pair{stmt.index, "store index"}, std::pair{stmt.value, "store value"}}) {
            if (absl::Status s = CheckValue(id, in_scope, what); !s.ok()) return s;
          }
          if (stmt.predicate != kNoValue) {
            if (absl::Status s = CheckValue(stmt.predicate, in_scope, "store predicate"); !s.ok()) {
              return s;
            }
            if (kernel_.expr(stmt.predicate).type != ScalarType::kBool) {
              return Error("store predicate is not bool");
            }
          }
          if (kernel_.expr(stmt.index).type != ScalarType::kI64) {
            return Error("store index is not i64");
          }
          const ScalarType want = ComputeType(kernel_.args[static_cast<size_t>(stmt.arg)].dtype);
          if (kernel_.expr(stmt.value).type != want) {
            return Error(absl::StrCat("store to arg", stmt.arg, " of a ",
                                      ScalarTypeName(kernel_.expr(stmt.value).type),
                                      " value; the arg computes in ", ScalarTypeName(want)));
          }
          break;
        }
        case StmtKind::kLoop:
        case StmtKind::kReduce: {
          if (stmt.var <= kGid || stmt.var >= kernel_.num_vars || defined_[stmt.var]) {
            return Error(
                absl::StrCat("statement defines variable ", stmt.var, " twice or out of range"));
          }
          if (stmt.extent < 0) return Error("negative extent");
          defined_[stmt.var] = true;
          const bool arg_kind =
              stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin;
          if (stmt.kind == StmtKind::kReduce) {
            if (arg_kind) {
              if (stmt.init != kNoValue) return Error("argmax/argmin reduce with an init value");
              if (stmt.extent < 1) return Error("argmax/argmin reduce over an empty range");
            } else if (absl::Status s = CheckValue(stmt.init, in_scope, "reduce init"); !s.ok()) {
              return s;
            }
          }
          std::vector<bool> inner = in_scope;
          inner[static_cast<size_t>(stmt.var)] = true;
          if (absl::Status s = CheckBlockInPlace(stmt.body, inner); !s.ok()) return s;
          if (stmt.kind == StmtKind::kReduce) {
            if (absl::Status s = CheckValue(stmt.value, inner, "reduce value"); !s.ok()) return s;
            if (!arg_kind && kernel_.expr(stmt.init).type != kernel_.expr(stmt.value).type) {
              return Error("reduce init and value types differ");
            }
            if (stmt.result < 0 || static_cast<size_t>(stmt.result) >= kernel_.exprs.size() ||
                kernel_.expr(stmt.result).op != ExprOp::kAccumulator ||
                kernel_.expr(stmt.result).var != stmt.var) {
              return Error("reduce result is not its accumulator");
            }
            in_scope[static_cast<size_t>(stmt.var + kernel_.num_vars)] = true;
          }
          break;
        }
      }
    }
    return absl::OkStatus();
  }

  const Kernel& kernel_;
  std::vector<bool> defined_;
  std::vector<std::optional<ScalarType>> result_types_;
  std::vector<std::vector<int32_t>> deps_;
};

}  // namespace

absl::Status VerifyKernel(const Kernel& kernel) { return Verifier(kernel).Run(); }

// ---- Printer ------------------------------------------------------------------------------------

namespace {

std::string FloatText(double value, ScalarType type) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  for (int precision = 1; precision <= 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    const double back = std::strtod(text.c_str(), nullptr);
    if (type == ScalarType::kF32 ? static_cast<float>(back) == static_cast<float>(value)
                                 : back == value) {
      return text;
    }
  }
  return absl::StrFormat("%.17g", value);
}

class Printer {
 public:
  explicit Printer(const Kernel& kernel) : kernel_(kernel) {
    var_prefix_.assign(static_cast<size_t>(kernel.num_vars), "v?");
    if (!var_prefix_.empty()) var_prefix_[0] = "gid";
    NameVars(kernel.body);
    printed_.assign(kernel.exprs.size(), false);
  }

  std::string Run() {
    absl::StrAppend(&out_, "kernel ", kernel_.name, " parallel_extent=", kernel_.parallel_extent,
                    " {\n");
    for (size_t i = 0; i < kernel_.args.size(); ++i) {
      const KernelArg& arg = kernel_.args[i];
      absl::StrAppend(&out_, "  arg", i, " ", ArgRoleName(arg.role), " ", ir::DTypeName(arg.dtype),
                      "[", arg.num_elements, "]");
      if (arg.node != ir::kInvalidNode) absl::StrAppend(&out_, " %", arg.node);
      if (!arg.name.empty()) absl::StrAppend(&out_, " \"", arg.name, "\"");
      absl::StrAppend(&out_, "\n");
    }
    absl::StrAppend(&out_, "  gid in [0, ", kernel_.parallel_extent, ") {\n");
    PrintBlock(kernel_.body, 2);
    absl::StrAppend(&out_, "  }\n}\n");
    return std::move(out_);
  }

 private:
  void NameVars(const std::vector<Stmt>& block) {
    for (const Stmt& stmt : block) {
      if ((stmt.kind == StmtKind::kLoop || stmt.kind == StmtKind::kReduce) && stmt.var > 0 &&
          stmt.var < kernel_.num_vars) {
        var_prefix_[static_cast<size_t>(stmt.var)] =
            absl::StrCat(stmt.kind == StmtKind::kLoop ? "i" : "r", stmt.var);
      }
      NameVars(stmt.body);
    }
  }

  std::string Ref(ValueId id) const {
    if (id < 0 || static_cast<size_t>(id) >= kernel_.exprs.size()) return absl::StrCat("?", id);
    const Expr& e = kernel_.expr(id);
    switch (e.op) {
      case ExprOp::kConst:
        if (IsFloatType(e.type)) {
          return absl::StrCat(FloatText(e.float_value, e.type), ":", ScalarTypeName(e.type));
        }
        if (e.type == ScalarType::kU64) {
          return absl::StrCat(static_cast<uint64_t>(e.int_value), ":u64");
        }
        if (e.type == ScalarType::kBool) return e.int_value != 0 ? "true" : "false";
        return absl::StrCat(e.int_value, ":", ScalarTypeName(e.type));
      case ExprOp::kVar:
        return e.var >= 0 && e.var < kernel_.num_vars ? var_prefix_[static_cast<size_t>(e.var)]
                                                      : "var?";
      case ExprOp::kAccumulator:
        return absl::StrCat("acc", e.var);
      default:
        return absl::StrCat("v", id);
    }
  }

  bool Inline(ValueId id) const {
    const ExprOp op = kernel_.expr(id).op;
    return op == ExprOp::kConst || op == ExprOp::kVar || op == ExprOp::kAccumulator;
  }

  // Prints `id` and the operands it needs (post order), each once per scope.
  void Define(ValueId id, int indent) {
    if (id < 0 || static_cast<size_t>(id) >= kernel_.exprs.size()) return;
    std::vector<std::pair<ValueId, bool>> stack = {{id, false}};
    while (!stack.empty()) {
      auto [v, expanded] = stack.back();
      stack.pop_back();
      if (Inline(v) || printed_[static_cast<size_t>(v)]) continue;
      if (!expanded) {
        stack.push_back({v, true});
        const Expr& e = kernel_.expr(v);
        for (auto it = e.operands.rbegin(); it != e.operands.rend(); ++it) {
          if (*it >= 0 && *it < v) stack.push_back({*it, false});
        }
        continue;
      }
      printed_[static_cast<size_t>(v)] = true;
      scope_defs_.back().push_back(v);
      const Expr& e = kernel_.expr(v);
      std::string line = absl::StrCat(std::string(static_cast<size_t>(indent) * 2, ' '), "v", v,
                                      " = ", ExprOpName(e.op), ".", ScalarTypeName(e.type), " ");
      if (e.op == ExprOp::kLoad) {
        absl::StrAppend(&line, "arg", e.arg, "[", Ref(e.operands[0]), "]");
      } else {
        std::vector<std::string> refs;
        for (ValueId operand : e.operands) refs.push_back(Ref(operand));
        absl::StrAppend(&line, absl::StrJoin(refs, ", "));
      }
      absl::StrAppend(&out_, line, "\n");
    }
  }

  void PrintBlock(const std::vector<Stmt>& block, int indent) {
    scope_defs_.emplace_back();
    PrintStmts(block, indent);
    EndScope();
  }

  void PrintStmts(const std::vector<Stmt>& block, int indent) {
    const std::string pad(static_cast<size_t>(indent) * 2, ' ');
    for (const Stmt& stmt : block) {
      switch (stmt.kind) {
        case StmtKind::kLet:
          Define(stmt.value, indent);
          absl::StrAppend(&out_, pad, "let ", Ref(stmt.value), "\n");
          break;
        case StmtKind::kStore:
          Define(stmt.index, indent);
          Define(stmt.value, indent);
          if (stmt.predicate != kNoValue) Define(stmt.predicate, indent);
          absl::StrAppend(&out_, pad, "store arg", stmt.arg, "[", Ref(stmt.index),
                          "] = ", Ref(stmt.value));
          if (stmt.predicate != kNoValue) absl::StrAppend(&out_, " if ", Ref(stmt.predicate));
          absl::StrAppend(&out_, "\n");
          break;
        case StmtKind::kLoop:
          absl::StrAppend(&out_, pad, "for ", VarName(stmt.var), " in [0, ", stmt.extent, ") {\n");
          PrintBlock(stmt.body, indent + 1);
          absl::StrAppend(&out_, pad, "}\n");
          break;
        case StmtKind::kReduce: {
          if (stmt.init != kNoValue) Define(stmt.init, indent);
          const std::string type =
              stmt.value >= 0 && static_cast<size_t>(stmt.value) < kernel_.exprs.size()
                  ? ScalarTypeName(kernel_.expr(stmt.value).type)
                  : "?";
          absl::StrAppend(&out_, pad, "acc", stmt.var, " = reduce ",
                          ReduceKindName(stmt.reduce_kind), ".", type, " ", VarName(stmt.var),
                          " in [0, ", stmt.extent, ")");
          if (stmt.init != kNoValue) absl::StrAppend(&out_, " init ", Ref(stmt.init));
          absl::StrAppend(&out_, " {\n");
          scope_defs_.emplace_back();
          PrintStmts(stmt.body, indent + 1);
          Define(stmt.value, indent + 1);
          EndScope();
          absl::StrAppend(&out_, pad, "} yield ", Ref(stmt.value), "\n");
          break;
        }
      }
    }
  }

  void EndScope() {
    for (ValueId v : scope_defs_.back()) printed_[static_cast<size_t>(v)] = false;
    scope_defs_.pop_back();
  }

  std::string VarName(VarId var) const {
    return var >= 0 && var < kernel_.num_vars ? var_prefix_[static_cast<size_t>(var)] : "var?";
  }

  const Kernel& kernel_;
  std::vector<std::string> var_prefix_;
  std::vector<bool> printed_;
  std::vector<std::vector<ValueId>> scope_defs_;
  std::string out_;
};

}  // namespace

std::string PrintKernel(const Kernel& kernel) { return Printer(kernel).Run(); }

}  // namespace kiln::codegen
