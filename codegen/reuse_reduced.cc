#include "codegen/reuse_reduced.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "codegen/kernel_walk.h"

namespace kiln::codegen {
namespace {

class Reuser {
 public:
  explicit Reuser(Kernel& kernel)
      : kernel_(kernel),
        has_accumulator_(
            kernel, [&kernel](ValueId id) { return kernel.expr(id).op == ExprOp::kAccumulator; }),
        costly_(kernel, [&kernel](ValueId id) { return IsTranscendental(kernel.expr(id).op); }) {
    for (const Expr& e : kernel_.exprs) {
      if (e.op == ExprOp::kLoad) loaded_args_.push_back(e.arg);
    }
  }

  void Block(std::vector<Stmt>& block) {
    for (Stmt& stmt : block) {
      if (stmt.kind == StmtKind::kLoop || stmt.kind == StmtKind::kReduce) Block(stmt.body);
    }
    for (size_t p = 0; p < block.size(); ++p) {
      if (block[p].kind != StmtKind::kReduce) continue;
      for (size_t q = p + 1; q < block.size(); ++q) {
        if (block[q].kind == StmtKind::kLoop && block[q].extent == block[p].extent) {
          TryPair(block, p, q);
        }
      }
    }
  }

 private:
  void TryPair(std::vector<Stmt>& block, size_t p, size_t q) {
    Stmt& reduce = block[p];
    Stmt& loop = block[q];
    equivalent_.clear();  // its answers hold for one pair of variables
    Stmt* store = nullptr;
    for (Stmt& stmt : loop.body) {
      if (stmt.kind != StmtKind::kLet && stmt.kind != StmtKind::kStore) return;
      if (stmt.kind == StmtKind::kStore && store == nullptr && stmt.predicate == kNoValue &&
          kernel_.args[static_cast<size_t>(stmt.arg)].role == ArgRole::kOutput) {
        store = &stmt;
      }
    }
    if (store == nullptr) return;
    const ArgId out = store->arg;
    const ir::DType dtype = kernel_.args[static_cast<size_t>(out)].dtype;
    if (dtype == ir::DType::kF16 || dtype == ir::DType::kBF16) return;
    if (std::find(loaded_args_.begin(), loaded_args_.end(), out) != loaded_args_.end()) return;
    if (has_accumulator_(store->index)) return;
    // The Loop's store must be the only one to `out` in its body, and neither the Reduce nor
    // anything between the two may store there.
    const auto stores_in_loop =
        std::count_if(loop.body.begin(), loop.body.end(),
                      [&](const Stmt& s) { return s.kind == StmtKind::kStore && s.arg == out; });
    if (stores_in_loop != 1) return;
    bool clobbered = false;
    auto stores_out = [&](const Stmt& stmt) {
      clobbered |= stmt.kind == StmtKind::kStore && stmt.arg == out;
    };
    ForEachStmt(reduce.body, stores_out);
    for (size_t k = p + 1; k < q; ++k) {
      stores_out(block[k]);
      ForEachStmt(block[k].body, stores_out);
    }
    if (clobbered) return;

    DagFlag uses_reduce_var(kernel_, IsVar(reduce.var));
    DagFlag uses_loop_var(kernel_, IsVar(loop.var));
    const std::vector<ValueId> computed = Reachable(reduce.value, uses_reduce_var);
    const std::vector<ValueId> recomputed = Reachable(store->value, uses_loop_var);
    const ScalarType stored_type = ComputeType(dtype);
    for (ValueId w : recomputed) {  // users first: the first match is the largest
      if (!costly_(w) || kernel_.expr(w).type != stored_type) continue;
      for (ValueId v : computed) {
        if (Equivalent(w, v, loop.var, reduce.var)) {
          Rewrite(reduce, loop, *store, w, v);
          return;
        }
      }
    }
  }

  // The expressions of `root`'s DAG for which `keep` holds, highest id (closest to the root)
  // first.
  std::vector<ValueId> Reachable(ValueId root, DagFlag& keep) {
    std::vector<ValueId> result, stack{root};
    std::vector<bool> seen(kernel_.exprs.size(), false);
    while (!stack.empty()) {
      const ValueId id = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(id)] || !keep(id)) continue;
      seen[static_cast<size_t>(id)] = true;
      result.push_back(id);
      for (ValueId operand : kernel_.expr(id).operands) stack.push_back(operand);
    }
    std::sort(result.begin(), result.end(), std::greater<>());
    return result;
  }

  // `w` (in the Loop, variable `loop_var`) computes what `v` (in the Reduce, `reduce_var`) does
  // on the same iteration. Loads must read inputs, which nothing in the kernel writes.
  bool Equivalent(ValueId w, ValueId v, VarId loop_var, VarId reduce_var) {
    if (w == v) return true;
    const auto key = std::make_pair(w, v);
    if (auto it = equivalent_.find(key); it != equivalent_.end()) return it->second;
    const Expr& a = kernel_.expr(w);
    const Expr& b = kernel_.expr(v);
    bool same = a.op == b.op && a.type == b.type && a.operands.size() == b.operands.size() &&
                a.int_value == b.int_value &&
                std::memcmp(&a.float_value, &b.float_value, sizeof(double)) == 0 && a.arg == b.arg;
    if (same && a.op == ExprOp::kVar) {
      same = (a.var == loop_var && b.var == reduce_var) ||
             (a.var == b.var && a.var != loop_var && a.var != reduce_var);
    } else if (same) {
      same = a.var == b.var;
    }
    if (same && a.op == ExprOp::kLoad) {
      same = kernel_.args[static_cast<size_t>(a.arg)].role == ArgRole::kInput;
    }
    for (size_t i = 0; same && i < a.operands.size(); ++i) {
      same = Equivalent(a.operands[i], b.operands[i], loop_var, reduce_var);
    }
    equivalent_[key] = same;
    return same;
  }

  // The Reduce stores `computed` where the Loop's store goes on the same iteration; the Loop
  // loads it back in place of `recomputed`.
  void Rewrite(Stmt& reduce, const Stmt& loop, Stmt& store, ValueId recomputed, ValueId computed) {
    const ValueId reduce_var =
        Append({.op = ExprOp::kVar, .type = ScalarType::kI64, .operands = {}, .var = reduce.var});
    const ValueId index_in_reduce = Substitute(store.index, IsVar(loop.var), reduce_var);
    Stmt early;
    early.kind = StmtKind::kStore;
    early.arg = store.arg;
    early.index = index_in_reduce;
    early.value = computed;
    reduce.body.push_back(early);
    // The Loop now loads `out`: no other Reduce may store there for it.
    loaded_args_.push_back(store.arg);
    const ValueId reloaded = Append({.op = ExprOp::kLoad,
                                     .type = kernel_.expr(recomputed).type,
                                     .operands = {store.index},
                                     .arg = store.arg});
    store.value = Substitute(
        store.value, [recomputed](ValueId id) { return id == recomputed; }, reloaded);
  }

  // `root` with every subexpression that `match` accepts replaced by `with` (the expressions on
  // the way to them copied; the others shared).
  ValueId Substitute(ValueId root, const std::function<bool(ValueId)>& match, ValueId with) {
    DagFlag contains(kernel_, match);
    std::map<ValueId, ValueId> done;
    std::function<ValueId(ValueId)> visit = [&](ValueId id) -> ValueId {
      if (match(id)) return with;
      if (!contains(id)) return id;
      if (auto it = done.find(id); it != done.end()) return it->second;
      Expr copy = kernel_.expr(id);
      for (ValueId& operand : copy.operands) operand = visit(operand);
      const ValueId result = Append(std::move(copy));
      done[id] = result;
      return result;
    };
    return visit(root);
  }

  std::function<bool(ValueId)> IsVar(VarId var) const {
    return [this, var](ValueId id) {
      const Expr& e = kernel_.expr(id);
      return e.op == ExprOp::kVar && e.var == var;
    };
  }

  ValueId Append(Expr e) {
    kernel_.exprs.push_back(std::move(e));
    return static_cast<ValueId>(kernel_.exprs.size() - 1);
  }

  Kernel& kernel_;
  DagFlag has_accumulator_;
  DagFlag costly_;
  std::vector<ArgId> loaded_args_;
  std::map<std::pair<ValueId, ValueId>, bool> equivalent_;
};

}  // namespace

Kernel ReuseReducedValues(Kernel kernel) {
  Reuser(kernel).Block(kernel.body);
  return kernel;
}

}  // namespace kiln::codegen
