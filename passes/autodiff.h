// Reverse-mode automatic differentiation as an ir -> ir transformation.
//
// AppendGradients adds to a graph the nodes that compute vector-Jacobian products, one rule per
// primitive op (docs/passes.md lists them). The result is an ordinary graph: it prints, verifies,
// simplifies, fuses and compiles like any other, and it can be differentiated again, which is how
// gradients of gradients work. The frontend's `loss.backward()` builds a graph from its lazy DAG,
// calls AppendGradients, and turns the appended nodes back into lazy tensors.
//
//   ir::Builder b;
//   auto x = b.Parameter("x", {ir::DType::kF64, {3}});
//   auto y = b.Reduce(ir::Op::kReduceSum, b.Unary(ir::Op::kExp, x), {0});
//   ...
//   absl::StatusOr<passes::GradientGraph> g = passes::AppendGradients(graph, y, {x});
//   // g->graph holds every node of `graph` unchanged, followed by the gradient nodes;
//   // g->gradients[0] is d sum(exp(x)) / dx = exp(x).
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

/// True for ops with a gradient rule. Every other op (comparisons, logical ops, argmax/argmin,
/// integer-valued leaves) is a constant for differentiation: no gradient flows through it.
/// Ops whose derivative is zero almost everywhere (floor, ceil, round, sign) are differentiable
/// and give zero.
bool IsDifferentiable(ir::Op op);

/// A graph with gradient nodes appended.
struct GradientGraph {
  /// The input graph's nodes with their ids unchanged and its outputs unchanged, followed by the
  /// new nodes (which only ever read earlier nodes).
  ir::Graph graph;
  /// gradients[i]: the id of d<seed, y>/d wrt[i], of wrt[i]'s type. A zero-filled node when `y`
  /// does not depend on wrt[i].
  std::vector<ir::NodeId> gradients;
};

/// Appends the nodes computing the gradient of `y` with respect to each of `wrt` (floating-point
/// nodes of `graph`, any op, parameters included). `seed` is the cotangent of `y` (a node of y's
/// type); kInvalidNode means "ones", which needs `y` to have one element (a loss).
///
/// Only nodes on a path from some wrt to `y` are differentiated (in reverse id order; a node's
/// cotangent is the sum of its users' contributions), and integer/bool values carry none. The new
/// nodes carry the source location of the forward node whose rule made them, so an error in a
/// gradient names the user's line. Errors (InvalidArgument): a non-float `y` or `wrt`, a missing
/// seed for a non-scalar `y`, a seed whose type is not y's, an id out of range.
absl::StatusOr<GradientGraph> AppendGradients(const ir::Graph& graph, ir::NodeId y,
                                              std::span<const ir::NodeId> wrt,
                                              ir::NodeId seed = ir::kInvalidNode);

/// The pass form, for pipelines, dumps and printed-IR tests: output 0 must be a one-element float
/// value (the loss); the pass appends one output per floating-point parameter, in parameter
/// order, named "grad.<parameter name>".
class GradientPass : public Pass {
 public:
  const char* name() const override { return "autodiff"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override;
};

}  // namespace kiln::passes
