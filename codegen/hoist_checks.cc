#include "codegen/hoist_checks.h"

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace kiln::codegen {
namespace {

// The variables that `stmt` and the statements nested in it define.
void CollectVars(const Stmt& stmt, absl::flat_hash_set<VarId>& vars) {
  if (stmt.kind == StmtKind::kLoop || stmt.kind == StmtKind::kReduce) vars.insert(stmt.var);
  for (const Stmt& inner : stmt.body) CollectVars(inner, vars);
}

class Hoister {
 public:
  explicit Hoister(const Kernel& kernel) : kernel_(kernel) {}

  // Hoists in the statements nested in `block` first, so a check moved out of an inner loop can
  // move on out of the outer one.
  void Block(std::vector<Stmt>& block) {
    for (size_t i = 0; i < block.size(); ++i) {
      if (block[i].kind != StmtKind::kLoop && block[i].kind != StmtKind::kReduce) continue;
      Block(block[i].body);
      if (block[i].extent <= 0) continue;
      absl::flat_hash_set<VarId> inner;
      CollectVars(block[i], inner);
      std::vector<Stmt> hoisted, kept;
      for (Stmt& stmt : block[i].body) {
        (Movable(stmt, inner) ? hoisted : kept).push_back(std::move(stmt));
      }
      block[i].body = std::move(kept);
      if (hoisted.empty()) continue;
      const size_t count = hoisted.size();
      block.insert(block.begin() + static_cast<std::ptrdiff_t>(i),
                   std::make_move_iterator(hoisted.begin()),
                   std::make_move_iterator(hoisted.end()));
      i += count;
    }
  }

 private:
  bool Movable(const Stmt& stmt, const absl::flat_hash_set<VarId>& inner) {
    if (stmt.kind != StmtKind::kStore) return false;
    if (kernel_.args[static_cast<size_t>(stmt.arg)].role != ArgRole::kErrorFlag) return false;
    memo_.clear();
    return Invariant(stmt.index, inner) && Invariant(stmt.value, inner) &&
           (stmt.predicate == kNoValue || Invariant(stmt.predicate, inner));
  }

  // Whether `id` uses no variable or accumulator in `inner` and loads only input args.
  bool Invariant(ValueId id, const absl::flat_hash_set<VarId>& inner) {
    if (const auto it = memo_.find(id); it != memo_.end()) return it->second;
    const Expr& e = kernel_.expr(id);
    bool invariant = true;
    if (e.op == ExprOp::kVar || e.op == ExprOp::kAccumulator) {
      invariant = !inner.contains(e.var);
    } else if (e.op == ExprOp::kLoad &&
               kernel_.args[static_cast<size_t>(e.arg)].role != ArgRole::kInput) {
      invariant = false;
    }
    for (size_t k = 0; invariant && k < e.operands.size(); ++k) {
      invariant = Invariant(e.operands[k], inner);
    }
    memo_[id] = invariant;
    return invariant;
  }

  const Kernel& kernel_;
  absl::flat_hash_map<ValueId, bool> memo_;
};

}  // namespace

Kernel HoistInvariantChecks(Kernel kernel) {
  Hoister hoister(kernel);
  hoister.Block(kernel.body);
  return kernel;
}

}  // namespace kiln::codegen
