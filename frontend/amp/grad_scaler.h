// Dynamic loss scaling for f16 training, as torch.amp.GradScaler. f16's smallest normal number
// is 6.1e-5, so small gradients of an f16 forward pass flush to zero; scaling the loss by S (2^16
// to start) scales every gradient by S on the way back and keeps them representable. Before the
// optimizer steps, the gradients are divided by S again and checked: when any is inf or NaN the
// scale was too large, so the step is skipped (counted in skipped_steps()) and S is halved;
// after growth_interval finite steps in a row S doubles.
//
//   kiln::amp::GradScaler scaler;  // GradScalerConfig().init()
//   {
//     kiln::amp::AutocastGuard autocast(kiln::ir::DType::kF16);
//     auto loss = kiln::nn::cross_entropy(model.forward(x), y);
//     kiln::Gradients grads = scaler.scale(loss).backward();
//     scaler.step(optimizer, model, grads);  // unscale, check, step or skip, update S
//   }
//
// train::LearnerConfig::with_precision(amp::Precision::kF16) does this for every step and keeps
// the scaler's state in checkpoints. bf16 has f32's exponent range and needs no scaler.
#pragma once

#include <cstdint>
#include <map>
#include <source_location>
#include <string>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/tensor.h"

namespace kiln::amp {

class GradScaler;

/// torch.amp.GradScaler's knobs, with its defaults.
struct GradScalerConfig {
  /// The first scale S (a power of two keeps unscaling exact).
  double init_scale = 65536.0;
  /// S is multiplied by this after growth_interval finite steps in a row (> 1).
  double growth_factor = 2.0;
  /// ... and by this when a step's gradients are not finite (in (0, 1)).
  double backoff_factor = 0.5;
  /// Finite steps in a row before S grows (>= 1).
  int64_t growth_interval = 2000;

  GradScalerConfig with_init_scale(double s) const {
    auto c = *this;
    c.init_scale = s;
    return c;
  }
  GradScalerConfig with_growth_factor(double f) const {
    auto c = *this;
    c.growth_factor = f;
    return c;
  }
  GradScalerConfig with_backoff_factor(double f) const {
    auto c = *this;
    c.backoff_factor = f;
    return c;
  }
  GradScalerConfig with_growth_interval(int64_t n) const {
    auto c = *this;
    c.growth_interval = n;
    return c;
  }
  /// Checks the knobs (kiln::Error naming the bad one) and makes the scaler.
  GradScaler init(std::source_location loc = std::source_location::current()) const;
};

/// The loss scale and its update rule. Host state only: the scale enters graphs as a rank-0
/// tensor, so changing it does not recompile the training step.
class GradScaler {
 public:
  GradScaler() : GradScaler(GradScalerConfig().init()) {}

  /// The current scale S.
  double scale() const { return scale_; }
  /// Steps skipped so far because a gradient was inf or NaN.
  int64_t skipped_steps() const { return skipped_; }
  /// Finite steps since S last changed.
  int64_t growth_tracker() const { return tracker_; }
  const GradScalerConfig& config() const { return config_; }

  /// loss * S, to differentiate instead of `loss`. S is an f32 tensor, so a bf16/f16 loss
  /// becomes f32.
  template <class B>
  Tensor<B, 0> scale(const Tensor<B, 0>& loss,
                     std::source_location loc = std::source_location::current()) {
    return Tensor<B, 0>(scaled(loss.ref(), loc), loc);
  }

  /// Divides the gradients of `module`'s Float parameters in `grads` by S (replacing them) and
  /// realizes them, with `also` (the loss, say, so the forward pass runs once), together with
  /// the check that all are finite. Finite: `optimizer.step(module, grads)` and true. Otherwise
  /// the step is skipped (parameters and optimizer state untouched) and false. Either way S is
  /// updated (torch's scaler.step and scaler.update in one call). Throws kiln::Error for an f16
  /// gradient (unscaling in f16 loses what the scale saved, as torch refuses too: keep the
  /// parameters f32 and autocast the forward pass).
  template <class Optimizer, class Module>
  bool step(Optimizer& optimizer, Module& module, Gradients& grads,
            const std::vector<detail::TensorRef>& also = {},
            std::source_location loc = std::source_location::current()) {
    std::vector<std::string> names;
    std::vector<detail::TensorRef> params, gradients;
    module.visit([&](const std::string& name, const auto& param) {
      using T = std::remove_cvref_t<decltype(param)>;
      if constexpr (std::is_same_v<typename T::Kind, Float>) {
        if (detail::TensorRef g = grads.get(param.ref())) {
          names.push_back(name);
          params.push_back(param.ref());
          gradients.push_back(std::move(g));
        }
      }
    });
    const bool finite = unscale(names, gradients, also, loc);
    for (size_t i = 0; i < params.size(); ++i) grads.set(params[i], gradients[i], loc);
    if (finite) optimizer.step(module, grads);
    update(finite);
    return finite;
  }

  /// "scale", "growth_tracker", "skipped_steps" (decimal text, for checkpoints' user values).
  std::map<std::string, std::string> state() const;
  /// Restores state() (unknown keys or malformed numbers throw kiln::Error).
  void load_state(const std::map<std::string, std::string>& state,
                  std::source_location loc = std::source_location::current());

 private:
  friend struct GradScalerConfig;
  explicit GradScaler(const GradScalerConfig& config)
      : config_(config), scale_(config.init_scale) {}

  detail::TensorRef scaled(const detail::TensorRef& loss, const std::source_location& loc);
  // Replaces each gradient by gradient / S and realizes them with `also` and their finiteness;
  // true when every one is finite.
  bool unscale(const std::vector<std::string>& names, std::vector<detail::TensorRef>& gradients,
               const std::vector<detail::TensorRef>& also, const std::source_location& loc);
  void update(bool finite);
  // S or 1 / S as a realized rank-0 tensor of `dtype` on `like`'s device, kept until S changes.
  detail::TensorRef factor(bool inverse, ir::DType dtype, const detail::TensorRef& like);

  GradScalerConfig config_;
  double scale_;
  int64_t tracker_ = 0;
  int64_t skipped_ = 0;
  struct Factor {
    bool inverse;
    double value;
    ir::DType dtype;
    Device device;
    detail::TensorRef ref;
  };
  std::vector<Factor> factors_;
};

}  // namespace kiln::amp
