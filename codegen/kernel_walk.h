// Walks over a kernel's expressions and statements that the kernel-IR passes share
// (reuse_reduced.h, hoist_checks.h).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Whether an expression's DAG holds a leaf (or op) that `test` accepts, memoized per id. Grows
/// with the kernel, so a pass may append expressions while it asks. `kernel` must outlive it.
class DagFlag {
 public:
  DagFlag(const Kernel& kernel, std::function<bool(ValueId)> test)
      : kernel_(kernel), test_(std::move(test)) {}

  bool operator()(ValueId id);

 private:
  static constexpr int8_t kUnknown = -1;
  const Kernel& kernel_;
  std::function<bool(ValueId)> test_;
  std::vector<int8_t> memo_;
};

/// Calls `fn` on every statement of `block`, nested ones included.
void ForEachStmt(const std::vector<Stmt>& block, const std::function<void(const Stmt&)>& fn);

}  // namespace kiln::codegen
