// Type inference: the result type of an op from its operand types and attributes. The builder,
// the verifier, the parser and the frontend (at the user's line, before anything runs) all use
// this one function, so a type rule lives in exactly one place.
#pragma once

#include <span>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace kiln::ir {

/// The result type of `op` applied to operands of `inputs` types with `attrs`, or an
/// InvalidArgument error whose message starts with the op name and lists the operand types,
/// e.g. "matmul: contracting dimensions differ (3 vs 4); operands f32[2,3], f32[4,5]".
absl::StatusOr<TensorType> InferType(Op op, std::span<const TensorType> inputs, const Attrs& attrs);

/// Number of tensor operands `op` takes, or -1 for variadic (concat takes one or more).
int NumOperands(Op op);

/// Output spatial size of a convolution or window along one axis, or a negative value when the
/// window does not fit: floor((dilated_in + low + high - dilated_window) / stride) + 1.
int64_t WindowOutputSize(int64_t in, int64_t window, int64_t stride, int64_t low, int64_t high,
                         int64_t dilation, int64_t input_dilation);

}  // namespace kiln::ir
