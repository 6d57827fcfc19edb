#include "codegen/kernel_eval.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/scalar_limits.h"
#include "ir/dtype.h"

namespace kiln::codegen {
namespace {

// A scalar value: integers and bool in `bits` (sign-extended to 64 bits for signed types,
// zero-extended for unsigned ones and bool), floats in `f` (an f32 value is a double holding a
// float exactly).
struct Scalar {
  uint64_t bits = 0;
  double f = 0.0;
};

// The canonical bits of an integer of `type`: wrapped to its width, then sign- or zero-extended.
uint64_t Normalize(ScalarType type, uint64_t bits) {
  if (type == ScalarType::kBool) return bits != 0 ? 1 : 0;
  if (IsFloatType(type)) return bits;
  const int width = BitWidth(type);
  if (width == 64) return bits;
  const uint64_t mask = (uint64_t{1} << width) - 1;
  bits &= mask;
  if (IsSignedType(type) && (bits >> (width - 1)) != 0) bits |= ~mask;
  return bits;
}

double RoundTo(ScalarType type, double value) {
  return type == ScalarType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
}

int64_t Signed(uint64_t bits) { return static_cast<int64_t>(bits); }

template <class T>
T LoadAs(const std::byte* p, int64_t index) {
  T v;
  std::memcpy(&v, p + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// Stores the low sizeof(T) bytes of `bits` (two's complement truncation).
template <class T>
void StoreAs(std::byte* p, int64_t index, uint64_t bits) {
  const auto v = static_cast<T>(bits);
  std::memcpy(p + index * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

// The interpreter's NaN-propagating max/min.
double MaxNaN(double a, double b) { return std::isnan(a) || b <= a ? a : b; }
double MinNaN(double a, double b) { return std::isnan(a) || b >= a ? a : b; }

// Saturating float → integer conversion (NaN → 0).
uint64_t FloatToInt(double value, ScalarType to) {
  if (to == ScalarType::kBool) return value != 0 ? 1 : 0;
  if (std::isnan(value)) return 0;
  const double t = std::trunc(value);
  if (to == ScalarType::kU64) {
    if (t <= 0) return 0;
    if (t >= 18446744073709551616.0) return ~uint64_t{0};
    return static_cast<uint64_t>(t);
  }
  if (to == ScalarType::kI64) {
    return static_cast<uint64_t>(ir::SaturatingCastToInt(value, ir::DType::kI64));
  }
  // Narrower types: their limits are exact doubles.
  const IntLimits limits = LimitsOf(to);
  const double lo = static_cast<double>(limits.lo_bits), hi = static_cast<double>(limits.hi_bits);
  return Normalize(to,
                   static_cast<uint64_t>(static_cast<int64_t>(t < lo ? lo : (t > hi ? hi : t))));
}

// Saturating integer → integer conversion.
uint64_t IntToInt(uint64_t bits, ScalarType from, ScalarType to) {
  if (to == ScalarType::kBool) return bits != 0 ? 1 : 0;
  const bool negative = IsSignedType(from) && Signed(bits) < 0;
  const IntLimits limits = LimitsOf(to);
  if (negative) {
    if (!IsSignedType(to)) return 0;
    return Signed(bits) < limits.lo_bits ? static_cast<uint64_t>(limits.lo_bits) : bits;
  }
  // u64's limit bits are -1: its maximum is 2^64 - 1 as an unsigned value.
  const uint64_t max_value = static_cast<uint64_t>(limits.hi_bits);
  return bits > max_value ? max_value : bits;
}

class Evaluator {
 public:
  Evaluator(const Kernel& kernel, std::span<void* const> args)
      : kernel_(kernel),
        args_(args),
        values_(kernel.exprs.size()),
        stamp_(kernel.exprs.size(), 0),
        vars_(static_cast<size_t>(kernel.num_vars), 0),
        accs_(static_cast<size_t>(kernel.num_vars)) {}

  absl::Status Run(int64_t begin, int64_t end) {
    if (args_.size() != kernel_.args.size()) {
      return absl::InvalidArgumentError(absl::StrCat("kernel ", kernel_.name, ": got ",
                                                     args_.size(), " buffers for ",
                                                     kernel_.args.size(), " args"));
    }
    for (int64_t gid = std::max<int64_t>(begin, 0);
         gid < std::min(end, kernel_.parallel_extent) && status_.ok(); ++gid) {
      vars_[kGid] = gid;
      RunBlock(kernel_.body);
    }
    return status_;
  }

 private:
  void Fail(std::string message) {
    if (status_.ok()) {
      status_ = absl::InternalError(absl::StrCat("kernel ", kernel_.name, ": ", message));
    }
  }

  // One statement's evaluation: a fresh memo so Loads read memory as of this statement.
  Scalar EvalFresh(ValueId id) {
    ++epoch_;
    return Eval(id);
  }

  void RunBlock(const std::vector<Stmt>& block) {
    for (const Stmt& stmt : block) {
      if (!status_.ok()) return;
      switch (stmt.kind) {
        case StmtKind::kLet:
          EvalFresh(stmt.value);
          break;
        case StmtKind::kStore: {
          ++epoch_;
          if (stmt.predicate != kNoValue && Eval(stmt.predicate).bits == 0) break;
          const int64_t index = Signed(Eval(stmt.index).bits);
          const Scalar value = Eval(stmt.value);
          StoreElement(stmt.arg, index, value);
          break;
        }
        case StmtKind::kLoop:
          for (int64_t i = 0; i < stmt.extent && status_.ok(); ++i) {
            vars_[static_cast<size_t>(stmt.var)] = i;
            RunBlock(stmt.body);
          }
          break;
        case StmtKind::kReduce:
          RunReduce(stmt);
          break;
      }
    }
  }

  void RunReduce(const Stmt& stmt) {
    const ScalarType type = kernel_.expr(stmt.value).type;
    const bool arg_kind =
        stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin;
    Scalar acc = arg_kind ? Scalar{} : EvalFresh(stmt.init);
    Scalar best;  // argmax/argmin: the best value so far.
    int64_t best_index = 0;
    for (int64_t i = 0; i < stmt.extent && status_.ok(); ++i) {
      vars_[static_cast<size_t>(stmt.var)] = i;
      RunBlock(stmt.body);
      const Scalar v = EvalFresh(stmt.value);
      if (arg_kind) {
        if (i == 0) {
          best = v;
          continue;
        }
        const bool want_max = stmt.reduce_kind == ReduceKind::kArgMax;
        bool better;
        if (IsFloatType(type)) {
          better =
              !std::isnan(best.f) && (std::isnan(v.f) || (want_max ? v.f > best.f : v.f < best.f));
        } else if (IsSignedType(type)) {
          better =
              want_max ? Signed(v.bits) > Signed(best.bits) : Signed(v.bits) < Signed(best.bits);
        } else {
          better = want_max ? v.bits > best.bits : v.bits < best.bits;
        }
        if (better) {
          best = v;
          best_index = i;
        }
        continue;
      }
      ExprOp combine = ExprOp::kAdd;
      switch (stmt.reduce_kind) {
        case ReduceKind::kProd:
          combine = ExprOp::kMul;
          break;
        case ReduceKind::kMax:
          combine = ExprOp::kMax;
          break;
        case ReduceKind::kMin:
          combine = ExprOp::kMin;
          break;
        default:
          break;
      }
      acc = Apply(combine, type, type, {acc, v, Scalar{}});
    }
    if (arg_kind) acc.bits = static_cast<uint64_t>(best_index);
    accs_[static_cast<size_t>(stmt.var)] = acc;
  }

  const std::byte* Buffer(ArgId arg) const {
    return static_cast<const std::byte*>(args_[static_cast<size_t>(arg)]);
  }

  bool CheckIndex(ArgId arg, int64_t index, const char* what) {
    if (arg < 0 || static_cast<size_t>(arg) >= kernel_.args.size()) {
      Fail(absl::StrCat(what, " of a missing arg ", arg));
      return false;
    }
    const int64_t n = kernel_.args[static_cast<size_t>(arg)].num_elements;
    if (index < 0 || index >= n) {
      Fail(absl::StrCat(what, " arg", arg, "[", index, "] out of range (", n, " elements)"));
      return false;
    }
    return true;
  }

  Scalar LoadElement(ArgId arg, int64_t index) {
    Scalar s;
    if (!CheckIndex(arg, index, "load")) return s;
    const std::byte* p = Buffer(arg);
    switch (kernel_.args[static_cast<size_t>(arg)].dtype) {
      case ir::DType::kF32: {
        float v;
        std::memcpy(&v, p + index * 4, 4);
        s.f = v;
        break;
      }
      case ir::DType::kF64:
        std::memcpy(&s.f, p + index * 8, 8);
        break;
      case ir::DType::kF16:
      case ir::DType::kBF16: {
        uint16_t v;
        std::memcpy(&v, p + index * 2, 2);
        s.f = kernel_.args[static_cast<size_t>(arg)].dtype == ir::DType::kF16
                  ? ir::HalfToFloat(v)
                  : ir::BFloat16ToFloat(v);
        break;
      }
      case ir::DType::kI8:
        s.bits = static_cast<uint64_t>(static_cast<int64_t>(LoadAs<int8_t>(p, index)));
        break;
      case ir::DType::kI16:
        s.bits = static_cast<uint64_t>(static_cast<int64_t>(LoadAs<int16_t>(p, index)));
        break;
      case ir::DType::kI32:
        s.bits = static_cast<uint64_t>(static_cast<int64_t>(LoadAs<int32_t>(p, index)));
        break;
      case ir::DType::kI64:
        s.bits = static_cast<uint64_t>(LoadAs<int64_t>(p, index));
        break;
      case ir::DType::kU8:
        s.bits = LoadAs<uint8_t>(p, index);
        break;
      case ir::DType::kU16:
        s.bits = LoadAs<uint16_t>(p, index);
        break;
      case ir::DType::kU32:
        s.bits = LoadAs<uint32_t>(p, index);
        break;
      case ir::DType::kU64:
        s.bits = LoadAs<uint64_t>(p, index);
        break;
      case ir::DType::kBool:
        s.bits = static_cast<uint8_t>(p[index]) != 0 ? 1 : 0;
        break;
    }
    return s;
  }

  void StoreElement(ArgId arg, int64_t index, Scalar s) {
    if (!CheckIndex(arg, index, "store")) return;
    std::byte* p = static_cast<std::byte*>(args_[static_cast<size_t>(arg)]);
    switch (kernel_.args[static_cast<size_t>(arg)].dtype) {
      case ir::DType::kF32: {
        const auto v = static_cast<float>(s.f);
        std::memcpy(p + index * 4, &v, 4);
        break;
      }
      case ir::DType::kF64:
        std::memcpy(p + index * 8, &s.f, 8);
        break;
      case ir::DType::kF16: {
        const uint16_t v = ir::FloatToHalf(static_cast<float>(s.f));
        std::memcpy(p + index * 2, &v, 2);
        break;
      }
      case ir::DType::kBF16: {
        const uint16_t v = ir::FloatToBFloat16(static_cast<float>(s.f));
        std::memcpy(p + index * 2, &v, 2);
        break;
      }
      case ir::DType::kI8:
      case ir::DType::kU8:
        StoreAs<uint8_t>(p, index, s.bits);
        break;
      case ir::DType::kI16:
      case ir::DType::kU16:
        StoreAs<uint16_t>(p, index, s.bits);
        break;
      case ir::DType::kI32:
      case ir::DType::kU32:
        StoreAs<uint32_t>(p, index, s.bits);
        break;
      case ir::DType::kI64:
      case ir::DType::kU64:
        StoreAs<uint64_t>(p, index, s.bits);
        break;
      case ir::DType::kBool:
        p[index] = static_cast<std::byte>(s.bits != 0 ? 1 : 0);
        break;
    }
  }

  Scalar Eval(ValueId id) {
    if (id < 0 || static_cast<size_t>(id) >= kernel_.exprs.size()) {
      Fail(absl::StrCat("reference to a missing value ", id));
      return {};
    }
    const auto slot = static_cast<size_t>(id);
    if (stamp_[slot] == epoch_) return values_[slot];
    const Expr& e = kernel_.expr(id);
    Scalar result;
    switch (e.op) {
      case ExprOp::kConst:
        if (IsFloatType(e.type)) {
          result.f = RoundTo(e.type, e.float_value);
        } else {
          result.bits = Normalize(e.type, static_cast<uint64_t>(e.int_value));
        }
        break;
      case ExprOp::kVar:
        result.bits = static_cast<uint64_t>(vars_[static_cast<size_t>(e.var)]);
        break;
      case ExprOp::kAccumulator:
        result = accs_[static_cast<size_t>(e.var)];
        break;
      case ExprOp::kLoad:
        result = LoadElement(e.arg, Signed(Eval(e.operands[0]).bits));
        break;
      default: {
        Scalar operands[3];
        ScalarType operand_type = e.type;
        for (size_t i = 0; i < e.operands.size() && i < 3; ++i) {
          operands[i] = Eval(e.operands[i]);
        }
        if (!e.operands.empty()) {
          // Select's first operand is the bool condition; its branches have the result type.
          operand_type = kernel_.expr(e.operands[e.op == ExprOp::kSelect ? 1 : 0]).type;
        }
        result = Apply(e.op, e.type, operand_type, {operands[0], operands[1], operands[2]});
        break;
      }
    }
    stamp_[slot] = epoch_;
    values_[slot] = result;
    return result;
  }

  // The pure ops. `type` is the result type, `in` the operands' type.
  static Scalar Apply(ExprOp op, ScalarType type, ScalarType in, std::array<Scalar, 3> x) {
    Scalar r;
    const bool is_float = IsFloatType(in);
    const double a = x[0].f, b = x[1].f;
    const uint64_t ua = x[0].bits, ub = x[1].bits;
    const int64_t sa = Signed(ua), sb = Signed(ub);
    const bool is_signed = IsSignedType(in);
    const auto set_float = [&](double v) { r.f = RoundTo(type, v); };
    const auto set_int = [&](uint64_t v) { r.bits = Normalize(type, v); };
    switch (op) {
      case ExprOp::kNeg:
        is_float ? set_float(-a) : set_int(0 - ua);
        break;
      case ExprOp::kAbs:
        if (is_float) {
          set_float(std::fabs(a));
        } else {
          set_int(is_signed && sa < 0 ? 0 - ua : ua);
        }
        break;
      case ExprOp::kSign:
        if (is_float) {
          set_float(a > 0 ? 1.0 : (a < 0 ? -1.0 : (std::isnan(a) ? a : 0.0)));
        } else if (is_signed) {
          set_int(sa > 0 ? 1 : (sa < 0 ? ~uint64_t{0} : 0));
        } else {
          set_int(ua > 0 ? 1 : 0);
        }
        break;
      case ExprOp::kExp:
        set_float(std::exp(a));
        break;
      case ExprOp::kLog:
        set_float(std::log(a));
        break;
      case ExprOp::kSqrt:
        set_float(std::sqrt(a));
        break;
      case ExprOp::kRsqrt:
        set_float(1.0 / std::sqrt(a));
        break;
      case ExprOp::kSin:
        set_float(std::sin(a));
        break;
      case ExprOp::kCos:
        set_float(std::cos(a));
        break;
      case ExprOp::kTanh:
        set_float(std::tanh(a));
        break;
      case ExprOp::kErf:
        set_float(std::erf(a));
        break;
      case ExprOp::kFloor:
        set_float(std::floor(a));
        break;
      case ExprOp::kCeil:
        set_float(std::ceil(a));
        break;
      case ExprOp::kRound:
        set_float(std::nearbyint(a));
        break;
      case ExprOp::kTrunc:
        set_float(std::trunc(a));
        break;
      case ExprOp::kReciprocal:
        set_float(1.0 / a);
        break;
      case ExprOp::kRoundToF16:
        r.f = ir::HalfToFloat(in == ScalarType::kF32 ? ir::FloatToHalf(static_cast<float>(a))
                                                     : ir::DoubleToHalf(a));
        break;
      case ExprOp::kRoundToBF16:
        r.f =
            ir::BFloat16ToFloat(in == ScalarType::kF32 ? ir::FloatToBFloat16(static_cast<float>(a))
                                                       : ir::DoubleToBFloat16(a));
        break;
      case ExprOp::kNot:
        set_int(in == ScalarType::kBool ? (ua == 0 ? 1 : 0) : ~ua);
        break;
      case ExprOp::kAdd:
        is_float ? set_float(a + b) : set_int(ua + ub);
        break;
      case ExprOp::kSub:
        is_float ? set_float(a - b) : set_int(ua - ub);
        break;
      case ExprOp::kMul:
        is_float ? set_float(a * b) : set_int(ua * ub);
        break;
      case ExprOp::kDiv:
        if (is_float) {
          set_float(a / b);
        } else if (!is_signed) {
          set_int(ub == 0 ? 0 : ua / ub);
        } else if (sb == 0) {
          set_int(0);
        } else if (sb == -1) {
          set_int(0 - ua);
        } else {
          const int64_t q = sa / sb;
          set_int(static_cast<uint64_t>(sa % sb != 0 && (sa < 0) != (sb < 0) ? q - 1 : q));
        }
        break;
      case ExprOp::kMod:
        if (is_float) {
          double m = std::fmod(a, b);
          if (m == 0) {
            m = std::copysign(0.0, b);
          } else if ((m < 0) != (b < 0)) {
            m += b;
          }
          set_float(m);
        } else if (!is_signed) {
          set_int(ub == 0 ? 0 : ua % ub);
        } else if (sb == 0 || sb == -1) {
          set_int(0);
        } else {
          const int64_t m = sa % sb;
          set_int(static_cast<uint64_t>(m != 0 && (m < 0) != (sb < 0) ? m + sb : m));
        }
        break;
      case ExprOp::kPow:
        set_float(std::pow(a, b));
        break;
      case ExprOp::kMax:
        if (is_float) {
          set_float(MaxNaN(a, b));
        } else {
          set_int(is_signed ? static_cast<uint64_t>(std::max(sa, sb)) : std::max(ua, ub));
        }
        break;
      case ExprOp::kMin:
        if (is_float) {
          set_float(MinNaN(a, b));
        } else {
          set_int(is_signed ? static_cast<uint64_t>(std::min(sa, sb)) : std::min(ua, ub));
        }
        break;
      case ExprOp::kEq:
      case ExprOp::kNe:
      case ExprOp::kLt:
      case ExprOp::kLe:
      case ExprOp::kGt:
      case ExprOp::kGe: {
        int order;  // -1, 0, 1, or 2 for unordered.
        if (is_float) {
          order = (std::isnan(a) || std::isnan(b)) ? 2 : (a < b ? -1 : (a > b ? 1 : 0));
        } else if (is_signed) {
          order = sa < sb ? -1 : (sa > sb ? 1 : 0);
        } else {
          order = ua < ub ? -1 : (ua > ub ? 1 : 0);
        }
        bool v = false;
        switch (op) {
          case ExprOp::kEq:
            v = order == 0;
            break;
          case ExprOp::kNe:
            v = order != 0;
            break;
          case ExprOp::kLt:
            v = order == -1;
            break;
          case ExprOp::kLe:
            v = order == -1 || order == 0;
            break;
          case ExprOp::kGt:
            v = order == 1;
            break;
          default:
            v = order == 1 || order == 0;
            break;
        }
        r.bits = v ? 1 : 0;
        break;
      }
      case ExprOp::kAnd:
        set_int(ua & ub);
        break;
      case ExprOp::kOr:
        set_int(ua | ub);
        break;
      case ExprOp::kXor:
        set_int(ua ^ ub);
        break;
      case ExprOp::kSelect:
        r = x[0].bits != 0 ? x[1] : x[2];
        break;
      case ExprOp::kCast:
        if (IsFloatType(type)) {
          if (is_float) {
            set_float(a);
          } else {
            set_float(is_signed ? static_cast<double>(sa) : static_cast<double>(ua));
          }
        } else if (is_float) {
          r.bits = Normalize(type, FloatToInt(a, type));
        } else {
          r.bits = Normalize(type, IntToInt(ua, in, type));
        }
        break;
      case ExprOp::kConvert:  // In range it truncates; outside, saturating is as good as any.
        r.bits = Normalize(type, FloatToInt(a, type));
        break;
      case ExprOp::kWrap:
        set_int(ua);
        break;
      case ExprOp::kBitcast:
        if (type == ScalarType::kF32) {
          r.f = std::bit_cast<float>(static_cast<uint32_t>(ua));
        } else if (type == ScalarType::kF64) {
          r.f = std::bit_cast<double>(ua);
        } else if (in == ScalarType::kF32) {
          set_int(std::bit_cast<uint32_t>(static_cast<float>(a)));
        } else if (in == ScalarType::kF64) {
          set_int(std::bit_cast<uint64_t>(a));
        } else {
          set_int(ua);
        }
        break;
      case ExprOp::kFma:
        set_float(std::fma(a, b, x[2].f));
        break;
      case ExprOp::kShl:
      case ExprOp::kShr: {
        const int bits = BitWidth(type);
        const uint64_t shift = ub;
        const uint64_t mask = bits == 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
        if (op == ExprOp::kShl) {
          set_int(shift >= static_cast<uint64_t>(bits) ? 0 : ua << shift);
        } else if (is_signed) {
          set_int(static_cast<uint64_t>(
              sa >> std::min<uint64_t>(shift, static_cast<uint64_t>(bits - 1))));
        } else {
          set_int(shift >= static_cast<uint64_t>(bits) ? 0 : (ua & mask) >> shift);
        }
        break;
      }
      case ExprOp::kUDiv:
      case ExprOp::kURem: {
        const int bits = BitWidth(type);
        const uint64_t mask = bits == 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
        const uint64_t na = ua & mask, nb = ub & mask;
        set_int(nb == 0 ? 0 : (op == ExprOp::kUDiv ? na / nb : na % nb));
        break;
      }
      default:
        break;
    }
    return r;
  }

  const Kernel& kernel_;
  std::span<void* const> args_;
  std::vector<Scalar> values_;
  std::vector<uint64_t> stamp_;
  uint64_t epoch_ = 1;
  std::vector<int64_t> vars_;
  std::vector<Scalar> accs_;
  absl::Status status_;
};

}  // namespace

absl::Status EvalKernel(const Kernel& kernel, std::span<void* const> args, int64_t begin,
                        int64_t end) {
  if (absl::Status s = VerifyKernel(kernel); !s.ok()) {
    return absl::InternalError(s.message());
  }
  return Evaluator(kernel, args).Run(begin, end);
}

absl::Status EvalKernel(const Kernel& kernel, std::span<void* const> args) {
  return EvalKernel(kernel, args, 0, kernel.parallel_extent);
}

absl::Status EvalKernelOnTensors(const Kernel& kernel, std::span<ir::TensorData* const> args) {
  if (args.size() != kernel.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("kernel ", kernel.name, ": got ", args.size(),
                                                   " tensors for ", kernel.args.size(), " args"));
  }
  std::vector<void*> buffers;
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArg& arg = kernel.args[i];
    if (args[i]->dtype() != arg.dtype || args[i]->num_elements() != arg.num_elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel ", kernel.name, ": arg", i, " is ", ir::DTypeName(arg.dtype), "[",
                       arg.num_elements, "], got ", ir::DTypeName(args[i]->dtype()), "[",
                       args[i]->num_elements(), "]"));
    }
    buffers.push_back(args[i]->data());
  }
  return EvalKernel(kernel, buffers);
}

}  // namespace kiln::codegen
