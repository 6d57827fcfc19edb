// The reference interpreter: executes any verified Graph with plain loops. Float math is done in
// double and each result is rounded to its dtype (reductions, matmul and conv accumulate in
// double), so it is the slow, obviously-correct oracle every backend is tested against.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::ir {

/// Runs `graph`. `arguments` are the values of graph.Parameters(), in that order, and must match
/// their types exactly. Returns one value per graph output, in order. Errors (a bad argument, an
/// out-of-range gather index) name the node, its op and the source line when known.
absl::StatusOr<std::vector<TensorData>> Interpret(const Graph& graph,
                                                  std::span<const TensorData> arguments);

}  // namespace kiln::ir
