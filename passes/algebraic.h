// Algebraic identities.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

/// Removes operations that return an operand unchanged, bit for bit, for every input (NaN, inf
/// and signed zeros included). "1" and "0" are a fill or a constant whose elements all equal
/// it (passes::IsUniform), in either operand position where the op commutes:
///  - x * 1, x / 1 -> x; x + 0 and x - 0 -> x for integers; for floats x + (-0) -> x and
///    x - (+0) -> x (x + (+0) is not x when x is -0, so it stays);
///  - x * 0 -> 0 for integers only (for floats NaN * 0 and inf * 0 are NaN);
///  - neg(neg(x)), not(not(x)) -> x;
///  - cast to x's own dtype; reshape, broadcast, slice or pad whose result has x's type; a
///    permute with x's type that keeps the axes longer than 1 in order; flip of no axis or only
///    size-1 axes; concat of one operand -> x;
///  - select(c, a, a) -> a; select with an all-true / all-false condition -> that branch;
///  - reduce_max, reduce_min, reduce_prod over axes that all have size 1 -> x (reduce_sum too
///    for integers; for floats 0 + (-0) is +0); argmax / argmin over a size-1 axis -> fill 0.
class AlgebraicSimplification : public Pass {
 public:
  const char* name() const override { return "algebraic"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override;
};

}  // namespace kiln::passes
