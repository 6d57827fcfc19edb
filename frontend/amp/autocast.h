// Automatic mixed precision, as torch.autocast: inside an AutocastGuard the ops that gain from a
// narrower type (matmul, linear, convolution, attention's products) cast their f32 operands to
// bf16 or f16, and the ops that lose accuracy in it (softmax, log_softmax, the losses, the
// normalization layers, sum and prod) cast bf16/f16 operands up to f32. Every other op runs in
// the dtype its operands have, with the usual promotion (bf16 + f32 -> f32).
//
//   kiln::Gradients grads;
//   {
//     kiln::amp::AutocastGuard autocast(kiln::ir::DType::kBF16);
//     auto loss = kiln::nn::cross_entropy(model.forward(images), labels);  // matmuls in bf16
//     grads = loss.backward();
//   }
//   optimizer.step(model, grads);  // parameters and gradients stay f32
//
// The parameters keep their dtype (f32 master weights): the casts are ops of the graph, so the
// gradient of a bf16 matmul flows back through the cast to an f32 gradient. The policy is decided
// when an op is recorded (kiln is lazy): what a guard covers is the code that builds the
// forward pass; backward() differentiates the recorded graph, casts included, whether or not a
// guard is alive then. train::LearnerConfig::with_precision puts the training step in a guard
// (and, for f16, adds the loss scaling of grad_scaler.h). docs/training.md ("Mixed precision")
// lists the policy.
#pragma once

#include <optional>
#include <source_location>
#include <string_view>

#include "frontend/engine.h"

namespace kiln::amp {

/// The precision a training run computes in (train::LearnerConfig::with_precision).
enum class Precision {
  kF32,   ///< Everything in f32 (no autocast).
  kBF16,  ///< Autocast to bf16: f32's exponent range, so no loss scaling.
  kF16,   ///< Autocast to f16 with dynamic loss scaling (GradScaler): f16 overflows at 65504.
};

/// "f32", "bf16", "f16".
const char* PrecisionName(Precision precision);
/// Inverse of PrecisionName (for command-line flags); nullopt for another name.
std::optional<Precision> ParsePrecision(std::string_view name);
/// The dtype autocast computes in: nullopt for kF32, kBF16 or kF16 otherwise.
std::optional<ir::DType> AutocastDTypeOf(Precision precision);

/// While alive, ops recorded on this thread follow the autocast policy for `dtype` (kBF16 or
/// kF16; anything else throws kiln::Error). Guards nest: the innermost one decides, and a guard
/// made with nullopt turns autocast off within its scope (torch.autocast(enabled=False)).
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<ir::DType> dtype,
                         std::source_location loc = std::source_location::current());
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<ir::DType> previous_;
};

/// The dtype of the innermost live AutocastGuard on this thread; nullopt when autocast is off.
std::optional<ir::DType> AutocastDType();

}  // namespace kiln::amp

namespace kiln::detail {

/// The autocast policy's two casts, applied by the ops named in autocast.h at record time. Both
/// return `x` itself when autocast is off or the rule does not apply; `op` names the cast's node.
/// An f32 `x` cast to the autocast dtype (f64, integer and already narrow operands unchanged,
/// as torch leaves f64 alone).
TensorRef AutocastToLow(const TensorRef& x, const char* op, const Loc& loc);
/// A bf16 or f16 `x` cast to f32.
TensorRef AutocastToF32(const TensorRef& x, const char* op, const Loc& loc);
/// The f32 bias of a layer whose product `product` autocast made narrow, cast to its dtype (torch
/// casts every operand of linear and conv); `bias` itself otherwise.
TensorRef AutocastBias(const TensorRef& bias, const TensorRef& product, const char* op,
                       const Loc& loc);

}  // namespace kiln::detail
