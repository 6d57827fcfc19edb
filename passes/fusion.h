// Fusion: partitions the computed nodes of a graph into groups, each of which becomes one kernel
// (codegen::LowerGroup, or the GEMM generator for contraction groups).
//
// Rules (every producer → consumer decision is recorded with its reason, fused or not):
//  - Elementwise ops, movement ops (reshape, permute, broadcast, slice, pad, concat, flip),
//    gather and window ops fuse into their consumer's group when every user of the producer is
//    in that group; otherwise the producer is materialized (it starts a group of its own).
//    Movement ops become index arithmetic on their consumers' loads.
//  - A reduction (reduce_*, argmax/argmin) fuses its elementwise consumers and producers: one
//    kReduction group holds reductions with the same outer (kept) shape and the elementwise ops
//    around them, so softmax and layer norm are one kernel each. The group's outputs have
//    either the outer shape's element count (stored per row) or a reduction input's count
//    (stored by an inner loop over the row).
//  - matmul/conv take an elementwise epilogue (bias, activation, residual add): a kContraction
//    group is the contraction plus elementwise consumers reading its result at the same index.
//    Their operands are never fused (the GEMM packs materialized buffers).
//  - scatter_add is a kScatter group of its own (its result is complete only at the end) that
//    may absorb elementwise/movement producers of its operands. sort/argsort are kScatter groups
//    too (each element is stored at its rank); they absorb movement producers only.
//  - Leaves without inputs (fill, iota, random_*, constants whose elements are all equal) are
//    recomputed inside every group that uses them; parameters and other constants are buffers.
//  - Groups with the same iteration space then merge: a producer group into its consumer group
//    when no third group sits between them (log-softmax's row statistics and the values that
//    also feed a loss with other rows: the producer's values stay stored for their other
//    users), and siblings that read a common buffer and do not depend on each other (one
//    multi-output kernel). Each merge is recorded as a fused decision.
//  - A group of movement ops only is kCopy; a parameter or constant that is itself a graph
//    output gets a kCopy group with no nodes that copies the buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

enum class FusionKind : uint8_t {
  /// One loop over the outputs' elements (all outputs have the same element count).
  kElementwise,
  /// Rows of the reductions' outer shape in parallel; reductions and elementwise ops per row.
  kReduction,
  /// matmul/conv with a fused elementwise epilogue.
  kContraction,
  /// scatter_add, sort or argsort (stores at data-dependent positions) with fused producers.
  kScatter,
  /// Movement only (or a straight copy of a parameter/constant graph output).
  kCopy,
};
const char* FusionKindName(FusionKind kind);

struct FusionGroup {
  FusionKind kind = FusionKind::kElementwise;
  /// The nodes this group computes, ascending (topological). Includes the recomputed leaves
  /// (fill, iota, random_*, splat constants) its other nodes use.
  std::vector<ir::NodeId> nodes;
  /// Values read from outside, ascending: parameters, non-splat constants and other groups'
  /// outputs.
  std::vector<ir::NodeId> inputs;
  /// The values the group's kernel writes, ascending: its nodes that are graph outputs or have
  /// users outside the group. A kCopy group with no nodes has its parameter/constant here.
  std::vector<ir::NodeId> outputs;
  /// kContraction: the matmul/conv. kScatter: the scatter_add/sort/argsort. Otherwise the
  /// group's last node.
  ir::NodeId root = ir::kInvalidNode;
  /// kReduction: the shape every reduction keeps (input shape with reduced axes set to 1).
  ir::Shape outer_shape;
};

/// Why a producer was or was not fused into a consumer's group.
struct FusionDecision {
  ir::NodeId producer = ir::kInvalidNode;
  ir::NodeId consumer = ir::kInvalidNode;
  bool fused = false;
  std::string reason;
};

struct FusionPlan {
  /// Groups in an order where every group comes after the groups whose outputs it reads.
  std::vector<FusionGroup> groups;
  /// One decision per producer → consumer edge between computed nodes (parameters, non-splat
  /// constants and recomputed leaves are not decisions), in the order they were made.
  std::vector<FusionDecision> decisions;
  /// Per node: the index of the group whose kernel writes it, or -1 (parameters, constants,
  /// leaves recomputed inside their users, nodes no output needs).
  std::vector<int32_t> group_of;
};

/// Fuses a verified graph.
FusionPlan Fuse(const ir::Graph& graph);

/// True for leaf nodes that are recomputed inside each group using them instead of being read
/// from a buffer: fill, iota, random_*, and constants with at most one distinct element value.
bool IsRecomputedLeaf(const ir::Node& node);

/// The plan as text (the dump's fusion.txt): each group with its kind, nodes (op and type),
/// inputs and outputs, then every decision, e.g.
///
///   group 0 reduction outer=[4,1]: %1 reduce_max f32[4,1], %2 broadcast f32[4,8], ...
///     inputs: %0   outputs: %7
///   decisions:
///     %6 -> %7 fused: elementwise chain
///     %3 -> %9 refused: consumer is a matmul operand: needs a materialized buffer
std::string PrintFusionPlan(const ir::Graph& graph, const FusionPlan& plan);

}  // namespace kiln::passes
