#include "codegen/kernel_walk.h"

namespace kiln::codegen {

bool DagFlag::operator()(ValueId id) {
  if (memo_.size() < kernel_.exprs.size()) memo_.resize(kernel_.exprs.size(), kUnknown);
  int8_t& slot = memo_[static_cast<size_t>(id)];
  if (slot == kUnknown) {
    bool found = test_(id);
    const size_t arity = kernel_.expr(id).operands.size();
    for (size_t i = 0; !found && i < arity; ++i) found = (*this)(kernel_.expr(id).operands[i]);
    // `slot` may dangle after the recursion resized memo_.
    memo_[static_cast<size_t>(id)] = found ? 1 : 0;
    return found;
  }
  return slot == 1;
}

void ForEachStmt(const std::vector<Stmt>& block, const std::function<void(const Stmt&)>& fn) {
  for (const Stmt& stmt : block) {
    fn(stmt);
    ForEachStmt(stmt.body, fn);
  }
}

}  // namespace kiln::codegen
