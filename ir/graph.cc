#include "ir/graph.h"

#include "absl/strings/str_cat.h"

namespace kiln::ir {

std::string TypeToString(const TensorType& type) {
  return absl::StrCat(DTypeName(type.dtype), ShapeToString(type.shape));
}

bool Attrs::operator==(const Attrs& o) const {
  const bool literals_equal =
      literal == o.literal || (literal && o.literal && *literal == *o.literal);
  return dtype == o.dtype && shape == o.shape && axes == o.axes && starts == o.starts &&
         limits == o.limits && strides == o.strides && low == o.low && high == o.high &&
         dilation == o.dilation && input_dilation == o.input_dilation && window == o.window &&
         groups == o.groups && (value == o.value || (value != value && o.value != o.value)) &&
         seed == o.seed && name == o.name && literals_equal && accumulate == o.accumulate;
}

std::string LocationToString(const std::source_location& loc) {
  const char* file = loc.file_name();
  if (file == nullptr || *file == '\0' || loc.line() == 0) return "";
  return absl::StrCat(file, ":", loc.line());
}

NodeId Graph::AddNode(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<NodeId>(nodes_.size() - 1);
}

void Graph::AddOutput(NodeId node, std::string name) {
  outputs_.push_back(Output{node, std::move(name)});
}

std::vector<NodeId> Graph::Parameters() const {
  std::vector<NodeId> params;
  for (NodeId i = 0; i < num_nodes(); ++i) {
    if (nodes_[static_cast<size_t>(i)].op == Op::kParameter) params.push_back(i);
  }
  return params;
}

NodeId Graph::FindParameter(std::string_view name) const {
  for (NodeId i = 0; i < num_nodes(); ++i) {
    const Node& n = nodes_[static_cast<size_t>(i)];
    if (n.op == Op::kParameter && n.attrs.name == name) return i;
  }
  return kInvalidNode;
}

}  // namespace kiln::ir
