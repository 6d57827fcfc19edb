// nn::Linear: y = x W^T + b, with PyTorch's parameter layout (weight [out, in], bias [out]) so
// PyTorch weights load as they are.
//
//   auto fc = kiln::nn::LinearConfig(4, 2).with_bias(true).init<B>(device);
//   auto y = fc.forward(x);  // x [..., 4] -> y [..., 2]
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>

#include "frontend/module.h"
#include "frontend/nn/init.h"
#include "frontend/quant/int8_layer.h"
#include "frontend/tensor.h"

namespace kiln::nn {

namespace detail {
/// x [..., in] -> x W^T + b; `bias` may be null.
kiln::detail::TensorRef LinearForward(const kiln::detail::TensorRef& x,
                                      const kiln::detail::TensorRef& weight,
                                      const kiln::detail::TensorRef& bias,
                                      const std::source_location& loc);
/// U(-1/sqrt(in), 1/sqrt(in)) for `shape` from kiln's seeded stream (torch.nn.Linear's
/// kaiming-uniform initialisation).
kiln::detail::TensorRef LinearInitUniform(ir::Shape shape, int64_t d_input,
                                          const BackendTraits& backend, const Device& device,
                                          const std::source_location& loc);
}  // namespace detail

template <class B>
struct Linear {
  /// [d_output, d_input].
  Tensor<B, 2> weight;
  /// [d_output], absent when the config says with_bias(false).
  std::optional<Tensor<B, 1>> bias;
  /// Set by kiln::quant::quantize(): forward() then runs int8 inference (frontend/quant/).
  std::optional<quant::Int8Layer<B, 2>> int8 = std::nullopt;

  KILN_MODULE(Linear, weight, bias, int8);

  /// Any rank >= 1; leading dims are kept.
  template <int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    static_assert(R >= 1, "kiln: Linear::forward needs an input of rank >= 1");
    if (int8) {
      return Tensor<B, R>(quant::detail::Int8LinearForward(
          x.ref(), weight.ref(), bias ? bias->ref() : nullptr, int8->state(), loc));
    }
    return Tensor<B, R>(
        detail::LinearForward(x.ref(), weight.ref(), bias ? bias->ref() : nullptr, loc));
  }
};

struct LinearConfig {
  LinearConfig(int64_t d_input, int64_t d_output) : d_input(d_input), d_output(d_output) {}

  LinearConfig with_bias(bool enabled) const {
    LinearConfig config = *this;
    config.bias = enabled;
    return config;
  }

  /// The weight's initialiser instead of torch's default (frontend/nn/init.h).
  LinearConfig with_initializer(Initializer init) const {
    LinearConfig config = *this;
    config.initializer = init;
    return config;
  }
  /// The bias's initialiser instead of torch's default.
  LinearConfig with_bias_initializer(Initializer init) const {
    LinearConfig config = *this;
    config.bias_initializer = init;
    return config;
  }

  /// A layer initialised like torch.nn.Linear: weight then bias drawn from kiln's seeded stream
  /// (see manual_seed), each U(-1/sqrt(d_input), 1/sqrt(d_input)), unless initialisers are set.
  /// The parameters require gradients.
  template <class B>
  Linear<B> init(const Device& device,
                 std::source_location loc = std::source_location::current()) const {
    Tensor<B, 2> weight(
        initializer ? detail::InitParameter(*initializer, {d_output, d_input}, 0, B::kTraits,
                                            device, "LinearConfig", loc)
                    : detail::MarkParameter(detail::LinearInitUniform({d_output, d_input}, d_input,
                                                                      B::kTraits, device, loc),
                                            loc));
    std::optional<Tensor<B, 1>> b;
    if (bias) {
      b.emplace(
          bias_initializer
              ? detail::InitParameter(*bias_initializer, {d_output}, d_input, B::kTraits, device,
                                      "LinearConfig", loc)
              : detail::MarkParameter(
                    detail::LinearInitUniform({d_output}, d_input, B::kTraits, device, loc), loc));
    }
    return Linear<B>{std::move(weight), std::move(b)};
  }

  int64_t d_input;
  int64_t d_output;
  bool bias = true;
  std::optional<Initializer> initializer;
  std::optional<Initializer> bias_initializer;
};

}  // namespace kiln::nn
