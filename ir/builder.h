// Builder: appends nodes to a Graph, inferring each result type and checking operands.
//
// Like XLA's XlaBuilder, errors are deferred: an op with bad operands records the first error
// (with the op, the operand types and the caller's source line) and returns kInvalidNode; every
// later op on an invalid operand is skipped. Check `status()` or call `Build()` at the end.
//
//   ir::Builder b;
//   auto x = b.Parameter("x", {ir::DType::kF32, {2, 3}});
//   auto y = b.Unary(ir::Op::kExp, x);
//   b.Output(y);
//   absl::StatusOr<ir::Graph> graph = std::move(b).Build();
#pragma once

#include <source_location>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace kiln::ir {

class Builder {
 public:
  using Loc = std::source_location;

  Builder() = default;
  /// Appends to an existing graph (e.g. a pass adding nodes).
  explicit Builder(Graph graph) : graph_(std::move(graph)) {}

  /// The generic form: every helper below calls it.
  NodeId Emit(Op op, std::vector<NodeId> inputs, Attrs attrs, Loc loc = Loc::current());

  // Leaves.
  NodeId Parameter(std::string name, TensorType type, Loc loc = Loc::current());
  NodeId Constant(TensorData literal, Loc loc = Loc::current());
  NodeId Fill(double value, TensorType type, Loc loc = Loc::current());
  NodeId Iota(TensorType type, int64_t axis, Loc loc = Loc::current());
  NodeId RandomUniform(TensorType type, uint64_t seed, Loc loc = Loc::current());
  NodeId RandomNormal(TensorType type, uint64_t seed, Loc loc = Loc::current());

  // Elementwise.
  NodeId Unary(Op op, NodeId x, Loc loc = Loc::current());
  NodeId Binary(Op op, NodeId a, NodeId b, Loc loc = Loc::current());
  NodeId Select(NodeId cond, NodeId on_true, NodeId on_false, Loc loc = Loc::current());
  NodeId Cast(NodeId x, DType dtype, Loc loc = Loc::current());

  // Reductions; reduced axes stay with size 1.
  NodeId Reduce(Op op, NodeId x, std::vector<int64_t> axes, Loc loc = Loc::current());
  NodeId ArgReduce(Op op, NodeId x, int64_t axis, Loc loc = Loc::current());

  // Movement.
  NodeId Reshape(NodeId x, Shape shape, Loc loc = Loc::current());
  NodeId Permute(NodeId x, std::vector<int64_t> perm, Loc loc = Loc::current());
  NodeId Broadcast(NodeId x, Shape shape, Loc loc = Loc::current());
  NodeId Slice(NodeId x, std::vector<int64_t> starts, std::vector<int64_t> limits,
               std::vector<int64_t> strides = {}, Loc loc = Loc::current());
  NodeId Pad(NodeId x, std::vector<int64_t> low, std::vector<int64_t> high, double value = 0.0,
             Loc loc = Loc::current());
  NodeId Concat(std::vector<NodeId> inputs, int64_t axis, Loc loc = Loc::current());
  NodeId Flip(NodeId x, std::vector<int64_t> axes, Loc loc = Loc::current());

  // Indexing (torch.gather / scatter_add semantics along one axis).
  NodeId Gather(NodeId x, NodeId index, int64_t axis, Loc loc = Loc::current());
  NodeId ScatterAdd(NodeId x, NodeId index, NodeId src, int64_t axis, Loc loc = Loc::current());

  // Contractions.
  NodeId MatMul(NodeId a, NodeId b, Loc loc = Loc::current());
  /// matmul {accumulate}: integer operands (u8 x i8, ...) multiplied and summed exactly in the
  /// wider integer dtype `accumulate` (ONNX MatMulInteger without zero points).
  NodeId IntegerMatMul(NodeId a, NodeId b, DType accumulate, Loc loc = Loc::current());
  /// `conv_attrs` uses strides, low, high, dilation, input_dilation and groups.
  NodeId Conv(NodeId input, NodeId weight, Attrs conv_attrs, Loc loc = Loc::current());
  /// `window_attrs` uses window, strides, low, high and dilation; op is kWindowSum/kWindowMax.
  NodeId WindowReduce(Op op, NodeId x, Attrs window_attrs, Loc loc = Loc::current());

  /// Marks a node as a graph output.
  void Output(NodeId node, std::string name = "");

  /// The type of a node already built.
  const TensorType& type(NodeId id) const { return graph_.node(id).type; }
  const Graph& graph() const { return graph_; }
  /// OK, or the first error recorded.
  const absl::Status& status() const { return status_; }

  /// The finished graph, or the first error.
  absl::StatusOr<Graph> Build() &&;

 private:
  Graph graph_;
  absl::Status status_;
};

/// Prefixes an op error with the user's line: "model.cc:12: add: operand shapes differ ...".
absl::Status AnnotateWithLocation(const absl::Status& status, const std::source_location& loc);

}  // namespace kiln::ir
