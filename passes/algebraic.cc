#include "passes/algebraic.h"

#include "passes/patterns.h"
#include "passes/rewriter.h"

namespace kiln::passes {
namespace {

// IEEE: x + (-0) == x and x - (+0) == x for every x, but (-0) + (+0) is +0.
constexpr double kNegativeZero = -0.0;

// Whether every reduced axis already has size 1 (or there are none), so each output element is
// a reduction of exactly one input element.
bool ReducesSingletons(const std::vector<int64_t>& axes, const ir::Shape& shape) {
  for (int64_t axis : axes) {
    if (shape[static_cast<size_t>(axis)] != 1) return false;
  }
  return true;
}

// The replacement of source node `id` by an identity, or kInvalidNode.
ir::NodeId Simplify(GraphRewriter& rw, ir::NodeId id) {
  const ir::Node& node = rw.source().node(id);
  const ir::OpClass op_class = ir::GetOpClass(node.op);
  if (op_class == ir::OpClass::kLeaf) return ir::kInvalidNode;
  const std::vector<ir::NodeId> in = rw.Inputs(id);
  for (ir::NodeId input : in) {
    if (input == ir::kInvalidNode) return ir::kInvalidNode;
  }
  const ir::Node& x = rw.node(in[0]);
  const ir::DType dtype = x.type.dtype;
  const bool integer = ir::IsInteger(dtype);

  switch (node.op) {
    case ir::Op::kMul: {
      const ir::Node& y = rw.node(in[1]);
      if (IsUniform(y, 1.0)) return in[0];
      if (IsUniform(x, 1.0)) return in[1];
      if (integer && IsUniform(y, 0.0)) return in[1];
      if (integer && IsUniform(x, 0.0)) return in[0];
      return ir::kInvalidNode;
    }
    case ir::Op::kAdd: {
      const double zero = integer ? 0.0 : kNegativeZero;
      if (IsUniform(rw.node(in[1]), zero)) return in[0];
      if (IsUniform(x, zero)) return in[1];
      return ir::kInvalidNode;
    }
    case ir::Op::kSub:
      return IsUniform(rw.node(in[1]), 0.0) ? in[0] : ir::kInvalidNode;
    case ir::Op::kDiv:
      return IsUniform(rw.node(in[1]), 1.0) ? in[0] : ir::kInvalidNode;
    case ir::Op::kNeg:
    case ir::Op::kNot:
      return x.op == node.op ? x.inputs[0] : ir::kInvalidNode;
    case ir::Op::kCast:
      return node.attrs.dtype == dtype ? in[0] : ir::kInvalidNode;
    case ir::Op::kReshape:
    case ir::Op::kBroadcast:
    case ir::Op::kSlice:  // Equal types force start 0, stride 1 and the full limit.
    case ir::Op::kPad:
      return node.type == x.type ? in[0] : ir::kInvalidNode;
    case ir::Op::kPermute:
      return node.type == x.type && MovesOnlyUnitAxes(node.attrs.axes, x.type.shape)
                 ? in[0]
                 : ir::kInvalidNode;
    case ir::Op::kReduceMax:
    case ir::Op::kReduceMin:
    case ir::Op::kReduceProd:
      // max(-inf, x), min(inf, x) and 1 * x are x, NaN and -0 included.
      return ReducesSingletons(node.attrs.axes, x.type.shape) ? in[0] : ir::kInvalidNode;
    case ir::Op::kReduceSum:
      // 0 + x is x for integers; for floats 0 + (-0) is +0.
      return integer && ReducesSingletons(node.attrs.axes, x.type.shape) ? in[0] : ir::kInvalidNode;
    case ir::Op::kArgMax:
    case ir::Op::kArgMin:
      return ReducesSingletons(node.attrs.axes, x.type.shape)
                 ? rw.EmitFill(0.0, node.type, node.loc)
                 : ir::kInvalidNode;
    case ir::Op::kFlip:
      for (int64_t axis : node.attrs.axes) {
        if (x.type.shape[static_cast<size_t>(axis)] > 1) return ir::kInvalidNode;
      }
      return in[0];
    case ir::Op::kConcat:
      return in.size() == 1 ? in[0] : ir::kInvalidNode;
    case ir::Op::kSelect:
      if (in[1] == in[2]) return in[1];
      if (IsUniform(x, 1.0)) return in[1];
      if (IsUniform(x, 0.0)) return in[2];
      return ir::kInvalidNode;
    default:
      return ir::kInvalidNode;
  }
}

}  // namespace

absl::StatusOr<ir::Graph> AlgebraicSimplification::Run(ir::Graph graph) {
  return RewriteEachNode(graph, Simplify);
}

}  // namespace kiln::passes
