// Activations: compositions of ir primitives (so autodiff and fusion need no rules for them),
// numerically stable where it matters (softmax and log_softmax subtract the max; softplus never
// overflows).
#pragma once

#include <cstdint>
#include <source_location>

#include "frontend/tensor.h"

namespace kiln::activation {

/// max(x, 0).
template <class B, int R>
Tensor<B, R, Float> relu(const Tensor<B, R, Float>& x,
                         std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::Relu(x.ref(), loc));
}
/// x for x > 0, slope * x otherwise.
template <class B, int R>
Tensor<B, R, Float> leaky_relu(const Tensor<B, R, Float>& x, double slope = 0.01,
                               std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::LeakyRelu(x.ref(), slope, loc));
}
/// Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).
template <class B, int R>
Tensor<B, R, Float> gelu(const Tensor<B, R, Float>& x,
                         std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::Gelu(x.ref(), false, loc));
}
/// GELU's tanh approximation (torch's approximate="tanh").
template <class B, int R>
Tensor<B, R, Float> gelu_tanh(const Tensor<B, R, Float>& x,
                              std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::Gelu(x.ref(), true, loc));
}
/// 1 / (1 + exp(-x)).
template <class B, int R>
Tensor<B, R, Float> sigmoid(const Tensor<B, R, Float>& x,
                            std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::Sigmoid(x.ref(), loc));
}
template <class B, int R>
Tensor<B, R, Float> tanh(const Tensor<B, R, Float>& x,
                         std::source_location loc = std::source_location::current()) {
  return x.tanh(loc);
}
/// x * sigmoid(x).
template <class B, int R>
Tensor<B, R, Float> silu(const Tensor<B, R, Float>& x,
                         std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::Silu(x.ref(), loc));
}
/// log(1 + exp(beta x)) / beta, computed as (max(bx, 0) + log(1 + exp(-|bx|))) / beta.
template <class B, int R>
Tensor<B, R, Float> softplus(const Tensor<B, R, Float>& x, double beta = 1.0,
                             std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, Float>(detail::Softplus(x.ref(), beta, loc));
}
/// exp(x - max) / sum(exp(x - max)) along dim.
template <class B, int R>
Tensor<B, R, Float> softmax(const Tensor<B, R, Float>& x, int64_t dim,
                            std::source_location loc = std::source_location::current()) {
  static_assert(R >= 1, "kiln: softmax needs rank >= 1");
  return Tensor<B, R, Float>(detail::Softmax(x.ref(), dim, loc));
}
/// (x - max) - log(sum(exp(x - max))) along dim.
template <class B, int R>
Tensor<B, R, Float> log_softmax(const Tensor<B, R, Float>& x, int64_t dim,
                                std::source_location loc = std::source_location::current()) {
  static_assert(R >= 1, "kiln: log_softmax needs rank >= 1");
  return Tensor<B, R, Float>(detail::LogSoftmax(x.ref(), dim, loc));
}

}  // namespace kiln::activation
