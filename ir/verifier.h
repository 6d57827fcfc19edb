// The verifier: checks any Graph (built, parsed or rewritten by a pass) against the IR's rules.
#pragma once

#include "absl/status/status.h"
#include "ir/graph.h"

namespace kiln::ir {

/// OK when: every operand id names an earlier node (topological order); each node's type is what
/// InferType gives for its operands and attributes; no node sets an attribute its op does not use;
/// parameter names are unique; outputs name existing nodes and output names are unique when set.
/// Errors name the node ("%4 = add"), the rule and, when known, the source line.
absl::Status Verify(const Graph& graph);

}  // namespace kiln::ir
