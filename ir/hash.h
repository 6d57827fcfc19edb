// Structural hashing of graphs: the key of the compile cache and the basis of CSE.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

/// A Merkle hash (XXH3-64) of the computation a graph describes: each node hashes its op, its
/// attributes (all fields, by value; doubles and literals by their exact bits, so -0.0 and 0.0
/// or two NaN payloads differ, unlike Attrs::operator==), its result type and its operands'
/// hashes in order; a parameter hashes its name and type. The graph hash combines the outputs in
/// order, with their names.
///
/// So the hash does not depend on node numbering (the same computation built in another
/// topological order hashes equal) nor on source locations, and nodes unreachable from the
/// outputs do not affect it. Any change of an op, attribute, dtype, shape, parameter name,
/// output name or output order changes it (up to 64-bit collisions).
///
/// It describes the computation, not the calling convention: the order of the parameters and
/// parameters no output uses do not enter it. A cache of compiled graphs that are called with
/// positional arguments must key on SignatureHash instead.
///
/// Works on any graph: an operand that is not an earlier node hashes as a fixed marker.
uint64_t StructuralHash(const Graph& graph);

/// StructuralHash combined with the positional signature: every parameter's name and type in id
/// order (Graph::Parameters(), used or not). Equal for graphs that can share one compiled
/// executable called with positional arguments.
uint64_t SignatureHash(const Graph& graph);

/// The per-node Merkle hashes StructuralHash builds on, one per node in id order. Two nodes with
/// equal hashes compute the same value (up to collisions), which is what CSE looks for.
std::vector<uint64_t> NodeHashes(const Graph& graph);

}  // namespace kiln::ir
