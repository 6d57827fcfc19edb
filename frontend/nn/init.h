// Parameter initialisers (torch.nn.init), chosen per layer through its config:
//
//   auto conv = Conv2dConfig(1, 32, {3, 3})
//                   .with_initializer(Initializer::KaimingNormal(FanMode::kFanOut, Gain::Relu()))
//                   .init<B>(device);
//
// Random initialisers draw from kiln's seeded stream (kiln::manual_seed), one seed per tensor.
// Fans follow torch: for a weight [O, I, k...], fan_in = I * prod(k), fan_out = O * prod(k).
#pragma once

#include <cmath>
#include <cstdint>
#include <source_location>
#include <vector>

#include "frontend/tensor.h"

namespace kiln::nn {

enum class FanMode { kFanIn, kFanOut };

/// torch.nn.init.calculate_gain.
struct Gain {
  static double Linear() { return 1.0; }
  static double Sigmoid() { return 1.0; }
  static double Tanh() { return 5.0 / 3.0; }
  static double Relu() { return std::sqrt(2.0); }
  static double LeakyRelu(double negative_slope = 0.01) {
    return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
  }
};

struct Initializer {
  enum class Kind {
    kUniform,
    kNormal,
    kConstant,
    kKaimingUniform,
    kKaimingNormal,
    kXavierUniform,
    kXavierNormal
  };

  /// U(low, high).
  static Initializer Uniform(double low, double high) { return {Kind::kUniform, low, high}; }
  /// N(mean, std^2).
  static Initializer Normal(double mean, double std) { return {Kind::kNormal, mean, std}; }
  static Initializer Constant(double value) { return {Kind::kConstant, value}; }
  static Initializer Zeros() { return Constant(0.0); }
  static Initializer Ones() { return Constant(1.0); }
  /// U(-b, b), b = gain * sqrt(3 / fan) (torch.nn.init.kaiming_uniform_ with that gain).
  static Initializer KaimingUniform(FanMode mode = FanMode::kFanIn, double gain = Gain::Relu()) {
    return {Kind::kKaimingUniform, gain, 0.0, mode};
  }
  /// N(0, (gain / sqrt(fan))^2).
  static Initializer KaimingNormal(FanMode mode = FanMode::kFanIn, double gain = Gain::Relu()) {
    return {Kind::kKaimingNormal, gain, 0.0, mode};
  }
  /// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
  static Initializer XavierUniform(double gain = 1.0) { return {Kind::kXavierUniform, gain}; }
  /// N(0, (gain * sqrt(2 / (fan_in + fan_out)))^2).
  static Initializer XavierNormal(double gain = 1.0) { return {Kind::kXavierNormal, gain}; }
  /// torch's default for Linear and Conv weights: kaiming_uniform_(a = sqrt(5)), which is
  /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static Initializer TorchDefault() {
    return KaimingUniform(FanMode::kFanIn, Gain::LeakyRelu(std::sqrt(5.0)));
  }

  Kind kind;
  double a = 0.0;  // low, mean, value or gain
  double b = 0.0;  // high or std
  FanMode mode = FanMode::kFanIn;
};

namespace detail {
/// A new parameter of `shape` (f32) drawn by `init`; fans as in the file comment (for rank 1,
/// fan_in = fan_out = shape[0]; pass `fan_in_override` > 0 for biases, which torch draws with the
/// weight's fan_in). The result is a gradient leaf (MarkParameter).
kiln::detail::TensorRef InitParameter(const Initializer& init, ir::Shape shape,
                                      int64_t fan_in_override, const BackendTraits& backend,
                                      const Device& device, const char* layer,
                                      const std::source_location& loc);
/// Marks a tensor created by a layer's init() as a trainable parameter: the single place that
/// sets requires-grad on new parameters.
kiln::detail::TensorRef MarkParameter(kiln::detail::TensorRef ref, const std::source_location& loc);
}  // namespace detail

/// Fills `shape` with `init` as a stand-alone tensor (e.g. for a custom module's field).
template <class B, int R>
Tensor<B, R> init_tensor(const Initializer& init, const std::vector<int64_t>& shape,
                         const Device& device,
                         std::source_location loc = std::source_location::current()) {
  return Tensor<B, R>(detail::InitParameter(init, ir::Shape(shape.begin(), shape.end()), 0,
                                            B::kTraits, device, "init_tensor", loc));
}

}  // namespace kiln::nn
