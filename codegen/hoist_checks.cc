#include "codegen/hoist_checks.h"

#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "codegen/kernel_walk.h"

namespace kiln::codegen {
namespace {

class Hoister {
 public:
  explicit Hoister(const Kernel& kernel) : kernel_(kernel) {}

  // Hoists in the statements nested in `block` first, so a check moved out of an inner loop can
  // move on out of the outer one.
  void Block(std::vector<Stmt>& block) {
    for (size_t i = 0; i < block.size(); ++i) {
      Stmt& loop = block[i];
      if (loop.kind != StmtKind::kLoop && loop.kind != StmtKind::kReduce) continue;
      Block(loop.body);
      if (loop.extent <= 0) continue;
      // The variables the statement and those nested in it define.
      absl::flat_hash_set<VarId> inner = {loop.var};
      ForEachStmt(loop.body, [&](const Stmt& stmt) {
        if (stmt.kind == StmtKind::kLoop || stmt.kind == StmtKind::kReduce) inner.insert(stmt.var);
      });
      // Whether an expression uses one of them or loads an arg the kernel may write.
      DagFlag varies(kernel_, [&](ValueId id) {
        const Expr& e = kernel_.expr(id);
        if (e.op == ExprOp::kVar || e.op == ExprOp::kAccumulator) return inner.contains(e.var);
        return e.op == ExprOp::kLoad &&
               kernel_.args[static_cast<size_t>(e.arg)].role != ArgRole::kInput;
      });
      std::vector<Stmt> hoisted, kept;
      for (Stmt& stmt : loop.body) {
        (Movable(stmt, varies) ? hoisted : kept).push_back(std::move(stmt));
      }
      loop.body = std::move(kept);
      if (hoisted.empty()) continue;
      const size_t count = hoisted.size();
      block.insert(block.begin() + static_cast<std::ptrdiff_t>(i),
                   std::make_move_iterator(hoisted.begin()),
                   std::make_move_iterator(hoisted.end()));
      i += count;
    }
  }

 private:
  bool Movable(const Stmt& stmt, DagFlag& varies) const {
    return stmt.kind == StmtKind::kStore &&
           kernel_.args[static_cast<size_t>(stmt.arg)].role == ArgRole::kErrorFlag &&
           !varies(stmt.index) && !varies(stmt.value) &&
           (stmt.predicate == kNoValue || !varies(stmt.predicate));
  }

  const Kernel& kernel_;
};

}  // namespace

Kernel HoistInvariantChecks(Kernel kernel) {
  Hoister hoister(kernel);
  hoister.Block(kernel.body);
  return kernel;
}

}  // namespace kiln::codegen
