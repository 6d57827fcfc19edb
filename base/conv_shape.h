// The output-shape rule of convolutions and windows, in the leaf library: ir::InferType (the
// compiler's type check of `conv`) and the runtime's convolution driver (runtime/cpu/gemm.h,
// which checks a blob's descriptors) apply the same rule without the runtime linking the IR.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::base {

/// Output spatial size of a convolution or window along one axis, or a negative value when the
/// window does not fit: floor((dilated_in + low + high - dilated_window) / stride) + 1.
int64_t WindowOutputSize(int64_t in, int64_t window, int64_t stride, int64_t low, int64_t high,
                         int64_t dilation, int64_t input_dilation);

/// A convolution's attributes (ir::Attrs of `conv`): one entry per spatial axis, or empty for
/// the default (stride 1, padding 0, dilation 1, input dilation 1).
struct ConvGeometry {
  std::span<const int64_t> strides, low, high, dilation, input_dilation;
  int64_t groups = 1;
};

/// The output shape [N, O, S'...] of a convolution of input [N, C, S...] with weight
/// [O, C / groups, K...] (docs/ir.md), or InvalidArgument saying what does not fit, without an
/// op prefix: "groups 3 must divide input channels 4 and output channels 6", "kernel of size 5
/// does not fit spatial axis 0 of size 3", ...
absl::StatusOr<std::vector<int64_t>> ConvOutputShape(std::span<const int64_t> input,
                                                     std::span<const int64_t> weight,
                                                     const ConvGeometry& geometry);

}  // namespace kiln::base
