#include "codegen/c_render.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/legalize.h"
#include "codegen/scalar_limits.h"

namespace kiln::codegen {
namespace {

bool IsTopLevelCooperativeReduce(const Stmt& stmt) { return stmt.kind == StmtKind::kReduce; }

class Renderer {
 public:
  Renderer(const Kernel& kernel, const CDialect& dialect, const RenderOptions& options,
           const LegalizeOptions& legalize)
      : k_(kernel),
        d_(dialect),
        options_(options),
        legalize_(legalize),
        name_(kernel.exprs.size()),
        defined_(kernel.exprs.size(), false),
        loads_arg_(kernel.exprs.size()) {
    // Which args each expression loads (transitively), to forget values across stores.
    for (size_t v = 0; v < k_.exprs.size(); ++v) {
      const Expr& e = k_.exprs[v];
      std::set<ArgId> args;
      if (e.op == ExprOp::kLoad) args.insert(e.arg);
      for (ValueId o : e.operands) {
        args.insert(loads_arg_[static_cast<size_t>(o)].begin(),
                    loads_arg_[static_cast<size_t>(o)].end());
      }
      loads_arg_[v].assign(args.begin(), args.end());
    }
  }

  absl::StatusOr<RenderedKernel> Run() {
    scopes_.emplace_back();
    if (options_.cooperative) {
      if (options_.workgroup_size <= 0 ||
          (options_.workgroup_size & (options_.workgroup_size - 1)) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel ", k_.name, ": workgroup size must be a power of two"));
      }
      for (const Stmt& stmt : k_.body) {
        if (absl::Status s = CooperativeStmt(stmt, 1); !s.ok()) return s;
      }
    } else {
      if (absl::Status s = Block(k_.body, 1); !s.ok()) return s;
    }
    if (!error_.ok()) return error_;
    RenderedKernel out;
    for (const std::string& name : helper_order_) absl::StrAppend(&out.helpers, helpers_[name]);
    out.shared_decls = shared_;
    out.body = body_;
    out.uses_subgroups = uses_subgroups_;
    return out;
  }

 private:
  // ---- Output --------------------------------------------------------------------------------

  void Line(int indent, const std::string& text) {
    body_.append(static_cast<size_t>(2 * indent), ' ');
    body_ += text;
    body_ += '\n';
  }

  void Fail(absl::Status status) {
    if (error_.ok()) error_ = std::move(status);
  }

  std::string T(ScalarType type) const { return d_.TypeName(type); }
  std::string Fn() const { return d_.FunctionPrefix(); }

  // Adds a helper function (once) produced by `make`.
  const std::string& Helper(const std::string& name, const std::function<std::string()>& make) {
    if (helpers_.count(name) == 0) {
      std::string text = make();  // may request other helpers first
      helpers_[name] = std::move(text);
      helper_order_.push_back(name);
    }
    return name;
  }

  // ---- Literals ------------------------------------------------------------------------------

  std::string Literal(ScalarType type, int64_t int_value, double float_value) const {
    if (IsFloatType(type)) {
      const double v = type == ScalarType::kF32
                           ? static_cast<double>(static_cast<float>(float_value))
                           : float_value;
      if (std::isfinite(v)) return d_.FloatLiteral(type, v);
      if (type == ScalarType::kF32) {
        const float f = static_cast<float>(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        return d_.Bitcast(ScalarType::kU32, type,
                          d_.IntLiteral(ScalarType::kU32, static_cast<int64_t>(bits)));
      }
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return d_.Bitcast(ScalarType::kU64, type,
                        d_.IntLiteral(ScalarType::kU64, static_cast<int64_t>(bits)));
    }
    switch (type) {
      case ScalarType::kBool:
        return int_value != 0 ? "true" : "false";
      case ScalarType::kU8:
        return d_.IntLiteral(type, int_value & 0xff);
      case ScalarType::kU16:
        return d_.IntLiteral(type, int_value & 0xffff);
      case ScalarType::kI8:
        return d_.IntLiteral(type, static_cast<int8_t>(int_value));
      case ScalarType::kI16:
        return d_.IntLiteral(type, static_cast<int16_t>(int_value));
      case ScalarType::kI32:
        return d_.IntLiteral(type, static_cast<int32_t>(int_value));
      case ScalarType::kU32:
        return d_.IntLiteral(type, int_value & 0xffffffffLL);
      default:
        return d_.IntLiteral(type, int_value);
    }
  }
  std::string Zero(ScalarType type) const { return Literal(type, 0, 0.0); }
  std::string One(ScalarType type) const { return Literal(type, 1, 1.0); }

  // ---- Expressions ---------------------------------------------------------------------------

  std::string VarName(VarId var) const {
    if (var == kGid) return "gid";
    return absl::StrCat(var_is_reduce_.count(var) ? "r" : "i", var);
  }

  // The text of `v`, defining it (and its operands) in the current scope first if needed.
  std::string Value(ValueId v, int indent) {
    const Expr& e = k_.expr(v);
    switch (e.op) {
      case ExprOp::kConst:
        return Literal(e.type, e.int_value, e.float_value);
      case ExprOp::kVar:
        return VarName(e.var);
      case ExprOp::kAccumulator:
        return absl::StrCat("acc", e.var);
      default:
        break;
    }
    const size_t slot = static_cast<size_t>(v);
    if (defined_[slot]) return name_[slot];
    std::vector<std::string> x;
    for (ValueId o : e.operands) x.push_back(Value(o, indent));
    const std::string text = Compute(e, x);
    std::string name = absl::StrCat("v", v);
    if (int& count = definitions_[v]; count++ > 0) absl::StrAppend(&name, "_", count);
    Line(indent, absl::StrCat(T(e.type), " ", name, " = ", text, ";"));
    name_[slot] = name;
    defined_[slot] = true;
    scopes_.back().push_back(v);
    return name;
  }

  // Forgets every defined value that loads `arg` (after a store to it).
  void ForgetLoadsOf(ArgId arg) {
    for (std::vector<ValueId>& scope : scopes_) {
      for (ValueId v : scope) {
        const std::vector<ArgId>& args = loads_arg_[static_cast<size_t>(v)];
        if (std::find(args.begin(), args.end(), arg) != args.end()) {
          defined_[static_cast<size_t>(v)] = false;
        }
      }
    }
  }

  void OpenScope() { scopes_.emplace_back(); }
  void CloseScope() {
    for (ValueId v : scopes_.back()) defined_[static_cast<size_t>(v)] = false;
    scopes_.pop_back();
  }

  ScalarType OperandType(const Expr& e) const {
    if (e.operands.empty()) return e.type;
    return k_.expr(e.operands[e.op == ExprOp::kSelect ? 1 : 0]).type;
  }

  // u8, u16, i8 and i16 values live in the dialect's 32-bit integer of their signedness:
  // results of arithmetic wrap to the type's width (a signed one sign-extended again), with
  // unsigned arithmetic only, which no dialect leaves undefined.
  std::string WrapNarrow(ScalarType type, const std::string& x) const {
    switch (type) {
      case ScalarType::kU8:
        return absl::StrCat("((", x, ") & 255u)");
      case ScalarType::kU16:
        return absl::StrCat("((", x, ") & 65535u)");
      case ScalarType::kI8:
      case ScalarType::kI16: {
        const bool i8 = type == ScalarType::kI8;
        const std::string low =
            absl::StrCat("((", d_.Convert(ScalarType::kU32, x), " & ", i8 ? "255u" : "65535u",
                         ") ^ ", i8 ? "128u" : "32768u", ")");
        return absl::StrCat("(", d_.Convert(type, low), " - ", i8 ? "128" : "32768", ")");
      }
      default:
        return x;
    }
  }

  std::string Unsupported(const Expr& e, ScalarType type) {
    Fail(absl::UnimplementedError(absl::StrCat(
        "kernel ", k_.name, ": ", d_.Name(), " has no ", ExprOpName(e.op), " for ",
        ScalarTypeName(type), " (", ExprOpName(e.op), " on ", ScalarTypeName(type),
        " cannot be compiled for this target; compute it in f32 or use the Cpu backend)")));
    return Zero(e.type);
  }

  std::string Compute(const Expr& e, const std::vector<std::string>& x) {
    const ScalarType in = OperandType(e);
    const ScalarType out = e.type;
    const bool is_float = IsFloatType(in);
    const bool is_signed = IsSignedType(in);
    switch (e.op) {
      case ExprOp::kLoad:
        return d_.Load(k_, e.arg, x[0]);
      case ExprOp::kNeg:
        if (is_float) return absl::StrCat("(-", x[0], ")");
        if (is_signed) return WrapNarrow(in, d_.SignedArith("-", in, Zero(in), x[0]));
        return WrapNarrow(in, absl::StrCat(Zero(in), " - ", x[0]));
      case ExprOp::kAbs:
        if (is_float) return absl::StrCat("abs(", x[0], ")");
        if (is_signed) {
          return WrapNarrow(in, absl::StrCat("(", x[0], " < ", Zero(in), " ? ", Zero(in), " - ",
                                             x[0], " : ", x[0], ")"));
        }
        return x[0];
      case ExprOp::kSign:
        if (is_float) {
          return absl::StrCat("(", x[0], " > ", Zero(in), " ? ", One(in), " : (", x[0], " < ",
                              Zero(in), " ? ", Literal(in, -1, -1.0), " : (", d_.IsNan(x[0]), " ? ",
                              x[0], " : ", Zero(in), ")))");
        }
        if (is_signed) {
          return absl::StrCat("(", x[0], " > ", Zero(in), " ? ", One(in), " : (", x[0], " < ",
                              Zero(in), " ? ", Literal(in, -1, -1.0), " : ", Zero(in), "))");
        }
        return absl::StrCat("(", x[0], " > ", Zero(in), " ? ", One(in), " : ", Zero(in), ")");
      case ExprOp::kExp:
      case ExprOp::kLog:
      case ExprOp::kSin:
      case ExprOp::kCos:
      case ExprOp::kTanh:
      case ExprOp::kErf:
      case ExprOp::kSqrt:
      case ExprOp::kFloor:
      case ExprOp::kCeil:
      case ExprOp::kRound:
      case ExprOp::kTrunc: {
        std::string call = d_.MathCall(e.op, in, x[0]);
        if (call.empty()) return Unsupported(e, in);
        return call;
      }
      case ExprOp::kRsqrt: {
        // As the interpreter: 1 / sqrt in f64, rounded once to f32 (where f64 exists).
        if (in == ScalarType::kF32 && d_.HasFloat64()) {
          const std::string wide =
              d_.MathCall(ExprOp::kSqrt, ScalarType::kF64, d_.Convert(ScalarType::kF64, x[0]));
          return d_.Convert(in, absl::StrCat("(", One(ScalarType::kF64), " / ", wide, ")"));
        }
        std::string call = d_.MathCall(ExprOp::kSqrt, in, x[0]);
        if (call.empty()) return Unsupported(e, in);
        return absl::StrCat("(", One(in), " / ", call, ")");
      }
      case ExprOp::kReciprocal:
        return absl::StrCat("(", One(in), " / ", x[0], ")");
      case ExprOp::kNot:
        if (in == ScalarType::kBool) return absl::StrCat("(!", x[0], ")");
        return WrapNarrow(in, absl::StrCat("~", x[0]));
      case ExprOp::kAdd:
        // bool arithmetic normalises to 0/1 like kernel_eval: + is or, * is and, - is xor.
        if (in == ScalarType::kBool) return absl::StrCat("(", x[0], " || ", x[1], ")");
        if (is_signed) return WrapNarrow(in, d_.SignedArith("+", in, x[0], x[1]));
        return WrapNarrow(in, absl::StrCat("(", x[0], " + ", x[1], ")"));
      case ExprOp::kSub:
        if (in == ScalarType::kBool) return absl::StrCat("(", x[0], " != ", x[1], ")");
        if (is_signed) return WrapNarrow(in, d_.SignedArith("-", in, x[0], x[1]));
        return WrapNarrow(in, absl::StrCat("(", x[0], " - ", x[1], ")"));
      case ExprOp::kMul:
        if (in == ScalarType::kBool) return absl::StrCat("(", x[0], " && ", x[1], ")");
        if (is_signed) return WrapNarrow(in, d_.SignedArith("*", in, x[0], x[1]));
        return WrapNarrow(in, absl::StrCat("(", x[0], " * ", x[1], ")"));
      case ExprOp::kDiv:  // Integer div/mod arrive legalized as udiv/urem (legalize.h).
        if (!is_float) return Unsupported(e, in);
        return absl::StrCat("(", x[0], " / ", x[1], ")");
      case ExprOp::kMod:
        if (!is_float) return Unsupported(e, in);
        return absl::StrCat(FloatModHelper(in), "(", x[0], ", ", x[1], ")");
      case ExprOp::kPow: {
        const std::string helper = PowHelper(in);
        if (helper.empty()) return Unsupported(e, in);
        return absl::StrCat(helper, "(", x[0], ", ", x[1], ")");
      }
      case ExprOp::kMax:
      case ExprOp::kMin:
        return MaxMin(e.op == ExprOp::kMax, in, x[0], x[1]);
      case ExprOp::kEq:
      case ExprOp::kNe:
      case ExprOp::kLt:
      case ExprOp::kLe:
      case ExprOp::kGt:
      case ExprOp::kGe: {
        std::string a = x[0], b = x[1];
        if (in == ScalarType::kBool) {
          a = absl::StrCat("(", a, " ? 1u : 0u)");
          b = absl::StrCat("(", b, " ? 1u : 0u)");
        }
        // `!=` may compile to an ordered compare; !(a == b) is true for NaN as required.
        const char* op = e.op == ExprOp::kEq   ? " == "
                         : e.op == ExprOp::kLt ? " < "
                         : e.op == ExprOp::kLe ? " <= "
                         : e.op == ExprOp::kGt ? " > "
                         : e.op == ExprOp::kGe ? " >= "
                                               : " == ";
        if (e.op == ExprOp::kNe) return absl::StrCat("(!(", a, op, b, "))");
        return absl::StrCat("(", a, op, b, ")");
      }
      case ExprOp::kAnd:
        return absl::StrCat("(", x[0], in == ScalarType::kBool ? " && " : " & ", x[1], ")");
      case ExprOp::kOr:
        return absl::StrCat("(", x[0], in == ScalarType::kBool ? " || " : " | ", x[1], ")");
      case ExprOp::kXor:
        return absl::StrCat("(", x[0], in == ScalarType::kBool ? " != " : " ^ ", x[1], ")");
      case ExprOp::kSelect:
        return absl::StrCat("(", x[0], " ? ", x[1], " : ", x[2], ")");
      case ExprOp::kCast:
        if (!IsLegal(k_, e, legalize_)) return Unsupported(e, in);
        return Cast(in, out, x[0]);
      case ExprOp::kConvert:
        if (!IsFloatType(in) || IsFloatType(out) || out == ScalarType::kBool) {
          return Unsupported(e, in);
        }
        return d_.Convert(out, x[0]);
      case ExprOp::kWrap:
        return Wrap(in, out, x[0]);
      case ExprOp::kBitcast:
        if (in == out) return x[0];
        if (IsFloatType(in) && IsFloatType(out)) return Unsupported(e, in);
        if (!IsFloatType(in) && !IsFloatType(out)) return d_.Convert(out, x[0]);
        return d_.Bitcast(in, out, x[0]);
      case ExprOp::kFma:
        return d_.FmaCall(x[0], x[1], x[2]);
      case ExprOp::kShl:
      case ExprOp::kShr:
        return Shift(e.op == ExprOp::kShl, in, x[0], x[1]);
      case ExprOp::kUDiv:
      case ExprOp::kURem:
        return UnsignedDiv(e.op == ExprOp::kURem, in, x[0], x[1]);
      case ExprOp::kRoundToF16:
      case ExprOp::kRoundToBF16:
        return absl::StrCat(RoundHalfHelper(e.op == ExprOp::kRoundToBF16, in), "(", x[0], ")");
      case ExprOp::kConst:
      case ExprOp::kVar:
      case ExprOp::kAccumulator:
        break;
    }
    Fail(
        absl::InternalError(absl::StrCat("kernel ", k_.name, ": unhandled op ", ExprOpName(e.op))));
    return Zero(out);
  }

  std::string MaxMin(bool is_max, ScalarType type, const std::string& a, const std::string& b) {
    if (IsFloatType(type)) {
      // The interpreter's NaN-propagating max/min: a if a is NaN or b is no better, else b.
      return absl::StrCat("((", d_.IsNan(a), " || ", b, is_max ? " <= " : " >= ", a, ") ? ", a,
                          " : ", b, ")");
    }
    if (type == ScalarType::kBool) {
      return absl::StrCat("(", a, is_max ? " || " : " && ", b, ")");
    }
    return absl::StrCat("(", a, is_max ? " >= " : " <= ", b, " ? ", a, " : ", b, ")");
  }

  static std::string Suffix(ScalarType type) { return ScalarTypeName(type); }

  // The interpreter's float mod: C's fmod (exact), then moved to the divisor's sign (floored
  // modulo). fmod by repeated exact subtraction of |b| scaled by powers of two (each step
  // subtracts s with s <= r < 2 s, which is exact), at most the exponent difference of steps.
  std::string FloatModHelper(ScalarType type) {
    const std::string name = absl::StrCat("kiln_fmod_", Suffix(type));
    return Helper(name, [&] {
      const std::string t = T(type), z = Zero(type), half = Literal(type, 0, 0.5);
      return absl::StrCat(Fn(), t, " ", name, "(", t, " a, ", t, " b) {\n", "  if (", d_.IsNan("a"),
                          " || ", d_.IsNan("b"), " || b == ", z, " || ", d_.IsNan("(a - a)"),
                          ") return (a - a) / (a - a);\n", "  ", t, " m = abs(b);\n", "  ", t,
                          " r = abs(a);\n", "  if (!", d_.IsNan("(b - b)"), ") {\n",
                          "    for (int i = 0; i < 2200 && r >= m; ++i) {\n", "      int er, em;\n",
                          "      frexp(r, er);\n", "      frexp(m, em);\n", "      ", t,
                          " sub = ldexp(m, er - em);\n", "      if (sub > r) sub = sub * ", half,
                          ";\n", "      r = r - sub;\n", "    }\n  }\n", "  if (a < ", z,
                          ") r = -r;\n", "  if (r == ", z, ") return b < ", z, " ? -", z, " : ", z,
                          ";\n", "  if ((r < ", z, ") != (b < ", z,
                          ")) r = r + b;\n  return r;\n}\n");
    });
  }

  // pow with C's special values: the dialect's pow for a positive finite base, then the sign
  // for negative bases and integer exponents, and the zero/one/infinity cases.
  std::string PowHelper(ScalarType type) {
    const std::string probe = d_.PowCall(type, "x", "y");
    if (probe.empty()) return "";
    const std::string name = absl::StrCat("kiln_pow_", Suffix(type));
    return Helper(name, [&] {
      const std::string t = T(type), z = Zero(type), one = One(type), two = Literal(type, 2, 2.0);
      const std::string inf = Literal(type, 0, std::numeric_limits<double>::infinity());
      const std::string trunc_b = d_.MathCall(ExprOp::kTrunc, type, "b");
      const std::string trunc_half =
          d_.MathCall(ExprOp::kTrunc, type, absl::StrCat("(b / ", two, ")"));
      return absl::StrCat(
          Fn(), t, " ", name, "(", t, " a, ", t, " b) {\n", "  if (b == ", z, " || a == ", one,
          ") return ", one, ";\n", "  if (", d_.IsNan("a"), " || ", d_.IsNan("b"),
          ") return a + b;\n", "  bool b_inf = ", d_.IsNan("(b - b)"), ";\n",
          "  bool b_int = !b_inf && ", trunc_b, " == b;\n", "  bool b_odd = b_int && ", trunc_half,
          " * ", two, " != b;\n", "  bool neg = a < ", z, " || (a == ", z, " && ", one, " / a < ",
          z, ");\n", "  ", t, " m = abs(a);\n", "  if (b_inf) {\n", "    if (m == ", one,
          ") return ", one, ";\n", "    return ((m > ", one, ") == (b > ", z, ")) ? ", inf, " : ",
          z, ";\n  }\n", "  ", t, " r;\n", "  if (m == ", z, ") r = b < ", z, " ? ", inf, " : ", z,
          ";\n", "  else if (", d_.IsNan("(m - m)"), ") r = b < ", z, " ? ", z, " : ", inf, ";\n",
          "  else {\n", "    if (neg && !b_int) return (m - m) / (m - m);\n",
          "    r = ", d_.PowCall(type, "m", "b"), ";\n  }\n",
          "  return (neg && b_odd) ? -r : r;\n}\n");
    });
  }

  std::string Shift(bool left, ScalarType type, const std::string& a, const std::string& b) {
    const int bits = BitWidth(type);
    const std::string limit = Literal(type, bits, 0);
    std::string out_of_range = absl::StrCat(b, " >= ", limit);
    if (IsSignedType(type))
      out_of_range = absl::StrCat("(", b, " < ", Zero(type), " || ", out_of_range, ")");
    if (left) {
      return WrapNarrow(
          type, absl::StrCat("(", out_of_range, " ? ", Zero(type), " : (", a, " << ", b, "))"));
    }
    if (IsSignedType(type)) {
      return absl::StrCat("(", a, " >> (", out_of_range, " ? ", Literal(type, bits - 1, 0), " : ",
                          b, "))");
    }
    return absl::StrCat("(", out_of_range, " ? ", Zero(type), " : (", a, " >> ", b, "))");
  }

  std::string UnsignedDiv(bool rem, ScalarType type, const std::string& a, const std::string& b) {
    const char* op = rem ? " % " : " / ";
    if (!IsSignedType(type)) {
      return absl::StrCat("(", b, " == ", Zero(type), " ? ", Zero(type), " : ", a, op, b, ")");
    }
    const ScalarType u = BitWidth(type) == 64 ? ScalarType::kU64 : ScalarType::kU32;
    return absl::StrCat("(", b, " == ", Zero(type), " ? ", Zero(type), " : ",
                        d_.Convert(type, absl::StrCat(d_.Convert(u, a), op, d_.Convert(u, b))),
                        ")");
  }

  // A legal Cast (legalize.h): float -> float, or an integer (not bool) -> float; 64-bit
  // integers reach f32 through f64 in the kernel already.
  std::string Cast(ScalarType from, ScalarType to, const std::string& x) {
    if (from == to) return x;
    return d_.Convert(to, x);
  }

  std::string Wrap(ScalarType from, ScalarType to, const std::string& x) {
    if (from == to) return x;
    if (from == ScalarType::kBool)
      return absl::StrCat("(", x, " ? ", One(to), " : ", Zero(to), ")");
    if (to == ScalarType::kBool) return absl::StrCat("(", x, " != ", Zero(from), ")");
    if (BitWidth(to) < 32) return WrapNarrow(to, d_.Convert(ScalarType::kU32, x));
    if (IsSignedType(from) && BitWidth(from) <= 32 && BitWidth(to) == 64) {
      return d_.SignExtend32(to, x);
    }
    return d_.Convert(to, x);
  }

  std::string RoundHalfHelper(bool bf16, ScalarType type) {
    const std::string name =
        absl::StrCat(bf16 ? "kiln_round_bf16_" : "kiln_round_f16_", Suffix(type));
    return Helper(name, [&] {
      Helper("kiln_half_helpers", [&] { return HalfHelpers(d_); });
      const std::string tf = T(ScalarType::kF32), tu = T(ScalarType::kU32);
      const std::string to_bits = bf16 ? "kiln_f32_to_bf16" : "kiln_f32_to_f16";
      const std::string from_bits = bf16 ? "kiln_bf16_to_f32" : "kiln_f16_to_f32";
      if (type == ScalarType::kF32) {
        return absl::StrCat(Fn(), tf, " ", name, "(", tf, " x) { return ", from_bits, "(", to_bits,
                            "(x)); }\n");
      }
      // f64: round to f32 with round-to-odd (24 bits >= 11 + 2), then once to the 16-bit type.
      const std::string td = T(ScalarType::kF64);
      return absl::StrCat(
          Fn(), td, " ", name, "(", td, " x) {\n", "  ", tf,
          " f = ", d_.Convert(ScalarType::kF32, "x"), ";\n", "  if (!", d_.IsNan("x"), " && ",
          d_.Convert(ScalarType::kF64, "f"), " != x && !", d_.IsNan(absl::StrCat("(f - f)")),
          ") {\n", "    ", tu, " bits = ", d_.Bitcast(ScalarType::kF32, ScalarType::kU32, "f"),
          ";\n", "    if ((bits & 1u) == 0u) {\n", "      if (abs(",
          d_.Convert(ScalarType::kF64, "f"),
          ") > abs(x)) bits = bits - 1u; else bits = bits + 1u;\n",
          "      f = ", d_.Bitcast(ScalarType::kU32, ScalarType::kF32, "bits"), ";\n    }\n  }\n",
          "  return ", d_.Convert(ScalarType::kF64, absl::StrCat(from_bits, "(", to_bits, "(f))")),
          ";\n}\n");
    });
  }

  // ---- Statements ----------------------------------------------------------------------------

  absl::Status Block(const std::vector<Stmt>& block, int indent) {
    for (const Stmt& stmt : block) {
      if (absl::Status s = Statement(stmt, indent); !s.ok()) return s;
      if (!error_.ok()) return error_;
    }
    return absl::OkStatus();
  }

  absl::Status Statement(const Stmt& stmt, int indent) {
    switch (stmt.kind) {
      case StmtKind::kLet:
        Value(stmt.value, indent);
        return absl::OkStatus();
      case StmtKind::kStore:
        return StoreStmt(stmt, indent);
      case StmtKind::kLoop: {
        const std::string v = VarName(stmt.var);
        Line(indent,
             absl::StrCat("for (", T(ScalarType::kI64), " ", v, " = ", Zero(ScalarType::kI64), "; ",
                          v, " < ", Literal(ScalarType::kI64, stmt.extent, 0), "; ++", v, ") {"));
        OpenScope();
        absl::Status s = Block(stmt.body, indent + 1);
        CloseScope();
        Line(indent, "}");
        return s;
      }
      case StmtKind::kReduce:
        return SerialReduce(stmt, indent);
    }
    return absl::OkStatus();
  }

  absl::Status StoreStmt(const Stmt& stmt, int indent) {
    int inner = indent;
    if (stmt.predicate != kNoValue) {
      const std::string p = Value(stmt.predicate, indent);
      Line(indent, absl::StrCat("if (", p, ") {"));
      inner = indent + 1;
      OpenScope();
    }
    const std::string index = Value(stmt.index, inner);
    const std::string value = Value(stmt.value, inner);
    for (absl::string_view line : absl::StrSplit(d_.Store(k_, stmt.arg, index, value), '\n')) {
      if (!line.empty()) Line(inner, std::string(line));
    }
    if (stmt.predicate != kNoValue) {
      CloseScope();
      Line(indent, "}");
    }
    ForgetLoadsOf(stmt.arg);
    return absl::OkStatus();
  }

  // `better(v, best)` for argmax/argmin: the first NaN wins, then strictly greater/less.
  std::string ArgBetter(ReduceKind kind, ScalarType type, const std::string& v,
                        const std::string& best) {
    const bool want_max = kind == ReduceKind::kArgMax;
    std::string a = v, b = best;
    if (type == ScalarType::kBool) {
      a = absl::StrCat("(", v, " ? 1u : 0u)");
      b = absl::StrCat("(", best, " ? 1u : 0u)");
    }
    const std::string cmp = absl::StrCat(a, want_max ? " > " : " < ", b);
    if (IsFloatType(type)) {
      return absl::StrCat("(!", d_.IsNan(best), " && (", d_.IsNan(v), " || ", cmp, "))");
    }
    return absl::StrCat("(", cmp, ")");
  }

  std::string Combine(ReduceKind kind, ScalarType type, const std::string& acc,
                      const std::string& v) {
    switch (kind) {
      case ReduceKind::kSum:
        if (type == ScalarType::kBool) return absl::StrCat("(", acc, " || ", v, ")");
        return WrapNarrow(type, absl::StrCat("(", acc, " + ", v, ")"));
      case ReduceKind::kProd:
        if (type == ScalarType::kBool) return absl::StrCat("(", acc, " && ", v, ")");
        return WrapNarrow(type, absl::StrCat("(", acc, " * ", v, ")"));
      case ReduceKind::kMax:
        return MaxMin(true, type, acc, v);
      case ReduceKind::kMin:
        return MaxMin(false, type, acc, v);
      default:
        return acc;
    }
  }

  absl::Status SerialReduce(const Stmt& stmt, int indent) {
    var_is_reduce_.insert(stmt.var);
    const ScalarType type = k_.expr(stmt.value).type;
    const std::string acc = absl::StrCat("acc", stmt.var);
    const std::string r = VarName(stmt.var);
    const bool arg_kind =
        stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin;
    const std::string best = absl::StrCat("best", stmt.var);
    if (arg_kind) {
      Line(indent, absl::StrCat(T(ScalarType::kI64), " ", acc, " = ", Zero(ScalarType::kI64), ";"));
      Line(indent, absl::StrCat(T(type), " ", best, " = ", Zero(type), ";"));
    } else {
      const std::string init = Value(stmt.init, indent);
      Line(indent, absl::StrCat(T(type), " ", acc, " = ", init, ";"));
    }
    Line(indent,
         absl::StrCat("for (", T(ScalarType::kI64), " ", r, " = ", Zero(ScalarType::kI64), "; ", r,
                      " < ", Literal(ScalarType::kI64, stmt.extent, 0), "; ++", r, ") {"));
    OpenScope();
    if (absl::Status s = Block(stmt.body, indent + 1); !s.ok()) return s;
    const std::string v = Value(stmt.value, indent + 1);
    if (arg_kind) {
      Line(indent + 1, absl::StrCat("if (", r, " == ", Zero(ScalarType::kI64), " || ",
                                    ArgBetter(stmt.reduce_kind, type, v, best), ") { ", best, " = ",
                                    v, "; ", acc, " = ", r, "; }"));
    } else {
      Line(indent + 1, absl::StrCat(acc, " = ", Combine(stmt.reduce_kind, type, acc, v), ";"));
    }
    CloseScope();
    Line(indent, "}");
    return absl::OkStatus();
  }

  // ---- Cooperative (workgroup per gid) -------------------------------------------------------

  absl::Status CooperativeStmt(const Stmt& stmt, int indent) {
    switch (stmt.kind) {
      case StmtKind::kLet:
        Value(stmt.value, indent);
        return absl::OkStatus();
      case StmtKind::kStore: {
        Line(indent, absl::StrCat("if (lid == ", Zero(ScalarType::kI64), ") {"));
        OpenScope();
        absl::Status s = StoreStmt(stmt, indent + 1);
        CloseScope();
        Line(indent, "}");
        return s;
      }
      case StmtKind::kLoop: {
        const std::string v = VarName(stmt.var);
        Line(indent, absl::StrCat("for (", T(ScalarType::kI64), " ", v, " = lid; ", v, " < ",
                                  Literal(ScalarType::kI64, stmt.extent, 0), "; ", v, " += ",
                                  Literal(ScalarType::kI64, options_.workgroup_size, 0), ") {"));
        OpenScope();
        absl::Status s = Block(stmt.body, indent + 1);
        CloseScope();
        Line(indent, "}");
        return s;
      }
      case StmtKind::kReduce:
        return CooperativeReduce(stmt, indent);
    }
    return absl::OkStatus();
  }

  absl::Status CooperativeReduce(const Stmt& stmt, int indent) {
    var_is_reduce_.insert(stmt.var);
    const ScalarType type = k_.expr(stmt.value).type;
    const int wg = options_.workgroup_size;
    const std::string acc = absl::StrCat("acc", stmt.var);
    const std::string r = VarName(stmt.var);
    const std::string i64 = T(ScalarType::kI64);
    const bool arg_kind =
        stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin;
    const std::string best = absl::StrCat("best", stmt.var);
    // Partial results of this invocation. argmax/argmin: the invocation's best value and its
    // first index (-1 while it has none, so empty invocations never win).
    const std::string sval = absl::StrCat("red_v", stmt.var),
                      sidx = absl::StrCat("red_i", stmt.var);
    absl::StrAppend(&shared_, d_.SharedArray(type, sval, wg), "\n");
    if (arg_kind) absl::StrAppend(&shared_, d_.SharedArray(ScalarType::kI64, sidx, wg), "\n");
    if (arg_kind) {
      Line(indent, absl::StrCat(i64, " ", acc, " = ", Literal(ScalarType::kI64, -1, 0), ";"));
      Line(indent, absl::StrCat(T(type), " ", best, " = ", Zero(type), ";"));
    } else {
      const std::string init = Value(stmt.init, indent);
      // Max and min may repeat `init`; sums and products take it in invocation 0 only, the
      // others start from the identity.
      std::string start = init;
      if (stmt.reduce_kind == ReduceKind::kSum || stmt.reduce_kind == ReduceKind::kProd) {
        const std::string identity =
            type == ScalarType::kBool
                ? (stmt.reduce_kind == ReduceKind::kSum ? "false" : "true")
                : (stmt.reduce_kind == ReduceKind::kSum ? Zero(type) : One(type));
        start = absl::StrCat("(lid == ", Zero(ScalarType::kI64), " ? ", init, " : ", identity, ")");
      }
      Line(indent, absl::StrCat(T(type), " ", acc, " = ", start, ";"));
    }
    Line(indent, absl::StrCat("for (", i64, " ", r, " = lid; ", r, " < ",
                              Literal(ScalarType::kI64, stmt.extent, 0), "; ", r,
                              " += ", Literal(ScalarType::kI64, wg, 0), ") {"));
    OpenScope();
    if (absl::Status s = Block(stmt.body, indent + 1); !s.ok()) return s;
    const std::string v = Value(stmt.value, indent + 1);
    if (arg_kind) {
      Line(indent + 1, absl::StrCat("if (", acc, " < ", Zero(ScalarType::kI64), " || ",
                                    ArgBetter(stmt.reduce_kind, type, v, best), ") { ", best, " = ",
                                    v, "; ", acc, " = ", r, "; }"));
    } else {
      Line(indent + 1, absl::StrCat(acc, " = ", Combine(stmt.reduce_kind, type, acc, v), ";"));
    }
    CloseScope();
    Line(indent, "}");
    if (SubgroupCombine(stmt, type, indent)) return absl::OkStatus();
    // Workgroup-array subscripts in the dialect's u32 (GLSL's uint(lid), CUDA's uint32_t(lid)).
    const std::string lid = d_.Convert(ScalarType::kU32, "lid");
    const auto lid_plus = [&](int half) {
      return d_.Convert(ScalarType::kU32,
                        absl::StrCat("lid + ", Literal(ScalarType::kI64, half, 0)));
    };
    const std::string lid_slot = absl::StrCat(sval, "[", lid, "]");
    Line(indent, absl::StrCat(lid_slot, " = ", arg_kind ? best : acc, ";"));
    if (arg_kind) Line(indent, absl::StrCat(sidx, "[", lid, "] = ", acc, ";"));
    Line(indent, d_.Barrier());
    for (int half = wg / 2; half >= 1; half /= 2) {
      Line(indent, absl::StrCat("if (lid < ", Literal(ScalarType::kI64, half, 0), ") {"));
      const std::string a = absl::StrCat(sval, "[", lid, "]");
      const std::string b = absl::StrCat(sval, "[", lid_plus(half), "]");
      if (arg_kind) {
        const std::string ai = absl::StrCat(sidx, "[", lid, "]");
        const std::string bi = absl::StrCat(sidx, "[", lid_plus(half), "]");
        // b wins when a has nothing, or b is better, or equal-ranked with a smaller index.
        const std::string b_better = ArgBetter(stmt.reduce_kind, type, b, a);
        const std::string a_better = ArgBetter(stmt.reduce_kind, type, a, b);
        Line(indent + 1,
             absl::StrCat("if (", bi, " >= ", Zero(ScalarType::kI64), " && (", ai, " < ",
                          Zero(ScalarType::kI64), " || ", b_better, " || (!", a_better, " && ", bi,
                          " < ", ai, "))) { ", a, " = ", b, "; ", ai, " = ", bi, "; }"));
      } else {
        Line(indent + 1, absl::StrCat(a, " = ", Combine(stmt.reduce_kind, type, a, b), ";"));
      }
      Line(indent, "}");
      Line(indent, d_.Barrier());
    }
    if (arg_kind) {
      Line(indent, absl::StrCat(acc, " = ", sidx, "[0];"));
    } else {
      Line(indent, absl::StrCat(acc, " = ", sval, "[0];"));
    }
    // Everyone has read slot 0 before any later reduce overwrites the arrays (distinct arrays
    // per reduce, but a loop around this would reuse them).
    Line(indent, d_.Barrier());
    return absl::OkStatus();
  }

  // The bits of a float type as the unsigned integer type of its width.
  static ScalarType BitsOf(ScalarType type) {
    return type == ScalarType::kF64 ? ScalarType::kU64 : ScalarType::kU32;
  }

  // Whether the dialect has every subgroup operation the combine of `stmt` needs.
  bool CanCombineInSubgroups(const Stmt& stmt, ScalarType type) const {
    if (!options_.subgroups || d_.SubgroupId().empty() || d_.NumSubgroups().empty() ||
        d_.SubgroupElect().empty()) {
      return false;
    }
    const auto has = [&](ReduceKind kind, ScalarType t) {
      return !d_.SubgroupReduce(kind, t, "x").empty();
    };
    const bool is_float = IsFloatType(type);
    switch (stmt.reduce_kind) {
      case ReduceKind::kSum:
      case ReduceKind::kProd:
        return has(stmt.reduce_kind, type);
      case ReduceKind::kMax:
      case ReduceKind::kMin:
        // Floats: the NaN travels as its bits (the subgroup max/min of NaN is undefined).
        return has(stmt.reduce_kind, type) && (!is_float || has(ReduceKind::kMax, BitsOf(type)));
      case ReduceKind::kArgMax:
      case ReduceKind::kArgMin:
        // Indices travel as i32 (first index = subgroup min), NaN presence as a u32 max.
        return stmt.extent <= std::numeric_limits<int32_t>::max() &&
               has(stmt.reduce_kind == ReduceKind::kArgMax ? ReduceKind::kMax : ReduceKind::kMin,
                   type) &&
               has(ReduceKind::kMin, ScalarType::kI32) &&
               (!is_float || has(ReduceKind::kMax, ScalarType::kU32));
    }
    return false;
  }

  // The cross-invocation combine of a cooperative reduce through subgroup operations: each
  // subgroup combines its invocations' partial results (acc, and best for argmax/argmin), one
  // invocation per subgroup writes the subgroup's result to workgroup memory, and after one
  // barrier every invocation combines the subgroups' results serially. Returns false (nothing
  // written) when the dialect lacks an operation needed; the caller then uses the tree.
  bool SubgroupCombine(const Stmt& stmt, ScalarType type, int indent) {
    if (!CanCombineInSubgroups(stmt, type)) return false;
    uses_subgroups_ = true;
    const std::string acc = absl::StrCat("acc", stmt.var), best = absl::StrCat("best", stmt.var);
    const std::string sval = absl::StrCat("red_v", stmt.var),
                      sidx = absl::StrCat("red_i", stmt.var);
    const std::string sg = absl::StrCat("sg", stmt.var);
    const std::string u32 = T(ScalarType::kU32), i32 = T(ScalarType::kI32);
    const std::string u0 = Zero(ScalarType::kU32), u1 = One(ScalarType::kU32);
    const bool is_float = IsFloatType(type);
    const std::string slot = absl::StrCat("[", d_.SubgroupId(), "]");
    const std::string s = absl::StrCat("s", stmt.var);
    const std::string loop = absl::StrCat("for (", u32, " ", s, " = ", u1, "; ", s, " < ",
                                          d_.NumSubgroups(), "; ++", s, ") {");
    if (stmt.reduce_kind == ReduceKind::kArgMax || stmt.reduce_kind == ReduceKind::kArgMin) {
      const bool want_max = stmt.reduce_kind == ReduceKind::kArgMax;
      const ReduceKind extreme = want_max ? ReduceKind::kMax : ReduceKind::kMin;
      const std::string has = absl::StrCat("(", acc, " >= ", Zero(ScalarType::kI64), ")");
      // A value no candidate is worse than (invocations with nothing never become candidates,
      // so it may equal a real value).
      std::string worst;
      if (is_float) {
        worst = Literal(type, 0, want_max ? -INFINITY : INFINITY);
      } else {
        const IntLimits limits = LimitsOf(type);
        worst = Literal(type, want_max ? limits.lo_bits : limits.hi_bits, 0);
      }
      const std::string nan = absl::StrCat(sg, "_nan"), m = absl::StrCat(sg, "_m"),
                        cand = absl::StrCat(sg, "_c"), first = absl::StrCat(sg, "_i");
      std::string is_cand;
      if (is_float) {
        // A NaN anywhere in the subgroup wins (the evaluator's first NaN), else the extreme.
        Line(indent, absl::StrCat(u32, " ", nan, " = ",
                                  d_.SubgroupReduce(ReduceKind::kMax, ScalarType::kU32,
                                                    absl::StrCat("((", has, " && ", d_.IsNan(best),
                                                                 ") ? ", u1, " : ", u0, ")")),
                                  ";"));
        Line(indent, absl::StrCat(T(type), " ", m, " = ",
                                  d_.SubgroupReduce(extreme, type,
                                                    absl::StrCat("((", has, " && !", d_.IsNan(best),
                                                                 ") ? ", best, " : ", worst, ")")),
                                  ";"));
        is_cand =
            absl::StrCat("(", nan, " != ", u0, " ? ", d_.IsNan(best), " : ", best, " == ", m, ")");
      } else {
        Line(indent,
             absl::StrCat(T(type), " ", m, " = ",
                          d_.SubgroupReduce(extreme, type,
                                            absl::StrCat("(", has, " ? ", best, " : ", worst, ")")),
                          ";"));
        is_cand = absl::StrCat("(", best, " == ", m, ")");
      }
      // The first index among the invocations holding the subgroup's extreme: each holds the
      // first index of its own best, so the minimum is the subgroup's first.
      const std::string none = Literal(ScalarType::kI32, std::numeric_limits<int32_t>::max(), 0);
      Line(indent, absl::StrCat(T(ScalarType::kBool), " ", cand, " = ", has, " && ", is_cand, ";"));
      Line(indent, absl::StrCat(i32, " ", first, " = ",
                                d_.SubgroupReduce(ReduceKind::kMin, ScalarType::kI32,
                                                  absl::StrCat("(", cand, " ? ",
                                                               d_.Convert(ScalarType::kI32, acc),
                                                               " : ", none, ")")),
                                ";"));
      Line(indent, absl::StrCat("if (", d_.SubgroupElect(), ") {"));
      const std::string value =
          is_float ? absl::StrCat("(", nan, " != ", u0, " ? ", Literal(type, 0, NAN), " : ", m, ")")
                   : m;
      Line(indent + 1, absl::StrCat(sval, slot, " = ", value, ";"));
      Line(indent + 1, absl::StrCat(sidx, slot, " = (", first, " == ", none, " ? ",
                                    Literal(ScalarType::kI64, -1, 0), " : ",
                                    d_.SignExtend32(ScalarType::kI64, first), ");"));
      Line(indent, "}");
      Line(indent, d_.Barrier());
      Line(indent, absl::StrCat(acc, " = ", sidx, "[0];"));
      Line(indent, absl::StrCat(best, " = ", sval, "[0];"));
      Line(indent, loop);
      const std::string b = absl::StrCat(sval, "[", s, "]"), bi = absl::StrCat(sidx, "[", s, "]");
      // As in the tree: b wins when acc has nothing, or b is better, or equal with a smaller
      // index.
      Line(indent + 1,
           absl::StrCat("if (", bi, " >= ", Zero(ScalarType::kI64), " && (", acc, " < ",
                        Zero(ScalarType::kI64), " || ", ArgBetter(stmt.reduce_kind, type, b, best),
                        " || (!", ArgBetter(stmt.reduce_kind, type, best, b), " && ", bi, " < ",
                        acc, "))) { ", best, " = ", b, "; ", acc, " = ", bi, "; }"));
      Line(indent, "}");
    } else {
      if (is_float &&
          (stmt.reduce_kind == ReduceKind::kMax || stmt.reduce_kind == ReduceKind::kMin)) {
        // NaN propagates: the subgroup's result is one of its NaNs (largest bit pattern) if it
        // has any, else the max/min of the others.
        const ScalarType bits = BitsOf(type);
        const std::string nan = absl::StrCat(sg, "_nan"), m = absl::StrCat(sg, "_m");
        Line(indent, absl::StrCat(T(bits), " ", nan, " = ",
                                  d_.SubgroupReduce(ReduceKind::kMax, bits,
                                                    absl::StrCat("(", d_.IsNan(acc), " ? ",
                                                                 d_.Bitcast(type, bits, acc), " : ",
                                                                 Zero(bits), ")")),
                                  ";"));
        Line(indent, absl::StrCat(T(type), " ", m, " = ",
                                  d_.SubgroupReduce(stmt.reduce_kind, type,
                                                    absl::StrCat("(", d_.IsNan(acc), " ? ",
                                                                 Zero(type), " : ", acc, ")")),
                                  ";"));
        Line(indent, absl::StrCat(T(type), " ", sg, " = (", nan, " != ", Zero(bits), " ? ",
                                  d_.Bitcast(bits, type, nan), " : ", m, ");"));
      } else {
        Line(indent,
             absl::StrCat(T(type), " ", sg, " = ",
                          WrapNarrow(type, d_.SubgroupReduce(stmt.reduce_kind, type, acc)), ";"));
      }
      Line(indent, absl::StrCat("if (", d_.SubgroupElect(), ") { ", sval, slot, " = ", sg, "; }"));
      Line(indent, d_.Barrier());
      Line(indent, absl::StrCat(acc, " = ", sval, "[0];"));
      Line(indent, loop);
      Line(
          indent + 1,
          absl::StrCat(acc, " = ",
                       Combine(stmt.reduce_kind, type, acc, absl::StrCat(sval, "[", s, "]")), ";"));
      Line(indent, "}");
    }
    // Everyone has read the arrays before a later reduce (or a loop around this) writes them.
    Line(indent, d_.Barrier());
    return true;
  }

  const Kernel& k_;
  const CDialect& d_;
  RenderOptions options_;
  LegalizeOptions legalize_;
  std::vector<std::string> name_;
  std::vector<bool> defined_;
  std::vector<std::vector<ArgId>> loads_arg_;
  std::map<ValueId, int> definitions_;
  std::vector<std::vector<ValueId>> scopes_;
  std::set<VarId> var_is_reduce_;
  std::map<std::string, std::string> helpers_;
  std::vector<std::string> helper_order_;
  std::string shared_;
  std::string body_;
  bool uses_subgroups_ = false;
  absl::Status error_;
};

}  // namespace

std::string HalfHelpers(const CDialect& d) {
  const std::string f = d.TypeName(ScalarType::kF32), u = d.TypeName(ScalarType::kU32);
  const std::string fn = d.FunctionPrefix();
  const auto to_f = [&](const std::string& x) {
    return d.Bitcast(ScalarType::kU32, ScalarType::kF32, x);
  };
  const auto to_u = [&](const std::string& x) {
    return d.Bitcast(ScalarType::kF32, ScalarType::kU32, x);
  };
  std::string out;
  // f16 bits → f32, exact (subnormals through an exact multiply by 2^-24).
  absl::StrAppend(&out, fn, f, " kiln_f16_to_f32(", u, " h) {\n", "  ", u,
                  " s = (h & 32768u) << 16;\n", "  ", u, " e = (h >> 10) & 31u;\n", "  ", u,
                  " m = h & 1023u;\n", "  if (e == 0u) {\n", "    ", f,
                  " v = ", d.Convert(ScalarType::kF32, "m"), " * 5.9604644775390625e-8",
                  (f == "float" ? "f" : ""), ";\n", "    return s != 0u ? -v : v;\n  }\n",
                  "  if (e == 31u) return ", to_f("s | 2139095040u | (m << 13)"), ";\n",
                  "  return ", to_f("s | ((e + 112u) << 23) | (m << 13)"), ";\n}\n");
  // f32 → f16 bits, round to nearest even; NaN stays NaN (quiet), overflow → inf.
  absl::StrAppend(&out, fn, u, " kiln_f32_to_f16(", f, " x) {\n", "  ", u, " b = ", to_u("x"),
                  ";\n", "  ", u, " s = (b >> 16) & 32768u;\n", "  ", u, " a = b & 2147483647u;\n",
                  "  if (a > 2139095040u) return s | 32256u | ((a >> 13) & 1023u);\n",
                  "  if (a >= 1199566848u) return s | 31744u;\n", "  if (a < 947912704u) {\n",
                  // Below 2^-14: the result is a multiple of 2^-24; shift the mantissa with its
                  // implicit bit and round to nearest even on the dropped bits.
                  "    if (a < 855638016u) return s;\n",  // below 2^-25: rounds to zero
                  "    ", u, " e = a >> 23;\n", "    ", u, " m = (a & 8388607u) | 8388608u;\n",
                  "    ", u, " shift = 126u - e;\n",  // 113 - e + 13
                  "    ", u, " q = m >> shift;\n", "    ", u, " rem = m & ((1u << shift) - 1u);\n",
                  "    ", u, " hw = 1u << (shift - 1u);\n",
                  "    if (rem > hw || (rem == hw && (q & 1u) != 0u)) q = q + 1u;\n",
                  "    return s | q;\n  }\n", "  ", u, " r = a - 939524096u;\n",
                  "  r = (r + 4095u + ((r >> 13) & 1u)) >> 13;\n", "  return s | r;\n}\n");
  absl::StrAppend(&out, fn, f, " kiln_bf16_to_f32(", u, " h) { return ", to_f("h << 16"), "; }\n");
  absl::StrAppend(&out, fn, u, " kiln_f32_to_bf16(", f, " x) {\n", "  ", u, " b = ", to_u("x"),
                  ";\n", "  if ((b & 2147483647u) > 2139095040u) return (b >> 16) | 64u;\n",
                  "  return (b + 32767u + ((b >> 16) & 1u)) >> 16;\n}\n");
  return out;
}

absl::StatusOr<RenderedKernel> RenderKernel(const Kernel& kernel, const CDialect& dialect,
                                            const RenderOptions& options) {
  if (absl::Status s = VerifyKernel(kernel); !s.ok()) return s;
  // Floored division and saturating casts are spelled out once, in kernel IR (legalize.h).
  LegalizeOptions legalize;
  legalize.float64 = dialect.HasFloat64();
  const Kernel legal = Legalize(kernel, legalize);
  return Renderer(legal, dialect, options, legalize).Run();
}

bool PreferCooperative(const Kernel& kernel, int64_t min_extent, int64_t max_rows) {
  if (kernel.parallel_extent >= max_rows) return false;
  bool any = false;
  for (const Stmt& stmt : kernel.body) {
    if (IsTopLevelCooperativeReduce(stmt) && stmt.extent >= min_extent) any = true;
  }
  return any;
}

}  // namespace kiln::codegen
