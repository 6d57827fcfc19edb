#include "passes/rewriter.h"

#include <bit>

#include "absl/strings/str_cat.h"

namespace kiln::passes {
namespace {

std::string Label(const ir::Graph& graph, ir::NodeId id) {
  const ir::Node& node = graph.node(id);
  std::string label = absl::StrCat("%", id, " = ", ir::OpName(node.op));
  if (std::string where = ir::LocationToString(node.loc); !where.empty()) {
    absl::StrAppend(&label, " (", where, ")");
  }
  return label;
}

bool SameAttrBits(const ir::Attrs& a, const ir::Attrs& b) {
  // Attrs::operator== equates -0 with 0 and all NaNs; a rewrite between those is a change.
  return a == b && std::bit_cast<uint64_t>(a.value) == std::bit_cast<uint64_t>(b.value);
}

}  // namespace

GraphRewriter::GraphRewriter(const ir::Graph& source)
    : source_(source), map_(static_cast<size_t>(source.num_nodes()), ir::kInvalidNode) {}

ir::NodeId GraphRewriter::Input(ir::NodeId old, size_t k) const {
  return Mapped(source_.node(old).inputs[k]);
}

std::vector<ir::NodeId> GraphRewriter::Inputs(ir::NodeId old) const {
  std::vector<ir::NodeId> inputs;
  inputs.reserve(source_.node(old).inputs.size());
  for (ir::NodeId input : source_.node(old).inputs) inputs.push_back(Mapped(input));
  return inputs;
}

ir::NodeId GraphRewriter::Copy(ir::NodeId old) {
  const ir::Node& node = source_.node(old);
  return Emit(node.op, Inputs(old), node.attrs, node.loc);
}

ir::NodeId GraphRewriter::Emit(ir::Op op, std::vector<ir::NodeId> inputs, ir::Attrs attrs,
                               std::source_location loc) {
  return builder_.Emit(op, std::move(inputs), std::move(attrs), loc);
}

ir::NodeId GraphRewriter::EmitFill(double value, const ir::TensorType& type,
                                   std::source_location loc) {
  ir::Attrs attrs;
  attrs.dtype = type.dtype;
  attrs.shape = type.shape;
  attrs.value = value;
  return Emit(ir::Op::kFill, {}, std::move(attrs), loc);
}

void GraphRewriter::Map(ir::NodeId old, ir::NodeId new_id) {
  map_[static_cast<size_t>(old)] = new_id;
  if (!status_.ok() || !builder_.status().ok()) return;
  if (new_id < 0 || new_id >= graph().num_nodes()) {
    status_ = absl::InternalError(absl::StrCat("rewrite of ", Label(source_, old),
                                               ": replacement %", new_id, " does not exist"));
    return;
  }
  const ir::TensorType& before = source_.node(old).type;
  const ir::TensorType& after = node(new_id).type;
  if (before != after) {
    status_ = absl::InternalError(absl::StrCat("rewrite of ", Label(source_, old),
                                               " changed its type from ", ir::TypeToString(before),
                                               " to ", ir::TypeToString(after)));
  }
}

absl::StatusOr<ir::Graph> GraphRewriter::Finish() && {
  if (!builder_.status().ok()) return builder_.status();
  if (!status_.ok()) return status_;
  for (const ir::Output& output : source_.outputs()) {
    const ir::NodeId mapped = Mapped(output.node);
    if (mapped == ir::kInvalidNode) {
      return absl::InternalError(
          absl::StrCat("rewrite: output ", Label(source_, output.node), " was never mapped"));
    }
    builder_.Output(mapped, output.name);
  }
  return std::move(builder_).Build();
}

absl::StatusOr<ir::Graph> RewriteEachNode(const ir::Graph& graph, const RewriteRule& rule) {
  GraphRewriter rw(graph);
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    const ir::NodeId replacement = rule(rw, id);
    rw.Map(id, replacement != ir::kInvalidNode ? replacement : rw.Copy(id));
  }
  return std::move(rw).Finish();
}

bool SameGraph(const ir::Graph& a, const ir::Graph& b) {
  if (a.num_nodes() != b.num_nodes() || a.outputs() != b.outputs()) return false;
  for (ir::NodeId id = 0; id < a.num_nodes(); ++id) {
    const ir::Node& x = a.node(id);
    const ir::Node& y = b.node(id);
    if (x.op != y.op || x.inputs != y.inputs || x.type != y.type ||
        !SameAttrBits(x.attrs, y.attrs)) {
      return false;
    }
  }
  return true;
}

}  // namespace kiln::passes
