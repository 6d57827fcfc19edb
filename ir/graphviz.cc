#include "ir/graphviz.h"

#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "ir/printer.h"

namespace kiln::ir {
namespace {

// Escapes text for a DOT double-quoted string. The input is already ASCII (the printer escapes
// everything else); "\n" in the result is DOT's centred line break.
std::string DotEscape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string Truncate(std::string text, int64_t max_chars) {
  if (max_chars >= 3 && static_cast<int64_t>(text.size()) > max_chars) {
    text.resize(static_cast<size_t>(max_chars - 3));
    text += "...";
  }
  return text;
}

const char* NodeStyle(Op op) {
  switch (op) {
    case Op::kParameter:
      return "shape=ellipse, style=filled, fillcolor=\"#c8e6c9\"";
    case Op::kConstant:
      return "shape=box, style=\"filled,rounded\", fillcolor=\"#e0e0e0\"";
    default:
      if (GetOpClass(op) == OpClass::kLeaf) {
        return "shape=box, style=\"filled,rounded\", fillcolor=\"#f5f5f5\"";
      }
      if (GetOpClass(op) == OpClass::kContraction) {
        return "shape=box, style=filled, fillcolor=\"#bbdefb\"";
      }
      return "shape=box";
  }
}

}  // namespace

std::string ToDot(const Graph& graph, const DotOptions& options) {
  std::string dot =
      "digraph kiln {\n"
      "  node [fontname=\"monospace\", fontsize=10];\n"
      "  edge [fontname=\"monospace\", fontsize=9];\n";
  PrintOptions print_options;
  print_options.max_literal_elements = options.max_literal_elements;
  std::set<NodeId> missing;
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    std::string label = absl::StrCat("%", id, " ", OpName(node.op));
    if (std::string attrs = PrintAttrs(node, print_options); !attrs.empty()) {
      absl::StrAppend(&label, "\n", Truncate(std::move(attrs), options.max_attr_chars));
    }
    absl::StrAppend(&label, "\n", TypeToString(node.type));
    absl::StrAppend(&dot, "  n", id, " [label=\"", DotEscape(label), "\", ", NodeStyle(node.op),
                    "];\n");
    const bool several = node.inputs.size() > 1;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const NodeId input = node.inputs[i];
      std::string source = absl::StrCat("n", input);
      if (input < 0 || input >= id) {
        source = absl::StrCat("missing", input < 0 ? "_" : "", input < 0 ? -int64_t{input} : input);
        if (missing.insert(input).second) {
          absl::StrAppend(&dot, "  ", source, " [label=\"missing %", input,
                          "\", shape=octagon, color=red, fontcolor=red];\n");
        }
      }
      absl::StrAppend(&dot, "  ", source, " -> n", id);
      if (several) absl::StrAppend(&dot, " [label=\"", i, "\"]");
      dot += ";\n";
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Output& out = graph.outputs()[i];
    std::string label = absl::StrCat("output ", i);
    if (!out.name.empty()) {
      absl::StrAppend(&label, "\n", Truncate(QuoteString(out.name), options.max_attr_chars));
    }
    absl::StrAppend(&dot, "  out", i, " [label=\"", DotEscape(label),
                    "\", shape=house, style=filled, fillcolor=\"#ffe0b2\"];\n");
    if (out.node >= 0 && out.node < graph.num_nodes()) {
      absl::StrAppend(&dot, "  n", out.node, " -> out", i, " [style=bold];\n");
    }
  }
  dot += "}\n";
  return dot;
}

}  // namespace kiln::ir
