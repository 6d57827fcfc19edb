// Folding of chained movement ops.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

/// Composes chains of movement ops into one, and moves known-uniform values through them:
///  - reshape(reshape(x)) -> reshape(x); broadcast(broadcast(x)) -> broadcast(x);
///  - permute(permute(x, p), q) -> permute(x, r) with r[i] = p[q[i]] (x when r is the identity);
///  - slice(slice(x)) -> one slice (start a + b * s, stride s * t);
///  - flip(flip(x, A), B) -> flip(x, A xor B) (x when A == B);
///  - a permute that keeps the axes longer than 1 in order (it only moves size-1 axes) ->
///    reshape, or x when the type does not change;
///  - reshape, broadcast, permute, slice or flip of a fill (or of a constant whose elements are
///    all equal, such as a broadcast scalar) -> a fill of the new shape; pad of such a value
///    with a padding value stored equal to it, and concat of such values that are all equal,
///    likewise;
///  - permute(matmul(a, b)) swapping the last two axes, the matmul used only there ->
///    matmul(b^T, a^T) (autodiff's weight gradients: the GEMM then writes dW in the parameter's
///    layout instead of the update reading it transposed).
class MovementFolding : public Pass {
 public:
  const char* name() const override { return "movement_fold"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override;
};

}  // namespace kiln::passes
