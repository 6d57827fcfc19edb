#include "ir/builder.h"

#include "absl/strings/str_cat.h"
#include "ir/infer.h"
#include "ir/verifier.h"

namespace kiln::ir {

absl::Status AnnotateWithLocation(const absl::Status& status, const std::source_location& loc) {
  const std::string where = LocationToString(loc);
  if (status.ok() || where.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

NodeId Builder::Emit(Op op, std::vector<NodeId> inputs, Attrs attrs, Loc loc) {
  if (!status_.ok()) return kInvalidNode;
  std::vector<TensorType> types;
  types.reserve(inputs.size());
  for (NodeId id : inputs) {
    if (id < 0 || id >= graph_.num_nodes()) {
      status_ = AnnotateWithLocation(absl::InvalidArgumentError(absl::StrCat(
                                         OpName(op), ": operand %", id, " does not exist")),
                                     loc);
      return kInvalidNode;
    }
    types.push_back(graph_.node(id).type);
  }
  absl::StatusOr<TensorType> type = InferType(op, types, attrs);
  if (!type.ok()) {
    status_ = AnnotateWithLocation(type.status(), loc);
    return kInvalidNode;
  }
  return graph_.AddNode(Node{op, std::move(inputs), std::move(attrs), *std::move(type), loc});
}

NodeId Builder::Parameter(std::string name, TensorType type, Loc loc) {
  if (graph_.FindParameter(name) != kInvalidNode) {
    if (status_.ok()) {
      status_ = AnnotateWithLocation(
          absl::InvalidArgumentError(absl::StrCat("parameter: name \"", name, "\" already used")),
          loc);
    }
    return kInvalidNode;
  }
  Attrs attrs;
  attrs.name = std::move(name);
  attrs.dtype = type.dtype;
  attrs.shape = std::move(type.shape);
  return Emit(Op::kParameter, {}, std::move(attrs), loc);
}

NodeId Builder::Constant(TensorData literal, Loc loc) {
  Attrs attrs;
  attrs.literal = std::make_shared<const TensorData>(std::move(literal));
  return Emit(Op::kConstant, {}, std::move(attrs), loc);
}

NodeId Builder::Fill(double value, TensorType type, Loc loc) {
  Attrs attrs;
  attrs.value = value;
  attrs.dtype = type.dtype;
  attrs.shape = std::move(type.shape);
  return Emit(Op::kFill, {}, std::move(attrs), loc);
}

NodeId Builder::Iota(TensorType type, int64_t axis, Loc loc) {
  Attrs attrs;
  attrs.dtype = type.dtype;
  attrs.shape = std::move(type.shape);
  attrs.axes = {axis};
  return Emit(Op::kIota, {}, std::move(attrs), loc);
}

NodeId Builder::RandomUniform(TensorType type, uint64_t seed, Loc loc) {
  Attrs attrs;
  attrs.dtype = type.dtype;
  attrs.shape = std::move(type.shape);
  attrs.seed = seed;
  return Emit(Op::kRandomUniform, {}, std::move(attrs), loc);
}

NodeId Builder::RandomNormal(TensorType type, uint64_t seed, Loc loc) {
  Attrs attrs;
  attrs.dtype = type.dtype;
  attrs.shape = std::move(type.shape);
  attrs.seed = seed;
  return Emit(Op::kRandomNormal, {}, std::move(attrs), loc);
}

NodeId Builder::Unary(Op op, NodeId x, Loc loc) { return Emit(op, {x}, {}, loc); }

NodeId Builder::Binary(Op op, NodeId a, NodeId b, Loc loc) { return Emit(op, {a, b}, {}, loc); }

NodeId Builder::Select(NodeId cond, NodeId on_true, NodeId on_false, Loc loc) {
  return Emit(Op::kSelect, {cond, on_true, on_false}, {}, loc);
}

NodeId Builder::Cast(NodeId x, DType dtype, Loc loc) {
  Attrs attrs;
  attrs.dtype = dtype;
  return Emit(Op::kCast, {x}, std::move(attrs), loc);
}

NodeId Builder::Reduce(Op op, NodeId x, std::vector<int64_t> axes, Loc loc) {
  Attrs attrs;
  attrs.axes = std::move(axes);
  return Emit(op, {x}, std::move(attrs), loc);
}

NodeId Builder::ArgReduce(Op op, NodeId x, int64_t axis, Loc loc) {
  Attrs attrs;
  attrs.axes = {axis};
  return Emit(op, {x}, std::move(attrs), loc);
}

NodeId Builder::Reshape(NodeId x, Shape shape, Loc loc) {
  Attrs attrs;
  attrs.shape = std::move(shape);
  return Emit(Op::kReshape, {x}, std::move(attrs), loc);
}

NodeId Builder::Permute(NodeId x, std::vector<int64_t> perm, Loc loc) {
  Attrs attrs;
  attrs.axes = std::move(perm);
  return Emit(Op::kPermute, {x}, std::move(attrs), loc);
}

NodeId Builder::Broadcast(NodeId x, Shape shape, Loc loc) {
  Attrs attrs;
  attrs.shape = std::move(shape);
  return Emit(Op::kBroadcast, {x}, std::move(attrs), loc);
}

NodeId Builder::Slice(NodeId x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                      std::vector<int64_t> strides, Loc loc) {
  Attrs attrs;
  attrs.starts = std::move(starts);
  attrs.limits = std::move(limits);
  attrs.strides = std::move(strides);
  return Emit(Op::kSlice, {x}, std::move(attrs), loc);
}

NodeId Builder::Pad(NodeId x, std::vector<int64_t> low, std::vector<int64_t> high, double value,
                    Loc loc) {
  Attrs attrs;
  attrs.low = std::move(low);
  attrs.high = std::move(high);
  attrs.value = value;
  return Emit(Op::kPad, {x}, std::move(attrs), loc);
}

NodeId Builder::Concat(std::vector<NodeId> inputs, int64_t axis, Loc loc) {
  Attrs attrs;
  attrs.axes = {axis};
  return Emit(Op::kConcat, std::move(inputs), std::move(attrs), loc);
}

NodeId Builder::Flip(NodeId x, std::vector<int64_t> axes, Loc loc) {
  Attrs attrs;
  attrs.axes = std::move(axes);
  return Emit(Op::kFlip, {x}, std::move(attrs), loc);
}

NodeId Builder::Gather(NodeId x, NodeId index, int64_t axis, Loc loc) {
  Attrs attrs;
  attrs.axes = {axis};
  return Emit(Op::kGather, {x, index}, std::move(attrs), loc);
}

NodeId Builder::ScatterAdd(NodeId x, NodeId index, NodeId src, int64_t axis, Loc loc) {
  Attrs attrs;
  attrs.axes = {axis};
  return Emit(Op::kScatterAdd, {x, index, src}, std::move(attrs), loc);
}

NodeId Builder::MatMul(NodeId a, NodeId b, Loc loc) { return Emit(Op::kMatMul, {a, b}, {}, loc); }

NodeId Builder::IntegerMatMul(NodeId a, NodeId b, DType accumulate, Loc loc) {
  Attrs attrs;
  attrs.accumulate = accumulate;
  return Emit(Op::kMatMul, {a, b}, std::move(attrs), loc);
}

NodeId Builder::Conv(NodeId input, NodeId weight, Attrs conv_attrs, Loc loc) {
  return Emit(Op::kConv, {input, weight}, std::move(conv_attrs), loc);
}

NodeId Builder::WindowReduce(Op op, NodeId x, Attrs window_attrs, Loc loc) {
  return Emit(op, {x}, std::move(window_attrs), loc);
}

void Builder::Output(NodeId node, std::string name) {
  if (!status_.ok()) return;
  if (node < 0 || node >= graph_.num_nodes()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("output: node %", node, " does not exist"));
    return;
  }
  graph_.AddOutput(node, std::move(name));
}

absl::StatusOr<Graph> Builder::Build() && {
  if (!status_.ok()) return status_;
  if (absl::Status s = Verify(graph_); !s.ok()) return s;
  return std::move(graph_);
}

}  // namespace kiln::ir
