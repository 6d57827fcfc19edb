// The int8 state of an nn::Linear or nn::Conv layer (its `int8` field), which
// kiln::quant::quantize() (frontend/quant/quantize.h) fills. A layer with it runs int8 inference:
//
//   x_q = cast(clamp(round(x / input_scale), lo, hi), u8 or i8)   per tensor, zero point 0
//   acc = matmul / conv {accumulate=i32}(x_q, weight)              weight: i8, per output channel
//   y   = cast(acc, f32) * dequant_scale[channel] + bias[channel]
//
// all IR primitives (docs/ir.md), so every backend runs it; the CPU backend runs the contraction
// on its int8 GEMM with the rest in the GEMM's epilogue (and the next layer's x_q with it).
#pragma once

#include <memory>
#include <optional>
#include <source_location>

#include "frontend/engine.h"
#include "frontend/module.h"
#include "frontend/nn/conv_ops.h"
#include "frontend/tensor.h"

namespace kiln::quant {

namespace detail {

/// What a layer's inputs looked like during calibration (quantize.cc).
class Observer;

/// The type-erased Int8Layer the forward functions below read.
struct Int8State {
  kiln::detail::TensorRef weight;         // i8, the float weight's shape; null while calibrating
  kiln::detail::TensorRef dequant_scale;  // f32 [out]
  float input_scale = 1;
  bool unsigned_input = true;
  Observer* observer = nullptr;  // set while calibrating: record x, run in float
};

/// x [..., in] -> the quantized Linear's output (see the file comment); while calibrating, the
/// float layer's, after recording x.
kiln::detail::TensorRef Int8LinearForward(const kiln::detail::TensorRef& x,
                                          const kiln::detail::TensorRef& float_weight,
                                          const kiln::detail::TensorRef& bias,
                                          const Int8State& state, const std::source_location& loc);

/// x [N, C, spatial...] -> the quantized convolution's output; while calibrating, the float
/// layer's, after recording x.
kiln::detail::TensorRef Int8ConvForward(const kiln::detail::TensorRef& x,
                                        const kiln::detail::TensorRef& float_weight,
                                        const kiln::detail::TensorRef& bias,
                                        const nn::detail::ConvArgs& args, const Int8State& state,
                                        const char* name, const std::source_location& loc);

}  // namespace detail

/// The int8 form of a layer whose float weight has rank R (Linear: 2, Conv2d: 4). Its tensors
/// are buffers (module.h), not parameters: they are not trained, and visitors of parameters
/// (optimizers, a user's `visit`) never meet an Int tensor in a float model's place.
template <class B, int R>
struct Int8Layer {
  /// i8, shaped like the float weight: round(w / weight_scale[o]) clamped to [-L, L], where
  /// weight_scale[o] = max |w[o, ...]| / L (symmetric, per output channel) and L = 127, or 64
  /// with QuantConfig::reduce_range.
  std::optional<Buffer<Tensor<B, R, Int>>> weight;
  /// f32 [out]: input_scale * weight_scale[o], what the i32 sums are multiplied by.
  std::optional<Buffer<Tensor<B, 1>>> dequant_scale;
  /// The input's scale (per tensor, symmetric: zero point 0): inputs quantize to u8 when the
  /// calibration saw no negative value (after a ReLU, normalised pixels >= 0), to i8 otherwise.
  float input_scale = 1;
  bool unsigned_input = true;
  /// Set while quantize() calibrates: forward records its input and runs in float.
  std::shared_ptr<detail::Observer> observer;

  KILN_MODULE(Int8Layer, weight, dequant_scale);

  detail::Int8State state() const {
    return {weight ? weight->value.ref() : nullptr,
            dequant_scale ? dequant_scale->value.ref() : nullptr, input_scale, unsigned_input,
            observer.get()};
  }
};

}  // namespace kiln::quant
