#include "frontend/trace.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "frontend/error.h"
#include "ir/verifier.h"

namespace kiln::detail {

TensorRef Placeholder(const TensorRef& like, const Loc& loc) {
  auto node = std::make_shared<LazyNode>();
  node->op = ir::Op::kParameter;
  node->type = like->type;
  node->device = like->device;
  node->loc = loc;
  node->pending_depth = 1;
  node->pending_estimate = 1;
  return node;
}

TracedGraph BuildTrace(std::span<const TensorRef> placeholders, std::span<const TensorRef> outputs,
                       std::span<const std::pair<std::string, TensorRef>> named,
                       const TraceNames& names, const Loc& loc) {
  if (!names.inputs.empty() && names.inputs.size() != placeholders.size()) {
    ThrowStatus(
        absl::InvalidArgumentError(absl::StrCat("trace: ", names.inputs.size(), " input names for ",
                                                placeholders.size(), " inputs")),
        loc);
  }
  if (!names.outputs.empty() && names.outputs.size() != outputs.size()) {
    ThrowStatus(
        absl::InvalidArgumentError(absl::StrCat("trace: ", names.outputs.size(),
                                                " output names for ", outputs.size(), " outputs")),
        loc);
  }
  // A module's parameters may still be pending (a lazy initialiser): they are weights, so they
  // get their values now.
  std::vector<TensorRef> pending;
  for (const auto& [name, ref] : named) {
    if (!ref->realized()) pending.push_back(ref);
  }
  if (!pending.empty()) Realize(pending, loc);
  std::vector<LazyNode*> roots;
  for (const TensorRef& out : outputs) roots.push_back(out.get());
  // Pending nodes are expanded; realized ones (captured weights) and placeholders are leaves.
  const std::vector<LazyNode*> order =
      TopologicalOrder(roots, [](const LazyNode* node) { return !node->realized(); });

  absl::flat_hash_map<const LazyNode*, std::string> name_of;
  for (const auto& [name, ref] : named) name_of.emplace(ref.get(), name);

  TracedGraph traced;
  ir::Graph& graph = traced.graph;
  absl::flat_hash_map<const LazyNode*, ir::NodeId> ids;
  auto add_parameter = [&](const LazyNode* node, std::string name) {
    ir::Attrs attrs;
    attrs.name = std::move(name);
    attrs.dtype = node->type.dtype;
    attrs.shape = node->type.shape;
    const ir::NodeId id =
        graph.AddNode(ir::Node{ir::Op::kParameter, {}, std::move(attrs), node->type, node->loc});
    ids[node] = id;
  };
  // Inputs first (in argument order, even when the function ignores one), then weights.
  for (size_t i = 0; i < placeholders.size(); ++i) {
    add_parameter(placeholders[i].get(),
                  names.inputs.empty() ? absl::StrCat("input", i) : names.inputs[i]);
  }
  int unnamed = 0;
  for (LazyNode* node : order) {
    if (!node->realized() || ids.contains(node)) continue;
    auto it = name_of.find(node);
    std::string name = it != name_of.end() ? it->second : absl::StrCat("weight", unnamed++);
    traced.weights.emplace_back(name, HostValue(*node, loc));
    add_parameter(node, std::move(name));
  }
  for (LazyNode* node : order) {
    if (ids.contains(node)) continue;
    if (node->op == ir::Op::kParameter) {
      ThrowStatus(absl::FailedPreconditionError(
                      "trace: the result depends on a placeholder of another trace, or on a value "
                      "lost to a failed run"),
                  loc);
    }
    std::vector<ir::NodeId> inputs;
    for (const TensorRef& in : node->inputs) inputs.push_back(ids.at(in.get()));
    ids[node] =
        graph.AddNode(ir::Node{node->op, std::move(inputs), node->attrs, node->type, node->loc});
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    graph.AddOutput(ids.at(outputs[k].get()),
                    names.outputs.empty() ? absl::StrCat("output", k) : names.outputs[k]);
  }
  if (absl::Status s = ir::Verify(graph); !s.ok()) {
    ThrowStatus(absl::Status(s.code(), absl::StrCat("trace: ", s.message())), loc);
  }
  return traced;
}

}  // namespace kiln::detail
