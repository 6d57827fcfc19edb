// Graphviz (DOT) pictures of graphs, for dumps: `dot -Tsvg graph.dot -o graph.svg`.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::ir {

struct DotOptions {
  /// Constant literals show at most this many elements.
  int64_t max_literal_elements = 8;
  /// Attribute text longer than this is cut with "..." (long names, long lists).
  int64_t max_attr_chars = 120;
};

/// A DOT digraph of `graph`: one box per node labelled "%id op", its key attributes and its
/// result type; edges run operand -> user (labelled with the operand index when the op takes
/// several); parameters are green ellipses, constants and other leaves grey, and each output is
/// a house-shaped node with its index and name. Works on any graph, including one that fails
/// ir::Verify (a dangling operand becomes a red "missing %id" node). The text is pure ASCII.
std::string ToDot(const Graph& graph, const DotOptions& options = {});

}  // namespace kiln::ir
