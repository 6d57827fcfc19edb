// Normalisation layers with torch's semantics and parameter names: BatchNorm1d / BatchNorm2d
// (weight, bias; buffers running_mean, running_var), LayerNorm, GroupNorm, RMSNorm.
//
//   auto bn = kiln::nn::BatchNorm2dConfig(32).init<B>(device);
//   y = bn.forward(x);   // training mode: batch statistics, running stats updated
//   bn.eval();           // (or model.eval() on the enclosing module)
//   y = bn.forward(x);   // running statistics
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <source_location>

#include "frontend/module.h"
#include "frontend/nn/init.h"
#include "frontend/nn/norm_ops.h"
#include "frontend/tensor.h"

namespace kiln::nn {

/// Batch normalisation over the channel dim 1. D = 1 (BatchNorm1d: [N, C] or [N, C, L]) or
/// D = 2 (BatchNorm2d: [N, C, H, W]). Training mode normalises with the batch's mean and biased
/// variance and updates the running statistics (momentum, unbiased variance, like torch);
/// evaluation mode uses the running statistics.
template <class B, int D>
struct BatchNorm {
  /// [C] (gamma), absent without affine.
  std::optional<Tensor<B, 1>> weight;
  /// [C] (beta), absent without affine.
  std::optional<Tensor<B, 1>> bias;
  Buffer<Tensor<B, 1>> running_mean;
  Buffer<Tensor<B, 1>> running_var;
  double momentum = 0.1;
  double eps = 1e-5;
  bool training = true;

  KILN_MODULE(BatchNorm, weight, bias, running_mean, running_var);
  void kiln_set_training(bool on) { training = on; }

  /// Not const: in training mode it replaces running_mean / running_var with their update.
  template <int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) {
    static_assert(D == 1 ? (R == 2 || R == 3) : R == D + 2,
                  "kiln: BatchNorm1d takes [N, C] or [N, C, L]; BatchNorm2d takes [N, C, H, W]");
    kiln::detail::TensorRef new_mean, new_var;
    Tensor<B, R> y(detail::BatchNormForward(
        x.ref(), weight ? weight->ref() : nullptr, bias ? bias->ref() : nullptr,
        running_mean.value.ref(), running_var.value.ref(), training, momentum, eps, &new_mean,
        &new_var, D == 1 ? "BatchNorm1d" : "BatchNorm2d", loc));
    if (new_mean != nullptr) {
      running_mean.value = Tensor<B, 1>(new_mean);
      running_var.value = Tensor<B, 1>(new_var);
    }
    return y;
  }
};
template <class B>
using BatchNorm1d = BatchNorm<B, 1>;
template <class B>
using BatchNorm2d = BatchNorm<B, 2>;

template <int D>
struct BatchNormConfigT {
  explicit BatchNormConfigT(int64_t num_features) : num_features(num_features) {}
  BatchNormConfigT with_eps(double v) const {
    BatchNormConfigT c = *this;
    c.eps = v;
    return c;
  }
  BatchNormConfigT with_momentum(double v) const {
    BatchNormConfigT c = *this;
    c.momentum = v;
    return c;
  }
  BatchNormConfigT with_affine(bool v) const {
    BatchNormConfigT c = *this;
    c.affine = v;
    return c;
  }
  /// weight = 1, bias = 0, running_mean = 0, running_var = 1 (torch).
  template <class B>
  BatchNorm<B, D> init(const Device& device,
                       std::source_location loc = std::source_location::current()) const {
    if (num_features < 1) {
      kiln::detail::ThrowOpError("BatchNormConfig", "num_features must be >= 1", {}, loc);
    }
    BatchNorm<B, D> bn{std::nullopt,
                       std::nullopt,
                       {Tensor<B, 1>::zeros({num_features}, device)},
                       {Tensor<B, 1>::ones({num_features}, device)},
                       momentum,
                       eps};
    if (affine) {
      bn.weight.emplace(detail::InitParameter(Initializer::Ones(), {num_features}, 0, B::kTraits,
                                              device, "BatchNorm", loc));
      bn.bias.emplace(detail::InitParameter(Initializer::Zeros(), {num_features}, 0, B::kTraits,
                                            device, "BatchNorm", loc));
    }
    return bn;
  }
  int64_t num_features;
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};
using BatchNorm1dConfig = BatchNormConfigT<1>;
using BatchNorm2dConfig = BatchNormConfigT<2>;

/// Layer normalisation over the last N dims (torch.nn.LayerNorm(normalized_shape)).
template <class B, int N = 1>
struct LayerNorm {
  std::optional<Tensor<B, N>> weight;
  std::optional<Tensor<B, N>> bias;
  double eps = 1e-5;
  KILN_MODULE(LayerNorm, weight, bias);

  template <int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    static_assert(R >= N, "kiln: LayerNorm's input needs at least the normalized dims");
    return Tensor<B, R>(detail::LayerNormForward(x.ref(), N, weight ? weight->ref() : nullptr,
                                                 bias ? bias->ref() : nullptr, eps, "LayerNorm",
                                                 loc));
  }
};

template <int N = 1>
struct LayerNormConfigT {
  explicit LayerNormConfigT(std::array<int64_t, N> shape) : normalized_shape(shape) {}
  explicit LayerNormConfigT(int64_t d) requires(N == 1) : normalized_shape{d} {}
  LayerNormConfigT with_eps(double v) const {
    LayerNormConfigT c = *this;
    c.eps = v;
    return c;
  }
  /// torch's elementwise_affine (weight = 1, bias = 0) and bias switches.
  LayerNormConfigT with_affine(bool v) const {
    LayerNormConfigT c = *this;
    c.affine = v;
    return c;
  }
  LayerNormConfigT with_bias(bool v) const {
    LayerNormConfigT c = *this;
    c.bias = v;
    return c;
  }
  template <class B>
  LayerNorm<B, N> init(const Device& device,
                       std::source_location loc = std::source_location::current()) const {
    ir::Shape shape(normalized_shape.begin(), normalized_shape.end());
    LayerNorm<B, N> ln{std::nullopt, std::nullopt, eps};
    if (affine) {
      ln.weight.emplace(detail::InitParameter(Initializer::Ones(), shape, 0, B::kTraits, device,
                                              "LayerNorm", loc));
      if (bias) {
        ln.bias.emplace(detail::InitParameter(Initializer::Zeros(), shape, 0, B::kTraits, device,
                                              "LayerNorm", loc));
      }
    }
    return ln;
  }
  std::array<int64_t, N> normalized_shape;
  double eps = 1e-5;
  bool affine = true;
  bool bias = true;
};
using LayerNormConfig = LayerNormConfigT<1>;

/// Group normalisation (torch.nn.GroupNorm): statistics per sample over groups of channels.
template <class B>
struct GroupNorm {
  std::optional<Tensor<B, 1>> weight;
  std::optional<Tensor<B, 1>> bias;
  int64_t num_groups = 1;
  double eps = 1e-5;
  KILN_MODULE(GroupNorm, weight, bias);

  template <int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    static_assert(R >= 2, "kiln: GroupNorm takes [N, C, ...]");
    return Tensor<B, R>(
        detail::GroupNormForward(x.ref(), num_groups, weight ? weight->ref() : nullptr,
                                 bias ? bias->ref() : nullptr, eps, "GroupNorm", loc));
  }
};

struct GroupNormConfig {
  GroupNormConfig(int64_t num_groups, int64_t num_channels)
      : num_groups(num_groups), num_channels(num_channels) {}
  GroupNormConfig with_eps(double v) const {
    GroupNormConfig c = *this;
    c.eps = v;
    return c;
  }
  GroupNormConfig with_affine(bool v) const {
    GroupNormConfig c = *this;
    c.affine = v;
    return c;
  }
  template <class B>
  GroupNorm<B> init(const Device& device,
                    std::source_location loc = std::source_location::current()) const {
    if (num_groups < 1 || num_channels % num_groups != 0) {
      kiln::detail::ThrowOpError("GroupNormConfig", "num_groups must divide num_channels", {}, loc);
    }
    GroupNorm<B> gn{std::nullopt, std::nullopt, num_groups, eps};
    if (affine) {
      gn.weight.emplace(detail::InitParameter(Initializer::Ones(), {num_channels}, 0, B::kTraits,
                                              device, "GroupNorm", loc));
      gn.bias.emplace(detail::InitParameter(Initializer::Zeros(), {num_channels}, 0, B::kTraits,
                                            device, "GroupNorm", loc));
    }
    return gn;
  }
  int64_t num_groups;
  int64_t num_channels;
  double eps = 1e-5;
  bool affine = true;
};

/// Root-mean-square normalisation over the last N dims (torch.nn.RMSNorm): x / sqrt(mean(x^2) +
/// eps) * weight. eps defaults to f32's machine epsilon, torch's default for f32 inputs.
template <class B, int N = 1>
struct RMSNorm {
  std::optional<Tensor<B, N>> weight;
  double eps = std::numeric_limits<float>::epsilon();
  KILN_MODULE(RMSNorm, weight);

  template <int R>
  Tensor<B, R> forward(const Tensor<B, R>& x,
                       std::source_location loc = std::source_location::current()) const {
    static_assert(R >= N, "kiln: RMSNorm's input needs at least the normalized dims");
    return Tensor<B, R>(
        detail::RmsNormForward(x.ref(), N, weight ? weight->ref() : nullptr, eps, "RMSNorm", loc));
  }
};

template <int N = 1>
struct RMSNormConfigT {
  explicit RMSNormConfigT(std::array<int64_t, N> shape) : normalized_shape(shape) {}
  explicit RMSNormConfigT(int64_t d) requires(N == 1) : normalized_shape{d} {}
  RMSNormConfigT with_eps(double v) const {
    RMSNormConfigT c = *this;
    c.eps = v;
    return c;
  }
  RMSNormConfigT with_affine(bool v) const {
    RMSNormConfigT c = *this;
    c.affine = v;
    return c;
  }
  template <class B>
  RMSNorm<B, N> init(const Device& device,
                     std::source_location loc = std::source_location::current()) const {
    RMSNorm<B, N> norm{std::nullopt, eps};
    if (affine) {
      norm.weight.emplace(detail::InitParameter(
          Initializer::Ones(), ir::Shape(normalized_shape.begin(), normalized_shape.end()), 0,
          B::kTraits, device, "RMSNorm", loc));
    }
    return norm;
  }
  std::array<int64_t, N> normalized_shape;
  double eps = std::numeric_limits<float>::epsilon();
  bool affine = true;
};
using RMSNormConfig = RMSNormConfigT<1>;

}  // namespace kiln::nn
