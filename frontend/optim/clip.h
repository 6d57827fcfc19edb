// Gradient clipping on kiln::Gradients, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_.
//
//   kiln::Gradients grads = loss.backward();
//   auto norm = kiln::optim::clip_grad_norm(model, grads, 1.0);  // lazy rank-0 tensor
//   optimizer.step(model, grads);
//
// Both record lazily (under a NoGradGuard) and replace the gradients of the module's parameters
// in `grads`; parameters without a gradient are skipped.
#pragma once

#include <cmath>
#include <limits>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/tensor.h"

namespace kiln::optim {

namespace detail {
using kiln::detail::Loc;
using kiln::detail::TensorRef;
/// Scales `grads` (in place in the vector) by min(1, max_norm / (total + 1e-6)) where total is
/// the norm_type-norm of all of them together; returns total (rank 0). `device_of` gives the
/// device and dtype of the result when `grads` is empty (the norm is then 0).
TensorRef ClipGradNorm(std::vector<TensorRef>& grads, double max_norm, double norm_type,
                       const TensorRef& device_of, const Loc& loc);
/// Clamps each of `grads` into [-clip_value, clip_value].
void ClipGradValue(std::vector<TensorRef>& grads, double clip_value, const Loc& loc);

/// The Float parameters of `module` with a gradient in `grads`, and those gradients.
template <class Module>
void CollectGrads(Module& module, const Gradients& grads, std::vector<TensorRef>& params,
                  std::vector<TensorRef>& gradients, TensorRef& first) {
  module.visit([&](const std::string&, const auto& param) {
    using T = std::remove_cvref_t<decltype(param)>;
    if constexpr (std::is_same_v<typename T::Kind, Float>) {
      if (first == nullptr) first = param.ref();
      if (TensorRef g = grads.get(param.ref())) {
        params.push_back(param.ref());
        gradients.push_back(std::move(g));
      }
    }
  });
}
}  // namespace detail

/// Inf for clip_grad_norm's norm_type (the largest absolute value).
inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

/// Rescales the gradients of `module`'s parameters so that their joint norm (the norm of the
/// per-tensor norms, `norm_type` >= 1 or kInfNorm) is at most `max_norm`; returns the norm before
/// clipping as a lazy rank-0 tensor: `clip_grad_norm<kiln::Cpu>(net, grads, 1.0)`.
template <class B, class Module>
Tensor<B, 0> clip_grad_norm(const Module& module, Gradients& grads, double max_norm,
                            double norm_type = 2.0,
                            std::source_location loc = std::source_location::current()) {
  NoGradGuard no_grad;
  std::vector<detail::TensorRef> params, gradients;
  detail::TensorRef first;
  detail::CollectGrads(module, grads, params, gradients, first);
  detail::TensorRef norm = detail::ClipGradNorm(gradients, max_norm, norm_type, first, loc);
  for (size_t i = 0; i < params.size(); ++i) grads.set(params[i], gradients[i], loc);
  return Tensor<B, 0>(norm, loc);
}

/// The same with B deduced from a module template such as Mlp<B>.
template <template <class> class Module, class B>
Tensor<B, 0> clip_grad_norm(const Module<B>& module, Gradients& grads, double max_norm,
                            double norm_type = 2.0,
                            std::source_location loc = std::source_location::current()) {
  return clip_grad_norm<B, Module<B>>(module, grads, max_norm, norm_type, loc);
}

/// Clamps every gradient of `module`'s parameters into [-clip_value, clip_value].
template <class Module>
void clip_grad_value(const Module& module, Gradients& grads, double clip_value,
                     std::source_location loc = std::source_location::current()) {
  NoGradGuard no_grad;
  std::vector<detail::TensorRef> params, gradients;
  detail::TensorRef first;
  detail::CollectGrads(module, grads, params, gradients, first);
  detail::ClipGradValue(gradients, clip_value, loc);
  for (size_t i = 0; i < params.size(); ++i) grads.set(params[i], gradients[i], loc);
}

}  // namespace kiln::optim
