// Gradients of lazy tensors.
//
//   auto w = Tensor<Cpu, 2>::random_normal({4, 3}, 0, 1, device).require_grad();
//   auto loss = x.matmul(w).square().mean();
//   kiln::Gradients grads = loss.backward();
//   std::optional<Tensor<Cpu, 2>> dw = w.grad(grads);
//
// Ops on a tensor that requires a gradient record a tape (each node keeps its operands even after
// it is realized). backward() collects the tape behind the loss into an ir::Graph, runs the
// autodiff pass (passes/autodiff.h) on it, and returns the appended gradient nodes as lazy
// tensors: nothing runs until they are realized, so a forward pass, its backward pass and the
// optimizer's update realized together compile to one graph (and the next step with the same
// shapes is a compile-cache hit). Gradients are themselves taped when their inputs are, so a
// gradient can be differentiated again.
//
// Inside a NoGradGuard scope nothing is taped (optimizer updates, evaluation); detach() returns
// the same value cut off from the tape.
#pragma once

#include <cstddef>
#include <optional>
#include <source_location>
#include <unordered_map>

#include "frontend/engine.h"

namespace kiln {

/// The gradients one backward() produced, keyed by the tensors that require them (their nodes:
/// copies of a tensor share its node, so any copy finds its gradient).
class Gradients {
 public:
  Gradients() = default;

  /// The gradient with respect to `tensor`, or null when `tensor` did not take part in the loss
  /// or does not require a gradient. Typed access: Tensor::grad(grads).
  detail::TensorRef get(const detail::TensorRef& tensor) const;
  /// Sets (replaces) a gradient; for optimizers' tests and for users combining gradients.
  /// Throws kiln::Error when the types differ.
  void set(const detail::TensorRef& tensor, detail::TensorRef gradient,
           std::source_location loc = std::source_location::current());
  /// Drops one gradient (e.g. of a frozen parameter); no-op when absent.
  void remove(const detail::TensorRef& tensor);
  size_t size() const { return by_node_.size(); }
  bool empty() const { return by_node_.empty(); }

 private:
  // Keyed by node address; the key node is held alive so the address cannot be reused.
  struct Entry {
    detail::TensorRef tensor;
    detail::TensorRef gradient;
  };
  std::unordered_map<const detail::LazyNode*, Entry> by_node_;
};

/// While an instance is alive (on this thread), ops record no tape, as in torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// False inside a NoGradGuard scope.
bool GradEnabled();

namespace detail {
/// Marks `x` as a gradient leaf (or clears the mark); returns `x`. A pending node that is taped
/// keeps its value but becomes a leaf: backward stops there.
TensorRef SetRequireGrad(const TensorRef& x, bool require, const Loc& loc);
/// True when gradients flow to `x` (it requires one, or it was computed from one with the tape on).
bool TracksGrad(const TensorRef& x);
/// True for a leaf that requires a gradient (a parameter).
bool RequiresGrad(const TensorRef& x);
/// The same value without a tape.
TensorRef Detach(const TensorRef& x, const Loc& loc);
/// Gradients of `loss` (one element, Float) with respect to every tensor that requires one and
/// that the loss depends on. `seed` (optional, loss's type) replaces the implicit 1.
Gradients Backward(const TensorRef& loss, const TensorRef& seed, const Loc& loc);
}  // namespace detail

}  // namespace kiln
