#include "codegen/kernel_rewriter.h"

#include <cstring>
#include <utility>

namespace kiln::codegen {

KernelRewriter::KernelRewriter(const Kernel& kernel)
    : in_(kernel), remap_(kernel.exprs.size(), kNoValue) {}

Kernel KernelRewriter::Run() && {
  Kernel out = in_;
  out.exprs.clear();
  out.body = RemapBlock(in_.body);
  out.exprs = std::move(exprs_);
  return out;
}

std::vector<Stmt> KernelRewriter::RemapBlock(const std::vector<Stmt>& block) {
  std::vector<Stmt> result;
  result.reserve(block.size());
  for (const Stmt& stmt : block) result.push_back(RemapStmt(stmt));
  return result;
}

Stmt KernelRewriter::RemapStmt(const Stmt& stmt) {
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

ValueId KernelRewriter::Get(ValueId id) {
  if (const ValueId done = remap_[static_cast<size_t>(id)]; done != kNoValue) return done;
  const ValueId result = Rewrite(in_.expr(id));
  remap_[static_cast<size_t>(id)] = result;
  return result;
}

ValueId KernelRewriter::Rewrite(const Expr& e) { return Copy(e); }

ValueId KernelRewriter::Copy(const Expr& e) {
  Expr copy = e;
  for (ValueId& operand : copy.operands) operand = Get(operand);
  return Append(std::move(copy));
}

ValueId KernelRewriter::Append(Expr e) {
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

ValueId KernelRewriter::IntConst(ScalarType type, int64_t bits) {
  Expr e;
  e.op = ExprOp::kConst;
  e.type = type;
  e.int_value = bits;
  return Append(std::move(e));
}

ValueId KernelRewriter::FloatConst(ScalarType type, double value) {
  Expr e;
  e.op = ExprOp::kConst;
  e.type = type;
  e.float_value = type == ScalarType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
  return Append(std::move(e));
}

ValueId KernelRewriter::Op(ExprOp op, ScalarType type, std::vector<ValueId> operands) {
  Expr e;
  e.op = op;
  e.type = type;
  e.operands = std::move(operands);
  return Append(std::move(e));
}

}  // namespace kiln::codegen
