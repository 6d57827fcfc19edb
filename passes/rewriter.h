// GraphRewriter: the one way passes rebuild a graph.
//
// ir::Graph is append-only and topologically ordered, so a pass does not edit nodes in place: it
// walks the source graph in order and appends to a new one, mapping each source node either to a
// copy (operands renamed to their new ids) or to a replacement it emits. New nodes go through
// ir::Builder, so their types are inferred and checked; a replacement must have the type of the
// node it replaces. Source locations and output names carry over.
//
//   GraphRewriter rw(graph);
//   for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
//     ir::NodeId replacement = TrySimplify(rw, id);  // kInvalidNode: keep the node
//     rw.Map(id, replacement != ir::kInvalidNode ? replacement : rw.Copy(id));
//   }
//   return std::move(rw).Finish();
//
// RewriteEachNode packages that loop. Rules look at the *new* graph through Input()/node(), so
// chains collapse in one sweep: neg(neg(neg(neg x))) becomes x because the outer pair sees the
// already-simplified inner one.
#pragma once

#include <functional>
#include <source_location>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/builder.h"
#include "ir/graph.h"

namespace kiln::passes {

class GraphRewriter {
 public:
  /// `source` must outlive the rewriter.
  explicit GraphRewriter(const ir::Graph& source);

  const ir::Graph& source() const { return source_; }
  /// The graph built so far.
  const ir::Graph& graph() const { return builder_.graph(); }
  /// A node of the new graph.
  const ir::Node& node(ir::NodeId new_id) const { return builder_.graph().node(new_id); }

  /// The new id of source node `old`; kInvalidNode until Map(old, ...) ran.
  ir::NodeId Mapped(ir::NodeId old) const { return map_[static_cast<size_t>(old)]; }
  /// The new id of operand `k` of source node `old` (which must already be mapped).
  ir::NodeId Input(ir::NodeId old, size_t k) const;
  /// All operands of source node `old`, as new ids.
  std::vector<ir::NodeId> Inputs(ir::NodeId old) const;

  /// Appends a copy of source node `old` with its operands mapped; returns the new id. Does not
  /// Map it.
  ir::NodeId Copy(ir::NodeId old);
  /// Appends a node over new-graph operands; its type is inferred. `loc` is normally that of the
  /// source node being replaced. Returns kInvalidNode (and Finish reports why) on a type error.
  ir::NodeId Emit(ir::Op op, std::vector<ir::NodeId> inputs, ir::Attrs attrs,
                  std::source_location loc);
  /// Emits `fill(value)` of `type`.
  ir::NodeId EmitFill(double value, const ir::TensorType& type, std::source_location loc);

  /// Records that source node `old` is now computed by new node `new_id`. The types must be
  /// equal; otherwise Finish fails naming the node (a bug in the pass).
  void Map(ir::NodeId old, ir::NodeId new_id);

  /// The new graph with the source's outputs (mapped, names kept), verified; or the first error.
  absl::StatusOr<ir::Graph> Finish() &&;

 private:
  const ir::Graph& source_;
  ir::Builder builder_;
  std::vector<ir::NodeId> map_;
  absl::Status status_;
};

/// For every source node in id order, `rule(rw, old)` returns a new-graph node that replaces it,
/// or kInvalidNode to keep a copy. Returns the rewritten graph.
using RewriteRule = std::function<ir::NodeId(GraphRewriter&, ir::NodeId)>;
absl::StatusOr<ir::Graph> RewriteEachNode(const ir::Graph& graph, const RewriteRule& rule);

/// True when the graphs have the same nodes (op, operands, attributes bit for bit, type) and the
/// same outputs; source locations are ignored. How a fixed-point loop sees that nothing changed.
bool SameGraph(const ir::Graph& a, const ir::Graph& b);

}  // namespace kiln::passes
