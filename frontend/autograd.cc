#include "frontend/autograd.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/error.h"
#include "frontend/ops_internal.h"
#include "ir/builder.h"
#include "passes/autodiff.h"

namespace kiln {
namespace {

thread_local bool g_grad_enabled = true;

}  // namespace

detail::TensorRef Gradients::get(const detail::TensorRef& tensor) const {
  if (tensor == nullptr) return nullptr;
  auto it = by_node_.find(tensor.get());
  return it == by_node_.end() ? nullptr : it->second.gradient;
}

void Gradients::set(const detail::TensorRef& tensor, detail::TensorRef gradient,
                    std::source_location loc) {
  if (tensor == nullptr || gradient == nullptr) {
    detail::ThrowOpError("Gradients::set", "null tensor or gradient", {}, loc);
  }
  if (!(tensor->type == gradient->type)) {
    detail::ThrowOpError("Gradients::set", "the gradient's type differs from the tensor's",
                         {tensor->type, gradient->type}, loc);
  }
  by_node_[tensor.get()] = Entry{tensor, std::move(gradient)};
}

void Gradients::remove(const detail::TensorRef& tensor) {
  if (tensor != nullptr) by_node_.erase(tensor.get());
}

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool GradEnabled() { return g_grad_enabled; }

namespace detail {

TensorRef SetRequireGrad(const TensorRef& x, bool require, const Loc& loc) {
  if (require && !ir::IsFloat(x->type.dtype)) {
    ThrowOpError("require_grad", "only floating-point tensors can require gradients", {x->type},
                 loc);
  }
  x->requires_grad = require;
  // A realized leaf needs no operands (backward stops at it); drop what it still holds.
  if (require && x->realized() && !x->inputs.empty()) {
    std::vector<TensorRef> inputs = std::move(x->inputs);
    x->inputs.clear();
  }
  // A leaf's tape ends here either way: backward() stops at a leaf, and a tensor that no longer
  // requires a gradient is cut off from the one it was computed from.
  x->tracks_grad = require;
  return x;
}

bool TracksGrad(const TensorRef& x) { return x->tracks_grad; }

bool RequiresGrad(const TensorRef& x) { return x->requires_grad; }

TensorRef Detach(const TensorRef& x, const Loc& loc) {
  if (x->realized()) return ShareValue(x);
  NoGradGuard no_grad;
  // An identity reshape: a new node with the same value and no tape (simplify removes it).
  ir::Attrs attrs;
  attrs.shape = x->type.shape;
  return Record("detach", ir::Op::kReshape, {x}, std::move(attrs), loc);
}

Gradients Backward(const TensorRef& loss, const TensorRef& seed, const Loc& loc) {
  if (!ir::IsFloat(loss->type.dtype)) {
    ThrowOpError("backward", "the loss must be a floating-point tensor", {loss->type}, loc);
  }
  if (seed == nullptr && loss->type.num_elements() != 1) {
    ThrowOpError("backward",
                 "a loss with more than one element needs a seed (the gradient of the output); "
                 "reduce it first, e.g. with mean()",
                 {loss->type}, loc);
  }
  if (seed != nullptr && !(seed->type == loss->type)) {
    ThrowOpError("backward", "the seed's type differs from the loss's", {loss->type, seed->type},
                 loc);
  }
  if (!loss->tracks_grad) {
    ThrowOpError("backward",
                 "the loss does not depend on any tensor that requires a gradient (call "
                 "require_grad() on the parameters, and record the loss outside a NoGradGuard)",
                 {loss->type}, loc);
  }

  // The tape behind the loss, operands first. Interior nodes are tracked non-leaves; everything
  // else (leaves that require a gradient, untracked values, pending or realized) enters the
  // graph as a parameter.
  auto interior = [](const LazyNode* node) { return node->tracks_grad && !node->requires_grad; };
  LazyNode* const root = loss.get();
  const std::vector<LazyNode*> order = TopologicalOrder(std::span(&root, 1), interior);

  ir::Builder builder;
  std::unordered_map<const LazyNode*, ir::NodeId> ids;
  std::vector<LazyNode*> nodes_by_id;  // graph id -> lazy node
  std::vector<ir::NodeId> wrt;
  std::vector<LazyNode*> wrt_nodes;
  for (LazyNode* node : order) {
    ir::NodeId id;
    if (interior(node)) {
      std::vector<ir::NodeId> inputs;
      inputs.reserve(node->inputs.size());
      for (const TensorRef& in : node->inputs) inputs.push_back(ids.at(in.get()));
      id = builder.Emit(node->op, std::move(inputs), node->attrs, node->loc);
    } else {
      id = builder.Parameter(absl::StrCat("p", ids.size()), node->type, node->loc);
      if (node->requires_grad) {
        wrt.push_back(id);
        wrt_nodes.push_back(node);
      }
    }
    ids[node] = id;
    nodes_by_id.resize(static_cast<size_t>(id) + 1, nullptr);
    nodes_by_id[static_cast<size_t>(id)] = node;
  }
  ir::NodeId seed_id = ir::kInvalidNode;
  if (seed != nullptr) {
    seed_id = builder.Parameter("seed", seed->type, seed->loc);
    nodes_by_id.resize(static_cast<size_t>(seed_id) + 1, nullptr);
    nodes_by_id[static_cast<size_t>(seed_id)] = seed.get();
  }
  absl::StatusOr<ir::Graph> tape = std::move(builder).Build();
  if (!tape.ok()) ThrowStatus(tape.status(), loc);
  const int32_t tape_size = tape->num_nodes();

  absl::StatusOr<passes::GradientGraph> result =
      passes::AppendGradients(*tape, ids.at(loss.get()), wrt, seed_id);
  if (!result.ok()) {
    ThrowStatus(
        absl::Status(result.status().code(), absl::StrCat("backward: ", result.status().message())),
        loc);
  }

  // The appended nodes become lazy nodes; the tape's nodes map back to the nodes they came from.
  const ir::Graph& graph = result->graph;
  std::vector<TensorRef> refs(static_cast<size_t>(graph.num_nodes()));
  // Owning references to the tape's nodes, gathered from their users' operand lists.
  std::unordered_map<const LazyNode*, TensorRef> owners;
  owners[loss.get()] = loss;
  if (seed != nullptr) owners[seed.get()] = seed;
  for (LazyNode* node : order) {
    if (!interior(node)) continue;
    for (const TensorRef& in : node->inputs) owners.emplace(in.get(), in);
  }
  const int64_t bound = graph.num_nodes();
  for (ir::NodeId id = tape_size; id < graph.num_nodes(); ++id) {
    const ir::Node& node = graph.node(id);
    std::vector<TensorRef> inputs;
    inputs.reserve(node.inputs.size());
    for (ir::NodeId in : node.inputs) {
      inputs.push_back(in < tape_size ? owners.at(nodes_by_id[static_cast<size_t>(in)])
                                      : refs[static_cast<size_t>(in)]);
    }
    refs[static_cast<size_t>(id)] = Import(graph, id, std::move(inputs), loss->device, bound);
  }

  Gradients gradients;
  for (size_t i = 0; i < wrt.size(); ++i) {
    const ir::NodeId g = result->gradients[i];
    TensorRef gradient = g < tape_size ? owners.at(nodes_by_id[static_cast<size_t>(g)])
                                       : refs[static_cast<size_t>(g)];
    gradients.set(owners.at(wrt_nodes[i]), std::move(gradient), loc);
  }
  return gradients;
}

}  // namespace detail
}  // namespace kiln
