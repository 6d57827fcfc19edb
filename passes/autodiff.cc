#include "passes/autodiff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/builder.h"

namespace kiln::passes {
namespace {

using ir::NodeId;
using ir::Op;
using ir::Shape;
using ir::TensorType;

int64_t At(const std::vector<int64_t>& v, size_t i, int64_t fallback) {
  return v.empty() ? fallback : v[i];
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<int64_t> Iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

// Appends gradient nodes. Every node gets `loc`, the location of the forward node whose rule is
// being applied, so a failure in a gradient points at the user's line.
class Emitter {
 public:
  explicit Emitter(ir::Graph graph) : b_(std::move(graph)) {}

  ir::Builder& builder() { return b_; }
  void set_loc(std::source_location loc) { loc_ = loc; }
  // The type of a node, by value: appending nodes reallocates the graph's node list, so a
  // reference would dangle after the next emit. An f32 scalar type for kInvalidNode (after a
  // builder error, which AppendGradients reports), so that a broken rule fails cleanly.
  TensorType type(NodeId id) const { return id == ir::kInvalidNode ? TensorType{} : b_.type(id); }
  Shape shape(NodeId id) const { return type(id).shape; }

  NodeId Fill(double value, const TensorType& type) { return b_.Fill(value, type, loc_); }
  NodeId Zeros(const TensorType& type) { return Fill(0.0, type); }
  // `value` as a tensor of id's type.
  NodeId Like(NodeId id, double value) { return Fill(value, type(id)); }
  NodeId Un(Op op, NodeId x) { return b_.Unary(op, x, loc_); }
  NodeId Bin(Op op, NodeId a, NodeId b) { return b_.Binary(op, a, b, loc_); }
  NodeId Add(NodeId a, NodeId b) { return Bin(Op::kAdd, a, b); }
  NodeId Mul(NodeId a, NodeId b) { return Bin(Op::kMul, a, b); }
  NodeId Div(NodeId a, NodeId b) { return Bin(Op::kDiv, a, b); }
  NodeId Neg(NodeId x) { return Un(Op::kNeg, x); }
  NodeId Select(NodeId c, NodeId t, NodeId f) { return b_.Select(c, t, f, loc_); }
  // g where `cond`, zero elsewhere.
  NodeId Where(NodeId cond, NodeId g) { return Select(cond, g, Like(g, 0.0)); }
  NodeId Cast(NodeId x, ir::DType dtype) { return b_.Cast(x, dtype, loc_); }
  NodeId Reduce(Op op, NodeId x, std::vector<int64_t> axes) {
    return b_.Reduce(op, x, std::move(axes), loc_);
  }
  NodeId Reshape(NodeId x, Shape shape) { return b_.Reshape(x, std::move(shape), loc_); }
  NodeId Permute(NodeId x, std::vector<int64_t> perm) {
    return b_.Permute(x, std::move(perm), loc_);
  }
  NodeId Broadcast(NodeId x, Shape shape) {
    return x == ir::kInvalidNode || shape == this->shape(x)
               ? x
               : b_.Broadcast(x, std::move(shape), loc_);
  }
  NodeId Slice(NodeId x, std::vector<int64_t> starts, std::vector<int64_t> limits,
               std::vector<int64_t> strides = {}) {
    return b_.Slice(x, std::move(starts), std::move(limits), std::move(strides), loc_);
  }
  NodeId Pad(NodeId x, std::vector<int64_t> low, std::vector<int64_t> high, double value = 0.0) {
    return b_.Pad(x, std::move(low), std::move(high), value, loc_);
  }
  NodeId Flip(NodeId x, std::vector<int64_t> axes) { return b_.Flip(x, std::move(axes), loc_); }
  NodeId Gather(NodeId x, NodeId index, int64_t axis) { return b_.Gather(x, index, axis, loc_); }
  NodeId ScatterAdd(NodeId x, NodeId index, NodeId src, int64_t axis) {
    return b_.ScatterAdd(x, index, src, axis, loc_);
  }
  NodeId MatMul(NodeId a, NodeId b) { return b_.MatMul(a, b, loc_); }
  NodeId Argsort(NodeId x, int64_t axis) {
    ir::Attrs attrs;
    attrs.axes = {axis};
    return b_.Emit(Op::kArgsort, {x}, std::move(attrs), loc_);
  }
  NodeId Conv(NodeId x, NodeId w, ir::Attrs attrs) { return b_.Conv(x, w, std::move(attrs), loc_); }
  NodeId Window(Op op, NodeId x, ir::Attrs attrs) {
    return b_.WindowReduce(op, x, std::move(attrs), loc_);
  }

  // Swaps the last two axes (a matrix transpose per batch).
  NodeId TransposeLast2(NodeId x) {
    const int64_t r = type(x).rank();
    std::vector<int64_t> perm = Iota(r);
    std::swap(perm[static_cast<size_t>(r - 2)], perm[static_cast<size_t>(r - 1)]);
    return Permute(x, perm);
  }

  // Spreads x along each axis so that element p lands at p * strides[i]: length (m - 1) * s + 1
  // with zeros between. pad has no interior padding, so per strided axis: reshape [m] -> [m, 1],
  // pad the new axis to s, reshape to [m * s] and cut the s - 1 trailing zeros. Every axis of x
  // must be non-empty.
  NodeId Interleave(NodeId x, const std::vector<int64_t>& strides) {
    const Shape in = shape(x);
    bool any = false;
    for (int64_t s : strides) any |= s > 1;
    if (!any) return x;
    Shape split, flat, low, high;
    std::vector<int64_t> starts, limits;
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t s = strides[i];
      split.push_back(in[i]);
      low.push_back(0);
      high.push_back(0);
      if (s > 1) {
        split.push_back(1);
        low.push_back(0);
        high.push_back(s - 1);
      }
      flat.push_back(in[i] * s);
      starts.push_back(0);
      limits.push_back((in[i] - 1) * s + 1);
    }
    NodeId spread = Reshape(Pad(Reshape(x, split), low, high), flat);
    return Slice(spread, starts, limits);
  }

  // The transpose of slice(x, starts, stride): g placed at starts + p * strides inside zeros of
  // `full` shape.
  NodeId UnSlice(NodeId g, const Shape& full, const std::vector<int64_t>& starts,
                 const std::vector<int64_t>& strides) {
    NodeId spread = Interleave(g, strides);
    if (spread == ir::kInvalidNode) return spread;
    const Shape spread_shape = shape(spread);
    std::vector<int64_t> high(full.size());
    for (size_t i = 0; i < full.size(); ++i) high[i] = full[i] - starts[i] - spread_shape[i];
    return Pad(spread, starts, high);
  }

  // conv(x, w) with per-axis low/high padding that may be negative: the negative side is padded
  // by a multiple of the stride instead (each stride step adds one output position) and the
  // extra outputs are sliced off, so the backends only ever see padding >= 0. `attrs` holds the
  // other conv attributes; `out` the expected spatial output sizes.
  NodeId ConvAnyPadding(NodeId x, NodeId w, ir::Attrs attrs, const std::vector<int64_t>& low,
                        const std::vector<int64_t>& high, const Shape& out) {
    const size_t spatial = low.size();
    std::vector<int64_t> skip(spatial, 0);
    bool sliced = false;
    attrs.low = low;
    attrs.high = high;
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t stride = At(attrs.strides, i, 1);
      if (low[i] < 0) {
        skip[i] = CeilDiv(-low[i], stride);
        attrs.low[i] = low[i] + skip[i] * stride;
        sliced = true;
      }
      if (high[i] < 0) {
        attrs.high[i] = high[i] + CeilDiv(-high[i], stride) * stride;
        sliced = true;
      }
    }
    NodeId y = Conv(x, w, std::move(attrs));
    if (!sliced || y == ir::kInvalidNode) return y;
    const Shape full = shape(y);
    std::vector<int64_t> starts(full.size(), 0), limits = full;
    for (size_t i = 0; i < spatial; ++i) {
      starts[i + 2] = skip[i];
      limits[i + 2] = skip[i] + out[i];
    }
    return Slice(y, starts, limits);
  }

 private:
  ir::Builder b_;
  std::source_location loc_;
};

// ---- Rules --------------------------------------------------------------------------------------

// The cotangents of a node's inputs: contributions[i] is kInvalidNode for "zero" (no gradient).
using Contributions = std::vector<NodeId>;
// need[i]: whether input i wants a cotangent; rules skip building the others.
using Needs = std::vector<char>;

// Rules sequence their emits in statements (never two emitting calls as arguments of one call,
// whose evaluation order C++ leaves unspecified), so node numbering is the same with every
// compiler and printed-IR tests are stable.
Contributions UnaryRule(Emitter& e, const ir::Node& node, NodeId out, NodeId g) {
  const NodeId x = node.inputs[0];
  switch (node.op) {
    case Op::kNeg:
      return {e.Neg(g)};
    case Op::kAbs:
      return {e.Mul(g, e.Un(Op::kSign, x))};
    case Op::kExp:
      return {e.Mul(g, out)};
    case Op::kLog:
      return {e.Div(g, x)};
    case Op::kSqrt:  // 1 / (2 sqrt(x))
      return {e.Div(g, e.Mul(e.Like(out, 2.0), out))};
    case Op::kRsqrt: {  // -x^(-3/2) / 2 = -out^3 / 2
      const NodeId minus_half = e.Like(out, -0.5);
      return {e.Mul(g, e.Mul(minus_half, e.Mul(out, e.Mul(out, out))))};
    }
    case Op::kSin:
      return {e.Mul(g, e.Un(Op::kCos, x))};
    case Op::kCos:
      return {e.Mul(g, e.Neg(e.Un(Op::kSin, x)))};
    case Op::kTanh: {  // 1 - tanh^2
      const NodeId one = e.Like(out, 1.0);
      return {e.Mul(g, e.Bin(Op::kSub, one, e.Mul(out, out)))};
    }
    case Op::kErf: {  // 2 / sqrt(pi) exp(-x^2)
      const NodeId scale = e.Like(x, 2.0 * std::numbers::inv_sqrtpi);
      return {e.Mul(g, e.Mul(scale, e.Un(Op::kExp, e.Neg(e.Mul(x, x)))))};
    }
    case Op::kReciprocal:  // -1 / x^2 = -out^2
      return {e.Neg(e.Mul(g, e.Mul(out, out)))};
    default:  // sign, floor, ceil, round: zero almost everywhere.
      return {ir::kInvalidNode};
  }
}

Contributions BinaryRule(Emitter& e, const ir::Node& node, NodeId out, NodeId g,
                         const Needs& need) {
  const NodeId a = node.inputs[0], b = node.inputs[1];
  const NodeId none = ir::kInvalidNode;
  switch (node.op) {
    case Op::kAdd:
      return {g, g};
    case Op::kSub:
      return {g, need[1] ? e.Neg(g) : none};
    case Op::kMul:
      return {need[0] ? e.Mul(g, b) : none, need[1] ? e.Mul(g, a) : none};
    case Op::kDiv:  // d/db a/b = -a/b^2 = -out/b
      return {need[0] ? e.Div(g, b) : none, need[1] ? e.Neg(e.Div(e.Mul(g, out), b)) : none};
    case Op::kPow: {
      // Like torch: d/da = b a^(b-1), zero where b == 0 (so 0^0 does not give 0 * inf);
      // d/db = out log(a), zero where a == 0 and b >= 0 (the limit of a^b log a).
      const NodeId zero = e.Like(a, 0.0);
      NodeId ga = none, gb = none;
      if (need[0]) {
        const NodeId da = e.Mul(b, e.Bin(Op::kPow, a, e.Bin(Op::kSub, b, e.Like(b, 1.0))));
        const NodeId b_zero = e.Bin(Op::kEq, b, zero);
        ga = e.Select(b_zero, zero, e.Mul(g, da));
      }
      if (need[1]) {
        const NodeId a_is_zero = e.Bin(Op::kEq, a, zero);
        const NodeId a_zero = e.Bin(Op::kAnd, a_is_zero, e.Bin(Op::kGe, b, zero));
        gb = e.Select(a_zero, zero, e.Mul(g, e.Mul(out, e.Un(Op::kLog, a))));
      }
      return {ga, gb};
    }
    case Op::kMax:
    case Op::kMin: {
      // Like torch.maximum / minimum: the winner gets g, a tie gives each operand g / 2.
      const Op wins = node.op == Op::kMax ? Op::kGt : Op::kLt;
      const NodeId zero = e.Like(g, 0.0);
      const NodeId half = e.Mul(g, e.Like(g, 0.5));
      const NodeId tie = e.Select(e.Bin(Op::kEq, a, b), half, zero);
      return {need[0] ? e.Select(e.Bin(wins, a, b), g, tie) : none,
              need[1] ? e.Select(e.Bin(wins, b, a), g, tie) : none};
    }
    case Op::kMod:  // a - b floor(a / b)
      return {g, need[1] ? e.Neg(e.Mul(g, e.Un(Op::kFloor, e.Div(a, b)))) : none};
    default:
      return {ir::kInvalidNode, ir::kInvalidNode};
  }
}

// reduce_prod: the product of the other elements of each group, exact with zeros: with no zero
// in the group it is prod / x; an element that is the group's only zero gets the product of the
// non-zero elements; everything else gets 0.
NodeId ReduceProdRule(Emitter& e, NodeId x, NodeId g, const std::vector<int64_t>& axes) {
  const TensorType type = e.type(x);
  const NodeId zero = e.Like(x, 0.0);
  const NodeId is_zero = e.Bin(Op::kEq, x, zero);
  const NodeId nonzero = e.Select(is_zero, e.Like(x, 1.0), x);
  const NodeId prod_nonzero = e.Broadcast(e.Reduce(Op::kReduceProd, nonzero, axes), type.shape);
  const NodeId zero_count = e.Cast(is_zero, type.dtype);
  const NodeId zeros = e.Broadcast(e.Reduce(Op::kReduceSum, zero_count, axes), type.shape);
  // Valid where the group's zeros are exactly this element (one zero) or none (x non-zero).
  const NodeId valid = e.Bin(Op::kEq, zeros, zero_count);
  const NodeId others = e.Select(is_zero, prod_nonzero, e.Div(prod_nonzero, nonzero));
  return e.Select(valid, e.Mul(e.Broadcast(g, type.shape), others), zero);
}

// reduce_max / reduce_min: like torch.amax, g split evenly among the elements equal to the result.
NodeId ReduceExtremumRule(Emitter& e, NodeId x, NodeId out, NodeId g,
                          const std::vector<int64_t>& axes) {
  const Shape shape = e.shape(x);
  const NodeId hit = e.Bin(Op::kEq, x, e.Broadcast(out, shape));
  const NodeId count = e.Reduce(Op::kReduceSum, e.Cast(hit, e.type(x).dtype), axes);
  return e.Where(hit, e.Broadcast(e.Div(g, count), shape));
}

Contributions MovementRule(Emitter& e, const ir::Graph& graph, const ir::Node& node, NodeId g,
                           const Needs& need) {
  const ir::Attrs& attrs = node.attrs;
  const NodeId x = node.inputs[0];
  const Shape& in = graph.node(x).type.shape;
  switch (node.op) {
    case Op::kReshape:
      return {e.Reshape(g, in)};
    case Op::kPermute: {
      std::vector<int64_t> inverse(attrs.axes.size());
      for (size_t i = 0; i < attrs.axes.size(); ++i) {
        inverse[static_cast<size_t>(attrs.axes[i])] = static_cast<int64_t>(i);
      }
      return {e.Permute(g, inverse)};
    }
    case Op::kBroadcast: {
      std::vector<int64_t> axes;
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] != node.type.shape[i]) axes.push_back(static_cast<int64_t>(i));
      }
      return {axes.empty() ? g : e.Reduce(Op::kReduceSum, g, axes)};
    }
    case Op::kSlice: {
      std::vector<int64_t> strides = attrs.strides;
      if (strides.empty()) strides.assign(in.size(), 1);
      return {e.UnSlice(g, in, attrs.starts, strides)};
    }
    case Op::kPad: {
      std::vector<int64_t> limits(in.size());
      for (size_t i = 0; i < in.size(); ++i) limits[i] = attrs.low[i] + in[i];
      return {e.Slice(g, attrs.low, limits)};
    }
    case Op::kConcat: {
      const size_t axis = static_cast<size_t>(attrs.axes[0]);
      Contributions result;
      std::vector<int64_t> starts(node.type.shape.size(), 0), limits = node.type.shape;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        limits[axis] = starts[axis] + graph.node(node.inputs[i]).type.shape[axis];
        result.push_back(need[i] ? e.Slice(g, starts, limits) : ir::kInvalidNode);
        starts[axis] = limits[axis];
      }
      return result;
    }
    case Op::kFlip:
      return {e.Flip(g, attrs.axes)};
    default:
      return {ir::kInvalidNode};
  }
}

// conv: the input gradient is the transposed convolution (a conv of g with input dilation =
// stride and the kernel flipped, in/out channels swapped per group); the weight gradient is a
// conv of the input with g as the kernel, batch and channel roles swapped.
Contributions ConvRule(Emitter& e, const ir::Graph& graph, const ir::Node& node, NodeId g,
                       const Needs& need) {
  const ir::Attrs& attrs = node.attrs;
  const NodeId x = node.inputs[0], w = node.inputs[1];
  const Shape& xs = graph.node(x).type.shape;
  const Shape& ws = graph.node(w).type.shape;
  const Shape& gs = node.type.shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const size_t spatial = xs.size() - 2;
  const int64_t groups = attrs.groups;
  const int64_t n = xs[0], c = xs[1], o = ws[0];
  const int64_t cg = c / groups, og = o / groups;

  std::vector<int64_t> stride(spatial), dil(spatial), in_dil(spatial), low(spatial), high(spatial);
  Shape input_size(spatial), kernel(spatial), out_size(spatial);
  for (size_t i = 0; i < spatial; ++i) {
    stride[i] = At(attrs.strides, i, 1);
    dil[i] = At(attrs.dilation, i, 1);
    in_dil[i] = At(attrs.input_dilation, i, 1);
    low[i] = At(attrs.low, i, 0);
    high[i] = At(attrs.high, i, 0);
    input_size[i] = xs[i + 2];
    kernel[i] = ws[i + 2];
    out_size[i] = gs[i + 2];
  }
  std::vector<int64_t> spatial_axes = Iota(static_cast<int64_t>(spatial), 2);
  Contributions result(2, ir::kInvalidNode);

  if (need[0]) {  // d input: conv(g, w') with w'[C, O/G, k] = w[O, C/G, k] regrouped and flipped.
    Shape grouped = {groups, og, cg};
    grouped.insert(grouped.end(), kernel.begin(), kernel.end());
    std::vector<int64_t> perm = {0, 2, 1};
    for (size_t i = 0; i < spatial; ++i) perm.push_back(static_cast<int64_t>(i) + 3);
    Shape swapped = {c, og};
    swapped.insert(swapped.end(), kernel.begin(), kernel.end());
    NodeId wt = e.Reshape(e.Permute(e.Reshape(w, grouped), perm), swapped);
    wt = e.Flip(wt, spatial_axes);
    ir::Attrs a;
    a.strides = in_dil;
    a.dilation = dil;
    a.input_dilation = stride;
    a.groups = groups;
    std::vector<int64_t> lo(spatial), hi(spatial);
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t dilated_kernel = (kernel[i] - 1) * dil[i] + 1;
      const int64_t dilated_input = (input_size[i] - 1) * in_dil[i] + 1;
      const int64_t dilated_g = (out_size[i] - 1) * stride[i] + 1;
      lo[i] = dilated_kernel - 1 - low[i];
      hi[i] = dilated_input - dilated_g + low[i];
    }
    result[0] = e.ConvAnyPadding(g, wt, a, lo, hi, input_size);
  }
  // d weight: conv(x' [C/G, G*N, sp], g' [O, N, out], groups G) -> [C/G, O, k] -> [O, C/G, k].
  if (need[1]) {
    Shape split = {n, groups, cg};
    split.insert(split.end(), input_size.begin(), input_size.end());
    std::vector<int64_t> perm = {2, 1, 0};
    for (size_t i = 0; i < spatial; ++i) perm.push_back(static_cast<int64_t>(i) + 3);
    Shape merged = {cg, groups * n};
    merged.insert(merged.end(), input_size.begin(), input_size.end());
    const NodeId xt = e.Reshape(e.Permute(e.Reshape(x, split), perm), merged);
    std::vector<int64_t> swap01 = Iota(rank);
    std::swap(swap01[0], swap01[1]);
    const NodeId gt = e.Permute(g, swap01);
    ir::Attrs a;
    a.strides = dil;
    a.dilation = stride;
    a.input_dilation = in_dil;
    a.groups = groups;
    std::vector<int64_t> hi(spatial);
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t dilated_kernel = (kernel[i] - 1) * dil[i] + 1;
      const int64_t dilated_input = (input_size[i] - 1) * in_dil[i] + 1;
      const int64_t dilated_g = (out_size[i] - 1) * stride[i] + 1;
      // Exactly the padded extent the forward windows covered, so the output has kernel size.
      hi[i] = dilated_kernel - 1 + dilated_g - dilated_input - low[i];
    }
    const NodeId dw = e.ConvAnyPadding(xt, gt, a, low, hi, kernel);
    result[1] = e.Permute(dw, swap01);
  }
  return result;
}

// window_sum: each x element gets the sum of g over the windows containing it: a window_sum
// (stride 1, same window and dilation) of g spread by the stride, padded so that output i
// lines up with input i. Padding that comes out negative is cut from the spread g instead.
NodeId WindowSumRule(Emitter& e, const ir::Graph& graph, const ir::Node& node, NodeId g) {
  const ir::Attrs& attrs = node.attrs;
  const Shape& in = graph.node(node.inputs[0]).type.shape;
  const size_t r = in.size();
  std::vector<int64_t> strides(r), lo(r), hi(r), starts(r), limits(r);
  bool cut = false;
  const NodeId spread = [&] {
    for (size_t i = 0; i < r; ++i) strides[i] = At(attrs.strides, i, 1);
    return e.Interleave(g, strides);
  }();
  if (spread == ir::kInvalidNode) return spread;
  const Shape spread_shape = e.shape(spread);
  for (size_t i = 0; i < r; ++i) {
    const int64_t dilated_window = (attrs.window[i] - 1) * At(attrs.dilation, i, 1) + 1;
    const int64_t low = At(attrs.low, i, 0);
    const int64_t l = dilated_window - 1 - low;
    const int64_t h = in[i] - spread_shape[i] + low;
    starts[i] = std::max<int64_t>(0, -l);
    limits[i] = spread_shape[i] - std::max<int64_t>(0, -h);
    // Nothing of g reaches x along this axis (all windows lie in the padding).
    if (starts[i] >= limits[i]) return ir::kInvalidNode;
    cut |= l < 0 || h < 0;
    lo[i] = std::max<int64_t>(0, l);
    hi[i] = std::max<int64_t>(0, h);
  }
  const NodeId src = cut ? e.Slice(spread, starts, limits) : spread;
  ir::Attrs a;
  a.window = attrs.window;
  a.dilation = attrs.dilation;
  a.low = lo;
  a.high = hi;
  return e.Window(Op::kWindowSum, src, a);
}

// window_max whose windows tile x (window == strides, no padding, no dilation; max_pool2d 2x2
// stride 2; a size that is not a multiple of its window leaves a remainder that no window reads
// and that gets a zero gradient): each windowed axis of length n is split
// into [n / w, w], so window offsets become small axes and the first-maximum mask needs no
// strided slices or spreads of the full tensor, only slices and pads on the size-w axes (cheap
// index math once fused). The mask is the general rule's `first` per offset; the result adds a
// zero like the general rule's sum of parts does, so both are bit-identical (-0.0 g included).
// Returns kInvalidNode when the windows do not tile x.
NodeId WindowMaxTiledRule(Emitter& e, const ir::Graph& graph, const ir::Node& node, NodeId out,
                          NodeId g) {
  const ir::Attrs& attrs = node.attrs;
  const Shape& in = graph.node(node.inputs[0]).type.shape;
  const size_t r = in.size();
  Shape split, small;               // x split by window; the output with size-1 window axes.
  Shape covered(r);                 // the part of x the windows read.
  std::vector<size_t> window_axes;  // position of each windowed axis's offset axis in `split`.
  std::vector<int64_t> window;
  for (size_t i = 0; i < r; ++i) {
    const int64_t w = attrs.window[i];
    if (At(attrs.strides, i, 1) != w || At(attrs.dilation, i, 1) != 1 || At(attrs.low, i, 0) != 0 ||
        At(attrs.high, i, 0) != 0 || w < 1 || in[i] < w) {
      return ir::kInvalidNode;
    }
    covered[i] = in[i] / w * w;
    split.push_back(in[i] / w);
    small.push_back(in[i] / w);
    if (w > 1) {
      window_axes.push_back(split.size());
      window.push_back(w);
      split.push_back(w);
      small.push_back(1);
    }
  }
  if (window_axes.empty()) return ir::kInvalidNode;  // Identity window: the general rule is fine.
  const size_t s = split.size();
  // Sizes that are not a multiple of the window (max_pool2d 2x2 on 11x11): the windows leave the
  // last rows/columns out, which get no gradient; the rule runs on the covered part and pads.
  const bool cut = covered != in;
  const NodeId x =
      cut ? e.Slice(node.inputs[0], std::vector<int64_t>(r, 0), covered) : node.inputs[0];
  const NodeId xs = e.Reshape(x, split);
  const NodeId ys = e.Reshape(out, small);
  NodeId taken = ir::kInvalidNode, mask = ir::kInvalidNode;
  std::vector<int64_t> k(window.size(), 0);
  for (int64_t count = ir::NumElements(window); count > 0; --count) {
    std::vector<int64_t> starts(s, 0), limits(split.begin(), split.end()), low(s, 0), high(s, 0);
    for (size_t j = 0; j < window.size(); ++j) {
      const size_t a = window_axes[j];
      starts[a] = k[j];
      limits[a] = k[j] + 1;
      low[a] = k[j];
      high[a] = window[j] - 1 - k[j];
    }
    const NodeId hit = e.Bin(Op::kEq, e.Slice(xs, starts, limits), ys);
    NodeId first = hit;
    if (taken == ir::kInvalidNode) {
      taken = hit;
    } else {
      first = e.Bin(Op::kAnd, hit, e.Un(Op::kNot, taken));
      if (count > 1) taken = e.Bin(Op::kOr, taken, hit);
    }
    const NodeId part = e.Pad(first, low, high);
    mask = mask == ir::kInvalidNode ? part : e.Bin(Op::kOr, mask, part);
    for (size_t j = window.size(); j-- > 0;) {
      if (++k[j] < window[j]) break;
      k[j] = 0;
    }
  }
  const NodeId gs = e.Broadcast(e.Reshape(g, small), split);
  NodeId dx = e.Where(mask, gs);
  // The general rule sums one part per offset (g at the taken element, +0 elsewhere), which turns
  // a -0.0 g into +0.0; adding +0 does the same here.
  if (ir::NumElements(window) > 1) dx = e.Add(dx, e.Like(dx, 0.0));
  if (!cut) return e.Reshape(dx, in);
  std::vector<int64_t> high(r);
  for (size_t i = 0; i < r; ++i) high[i] = in[i] - covered[i];
  return e.Pad(e.Reshape(dx, covered), std::vector<int64_t>(r, 0), high);
}

// window_max: like torch's max_pool, g goes to the first maximum of each window in row-major
// window order. Per window offset k: the elements each window reads at k (a strided slice of
// the padded x) that equal the window's max and were not taken at an earlier offset receive g,
// scattered back through the slice's transpose. Windows that tile x take the cheaper
// WindowMaxTiledRule.
NodeId WindowMaxRule(Emitter& e, const ir::Graph& graph, const ir::Node& node, NodeId out,
                     NodeId g) {
  if (const NodeId tiled = WindowMaxTiledRule(e, graph, node, out, g); tiled != ir::kInvalidNode) {
    return tiled;
  }
  const ir::Attrs& attrs = node.attrs;
  const NodeId x = node.inputs[0];
  const Shape& in = graph.node(x).type.shape;
  const Shape& out_shape = node.type.shape;
  const size_t r = in.size();
  std::vector<int64_t> strides(r), dil(r), low(r), high(r);
  Shape padded(r);
  bool any_pad = false;
  for (size_t i = 0; i < r; ++i) {
    strides[i] = At(attrs.strides, i, 1);
    dil[i] = At(attrs.dilation, i, 1);
    low[i] = At(attrs.low, i, 0);
    high[i] = At(attrs.high, i, 0);
    padded[i] = in[i] + low[i] + high[i];
    any_pad |= low[i] != 0 || high[i] != 0;
  }
  const NodeId xp = any_pad ? e.Pad(x, low, high, -std::numeric_limits<double>::infinity()) : x;
  NodeId taken = ir::kInvalidNode, total = ir::kInvalidNode;
  std::vector<int64_t> k(r, 0);
  for (int64_t count = ir::NumElements(attrs.window); count > 0; --count) {
    std::vector<int64_t> starts(r), limits(r);
    for (size_t i = 0; i < r; ++i) {
      starts[i] = k[i] * dil[i];
      limits[i] = starts[i] + (out_shape[i] - 1) * strides[i] + 1;
    }
    const NodeId hit = e.Bin(Op::kEq, e.Slice(xp, starts, limits, strides), out);
    NodeId first = hit;
    if (taken == ir::kInvalidNode) {
      taken = hit;
    } else {
      first = e.Bin(Op::kAnd, hit, e.Un(Op::kNot, taken));
      if (count > 1) taken = e.Bin(Op::kOr, taken, hit);
    }
    const NodeId part = e.UnSlice(e.Where(first, g), padded, starts, strides);
    total = total == ir::kInvalidNode ? part : e.Add(total, part);
    // Next offset in row-major order.
    for (size_t i = r; i-- > 0;) {
      if (++k[i] < attrs.window[i]) break;
      k[i] = 0;
    }
  }
  if (!any_pad) return total;
  std::vector<int64_t> limits(r);
  for (size_t i = 0; i < r; ++i) limits[i] = low[i] + in[i];
  return e.Slice(total, low, limits);
}

Contributions Rule(Emitter& e, const ir::Graph& graph, NodeId id, NodeId g, const Needs& need) {
  const ir::Node& node = graph.node(id);
  const std::vector<NodeId>& in = node.inputs;
  switch (ir::GetOpClass(node.op)) {
    case ir::OpClass::kUnary:
      return UnaryRule(e, node, id, g);
    case ir::OpClass::kBinary:
      return BinaryRule(e, node, id, g, need);
    case ir::OpClass::kSelect: {
      const NodeId zero = e.Like(g, 0.0);
      return {ir::kInvalidNode, need[1] ? e.Select(in[0], g, zero) : ir::kInvalidNode,
              need[2] ? e.Select(in[0], zero, g) : ir::kInvalidNode};
    }
    case ir::OpClass::kCast:
      return {e.Cast(g, graph.node(in[0]).type.dtype)};
    case ir::OpClass::kReduce: {
      const std::vector<int64_t>& axes = node.attrs.axes;
      const Shape& shape = graph.node(in[0]).type.shape;
      switch (node.op) {
        case Op::kReduceSum:
          return {e.Broadcast(g, shape)};
        case Op::kReduceProd:
          return {ReduceProdRule(e, in[0], g, axes)};
        default:
          return {ReduceExtremumRule(e, in[0], id, g, axes)};
      }
    }
    case ir::OpClass::kMovement:
      return MovementRule(e, graph, node, g, need);
    case ir::OpClass::kIndex: {
      const int64_t axis = node.attrs.axes[0];
      if (node.op == Op::kGather) {
        return {e.ScatterAdd(e.Zeros(graph.node(in[0]).type), in[1], g, axis), ir::kInvalidNode};
      }
      return {g, ir::kInvalidNode, need[2] ? e.Gather(g, in[1], axis) : ir::kInvalidNode};
    }
    case ir::OpClass::kContraction:
      if (node.op == Op::kMatMul) {
        return {need[0] ? e.MatMul(g, e.TransposeLast2(in[1])) : ir::kInvalidNode,
                need[1] ? e.MatMul(e.TransposeLast2(in[0]), g) : ir::kInvalidNode};
      }
      return ConvRule(e, graph, node, g, need);
    case ir::OpClass::kWindow:
      return {node.op == Op::kWindowSum ? WindowSumRule(e, graph, node, g)
                                        : WindowMaxRule(e, graph, node, id, g)};
    case ir::OpClass::kSort: {
      // sort(x)[k] = x[argsort(x)[k]] along the axis: a gather, so its gradient scatters g
      // back to the positions the values came from (a permutation: no two adds meet).
      if (node.op == Op::kArgsort) return {ir::kInvalidNode};
      const int64_t axis = node.attrs.axes[0];
      return {e.ScatterAdd(e.Zeros(graph.node(in[0]).type), e.Argsort(in[0], axis), g, axis)};
    }
    default:
      return Contributions(in.size(), ir::kInvalidNode);
  }
}

}  // namespace

bool IsDifferentiable(ir::Op op) {
  switch (ir::GetOpClass(op)) {
    case ir::OpClass::kUnary:
      return op != Op::kNot;
    case ir::OpClass::kBinary:
    case ir::OpClass::kSelect:
    case ir::OpClass::kCast:
    case ir::OpClass::kReduce:
    case ir::OpClass::kMovement:
    case ir::OpClass::kIndex:
    case ir::OpClass::kContraction:
    case ir::OpClass::kWindow:
      return true;
    case ir::OpClass::kSort:
      return op == Op::kSort;
    case ir::OpClass::kLeaf:
    case ir::OpClass::kCompare:
    case ir::OpClass::kLogical:
    case ir::OpClass::kArgReduce:
      return false;
  }
  return false;
}

absl::StatusOr<GradientGraph> AppendGradients(const ir::Graph& graph, ir::NodeId y,
                                              std::span<const ir::NodeId> wrt, ir::NodeId seed) {
  const int32_t size = graph.num_nodes();
  const auto in_range = [&](NodeId id) { return id >= 0 && id < size; };
  if (!in_range(y)) {
    return absl::InvalidArgumentError(
        absl::StrCat("autodiff: y %", y, " is not a node of the graph (", size, " nodes)"));
  }
  const ir::Node& y_node = graph.node(y);
  const std::string y_where = [&] {
    std::string where = ir::LocationToString(y_node.loc);
    return where.empty() ? std::string() : absl::StrCat(" (", where, ")");
  }();
  if (!ir::IsFloat(y_node.type.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "autodiff: cannot differentiate %", y, " = ", ir::OpName(y_node.op), y_where, " of type ",
        ir::TypeToString(y_node.type), ": only floating-point values have gradients"));
  }
  for (NodeId id : wrt) {
    if (!in_range(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("autodiff: wrt %", id, " is not a node of the graph (", size, " nodes)"));
    }
    if (!ir::IsFloat(graph.node(id).type.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "autodiff: gradient with respect to %", id, " = ", ir::OpName(graph.node(id).op),
          " of type ", ir::TypeToString(graph.node(id).type),
          ": only floating-point values have gradients"));
    }
  }
  if (seed != ir::kInvalidNode) {
    if (!in_range(seed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("autodiff: seed %", seed, " is not a node of the graph (", size, " nodes)"));
    }
    if (graph.node(seed).type != y_node.type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "autodiff: seed %", seed, " has type ", ir::TypeToString(graph.node(seed).type), ", y %",
          y, y_where, " has type ", ir::TypeToString(y_node.type)));
    }
  } else if (y_node.type.num_elements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "autodiff: %", y, " = ", ir::OpName(y_node.op), y_where, " of type ",
        ir::TypeToString(y_node.type),
        " has more than one element: reduce it to a scalar loss or pass a seed (its cotangent)"));
  }

  // Active nodes: floating-point, depending on some wrt, and reaching y.
  std::vector<char> from_wrt(static_cast<size_t>(size), 0), to_y(static_cast<size_t>(size), 0);
  for (NodeId id : wrt) from_wrt[static_cast<size_t>(id)] = 1;
  for (NodeId id = 0; id <= y; ++id) {
    if (from_wrt[static_cast<size_t>(id)]) continue;
    for (NodeId input : graph.node(id).inputs) {
      if (from_wrt[static_cast<size_t>(input)]) {
        from_wrt[static_cast<size_t>(id)] = 1;
        break;
      }
    }
  }
  to_y[static_cast<size_t>(y)] = 1;
  for (NodeId id = y; id >= 0; --id) {
    if (!to_y[static_cast<size_t>(id)]) continue;
    for (NodeId input : graph.node(id).inputs) to_y[static_cast<size_t>(input)] = 1;
  }
  const auto active = [&](NodeId id) {
    return from_wrt[static_cast<size_t>(id)] && to_y[static_cast<size_t>(id)] &&
           ir::IsFloat(graph.node(id).type.dtype) && graph.node(id).type.num_elements() > 0;
  };

  Emitter e(graph);
  std::vector<NodeId> cotangent(static_cast<size_t>(size), ir::kInvalidNode);
  if (active(y)) {
    e.set_loc(y_node.loc);
    cotangent[static_cast<size_t>(y)] = seed != ir::kInvalidNode ? seed : e.Fill(1.0, y_node.type);
  }
  for (NodeId id = y; id >= 0; --id) {
    const NodeId g = cotangent[static_cast<size_t>(id)];
    const ir::Node& node = graph.node(id);
    if (g == ir::kInvalidNode || node.inputs.empty() || !IsDifferentiable(node.op)) continue;
    Needs need(node.inputs.size(), 0);
    bool any_input = false;
    for (size_t i = 0; i < need.size(); ++i) any_input |= (need[i] = active(node.inputs[i])) != 0;
    if (!any_input) continue;
    e.set_loc(node.loc);
    const Contributions parts = Rule(e, graph, id, g, need);
    if (!e.builder().status().ok()) {
      return absl::InternalError(
          absl::StrCat("autodiff: the gradient rule of %", id, " = ", ir::OpName(node.op),
                       " built an invalid node: ", e.builder().status().message()));
    }
    for (size_t i = 0; i < parts.size() && i < node.inputs.size(); ++i) {
      const NodeId input = node.inputs[i];
      if (parts[i] == ir::kInvalidNode || !active(input)) continue;
      NodeId& acc = cotangent[static_cast<size_t>(input)];
      acc = acc == ir::kInvalidNode ? parts[i] : e.Add(acc, parts[i]);
    }
  }

  GradientGraph result;
  for (NodeId id : wrt) {
    NodeId g = cotangent[static_cast<size_t>(id)];
    if (g == ir::kInvalidNode) {
      e.set_loc(graph.node(id).loc);
      g = e.Zeros(graph.node(id).type);
    }
    result.gradients.push_back(g);
  }
  if (!e.builder().status().ok()) {
    return absl::InternalError(
        absl::StrCat("autodiff: building gradients failed: ", e.builder().status().message()));
  }
  result.graph = e.builder().graph();
  return result;
}

absl::StatusOr<ir::Graph> GradientPass::Run(ir::Graph graph) {
  if (graph.outputs().empty()) {
    return absl::InvalidArgumentError("autodiff: the graph has no output (output 0 is the loss)");
  }
  std::vector<NodeId> params;
  for (NodeId p : graph.Parameters()) {
    if (ir::IsFloat(graph.node(p).type.dtype)) params.push_back(p);
  }
  absl::StatusOr<GradientGraph> g = AppendGradients(graph, graph.outputs()[0].node, params);
  if (!g.ok()) return g.status();
  ir::Graph result = std::move(g->graph);
  for (size_t i = 0; i < params.size(); ++i) {
    result.AddOutput(g->gradients[i], "grad." + result.node(params[i]).attrs.name);
  }
  return result;
}

}  // namespace kiln::passes
