// Convolution and pooling on type-erased handles: the non-template part of frontend/nn/conv.h.
// Each builds on the IR primitives conv, window_sum and window_max (docs/ir.md), so autodiff and
// every backend need rules for those alone. Inputs are batched, channels first ([N, C, spatial]),
// as in torch.
#pragma once

#include <cstdint>
#include <vector>

#include "frontend/engine.h"

namespace kiln::nn::detail {

using kiln::detail::Loc;
using kiln::detail::TensorRef;

/// Per-spatial-axis settings; each list has one entry per spatial axis.
struct ConvArgs {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  int64_t groups = 1;
};

/// The IR conv attributes of torch's conv{1,2,3}d of x (a float input) and weight, after its
/// checks (rank, channels and groups, the kernel fitting); throws kiln::Error naming `name`.
ir::Attrs ConvAttrs(const ir::TensorType& tx, const ir::TensorType& tw, const ConvArgs& args,
                    const char* name, const Loc& loc);

/// torch.nn.functional.conv{1,2,3}d: x [N, C, s...], weight [O, C / groups, k...], bias [O] or
/// null.
TensorRef ConvForward(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                      const ConvArgs& args, const char* name, const Loc& loc);

/// torch.nn.functional.conv_transpose{1,2}d: weight [C, O / groups, k...] (torch's layout),
/// out = (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1. Computed as a
/// convolution of the input dilated by `stride` with the flipped, transposed kernel.
TensorRef ConvTransposeForward(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                               const ConvArgs& args, const std::vector<int64_t>& output_padding,
                               const char* name, const Loc& loc);

struct PoolArgs {
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;  // defaults to kernel when empty (torch)
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;  // max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
};

/// Max over windows of the spatial axes; padding counts as -inf (torch). Needs padding <= k / 2.
TensorRef MaxPool(const TensorRef& x, const PoolArgs& args, const char* name, const Loc& loc);
/// Mean over windows; the divisor is the window size, or the number of non-padding elements when
/// !count_include_pad (torch's default is count_include_pad = true).
TensorRef AvgPool(const TensorRef& x, const PoolArgs& args, const char* name, const Loc& loc);
/// torch.nn.functional.adaptive_avg_pool{1,2}d: output cell i averages input
/// [floor(i * in / out), ceil((i + 1) * in / out)) on each spatial axis.
TensorRef AdaptiveAvgPool(const TensorRef& x, const std::vector<int64_t>& output_size,
                          const char* name, const Loc& loc);

}  // namespace kiln::nn::detail
