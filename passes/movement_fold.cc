#include "passes/movement_fold.h"

#include <algorithm>
#include <iterator>
#include <optional>

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
  return RewriteEachNode(graph, Fold);
}

}  // namespace kiln::passes
