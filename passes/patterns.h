// Small predicates the simplify passes match on: which nodes are known values, and which uniform
// value (every element equal) a node holds.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::passes {

/// constant, fill or iota: leaves whose value is known at compile time (random_* are excluded:
/// constant folding must not materialize them).
bool IsKnownLeaf(ir::Op op);

/// When every element of `node`'s value is the same bit pattern: that element, as a rank-0
/// tensor of the node's dtype. For a fill, what fill stores (also when it has no elements); for a
/// constant with at least one element, when all elements are bitwise equal. nullopt otherwise.
std::optional<ir::TensorData> UniformElement(const ir::Node& node);

/// The element every element of `value` equals bit for bit, as a rank-0 tensor; nullopt when
/// they differ or there are none.
std::optional<ir::TensorData> UniformElementOf(const ir::TensorData& value);

/// True when `node` is uniform and its element is `value` stored in the node's dtype, compared
/// bit for bit (so -0 does not match 0). How rules recognise "a 1" or "a 0", whether it is a
/// fill or a constant.
bool IsUniform(const ir::Node& node, double value);

/// A double that fill stores as exactly `element` (a rank-0 tensor), or nullopt when none does
/// (an i64 beyond 2^53, a NaN payload the conversions do not keep).
std::optional<double> FillValueFor(const ir::TensorData& element);

/// The value of a fill that equals `node`'s value: a fill's own value, the element of a uniform
/// constant when FillValueFor has one, 0 for a constant without elements; nullopt otherwise.
std::optional<double> AsFillValue(const ir::Node& node);

/// Whether the permutation `axes` of a tensor of `shape` keeps the axes longer than 1 in their
/// order, i.e. only moves size-1 axes: the elements stay in row-major order, so the permute is a
/// reshape (and the identity when the shape does not change).
bool MovesOnlyUnitAxes(const std::vector<int64_t>& axes, const ir::Shape& shape);

}  // namespace kiln::passes
