// The kernel IR: what one fused group of the graph becomes before a target emitter sees it.
//
// A Kernel is a structured loop nest (no gotos) over SSA scalar expressions:
//
//   kernel k(args...) parallel_extent P:
//     for gid in [begin, end) ⊆ [0, P):   // the outer loop; the runtime splits it over threads
//       body                              // statements: Loop, Let, Store, Reduce
//
// Expressions form a DAG in `Kernel::exprs` (indexed by ValueId). Each has a ScalarType and an
// ExprOp; operands are other ValueIds. Leaves are constants, loop variables (`gid` and the
// variables of Loop/Reduce statements, all i64), Load{arg, index} and the results of Reduce
// statements (kAccumulator). Everything else is a pure scalar function of its operands.
//
// Evaluation semantics (what kernel_eval.h implements and every emitter must reproduce):
//  - Statements run in order. An expression is computed when a statement using it runs (a Let,
//    the index/value/predicate of a Store, the init or per-iteration value of a Reduce). Every
//    op except Load is pure; Load reads memory at that moment. An emitter may hoist or share an
//    expression between uses freely, except a Load across a Store to the same arg. (The lowering
//    reads an output arg only in scatter_add, where a Let pins the read just before the Store.)
//  - An expression may use a loop variable or accumulator only inside the scope that defines
//    it (the Loop/Reduce body for its variable; the statements after a Reduce, in the same
//    block, for its accumulator — including the per-iteration value of an enclosing Reduce
//    whose body holds it). VerifyKernel checks this.
//  - Buffers: args are dense arrays of `num_elements` elements of `dtype`. Load of an arg with
//    dtype d yields ComputeType(d) (f16/bf16 widen exactly to f32; bool is 0/1); Store takes a
//    value of ComputeType(d) and converts it: f32 → f16/bf16 rounds to nearest even (NaN stays
//    NaN), everything else stores as is. Indices are i64 element indices and must be in range
//    whenever the statement runs (the lowering clamps every data-dependent index).
//  - Integer arithmetic wraps modulo 2^bits of the type. Float arithmetic is IEEE in the type
//    (f32 ops are rounded once to f32; emitters may contract a*b+c into fma and reassociate sum
//    and product reductions).
//
// Numerics against the reference interpreter (which computes in double and rounds once per op):
// f32 and f64 basic arithmetic (+ - * / sqrt, compares, casts) match bit for bit; transcendental
// functions may differ by their documented accuracy (kernel_eval computes them in double, so it
// matches); f16/bf16 are computed in f32 and rounded on store, so a result may differ by one
// unit in the last place of the 16-bit type per op of a fused chain (double rounding);
// reductions accumulate in the compute type (f32 for f32/f16/bf16) in an unspecified order.
//
// Stability: the LLVM emitter codes against this header. Additions (new ExprOps at the end of
// the table, new fields with defaults) are fine; do not rename or reorder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "ir/dtype.h"
#include "ir/graph.h"

namespace kiln::codegen {

// ---- Types --------------------------------------------------------------------------------------

/// The type of a scalar expression. f16/bf16 never appear: they are computed in f32 (see
/// ComputeType). Every integer dtype of the IR has its own type, so arithmetic wraps at the
/// dtype's width inside a fused kernel as it does between kernels; u32/u64 also serve bit
/// manipulation (Philox, exponent tricks).
enum class ScalarType : uint8_t { kBool, kU8, kI32, kU32, kI64, kU64, kF32, kF64, kI8, kI16, kU16 };

/// "bool", "u8", "i32", "u32", "i64", "u64", "f32", "f64", "i8", "i16", "u16".
const char* ScalarTypeName(ScalarType type);
bool IsFloatType(ScalarType type);
/// u8, u16, u32, u64 (and bool, which is 0 or 1).
bool IsUnsignedType(ScalarType type);
/// i8, i16, i32, i64.
bool IsSignedType(ScalarType type);
/// 1 for bool, else 8, 16, 32 or 64.
int BitWidth(ScalarType type);
/// The type a buffer of `dtype` is computed in: f16/bf16 → f32, others their own type.
ScalarType ComputeType(ir::DType dtype);

/// Index of an expression in Kernel::exprs.
using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;
/// A loop variable: 0 is `gid`, the outer (parallel) index; Loop and Reduce statements each
/// define a new one.
using VarId = int32_t;
inline constexpr VarId kGid = 0;
/// Index of a kernel argument in Kernel::args.
using ArgId = int32_t;

// ---- Expressions --------------------------------------------------------------------------------

// X(Enum, "text name", number of operands). Semantics are in the comments after the table.
#define KILN_KERNEL_EXPR_OPS(X)                                                                \
  /* Leaves. */                                                                                \
  X(Const, "const", 0)                                                                         \
  X(Var, "var", 0)                                                                             \
  X(Accumulator, "acc", 0)                                                                     \
  X(Load, "load", 1)                                                                           \
  /* The IR's unary ops, same semantics (docs/ir.md), operand type = result type. */           \
  X(Neg, "neg", 1)                                                                             \
  X(Abs, "abs", 1)                                                                             \
  X(Sign, "sign", 1)                                                                           \
  X(Exp, "exp", 1)                                                                             \
  X(Log, "log", 1)                                                                             \
  X(Sqrt, "sqrt", 1)                                                                           \
  X(Rsqrt, "rsqrt", 1)                                                                         \
  X(Sin, "sin", 1)                                                                             \
  X(Cos, "cos", 1)                                                                             \
  X(Tanh, "tanh", 1)                                                                           \
  X(Erf, "erf", 1)                                                                             \
  X(Floor, "floor", 1)                                                                         \
  X(Ceil, "ceil", 1)                                                                           \
  X(Round, "round", 1)                                                                         \
  X(Reciprocal, "reciprocal", 1)                                                               \
  X(Not, "not", 1)                                                                             \
  /* The IR's binary ops, same semantics (integer div/mod floored, by zero → 0). */          \
  X(Add, "add", 2)                                                                             \
  X(Sub, "sub", 2)                                                                             \
  X(Mul, "mul", 2)                                                                             \
  X(Div, "div", 2)                                                                             \
  X(Pow, "pow", 2)                                                                             \
  X(Max, "max", 2)                                                                             \
  X(Min, "min", 2)                                                                             \
  X(Mod, "mod", 2)                                                                             \
  /* Comparisons: operands of one type, result bool. */                                        \
  X(Eq, "eq", 2)                                                                               \
  X(Ne, "ne", 2)                                                                               \
  X(Lt, "lt", 2)                                                                               \
  X(Le, "le", 2)                                                                               \
  X(Gt, "gt", 2)                                                                               \
  X(Ge, "ge", 2)                                                                               \
  /* Logical on bool, bitwise on integers. */                                                  \
  X(And, "and", 2)                                                                             \
  X(Or, "or", 2)                                                                               \
  X(Xor, "xor", 2)                                                                             \
  /* select(cond: bool, on_true, on_false). */                                                 \
  X(Select, "select", 3)                                                                       \
  /* Conversions. */                                                                           \
  X(Cast, "cast", 1)                                                                           \
  X(Wrap, "wrap", 1)                                                                           \
  X(Bitcast, "bitcast", 1)                                                                     \
  /* Building blocks for index arithmetic and polynomial math (ExpandMath). */                 \
  X(Fma, "fma", 3)                                                                             \
  X(Shl, "shl", 2)                                                                             \
  X(Shr, "shr", 2)                                                                             \
  X(UDiv, "udiv", 2)                                                                           \
  X(URem, "urem", 2)                                                                           \
  X(Trunc, "trunc", 1)                                                                         \
  /* Rounding to the 16-bit float dtypes (IR casts to f16/bf16); added after the first cut. */ \
  X(RoundToF16, "round_f16", 1)                                                                \
  X(RoundToBF16, "round_bf16", 1)                                                              \
  /* What codegen/legalize.h turns saturating float -> integer casts into. */                  \
  X(Convert, "convert", 1)

/// Scalar operations. Unless noted, operands have the result's type.
///  - Const: `int_value` (integer/bool types; u64 as its bit pattern) or `float_value`.
///  - Var: loop variable `var` (i64). Accumulator: the result of the Reduce statement whose loop
///    variable is `var`; its type is the Reduce's result type.
///  - Load: element `operands[0]` (i64) of arg `arg`; type ComputeType(arg dtype).
///  - Neg … Mod, Eq … Ge, And/Or/Xor, Select: exactly the IR ops' semantics (docs/ir.md; the
///    reference is ir/interpreter.cc) applied to scalars of the type: NaN-propagating max/min,
///    floored integer div/mod with a zero divisor giving 0 (and INT_MIN / -1 wrapping), round
///    half to even, `not`/and/or/xor logical on bool and bitwise on integers. On unsigned types
///    neg/sub wrap, abs is the identity and sign is 0 or 1.
///  - Cast: the IR's cast: float → float rounds to nearest even; float → integer truncates
///    toward zero and saturates, NaN → 0; integer → integer saturates; integer → float goes
///    through f64 (as the interpreter does: i64 → f32 may round twice); → bool is x != 0 (NaN is
///    true); bool → anything is 0 or 1.
///  - Wrap: integer/bool → integer modulo 2^bits (truncation; sign extension from signed
///    sources, zero extension from unsigned/bool sources), as C++ integer conversion does.
///  - Bitcast: the same bits as another type of the same width (f32↔i32/u32, f64↔i64/u64).
///  - Fma: a * b + c on floats, rounded once (kernel_eval; emitters for targets with a fused
///    multiply-add) or twice (the CPU emitter on targets without one, such as x86-64-v2, where
///    a correctly rounded fma is a scalar libm call per element). math_expand's error bounds
///    hold for both.
///  - Shl, Shr: integer shifts by operands[1] (same type, 0 <= shift < bits; otherwise the
///    result is 0 for shl and unsigned shr, and the sign fill for signed shr); Shr is logical on
///    unsigned types and arithmetic on signed ones.
///  - UDiv, URem: division and remainder of the operands' bit patterns as unsigned numbers; a
///    zero divisor gives 0. The lowering uses them for index arithmetic with non-negative
///    operands and non-zero constant divisors, where they equal floor division.
///  - Trunc: float rounded toward zero (to an integral float value).
///  - RoundToF16, RoundToBF16: an f32 or f64 value rounded once to the nearest f16 / bf16 value
///    (ties to even, overflow to ±inf, NaN stays NaN), returned in the operand's type. From f64
///    the rounding must be single (not through f32): LLVM's fptrunc double→half does that; for
///    bf16 an emitter can round to f32 with round-to-odd (truncate, then set the lowest bit if
///    inexact) and then to bf16. The lowering uses them for casts to f16/bf16 and random_normal.
///  - Convert: float → integer (not bool) truncation toward zero of an operand inside the
///    target's range (an emitter prints fptosi/fptoui or a C conversion); outside the range the
///    result is unspecified (kernel_eval saturates like Cast). Only Legalize creates it.
///
/// Emitters see kernels after Legalize (codegen/legalize.h), which rewrites integer Div/Mod and
/// every Cast that is not one conversion instruction into the ops above; they print the rest.
enum class ExprOp : uint8_t {
#define KILN_KERNEL_EXPR_ENUM(name, text, arity) k##name,
  KILN_KERNEL_EXPR_OPS(KILN_KERNEL_EXPR_ENUM)
#undef KILN_KERNEL_EXPR_ENUM
};

/// "add", "load", ...
const char* ExprOpName(ExprOp op);
/// Number of operands (0..3).
int ExprOpArity(ExprOp op);
/// True for Eq … Ge (bool result).
bool IsComparison(ExprOp op);
/// True for exp, log, tanh, erf, sin, cos and pow: a libm call, or dozens of vector ops once
/// ExpandMath writes it out.
bool IsTranscendental(ExprOp op);
/// The ExprOp computing a unary, binary, compare or logical IR op elementwise, or nullopt for
/// ops without a scalar form (select and cast have their own builder calls).
std::optional<ExprOp> ScalarFormOf(ir::Op op);

/// One node of the expression DAG.
struct Expr {
  ExprOp op = ExprOp::kConst;
  ScalarType type = ScalarType::kI64;
  std::vector<ValueId> operands;
  /// Const of an integer or bool type (bool: 0/1; u64: the bit pattern).
  int64_t int_value = 0;
  /// Const of a float type.
  double float_value = 0.0;
  /// Var and Accumulator: the variable.
  VarId var = -1;
  /// Load: the argument.
  ArgId arg = -1;
};

// ---- Statements ---------------------------------------------------------------------------------

enum class StmtKind : uint8_t {
  /// for var in [0, extent): body.
  kLoop,
  /// Computes `value` here (pins a Load's read, or marks a value worth computing once).
  kLet,
  /// If `predicate` is kNoValue or true: arg[index] = value (converted to the arg's dtype).
  kStore,
  /// acc = init; for var in [0, extent): { body; acc = combine(acc, value) }. The result is the
  /// Accumulator expression `result` (its var is this statement's var).
  kReduce,
};

/// How a Reduce combines. kSum/kProd: + and * in the value type (integers wrap; float order is
/// unspecified, so emitters may vectorise). kMax/kMin: the NaN-propagating max/min of ExprOp.
/// kArgMax/kArgMin: the result is the i64 iteration index of the first extreme value, a NaN
/// counting as more extreme than any number (the first NaN wins), exactly like the IR's argmax;
/// `init` is unused (kNoValue) and the extent must be at least 1.
enum class ReduceKind : uint8_t { kSum, kProd, kMax, kMin, kArgMax, kArgMin };
/// "sum", "prod", "max", "min", "argmax", "argmin".
const char* ReduceKindName(ReduceKind kind);

struct Stmt {
  StmtKind kind = StmtKind::kLet;
  /// Loop, Reduce: the loop variable this statement defines and its trip count.
  VarId var = -1;
  int64_t extent = 0;
  /// Loop, Reduce: statements run on each iteration (for Reduce, before `value`).
  std::vector<Stmt> body;
  /// Let: the value. Store: the value stored. Reduce: the value combined on each iteration.
  ValueId value = kNoValue;
  /// Store: destination arg, element index (i64) and optional bool predicate.
  ArgId arg = -1;
  ValueId index = kNoValue;
  ValueId predicate = kNoValue;
  /// Reduce: how it combines, the initial value (kNoValue for argmax/argmin) and the
  /// Accumulator expression holding the result.
  ReduceKind reduce_kind = ReduceKind::kSum;
  ValueId init = kNoValue;
  ValueId result = kNoValue;
};

// ---- Kernels ------------------------------------------------------------------------------------

/// What an argument is. The CPU ABI passes args in Kernel::args order, which is: inputs, then
/// outputs, then the error flag (if any).
enum class ArgRole : uint8_t {
  /// Read only.
  kInput,
  /// Written (and, for scatter_add, read back).
  kOutput,
  /// An i64[2] buffer the runtime zeroes before the launch. A kernel that meets an out-of-range
  /// gather/scatter index stores 1 into element 0 and the offending index into element 1 (any
  /// one of them, if several), and reads the data at a clamped in-range index instead. The
  /// arg's `name` describes the check ("%5 = gather (model.cc:12): index out of range for axis
  /// 0 of size 3") for the runtime's error message.
  kErrorFlag,
};
const char* ArgRoleName(ArgRole role);

struct KernelArg {
  std::string name;
  ir::DType dtype = ir::DType::kF32;
  int64_t num_elements = 0;
  ArgRole role = ArgRole::kInput;
  /// The graph value this buffer holds: for inputs the value read, for outputs the value stored
  /// (kInvalidNode for the error flag).
  ir::NodeId node = ir::kInvalidNode;
};

struct Kernel {
  std::string name;
  std::vector<KernelArg> args;
  /// Trip count of the outer loop over `gid`, which the runtime splits into [begin, end) chunks.
  int64_t parallel_extent = 0;
  /// Number of loop variables (gid = 0 plus one per Loop/Reduce statement).
  int32_t num_vars = 1;
  std::vector<Expr> exprs;
  /// Runs once per gid.
  std::vector<Stmt> body;

  const Expr& expr(ValueId id) const { return exprs[static_cast<size_t>(id)]; }
};

/// Checks a kernel's invariants: operand ids precede their users, operand counts and types are
/// consistent with each op, args are in ABI order and in range, Loads read ComputeType(dtype),
/// Stores write it, every variable/accumulator is used only in its scope, variables are
/// defined once. Returns InvalidArgument naming the kernel and the offending value/statement.
absl::Status VerifyKernel(const Kernel& kernel);

/// The text form used in dumps (kernel_K.kir), e.g.
///
///   kernel softmax_4 parallel_extent=4 {
///     arg0 in f32[32] %0
///     arg1 out f32[32] %9
///     gid in [0, 4) {
///       v3 = mul.i64 gid, 8:i64
///       acc1 = reduce max.f32 r1 in [0, 8) init -inf:f32 {
///         v5 = add.i64 v3, r1
///         v6 = load.f32 arg0[v5]
///       } yield v6
///       ...
///       store arg1[v9] = v12
///     }
///   }
///
/// Each expression is printed once per scope, just before the first statement that uses it;
/// constants print inline as value:type and variables as gid, i<N> (Loop) or r<N> (Reduce).
std::string PrintKernel(const Kernel& kernel);

// ---- Builder ------------------------------------------------------------------------------------

/// Builds a Kernel. Expressions are hash-consed (building the same expression twice gives the
/// same ValueId) and i64/u64 index arithmetic is simplified with constants and known value
/// ranges (x + 0, x * 1, x * 0, udiv/urem by 1, udiv/urem of a value below the divisor, constant
/// folding), so linearising and delinearising an index in the same shape collapses.
///
///   KernelBuilder b("scale");
///   ArgId x = b.AddArg({"x", ir::DType::kF32, n, ArgRole::kInput});
///   ArgId y = b.AddArg({"y", ir::DType::kF32, n, ArgRole::kOutput});
///   ValueId gid = b.Var(kGid);
///   b.Store(y, gid, b.Binary(ExprOp::kMul, b.Load(x, gid), b.Float(ScalarType::kF32, 2.0)));
///   Kernel k = std::move(b).Finish(n);
class KernelBuilder {
 public:
  explicit KernelBuilder(std::string name);

  /// Declares gid's trip count before the body is built (optional; Finish sets it anyway), so
  /// that index arithmetic knows gid's range: with a trip count of 1, Var(kGid) is the constant
  /// 0, as is any Loop variable of extent 1.
  void SetParallelExtent(int64_t parallel_extent);

  /// Appends an argument; add inputs, then outputs, then the error flag.
  ArgId AddArg(KernelArg arg);
  const KernelArg& arg(ArgId id) const { return kernel_.args[static_cast<size_t>(id)]; }
  int32_t num_args() const { return static_cast<int32_t>(kernel_.args.size()); }

  // Constants and leaves.
  ValueId Int(ScalarType type, int64_t value);
  /// An i64 constant (index arithmetic).
  ValueId Index(int64_t value) { return Int(ScalarType::kI64, value); }
  ValueId Float(ScalarType type, double value);
  ValueId Bool(bool value) { return Int(ScalarType::kBool, value ? 1 : 0); }
  /// A constant `value` of `type`, converted as the IR's cast/fill would (floats rounded to the
  /// type, integers truncated and saturated).
  ValueId ConstantOf(ScalarType type, double value);
  ValueId Var(VarId var);
  ValueId Load(ArgId arg, ValueId index);

  /// The generic form: result type `type`, operands as listed. The helpers below derive `type`.
  ValueId Emit(ExprOp op, ScalarType type, std::vector<ValueId> operands);
  /// Unary ops (neg … not, trunc): the operand's type.
  ValueId Unary(ExprOp op, ValueId x);
  /// Binary arithmetic, logical, shifts, udiv/urem: the operands' type. Comparisons: bool.
  ValueId Binary(ExprOp op, ValueId a, ValueId b);
  ValueId Select(ValueId cond, ValueId on_true, ValueId on_false);
  ValueId Cast(ValueId x, ScalarType to);
  ValueId Wrap(ValueId x, ScalarType to);
  ValueId Bitcast(ValueId x, ScalarType to);
  ValueId Fma(ValueId a, ValueId b, ValueId c);

  // Index arithmetic on i64 (simplified as described above).
  ValueId IAdd(ValueId a, ValueId b) { return Binary(ExprOp::kAdd, a, b); }
  ValueId IMul(ValueId a, ValueId b) { return Binary(ExprOp::kMul, a, b); }
  ValueId IAddConst(ValueId a, int64_t c) { return IAdd(a, Index(c)); }
  ValueId IMulConst(ValueId a, int64_t c) { return IMul(a, Index(c)); }
  /// a / c and a % c for a >= 0 and a constant c > 0 (UDiv/URem).
  ValueId IDivConst(ValueId a, int64_t c);
  ValueId IModConst(ValueId a, int64_t c);
  /// min(max(a, lo), hi) on i64.
  ValueId IClamp(ValueId a, int64_t lo, int64_t hi);

  /// Known inclusive range of an integer value (constants, variables, index arithmetic), if any.
  std::optional<std::pair<int64_t, int64_t>> Range(ValueId value) const;
  /// The value of an integer/bool constant.
  std::optional<int64_t> ConstantInt(ValueId value) const;

  const Expr& expr(ValueId id) const { return kernel_.expr(id); }
  ScalarType type(ValueId id) const { return expr(id).type; }

  // Statements, appended to the innermost open block (the kernel body, or an open Loop/Reduce).
  /// Opens `for var in [0, extent)`; returns var. Close with EndLoop.
  VarId BeginLoop(int64_t extent);
  void EndLoop();
  /// Opens a Reduce; returns its var (use Var(var) in the body and value). Close with
  /// EndReduce(value), which returns the Accumulator (of `value`'s type, i64 for argmax/argmin).
  VarId BeginReduce(ReduceKind kind, ValueId init, int64_t extent);
  ValueId EndReduce(ValueId value);
  void Let(ValueId value);
  void Store(ArgId arg, ValueId index, ValueId value, ValueId predicate = kNoValue);
  /// Nesting depth of open Loop/Reduce statements (0 = kernel body).
  int depth() const { return static_cast<int>(open_.size()); }

  /// The kernel; every Loop/Reduce must be closed.
  Kernel Finish(int64_t parallel_extent) &&;

 private:
  struct ExprKey {
    ExprOp op;
    ScalarType type;
    std::vector<ValueId> operands;
    int64_t int_value;
    uint64_t float_bits;
    VarId var;
    ArgId arg;
    template <typename H>
    friend H AbslHashValue(H h, const ExprKey& k) {
      return H::combine(std::move(h), k.op, k.type, k.operands, k.int_value, k.float_bits, k.var,
                        k.arg);
    }
    bool operator==(const ExprKey&) const = default;
  };
  struct Open {
    Stmt stmt;
  };

  ValueId Intern(Expr expr);
  std::optional<ValueId> Simplify(ExprOp op, ScalarType type, const std::vector<ValueId>& operands);
  std::vector<Stmt>& CurrentBlock();

  Kernel kernel_;
  absl::flat_hash_map<ExprKey, ValueId> interned_;
  std::vector<std::optional<std::pair<int64_t, int64_t>>> ranges_;
  std::vector<int64_t> var_extents_;
  bool gid_extent_known_ = false;
  std::vector<Open> open_;
};

}  // namespace kiln::codegen
