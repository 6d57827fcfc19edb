#include "ir/verifier.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ir/infer.h"

namespace kiln::ir {
namespace {

// The AttrField bits whose Attrs field differs from a default-constructed Attrs.
uint32_t SetAttrs(const Attrs& a) {
  static const Attrs kDefault;
  uint32_t mask = 0;
  if (a.dtype != kDefault.dtype) mask |= kAttrDType;
  if (!a.shape.empty()) mask |= kAttrShape;
  if (!a.axes.empty()) mask |= kAttrAxes;
  if (!a.starts.empty()) mask |= kAttrStarts;
  if (!a.limits.empty()) mask |= kAttrLimits;
  if (!a.strides.empty()) mask |= kAttrStrides;
  if (!a.low.empty()) mask |= kAttrLow;
  if (!a.high.empty()) mask |= kAttrHigh;
  if (!a.dilation.empty()) mask |= kAttrDilation;
  if (!a.input_dilation.empty()) mask |= kAttrInputDilation;
  if (!a.window.empty()) mask |= kAttrWindow;
  if (a.groups != kDefault.groups) mask |= kAttrGroups;
  if (a.value != kDefault.value) mask |= kAttrValue;
  if (a.seed != kDefault.seed) mask |= kAttrSeed;
  if (!a.name.empty()) mask |= kAttrName;
  if (a.literal) mask |= kAttrLiteral;
  if (a.accumulate.has_value()) mask |= kAttrAccumulate;
  return mask;
}

std::string NodeLabel(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string label = absl::StrCat("%", id, " = ", OpName(n.op));
  if (std::string where = LocationToString(n.loc); !where.empty()) {
    absl::StrAppend(&label, " (", where, ")");
  }
  return label;
}

}  // namespace

absl::Status Verify(const Graph& graph) {
  std::set<std::string> parameter_names;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    std::vector<TensorType> types;
    for (NodeId input : node.inputs) {
      if (input < 0 || input >= id) {
        return absl::InvalidArgumentError(
            absl::StrCat(NodeLabel(graph, id), ": operand %", input, " is not an earlier node"));
      }
      types.push_back(graph.node(input).type);
    }
    if (uint32_t extra = SetAttrs(node.attrs) & ~UsedAttrs(node.op); extra != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(NodeLabel(graph, id), ": sets attributes the op does not use (mask 0x",
                       absl::Hex(extra), ")"));
    }
    absl::StatusOr<TensorType> type = InferType(node.op, types, node.attrs);
    if (!type.ok()) {
      // InferType's message starts with "<op>: "; say the op once, after the node id.
      absl::string_view message = type.status().message();
      absl::ConsumePrefix(&message, absl::StrCat(OpName(node.op), ": "));
      const std::string where = LocationToString(node.loc);
      return absl::InvalidArgumentError(absl::StrCat("%", id, " = ", OpName(node.op), ": ", message,
                                                     where.empty() ? "" : " (at ", where,
                                                     where.empty() ? "" : ")"));
    }
    if (*type != node.type) {
      return absl::InvalidArgumentError(absl::StrCat(NodeLabel(graph, id), ": result type ",
                                                     TypeToString(node.type), " should be ",
                                                     TypeToString(*type)));
    }
    if (node.op == Op::kParameter && !parameter_names.insert(node.attrs.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(NodeLabel(graph, id), ": parameter name \"",
                                                     node.attrs.name, "\" used twice"));
    }
  }
  std::set<std::string> output_names;
  for (const Output& out : graph.outputs()) {
    if (out.node < 0 || out.node >= graph.num_nodes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output %", out.node, " does not name a node"));
    }
    if (!out.name.empty() && !output_names.insert(out.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("output name \"", out.name, "\" used twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::ir
