#include "frontend/nn/conv_ops.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "frontend/amp/autocast.h"
#include "frontend/error.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn::detail {

namespace {

using kiln::detail::OperandTypes;
using kiln::detail::ThrowOpError;
using kiln::detail::ThrowOpErrorByRef;
using kiln::detail::TypeOf;

std::string List(const std::vector<int64_t>& v) { return kiln::detail::DimsToString(v); }

/// `values` with one entry per spatial axis: a single value is repeated, an empty list gives
/// `fallback`.
std::vector<int64_t> PerAxis(const std::vector<int64_t>& values, size_t spatial, int64_t fallback,
                             int64_t min, const char* what, const char* name,
                             const ir::TensorType& type, const Loc& loc) {
  std::vector<int64_t> out;
  if (values.empty()) {
    out.assign(spatial, fallback);
  } else if (values.size() == 1) {
    out.assign(spatial, values[0]);
  } else if (values.size() == spatial) {
    out = values;
  } else {
    ThrowOpError(name, absl::StrCat(what, " ", List(values), " needs 1 or ", spatial, " entries"),
                 {type}, loc);
  }
  for (int64_t v : out) {
    if (v < min) {
      ThrowOpError(name, absl::StrCat(what, " ", List(out), " must be >= ", min), {type}, loc);
    }
  }
  return out;
}

void CheckInput(const ir::TensorType& tx, int64_t rank, const char* name, OperandTypes operands,
                const Loc& loc) {
  if (tx.rank() != rank) {
    ThrowOpErrorByRef(name,
                      absl::StrCat("the input must have rank ", rank, " ([N, C, ", rank - 2,
                                   " spatial dims]), got ", tx.rank()),
                      operands, loc);
  }
  if (!ir::IsFloat(tx.dtype)) ThrowOpErrorByRef(name, "needs a float input", operands, loc);
  for (int64_t i = 2; i < rank; ++i) {
    if (tx.shape[static_cast<size_t>(i)] == 0) {
      ThrowOpErrorByRef(name, "spatial dims must not be empty", operands, loc);
    }
  }
}

/// bias [O] added to y [N, O, spatial...].
TensorRef AddChannelBias(const TensorRef& y, const TensorRef& bias_in, int64_t channels,
                         const char* name, const Loc& loc) {
  if (bias_in == nullptr) return y;
  const TensorRef bias = kiln::detail::AutocastBias(bias_in, y, name, loc);
  const ir::TensorType& tb = TypeOf(bias);
  if (tb.rank() != 1 || tb.shape[0] != channels) {
    ThrowOpError(name, absl::StrCat("bias must have shape [", channels, "]"), {TypeOf(y), tb}, loc);
  }
  ir::Shape shape(static_cast<size_t>(TypeOf(y).rank() - 1), 1);
  shape[0] = channels;
  return kiln::detail::Binary(
      ir::Op::kAdd, y, kiln::detail::ReshapeTo(bias, std::move(shape), name, loc), name, loc);
}

/// Output size of one axis as the IR's WindowOutputSize computes it, or < 1 when nothing fits.
int64_t OutSize(int64_t in, int64_t window, int64_t stride, int64_t low, int64_t high,
                int64_t dilation, int64_t input_dilation) {
  const int64_t dilated_in = (in - 1) * input_dilation + 1;
  const int64_t dilated_window = (window - 1) * dilation + 1;
  const int64_t span = dilated_in + low + high - dilated_window;
  if (span < 0) return 0;
  return span / stride + 1;
}

}  // namespace

ir::Attrs ConvAttrs(const ir::TensorType& tx, const ir::TensorType& tw, const ConvArgs& args,
                    const char* name, const Loc& loc) {
  CheckInput(tx, tw.rank(), name, {tx, tw}, loc);
  const size_t spatial = static_cast<size_t>(tw.rank() - 2);
  const int64_t groups = args.groups;
  if (groups < 1 || tw.shape[0] % groups != 0 || tw.shape[1] * groups != tx.shape[1]) {
    ThrowOpError(name,
                 absl::StrCat("the input's channels (", tx.shape[1], ") must equal weight.shape[1]",
                              " * groups (", tw.shape[1], " * ", groups,
                              "), and groups must divide the output channels (", tw.shape[0], ")"),
                 {tx, tw}, loc);
  }
  ir::Attrs attrs;
  attrs.strides = PerAxis(args.stride, spatial, 1, 1, "stride", name, tx, loc);
  attrs.low = PerAxis(args.padding, spatial, 0, 0, "padding", name, tx, loc);
  attrs.high = attrs.low;
  attrs.dilation = PerAxis(args.dilation, spatial, 1, 1, "dilation", name, tx, loc);
  attrs.groups = groups;
  for (size_t i = 0; i < spatial; ++i) {
    if (OutSize(tx.shape[i + 2], tw.shape[i + 2], attrs.strides[i], attrs.low[i], attrs.high[i],
                attrs.dilation[i], 1) < 1) {
      ThrowOpError(
          name,
          absl::StrCat("the (dilated) kernel does not fit in the padded input on spatial "
                       "dim ",
                       i, " (padding ", List(attrs.low), ", dilation ", List(attrs.dilation), ")"),
          {tx, tw}, loc);
    }
  }
  return attrs;
}

TensorRef ConvForward(const TensorRef& x_in, const TensorRef& weight_in, const TensorRef& bias,
                      const ConvArgs& args, const char* name, const Loc& loc) {
  const TensorRef x = kiln::detail::AutocastToLow(x_in, name, loc);
  const TensorRef weight = kiln::detail::AutocastToLow(weight_in, name, loc);
  const ir::TensorType& tw = TypeOf(weight);
  ir::Attrs attrs = ConvAttrs(TypeOf(x), tw, args, name, loc);
  TensorRef y = kiln::detail::Prim(ir::Op::kConv, {x, weight}, name, loc, std::move(attrs));
  return AddChannelBias(y, bias, tw.shape[0], name, loc);
}

TensorRef ConvTransposeForward(const TensorRef& x_in, const TensorRef& weight_in,
                               const TensorRef& bias, const ConvArgs& args,
                               const std::vector<int64_t>& output_padding, const char* name,
                               const Loc& loc) {
  const TensorRef x = kiln::detail::AutocastToLow(x_in, name, loc);
  const TensorRef weight = kiln::detail::AutocastToLow(weight_in, name, loc);
  const ir::TensorType& tx = TypeOf(x);
  const ir::TensorType& tw = TypeOf(weight);
  CheckInput(tx, tw.rank(), name, {tx, tw}, loc);
  const size_t spatial = static_cast<size_t>(tw.rank() - 2);
  const int64_t groups = args.groups;
  const int64_t c_in = tw.shape[0];
  if (groups < 1 || c_in != tx.shape[1] || c_in % groups != 0) {
    ThrowOpError(
        name,
        absl::StrCat("the input's channels (", tx.shape[1], ") must equal weight.shape[0] (", c_in,
                     "), divisible by groups (", groups, ")"),
        {tx, tw}, loc);
  }
  const int64_t c_out_g = tw.shape[1];
  const std::vector<int64_t> stride = PerAxis(args.stride, spatial, 1, 1, "stride", name, tx, loc);
  const std::vector<int64_t> padding =
      PerAxis(args.padding, spatial, 0, 0, "padding", name, tx, loc);
  const std::vector<int64_t> dilation =
      PerAxis(args.dilation, spatial, 1, 1, "dilation", name, tx, loc);
  const std::vector<int64_t> out_pad =
      PerAxis(output_padding, spatial, 0, 0, "output_padding", name, tx, loc);
  for (size_t i = 0; i < spatial; ++i) {
    if (out_pad[i] >= stride[i] && out_pad[i] >= dilation[i]) {
      ThrowOpError(name,
                   absl::StrCat("output_padding ", List(out_pad),
                                " must be smaller than the stride or the dilation"),
                   {tx, tw}, loc);
    }
  }
  // [C, O/g, k...] -> [g, C/g, O/g, k...] -> [g, O/g, C/g, k...] -> [O, C/g, k...], flipped.
  ir::Shape grouped = tw.shape;
  grouped[0] = c_in / groups;
  grouped.insert(grouped.begin(), groups);
  TensorRef w = kiln::detail::ReshapeTo(weight, grouped, name, loc);
  std::vector<int64_t> perm = {0, 2, 1};
  for (size_t i = 0; i < spatial; ++i) perm.push_back(static_cast<int64_t>(3 + i));
  w = kiln::detail::Permute(w, perm, loc);
  ir::Shape kernel_shape = {groups * c_out_g, c_in / groups};
  for (size_t i = 0; i < spatial; ++i) kernel_shape.push_back(tw.shape[2 + i]);
  w = kiln::detail::ReshapeTo(w, kernel_shape, name, loc);
  std::vector<int64_t> flip_axes;
  for (size_t i = 0; i < spatial; ++i) flip_axes.push_back(static_cast<int64_t>(2 + i));
  w = kiln::detail::Flip(w, flip_axes, loc);

  // Full padding dilation * (k - 1) on each side of the dilated input, less `padding`; padding
  // beyond that (negative conv padding) is cut from the result instead.
  ir::Attrs attrs;
  attrs.strides.assign(spatial, 1);
  attrs.dilation = dilation;
  attrs.input_dilation = stride;
  attrs.groups = groups;
  std::vector<kiln::detail::SliceRange> crop(2);
  bool needs_crop = false;
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t full = dilation[i] * (tw.shape[2 + i] - 1);
    const int64_t low = full - padding[i];
    const int64_t high = full - padding[i] + out_pad[i];
    attrs.low.push_back(std::max<int64_t>(low, 0));
    attrs.high.push_back(std::max<int64_t>(high, 0));
    const int64_t out = (tx.shape[2 + i] - 1) * stride[i] - 2 * padding[i] +
                        dilation[i] * (tw.shape[2 + i] - 1) + out_pad[i] + 1;
    if (out < 1) {
      ThrowOpError(name,
                   absl::StrCat("the output would be empty on spatial dim ", i, " (padding ",
                                List(padding), ")"),
                   {tx, tw}, loc);
    }
    const int64_t start = std::max<int64_t>(-low, 0);
    crop.push_back({start, start + out, 1});
    needs_crop = needs_crop || low < 0 || high < 0;
  }
  TensorRef y = kiln::detail::Prim(ir::Op::kConv, {x, w}, name, loc, std::move(attrs));
  if (needs_crop) y = kiln::detail::Slice(y, crop, name, loc);
  return AddChannelBias(y, bias, groups * c_out_g, name, loc);
}

namespace {

/// The window attributes of a pooling op over the spatial axes of `tx`, with ceil_mode's extra
/// high padding; also the spatial output sizes.
ir::Attrs PoolAttrs(const ir::TensorType& tx, const PoolArgs& args, bool with_dilation,
                    const char* name, const Loc& loc) {
  const size_t spatial = static_cast<size_t>(tx.rank() - 2);
  const std::vector<int64_t> kernel = PerAxis(args.kernel, spatial, 0, 1, "kernel", name, tx, loc);
  const std::vector<int64_t> stride =
      args.stride.empty() ? kernel : PerAxis(args.stride, spatial, 1, 1, "stride", name, tx, loc);
  const std::vector<int64_t> padding =
      PerAxis(args.padding, spatial, 0, 0, "padding", name, tx, loc);
  const std::vector<int64_t> dilation =
      PerAxis(args.dilation, spatial, 1, 1, "dilation", name, tx, loc);
  if (!with_dilation) {
    for (int64_t d : dilation) {
      if (d != 1) ThrowOpError(name, "dilation is for max pooling only", {tx}, loc);
    }
  }
  ir::Attrs attrs;
  attrs.window = {1, 1};
  attrs.strides = {1, 1};
  attrs.low = {0, 0};
  attrs.high = {0, 0};
  attrs.dilation = {1, 1};
  for (size_t i = 0; i < spatial; ++i) {
    if (2 * padding[i] > kernel[i]) {
      ThrowOpError(name,
                   absl::StrCat("padding ", List(padding), " must be at most half the kernel ",
                                List(kernel)),
                   {tx}, loc);
    }
    const int64_t in = tx.shape[2 + i];
    const int64_t span = in + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1;
    if (span < 0) {
      ThrowOpError(name,
                   absl::StrCat("the kernel ", List(kernel), " (dilation ", List(dilation),
                                ") does not fit in the padded input"),
                   {tx}, loc);
    }
    int64_t out = (args.ceil_mode ? (span + stride[i] - 1) / stride[i] : span / stride[i]) + 1;
    // torch: the last window must start inside the input or its left padding.
    if (args.ceil_mode && (out - 1) * stride[i] >= in + padding[i]) --out;
    const int64_t needed = (out - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1;
    const int64_t extra = std::max<int64_t>(needed - (in + 2 * padding[i]), 0);
    attrs.window.push_back(kernel[i]);
    attrs.strides.push_back(stride[i]);
    attrs.low.push_back(padding[i]);
    attrs.high.push_back(padding[i] + extra);
    attrs.dilation.push_back(dilation[i]);
  }
  return attrs;
}

}  // namespace

TensorRef MaxPool(const TensorRef& x, const PoolArgs& args, const char* name, const Loc& loc) {
  const ir::TensorType& tx = TypeOf(x);
  CheckInput(tx, tx.rank() < 3 ? 3 : tx.rank(), name, {tx}, loc);
  ir::Attrs attrs = PoolAttrs(tx, args, true, name, loc);
  return kiln::detail::Prim(ir::Op::kWindowMax, {x}, name, loc, std::move(attrs));
}

TensorRef AvgPool(const TensorRef& x, const PoolArgs& args, const char* name, const Loc& loc) {
  const ir::TensorType& tx = TypeOf(x);
  CheckInput(tx, tx.rank() < 3 ? 3 : tx.rank(), name, {tx}, loc);
  ir::Attrs attrs = PoolAttrs(tx, args, false, name, loc);
  TensorRef sum = kiln::detail::Prim(ir::Op::kWindowSum, {x}, name, loc, attrs);
  // The divisor per output position, as torch counts it: the window clipped to the input plus
  // its declared padding (count_include_pad) or to the input alone; ceil_mode's overhang never
  // counts. A window sum over ones of shape [1, 1, spatial...] gives exactly that.
  ir::TensorType ones_type{tx.dtype, ir::Shape(static_cast<size_t>(tx.rank()), 1)};
  ir::Attrs count_attrs = attrs;
  for (size_t i = 2; i < tx.shape.size(); ++i) {
    const int64_t pad = attrs.low[i];
    const int64_t extra = attrs.high[i] - pad;
    if (args.count_include_pad) {
      ones_type.shape[i] = tx.shape[i] + 2 * pad;
      count_attrs.low[i] = 0;
      count_attrs.high[i] = extra;
    } else {
      ones_type.shape[i] = tx.shape[i];
    }
  }
  TensorRef ones = kiln::detail::FillOn(x, ones_type, 1.0, name, loc);
  TensorRef count =
      kiln::detail::Prim(ir::Op::kWindowSum, {ones}, name, loc, std::move(count_attrs));
  return kiln::detail::Binary(ir::Op::kDiv, sum, count, name, loc);
}

TensorRef AdaptiveAvgPool(const TensorRef& x, const std::vector<int64_t>& output_size,
                          const char* name, const Loc& loc) {
  const ir::TensorType& tx = TypeOf(x);
  CheckInput(tx, tx.rank() < 3 ? 3 : tx.rank(), name, {tx}, loc);
  const size_t spatial = static_cast<size_t>(tx.rank() - 2);
  const std::vector<int64_t> out =
      PerAxis(output_size, spatial, 0, 1, "output_size", name, tx, loc);
  bool divisible = true;
  for (size_t i = 0; i < spatial; ++i) divisible = divisible && tx.shape[2 + i] % out[i] == 0;
  if (divisible) {
    // Equal, non-overlapping windows: plain average pooling.
    PoolArgs args;
    for (size_t i = 0; i < spatial; ++i) args.kernel.push_back(tx.shape[2 + i] / out[i]);
    return AvgPool(x, args, name, loc);
  }
  // Otherwise windows differ in size and overlap: one averaging matrix per axis,
  // y = x P^T along that axis (P[o, i] = 1 / |window o| for i in window o).
  TensorRef y = x;
  for (size_t a = 0; a < spatial; ++a) {
    const int64_t in = tx.shape[2 + a];
    const int64_t o_size = out[a];
    ir::TensorData pt(tx.dtype, {in, o_size});  // zero-filled
    for (int64_t o = 0; o < o_size; ++o) {
      const int64_t start = (o * in) / o_size;
      const int64_t end = ((o + 1) * in + o_size - 1) / o_size;
      for (int64_t i = start; i < end; ++i) {
        pt.SetDouble(i * o_size + o, 1.0 / static_cast<double>(end - start));
      }
    }
    TensorRef matrix = kiln::detail::FromTensorData(std::move(pt), kiln::detail::DeviceOf(x));
    const int64_t axis = static_cast<int64_t>(2 + a);
    TensorRef moved = kiln::detail::SwapDims(y, axis, -1, name, loc);
    {
      // An averaging matrix is not a layer's weight: 1/3 in bf16 would skew every average, so
      // autocast stays out of it.
      amp::AutocastGuard exact(std::nullopt, loc);
      moved = kiln::detail::MatMul(moved, matrix, loc);
    }
    y = kiln::detail::SwapDims(moved, axis, -1, name, loc);
  }
  return y;
}

}  // namespace kiln::nn::detail
