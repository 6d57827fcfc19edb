// int8 post-training quantization: kiln::quant::quantize(model, calibration_loader, run[, config])
// returns a copy of `model` whose nn::Linear and nn::Conv1d / Conv2d layers run int8 inference.
//
//   auto loader = kiln::data::DataLoaderConfig(128).init(train_set);   // calibration data
//   auto run = [&](const Mlp<kiln::Cpu>& m, const kiln::data::Batch& b) {
//     return m.forward(b.inputs_as<kiln::Cpu, 2, kiln::Float>(device));
//   };
//   Mlp<kiln::Cpu> int8_model = kiln::quant::quantize(model, loader, run);
//   auto logits = int8_model.forward(x);          // int8 GEMMs, f32 logits
//   kiln::TracedGraph t = kiln::trace(int8_model, x);   // traces and AOT-compiles like any model
//
// Weights: symmetric int8 per output channel (scale = max |w| / 127; with reduce_range, 7 bits:
// max |w| / 64, which the CPU's u8 x i8 GEMM runs on pmaddubsw, 1.2x as fast on AVX2 without
// VNNI, as onnxruntime's reduce_range does). Activations: per tensor,
// symmetric (zero point 0), as u8 when calibration saw no negative input (after a ReLU,
// normalised pixels), as i8 otherwise; the range comes from the calibration batches, by min-max
// or a percentile (QuantConfig). The calibration runs `run(model, batch)` on the model in float
// with each layer recording its input, for config.batches batches of the loader's epoch 0. The
// int8 layers compute (frontend/quant/int8_layer.h):
//   y = cast(matmul{accumulate=i32}(cast(clamp(round(x / s_x)), u8|i8), w_i8), f32) * s_x s_w + b
// Nothing else changes: other layers (norms, pooling, attention) stay f32. docs/quantization.md.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <type_traits>
#include <utility>

#include "frontend/data/loader.h"
#include "frontend/error.h"
#include "frontend/module.h"
#include "frontend/quant/int8_layer.h"
#include "frontend/tensor.h"

namespace kiln::quant {

/// How an activation's range is taken from the calibration inputs.
enum class Calibration {
  kMinMax,      // the smallest and largest value seen
  kPercentile,  // the `percentile`-th percentile of the values (and the 100 - p-th below 0)
};

struct QuantConfig {
  Calibration calibration = Calibration::kMinMax;
  /// kPercentile: e.g. 99.99 clips the 0.01% largest values (outliers) to widen the resolution.
  double percentile = 99.99;
  /// Calibration batches read from the loader (its epoch 0); 0: the whole epoch.
  int64_t batches = 8;
  /// Weights in [-64, 64] (7 bits) instead of [-127, 127]: the CPU backend's u8 x i8 GEMMs then
  /// run on its u8-quad kernels (pmaddubsw, exact in that range; docs/quantization.md), at the
  /// cost of one bit of weight resolution. onnxruntime's quantizer calls it reduce_range.
  bool reduce_range = false;

  QuantConfig with_calibration(Calibration c) const {
    QuantConfig config = *this;
    config.calibration = c;
    return config;
  }
  /// kPercentile with percentile `p` (in (50, 100]).
  QuantConfig with_percentile(double p) const {
    QuantConfig config = *this;
    config.calibration = Calibration::kPercentile;
    config.percentile = p;
    return config;
  }
  QuantConfig with_batches(int64_t n) const {
    QuantConfig config = *this;
    config.batches = n;
    return config;
  }
  QuantConfig with_reduce_range(bool reduce = true) const {
    QuantConfig config = *this;
    config.reduce_range = reduce;
    return config;
  }
};

namespace detail {

/// A new observer for one layer's inputs. Throws kiln::Error on a bad config.
std::shared_ptr<Observer> NewObserver(const QuantConfig& config, const std::source_location& loc);

/// A layer's int8 weights (within +-127, or +-64 with config.reduce_range) and scales from its
/// float weight and its observer's range.
struct QuantizedLayer {
  ir::TensorData weight;         // i8, the float weight's shape
  ir::TensorData dequant_scale;  // f32 [out]
  float input_scale = 1;
  bool unsigned_input = true;
};
QuantizedLayer QuantizeLayer(const ir::TensorData& float_weight, const Observer& observer,
                             const QuantConfig& config, const std::source_location& loc);

/// nn::Linear and nn::Conv: modules with a float `weight` and an `int8` slot.
template <class M>
concept Quantizable = requires(M m) {
  m.weight;
  m.int8.emplace();
  m.int8->observer;
};

template <class Fn, class Model>
void ForEachQuantizable(Model& model, Fn&& fn) {
  const auto visit = [&](auto& module) {
    if constexpr (Quantizable<std::remove_cvref_t<decltype(module)>>) fn(module);
  };
  visit(model);
  model.visit_modules(visit);
}

}  // namespace detail

/// A copy of `model` (model.clone()) with every nn::Linear and nn::Conv1d / Conv2d quantized to
/// int8, calibrated by calling run(model, batch) on `calibration`'s batches (see the file
/// comment). `model` itself is left as it is. Throws kiln::Error when the loader gives no batch
/// or a layer is already quantized.
template <class Model, class Run>
Model quantize(const Model& model, data::DataLoader& calibration, Run&& run,
               const QuantConfig& config = {},
               std::source_location loc = std::source_location::current()) {
  Model q = model.clone(loc);
  detail::ForEachQuantizable(q, [&](auto& layer) {
    if (layer.int8.has_value()) {
      kiln::detail::ThrowOpError("quantize", "the model has an int8 layer already", {}, loc);
    }
    layer.int8.emplace();
    layer.int8->observer = detail::NewObserver(config, loc);
  });
  int64_t seen = 0;
  for (data::Batch& batch : calibration.epoch(0)) {
    run(std::as_const(q), batch);
    if (++seen == config.batches) break;
  }
  if (seen == 0) {
    kiln::detail::ThrowOpError("quantize", "the calibration loader gave no batch", {}, loc);
  }
  detail::ForEachQuantizable(q, [&](auto& layer) {
    auto& state = *layer.int8;
    detail::QuantizedLayer done =
        detail::QuantizeLayer(layer.weight.into_data(loc), *state.observer, config, loc);
    using Weight = std::remove_cvref_t<decltype(state.weight->value)>;
    using Scale = std::remove_cvref_t<decltype(state.dequant_scale->value)>;
    state.weight = Buffer<Weight>{
        Weight::from_tensor_data(std::move(done.weight), layer.weight.device(), loc)};
    state.dequant_scale = Buffer<Scale>{
        Scale::from_tensor_data(std::move(done.dequant_scale), layer.weight.device(), loc)};
    state.input_scale = done.input_scale;
    state.unsigned_input = done.unsigned_input;
    state.observer.reset();
  });
  return q;
}

}  // namespace kiln::quant
