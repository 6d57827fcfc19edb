// Common subexpression elimination.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

/// Hash-conses the graph: a node equal to an earlier one (same op, attributes bit for bit, type
/// and operands after renaming) is replaced by it. Candidates come from ir::NodeHashes (a Merkle
/// hash, so equal values chain through operands) and are confirmed by comparing the nodes, so a
/// hash collision cannot merge different values. Parameters are never merged (their names
/// differ). random_* nodes with equal seeds and types are merged: their values are equal by
/// definition (counter-based generation). The duplicates are left for DCE.
class CommonSubexpressionElimination : public Pass {
 public:
  const char* name() const override { return "cse"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override;
};

}  // namespace kiln::passes
