// Reads the IR's text form (see ir/printer.h and docs/ir.md) back into a Graph.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace kiln::ir {

/// Parses a graph written by PrintGraph, or by hand in the same grammar.
///
/// Node ids in the text may use any numbering as long as each value is defined before it is
/// used; they are renumbered densely in order of definition. `// comments` run to the end of
/// the line. Each node is type-checked as it is read (ir::InferType must agree with the written
/// result type), and ir::Verify runs on the finished graph.
///
/// Errors are InvalidArgument with the position and what was expected, e.g.
/// "3:14: expected ',' or ')' after operand" or "4:3: %2 = add: operand shapes differ ...".
/// The input is treated as untrusted: any byte string gives a graph or an error, with memory
/// bounded by the input's size. Types are limited to 2^31 elements (the product of the non-zero
/// dimensions), integer attributes to magnitudes of at most 2^31.
absl::StatusOr<Graph> ParseGraph(std::string_view text);

}  // namespace kiln::ir
