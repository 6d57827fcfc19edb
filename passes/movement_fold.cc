#include "passes/movement_fold.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <source_location>
#include <utility>
#include <vector>

#include "passes/patterns.h"
#include "passes/rewriter.h"

namespace kiln::passes {
namespace {

int64_t At(const std::vector<int64_t>& values, size_t i, int64_t fallback) {
  return values.empty() ? fallback : values[i];
}

// Whether fills of `dtype` with values `a` and `b` store the same bits.
bool SameStored(double a, double b, ir::DType dtype) {
  ir::TensorData x(dtype, {}), y(dtype, {});
  x.SetDouble(0, a);
  y.SetDouble(0, b);
  return x == y;
}

ir::NodeId FoldFill(GraphRewriter& rw, ir::NodeId id, const std::vector<ir::NodeId>& in) {
  const ir::Node& node = rw.source().node(id);
  const ir::DType dtype = node.type.dtype;
  std::optional<double> value = AsFillValue(rw.node(in[0]));
  if (!value) return ir::kInvalidNode;
  switch (node.op) {
    case ir::Op::kReshape:
    case ir::Op::kBroadcast:
    case ir::Op::kPermute:
    case ir::Op::kSlice:
    case ir::Op::kFlip:
      break;
    case ir::Op::kPad:
      // An empty operand contributes no element, so its value does not matter.
      if (rw.node(in[0]).type.num_elements() == 0) value = node.attrs.value;
      if (!SameStored(*value, node.attrs.value, dtype)) return ir::kInvalidNode;
      break;
    case ir::Op::kConcat:
      for (size_t k = 1; k < in.size(); ++k) {
        const std::optional<double> other = AsFillValue(rw.node(in[k]));
        if (!other || !SameStored(*value, *other, dtype)) return ir::kInvalidNode;
      }
      break;
    default:
      return ir::kInvalidNode;
  }
  return rw.EmitFill(*value, node.type, node.loc);
}

ir::NodeId Compose(GraphRewriter& rw, ir::NodeId id, ir::NodeId input) {
  const ir::Node& node = rw.source().node(id);
  const ir::Node& inner = rw.node(input);
  if (inner.op != node.op) return ir::kInvalidNode;
  const ir::NodeId x = inner.inputs[0];
  const ir::TensorType& x_type = rw.node(x).type;
  switch (node.op) {
    case ir::Op::kReshape:
    case ir::Op::kBroadcast: {
      if (x_type == node.type) return x;
      ir::Attrs attrs;
      attrs.shape = node.type.shape;
      return rw.Emit(node.op, {x}, std::move(attrs), node.loc);
    }
    case ir::Op::kPermute: {
      ir::Attrs attrs;
      bool identity = true;
      for (size_t i = 0; i < node.attrs.axes.size(); ++i) {
        attrs.axes.push_back(inner.attrs.axes[static_cast<size_t>(node.attrs.axes[i])]);
        identity = identity && attrs.axes[i] == static_cast<int64_t>(i);
      }
      return identity ? x : rw.Emit(ir::Op::kPermute, {x}, std::move(attrs), node.loc);
    }
    case ir::Op::kSlice: {
      // Outer element j on an axis reads inner element b + j*t, which reads x at
      // a + (b + j*t)*s = (a + b*s) + j*(s*t).
      ir::Attrs attrs;
      bool unit_strides = true;
      for (size_t i = 0; i < node.type.shape.size(); ++i) {
        const int64_t a = inner.attrs.starts[i], s = At(inner.attrs.strides, i, 1);
        const int64_t b = node.attrs.starts[i], t = At(node.attrs.strides, i, 1);
        const int64_t stride = s * t, count = node.type.shape[i];
        // An empty result reads nothing, and a + b*s may then lie past x: slice [0:0] instead.
        const int64_t start = count == 0 ? 0 : a + b * s;
        attrs.starts.push_back(start);
        // The tightest limit giving `count` elements; it stays within x since the last element
        // read is inside x.
        attrs.limits.push_back(count == 0 ? start : start + (count - 1) * stride + 1);
        attrs.strides.push_back(stride);
        unit_strides = unit_strides && stride == 1;
      }
      if (unit_strides) attrs.strides.clear();
      return rw.Emit(ir::Op::kSlice, {x}, std::move(attrs), node.loc);
    }
    case ir::Op::kFlip: {
      ir::Attrs attrs;
      std::set_symmetric_difference(inner.attrs.axes.begin(), inner.attrs.axes.end(),
                                    node.attrs.axes.begin(), node.attrs.axes.end(),
                                    std::back_inserter(attrs.axes));
      return attrs.axes.empty() ? x : rw.Emit(ir::Op::kFlip, {x}, std::move(attrs), node.loc);
    }
    default:
      return ir::kInvalidNode;
  }
}

// Whether `axes` swaps the last two axes and keeps the others in place.
bool SwapsLastTwo(const std::vector<int64_t>& axes) {
  const size_t r = axes.size();
  if (r < 2) return false;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (axes[i] != static_cast<int64_t>(i)) return false;
  }
  return axes[r - 2] == static_cast<int64_t>(r - 1) && axes[r - 1] == static_cast<int64_t>(r - 2);
}

// x with its last two axes swapped: the operand of x when x is itself such a permute.
ir::NodeId SwapLastTwo(GraphRewriter& rw, ir::NodeId x, std::source_location loc) {
  const ir::Node& node = rw.node(x);
  if (node.op == ir::Op::kPermute && SwapsLastTwo(node.attrs.axes)) return node.inputs[0];
  ir::Attrs attrs;
  const int64_t r = node.type.rank();
  for (int64_t i = 0; i < r; ++i) attrs.axes.push_back(i);
  std::swap(attrs.axes[static_cast<size_t>(r - 2)], attrs.axes[static_cast<size_t>(r - 1)]);
  return rw.Emit(ir::Op::kPermute, {x}, std::move(attrs), loc);
}

// permute(matmul(a, b)) swapping the last two axes -> matmul(b^T, a^T), when that matmul is used
// only there. Reverse-mode autodiff produces this for every linear layer's weight gradient:
// y = x W^T gives dW^T = x^T dy, then the permute's gradient transposes it back, so the update
// W - lr dW would read the GEMM's [in, out] result column by column. The swapped product writes
// dW [out, in] directly; the operands' permutes cancel (movement folding) or are read in place
// by the GEMM.
ir::NodeId TransposeProduct(GraphRewriter& rw, ir::NodeId id, const std::vector<int>& uses) {
  const ir::Node& node = rw.source().node(id);
  if (node.op != ir::Op::kPermute || !SwapsLastTwo(node.attrs.axes)) return ir::kInvalidNode;
  const ir::NodeId product = node.inputs[0];
  if (rw.source().node(product).op != ir::Op::kMatMul) return ir::kInvalidNode;
  if (uses[static_cast<size_t>(product)] != 1) return ir::kInvalidNode;
  const ir::Node& matmul = rw.node(rw.Input(id, 0));
  if (matmul.op != ir::Op::kMatMul) return ir::kInvalidNode;
  const ir::NodeId a = matmul.inputs[0], b = matmul.inputs[1];
  const ir::Attrs attrs = matmul.attrs;  // an integer matmul's accumulate; copied before Emit
  const ir::NodeId bt = SwapLastTwo(rw, b, node.loc);
  const ir::NodeId at = SwapLastTwo(rw, a, node.loc);
  if (bt == ir::kInvalidNode || at == ir::kInvalidNode) return ir::kInvalidNode;
  return rw.Emit(ir::Op::kMatMul, {bt, at}, attrs, node.loc);
}

ir::NodeId Fold(GraphRewriter& rw, ir::NodeId id) {
  const ir::Node& node = rw.source().node(id);
  if (ir::GetOpClass(node.op) != ir::OpClass::kMovement) return ir::kInvalidNode;
  const std::vector<ir::NodeId> in = rw.Inputs(id);
  for (ir::NodeId input : in) {
    if (input == ir::kInvalidNode) return ir::kInvalidNode;
  }
  if (ir::NodeId fill = FoldFill(rw, id, in); fill != ir::kInvalidNode) return fill;
  if (node.op == ir::Op::kPermute &&
      MovesOnlyUnitAxes(node.attrs.axes, rw.node(in[0]).type.shape)) {
    if (rw.node(in[0]).type == node.type) return in[0];
    ir::Attrs attrs;
    attrs.shape = node.type.shape;
    return rw.Emit(ir::Op::kReshape, {in[0]}, std::move(attrs), node.loc);
  }
  return Compose(rw, id, in[0]);
}

}  // namespace

absl::StatusOr<ir::Graph> MovementFolding::Run(ir::Graph graph) {
  // Uses of each source node (operands and graph outputs), for TransposeProduct.
  std::vector<int> uses(static_cast<size_t>(graph.num_nodes()), 0);
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    for (ir::NodeId input : graph.node(id).inputs) ++uses[static_cast<size_t>(input)];
  }
  for (const ir::Output& output : graph.outputs()) ++uses[static_cast<size_t>(output.node)];
  return RewriteEachNode(graph, [&uses](GraphRewriter& rw, ir::NodeId id) {
    const ir::NodeId folded = Fold(rw, id);
    return folded != ir::kInvalidNode ? folded : TransposeProduct(rw, id, uses);
  });
}

}  // namespace kiln::passes
