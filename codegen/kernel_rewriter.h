// KernelRewriter: the skeleton the kernel-IR rewriting passes (Legalize, ExpandMath) share. It
// rebuilds a kernel's expression DAG in demand order: an expression is emitted, after its
// operands, when a statement or a later expression first needs it. A pass decides, per input
// expression, what to emit in its place; operands therefore always precede their users, and
// expressions that only the replaced ones used disappear.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "codegen/kernel_ir.h"

namespace kiln::codegen {

class KernelRewriter {
 public:
  /// `kernel` must outlive the rewriter.
  explicit KernelRewriter(const Kernel& kernel);
  virtual ~KernelRewriter() = default;
  KernelRewriter(const KernelRewriter&) = delete;
  KernelRewriter& operator=(const KernelRewriter&) = delete;

  /// Returns the input kernel with its statements' expressions re-emitted through Rewrite.
  /// Statements, args and variables are unchanged. Consumes the rewriter.
  Kernel Run() &&;

 protected:
  /// The new id of input expression `id`, emitting it (and its operands) on first use.
  ValueId Get(ValueId id);

  /// Emits what stands for input expression `e` and returns its new id. The operands of `e` are
  /// input ids: map them with Get. The default emits `e` as it is (Copy).
  virtual ValueId Rewrite(const Expr& e);

  /// Emits `e` with its operands mapped through Get.
  ValueId Copy(const Expr& e);

  const Kernel& input() const { return in_; }

  // ---- Building new expressions -----------------------------------------------------------------

  /// Appends `e` to the output; equal constants are emitted once.
  ValueId Append(Expr e);
  /// A constant of integer `type` with these bits (Expr::int_value).
  ValueId IntConst(ScalarType type, int64_t bits);
  /// A constant of float `type`; an f32 constant is `value` rounded to f32.
  ValueId FloatConst(ScalarType type, double value);
  ValueId Op(ExprOp op, ScalarType type, std::vector<ValueId> operands);
  /// The type of output expression `id`.
  ScalarType TypeOf(ValueId id) const { return exprs_[static_cast<size_t>(id)].type; }
  /// An op whose result has its first operand's type.
  ValueId Un(ExprOp op, ValueId a) { return Op(op, TypeOf(a), {a}); }
  ValueId Bin(ExprOp op, ValueId a, ValueId b) { return Op(op, TypeOf(a), {a, b}); }
  /// A comparison (bool result).
  ValueId Cmp(ExprOp op, ValueId a, ValueId b) { return Op(op, ScalarType::kBool, {a, b}); }
  ValueId Sel(ValueId c, ValueId t, ValueId f) { return Op(ExprOp::kSelect, TypeOf(t), {c, t, f}); }

 private:
  std::vector<Stmt> RemapBlock(const std::vector<Stmt>& block);
  Stmt RemapStmt(const Stmt& stmt);

  const Kernel& in_;
  std::vector<ValueId> remap_;
  std::vector<Expr> exprs_;
  // Keyed by type, int_value and the bits of float_value (so that -0.0 and NaNs stay apart).
  absl::flat_hash_map<std::tuple<ScalarType, int64_t, uint64_t>, ValueId> constants_;
};

}  // namespace kiln::codegen
