// The IR's text form (MLIR-like), written by PrintGraph and read back by ir::ParseGraph:
//
//   graph {
//     %0 = parameter() {name="x"} : f32[2,3]
//     %1 = fill() {value=1} : f32[2,3]
//     %2 = add(%0, %1) : f32[2,3]
//     %3 = reduce_sum(%2) {axes=[1]} : f32[2,1]
//     %4 = constant() {literal=[1, 2.5, -3]} : f32[3]
//     return %2 as "y", %3
//   }
//
// Only attributes that differ from their defaults are printed. attrs.dtype and attrs.shape are
// left out where the result type already says them (parameter, fill, iota, random_*: both; cast:
// dtype; reshape, broadcast: shape), and the parser restores them from it. Numbers round-trip
// exactly: doubles and float literal elements in their shortest exact form, nan / -nan / inf /
// -inf spelled out, NaNs other than the default quiet NaN as nan(0x<bits>). docs/ir.md has the
// grammar.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::ir {

struct PrintOptions {
  /// Appends "  // file.cc:12" to nodes whose creation site is known. Comments are skipped by
  /// the parser, which leaves Node::loc empty.
  bool locations = false;
  /// When >= 0, a constant literal prints at most this many elements followed by "..." (for
  /// dumps and pictures of big graphs). Such text no longer parses.
  int64_t max_literal_elements = -1;
};

/// The whole graph in the text form above. Works on any graph, including one that fails
/// ir::Verify (dangling operands print as their ids; attributes an op does not use print too),
/// so it can be used to show what is wrong.
std::string PrintGraph(const Graph& graph, const PrintOptions& options = {});

/// One node, as it appears in PrintGraph without indentation: "%2 = add(%0, %1) : f32[2,3]".
std::string PrintNode(const Graph& graph, NodeId id, const PrintOptions& options = {});

/// The attribute list of a node without braces ("axes=[1], value=0.5"), "" when it has none.
std::string PrintAttrs(const Node& node, const PrintOptions& options = {});

/// `text` as a double-quoted string literal of the text form: printable ASCII as is except
/// '"' and '\\', which are backslash-escaped; \n, \t, \r; every other byte as \xHH. The result is
/// pure printable ASCII.
std::string QuoteString(std::string_view text);

/// The Attrs fields (an AttrField mask) that the text form leaves out when they equal the result
/// type, because the op's result type is made of them: dtype and shape for parameter, fill, iota
/// and random_*; dtype for cast; shape for reshape and broadcast; 0 for other ops.
uint32_t AttrsFromResultType(Op op);

/// The bit pattern (in the low bits) that "nan" denotes for a float dtype: its default quiet NaN,
/// the one FloatToHalf / FloatToBFloat16 produce (f32 0x7fc00000, f64 0x7ff8000000000000, f16
/// 0x7e00, bf16 0x7fc0). 0 for other dtypes.
uint64_t DefaultNaNBits(DType dtype);

/// A double in the shortest form that reads back to the same bits: "1", "-0", "2.5e-08",
/// "inf", "-inf", "nan", "-nan", or "nan(0x7ff8000000000001)" for any other NaN.
std::string FormatDouble(double value);

}  // namespace kiln::ir
