// Convolutions and pooling: functions (kiln::nn::conv2d, max_pool2d, ...) and modules
// (Conv1d, Conv2d, ConvTranspose2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d) with torch's
// semantics and parameter layouts, so PyTorch weights load as they are:
//
//   auto conv = kiln::nn::Conv2dConfig(1, 32, {3, 3}).with_padding({1, 1}).init<B>(device);
//   Tensor<B, 4> y = conv.forward(x);                 // x [N, 1, H, W] -> y [N, 32, H, W]
//   auto pool = kiln::nn::MaxPool2dConfig({2, 2}).init();
//   y = pool.forward(y);                              // [N, 32, H / 2, W / 2]
//
// Inputs are batched and channels-first ([N, C, spatial...]).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <source_location>
#include <vector>

#include "frontend/module.h"
#include "frontend/nn/conv_ops.h"
#include "frontend/nn/init.h"
#include "frontend/quant/int8_layer.h"
#include "frontend/tensor.h"

namespace kiln::nn {

/// Settings of conv{1,2}d / conv_transpose2d. A list with one entry applies to every spatial
/// axis; empty lists take the defaults (stride 1, padding 0, dilation 1, output_padding 0).
struct ConvOptions {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  int64_t groups = 1;
  /// conv_transpose only: extra size on the high side of each output axis.
  std::vector<int64_t> output_padding;
};

/// Settings of the pooling functions; `stride` defaults to `kernel` (torch).
struct PoolOptions {
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  /// max pooling only.
  std::vector<int64_t> dilation;
  /// Output sizes rounded up (a last partial window), as torch's ceil_mode.
  bool ceil_mode = false;
  /// avg pooling only: padding counts in the divisor (torch's default).
  bool count_include_pad = true;
};

namespace detail {
inline ConvArgs ToConvArgs(const ConvOptions& o) {
  return ConvArgs{o.stride, o.padding, o.dilation, o.groups};
}
inline PoolArgs ToPoolArgs(std::vector<int64_t> kernel, const PoolOptions& o) {
  return PoolArgs{std::move(kernel), o.stride,    o.padding,
                  o.dilation,        o.ceil_mode, o.count_include_pad};
}
template <class B>
kiln::detail::TensorRef RefOr(const std::optional<Tensor<B, 1>>& t) {
  return t ? t->ref() : nullptr;
}
}  // namespace detail

// ---- Functions
// -----------------------------------------------------------------------------------

/// torch.nn.functional.conv1d: x [N, C, L], weight [O, C / groups, k], bias [O].
template <class B>
Tensor<B, 3> conv1d(const Tensor<B, 3>& x, const Tensor<B, 3>& weight,
                    const std::optional<Tensor<B, 1>>& bias = std::nullopt,
                    const ConvOptions& options = {},
                    std::source_location loc = std::source_location::current()) {
  return Tensor<B, 3>(detail::ConvForward(x.ref(), weight.ref(), detail::RefOr(bias),
                                          detail::ToConvArgs(options), "conv1d", loc));
}
/// torch.nn.functional.conv2d: x [N, C, H, W], weight [O, C / groups, kH, kW], bias [O].
template <class B>
Tensor<B, 4> conv2d(const Tensor<B, 4>& x, const Tensor<B, 4>& weight,
                    const std::optional<Tensor<B, 1>>& bias = std::nullopt,
                    const ConvOptions& options = {},
                    std::source_location loc = std::source_location::current()) {
  return Tensor<B, 4>(detail::ConvForward(x.ref(), weight.ref(), detail::RefOr(bias),
                                          detail::ToConvArgs(options), "conv2d", loc));
}
/// torch.nn.functional.conv_transpose2d: weight [C, O / groups, kH, kW] (torch's layout).
template <class B>
Tensor<B, 4> conv_transpose2d(const Tensor<B, 4>& x, const Tensor<B, 4>& weight,
                              const std::optional<Tensor<B, 1>>& bias = std::nullopt,
                              const ConvOptions& options = {},
                              std::source_location loc = std::source_location::current()) {
  return Tensor<B, 4>(detail::ConvTransposeForward(
      x.ref(), weight.ref(), detail::RefOr(bias), detail::ToConvArgs(options),
      options.output_padding, "conv_transpose2d", loc));
}
/// torch.nn.functional.max_pool2d (padding is -inf; padding <= kernel / 2).
template <class B>
Tensor<B, 4> max_pool2d(const Tensor<B, 4>& x, std::array<int64_t, 2> kernel,
                        const PoolOptions& options = {},
                        std::source_location loc = std::source_location::current()) {
  return Tensor<B, 4>(detail::MaxPool(x.ref(), detail::ToPoolArgs({kernel[0], kernel[1]}, options),
                                      "max_pool2d", loc));
}
/// torch.nn.functional.avg_pool2d.
template <class B>
Tensor<B, 4> avg_pool2d(const Tensor<B, 4>& x, std::array<int64_t, 2> kernel,
                        const PoolOptions& options = {},
                        std::source_location loc = std::source_location::current()) {
  return Tensor<B, 4>(detail::AvgPool(x.ref(), detail::ToPoolArgs({kernel[0], kernel[1]}, options),
                                      "avg_pool2d", loc));
}
/// torch.nn.functional.adaptive_avg_pool2d.
template <class B>
Tensor<B, 4> adaptive_avg_pool2d(const Tensor<B, 4>& x, std::array<int64_t, 2> output_size,
                                 std::source_location loc = std::source_location::current()) {
  return Tensor<B, 4>(detail::AdaptiveAvgPool(x.ref(), {output_size[0], output_size[1]},
                                              "adaptive_avg_pool2d", loc));
}

// ---- Convolution modules
// -------------------------------------------------------------------------

/// A convolution with D spatial dims (Conv1d, Conv2d). weight [O, C / groups, k...], bias [O].
template <class B, int D>
struct Conv {
  Tensor<B, D + 2> weight;
  std::optional<Tensor<B, 1>> bias;
  ConvOptions options;
  /// Set by kiln::quant::quantize(): forward() then runs int8 inference (frontend/quant/).
  std::optional<quant::Int8Layer<B, D + 2>> int8 = std::nullopt;

  KILN_MODULE(Conv, weight, bias, int8);

  Tensor<B, D + 2> forward(const Tensor<B, D + 2>& x,
                           std::source_location loc = std::source_location::current()) const {
    const char* name = D == 1 ? "Conv1d" : "Conv2d";
    if (int8) {
      return Tensor<B, D + 2>(
          quant::detail::Int8ConvForward(x.ref(), weight.ref(), detail::RefOr(bias),
                                         detail::ToConvArgs(options), int8->state(), name, loc));
    }
    return Tensor<B, D + 2>(detail::ConvForward(x.ref(), weight.ref(), detail::RefOr(bias),
                                                detail::ToConvArgs(options), name, loc));
  }
};
template <class B>
using Conv1d = Conv<B, 1>;
template <class B>
using Conv2d = Conv<B, 2>;

/// A transposed convolution (ConvTranspose2d): weight [C, O / groups, k...] like torch.
template <class B, int D>
struct ConvTranspose {
  Tensor<B, D + 2> weight;
  std::optional<Tensor<B, 1>> bias;
  ConvOptions options;

  KILN_MODULE(ConvTranspose, weight, bias);

  Tensor<B, D + 2> forward(const Tensor<B, D + 2>& x,
                           std::source_location loc = std::source_location::current()) const {
    return Tensor<B, D + 2>(detail::ConvTransposeForward(
        x.ref(), weight.ref(), detail::RefOr(bias), detail::ToConvArgs(options),
        options.output_padding, "ConvTranspose2d", loc));
  }
};
template <class B>
using ConvTranspose2d = ConvTranspose<B, 2>;

/// Config of Conv / ConvTranspose with D spatial dims (builder methods return a modified copy).
template <int D, bool kTransposed>
struct ConvConfigT {
  using Dims = std::array<int64_t, D>;
  ConvConfigT(int64_t in_channels, int64_t out_channels, Dims kernel_size)
      : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size) {}

  ConvConfigT with_stride(Dims v) const { return set(&ConvOptions::stride, v); }
  ConvConfigT with_padding(Dims v) const { return set(&ConvOptions::padding, v); }
  ConvConfigT with_dilation(Dims v) const { return set(&ConvOptions::dilation, v); }
  ConvConfigT with_output_padding(Dims v) const {
    static_assert(kTransposed, "kiln: output_padding is for transposed convolutions");
    return set(&ConvOptions::output_padding, v);
  }
  ConvConfigT with_groups(int64_t g) const {
    ConvConfigT c = *this;
    c.options.groups = g;
    return c;
  }
  ConvConfigT with_bias(bool enabled) const {
    ConvConfigT c = *this;
    c.bias = enabled;
    return c;
  }
  /// The weight's initialiser (default: torch's, Initializer::TorchDefault()).
  ConvConfigT with_initializer(Initializer init) const {
    ConvConfigT c = *this;
    c.initializer = init;
    return c;
  }
  /// The bias's initialiser (default: torch's U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
  ConvConfigT with_bias_initializer(Initializer init) const {
    ConvConfigT c = *this;
    c.bias_initializer = init;
    return c;
  }

  template <class B>
  auto init(const Device& device,
            std::source_location loc = std::source_location::current()) const {
    const int64_t g = options.groups;
    const char* name = kTransposed ? "ConvTranspose2dConfig" : "ConvConfig";
    if (g < 1 || in_channels < 1 || out_channels < 1 || in_channels % g != 0 ||
        out_channels % g != 0) {
      kiln::detail::ThrowOpError(name,
                                 "in_channels and out_channels must be >= 1 and divisible by "
                                 "groups",
                                 {}, loc);
    }
    ir::Shape shape = kTransposed ? ir::Shape{in_channels, out_channels / g}
                                  : ir::Shape{out_channels, in_channels / g};
    int64_t receptive = 1;
    for (int64_t k : kernel_size) {
      shape.push_back(k);
      receptive *= k;
    }
    // torch computes fan_in from weight.shape[1] * prod(kernel) for both layouts.
    const int64_t fan_in = shape[1] * receptive;
    Tensor<B, D + 2> weight(
        detail::InitParameter(initializer, shape, 0, B::kTraits, device, name, loc));
    std::optional<Tensor<B, 1>> b;
    if (bias) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      b.emplace(detail::InitParameter(
          bias_initializer.value_or(Initializer::Uniform(-bound, bound)),
          {kTransposed ? shape[1] * g : shape[0]}, fan_in, B::kTraits, device, name, loc));
    }
    if constexpr (kTransposed) {
      return ConvTranspose<B, D>{std::move(weight), std::move(b), options};
    } else {
      return Conv<B, D>{std::move(weight), std::move(b), options};
    }
  }

  int64_t in_channels;
  int64_t out_channels;
  Dims kernel_size;
  ConvOptions options;
  bool bias = true;
  Initializer initializer = Initializer::TorchDefault();
  std::optional<Initializer> bias_initializer;

 private:
  ConvConfigT set(std::vector<int64_t> ConvOptions::*field, Dims v) const {
    ConvConfigT c = *this;
    c.options.*field = std::vector<int64_t>(v.begin(), v.end());
    return c;
  }
};
using Conv1dConfig = ConvConfigT<1, false>;
using Conv2dConfig = ConvConfigT<2, false>;
using ConvTranspose2dConfig = ConvConfigT<2, true>;

// ---- Pooling modules (no parameters)
// -------------------------------------------------------------

struct MaxPool2d {
  std::array<int64_t, 2> kernel;
  PoolOptions options;
  KILN_MODULE(MaxPool2d);
  template <class B>
  Tensor<B, 4> forward(const Tensor<B, 4>& x,
                       std::source_location loc = std::source_location::current()) const {
    return Tensor<B, 4>(detail::MaxPool(
        x.ref(), detail::ToPoolArgs({kernel[0], kernel[1]}, options), "MaxPool2d", loc));
  }
};

struct AvgPool2d {
  std::array<int64_t, 2> kernel;
  PoolOptions options;
  KILN_MODULE(AvgPool2d);
  template <class B>
  Tensor<B, 4> forward(const Tensor<B, 4>& x,
                       std::source_location loc = std::source_location::current()) const {
    return Tensor<B, 4>(detail::AvgPool(
        x.ref(), detail::ToPoolArgs({kernel[0], kernel[1]}, options), "AvgPool2d", loc));
  }
};

struct AdaptiveAvgPool2d {
  std::array<int64_t, 2> output_size;
  KILN_MODULE(AdaptiveAvgPool2d);
  template <class B>
  Tensor<B, 4> forward(const Tensor<B, 4>& x,
                       std::source_location loc = std::source_location::current()) const {
    return Tensor<B, 4>(detail::AdaptiveAvgPool(x.ref(), {output_size[0], output_size[1]},
                                                "AdaptiveAvgPool2d", loc));
  }
};

/// Config of MaxPool2d / AvgPool2d.
template <class Pool>
struct PoolConfigT {
  explicit PoolConfigT(std::array<int64_t, 2> kernel) : kernel(kernel) {}
  PoolConfigT with_stride(std::array<int64_t, 2> v) const {
    PoolConfigT c = *this;
    c.options.stride = {v[0], v[1]};
    return c;
  }
  PoolConfigT with_padding(std::array<int64_t, 2> v) const {
    PoolConfigT c = *this;
    c.options.padding = {v[0], v[1]};
    return c;
  }
  /// MaxPool2d only.
  PoolConfigT with_dilation(std::array<int64_t, 2> v) const {
    PoolConfigT c = *this;
    c.options.dilation = {v[0], v[1]};
    return c;
  }
  PoolConfigT with_ceil_mode(bool on) const {
    PoolConfigT c = *this;
    c.options.ceil_mode = on;
    return c;
  }
  /// AvgPool2d only (default true, like torch).
  PoolConfigT with_count_include_pad(bool on) const {
    PoolConfigT c = *this;
    c.options.count_include_pad = on;
    return c;
  }
  Pool init() const { return Pool{kernel, options}; }

  std::array<int64_t, 2> kernel;
  PoolOptions options;
};
using MaxPool2dConfig = PoolConfigT<MaxPool2d>;
using AvgPool2dConfig = PoolConfigT<AvgPool2d>;

struct AdaptiveAvgPool2dConfig {
  explicit AdaptiveAvgPool2dConfig(std::array<int64_t, 2> output_size) : output_size(output_size) {}
  AdaptiveAvgPool2d init() const { return AdaptiveAvgPool2d{output_size}; }
  std::array<int64_t, 2> output_size;
};

}  // namespace kiln::nn
