// Optimizers: SGD, Adam, AdamW, RMSprop and AdaGrad with PyTorch's update rules (torch 1.13).
//
//   auto optimizer = kiln::optim::AdamConfig().with_lr(1e-3).init();
//   for (...) {
//     auto loss = kiln::nn::cross_entropy(model.forward(x), labels);
//     kiln::Gradients grads = loss.backward();
//     optimizer.step(model, grads);                     // records the update; runs nothing
//     kiln::optim::realize_step(model, optimizer, loss); // one graph for the whole step
//   }
//
// step() visits the module's parameters (KILN_MODULE), replaces each one that has a gradient with
// its update, recorded lazily under a NoGradGuard, and marks the new value as a parameter again
// (requires_grad). Nothing is realized: the forward pass, the backward pass and the update (and
// the optimizer state, state_tensors()) realized together compile to one graph.
//
// Everything that changes from step to step is a tensor of the state, as in torch's capturable
// optimizers and optax: each parameter's step count ("<param>.step", i64; parameters that step
// together share one) and the learning rate (f64, one per device; set_lr replaces its value).
// Per-step numbers (Adam's bias corrections, AdamW's decay, AdaGrad's decayed rate) are computed
// from them inside the graph in f64 and rounded once to the parameter's dtype, as the host would
// compute them. So step 2, 3, ... are the same graph (a compile-cache hit), a learning-rate
// schedule changes no graph, and kiln::jit replays a whole training step, optimizer included
// (frontend/jit.h: optimizers are state, visit_state()).
//
// State (momentum buffers, moments, step counts) is keyed by parameter name ("fc.weight"), so a
// checkpoint can restore it into a freshly built optimizer: state() / load_state().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/tensor.h"
#include "frontend/train/checkpoint.h"

namespace kiln::optim {

/// An optimizer's checkpoint state (frontend/train/checkpoint.h), as train::Learner expects:
///   tensors  "<parameter>.<buffer>", e.g. "fc.weight.exp_avg" (torch's buffer names);
///   values   "optimizer" (its name, checked on load), "lr", "<parameter>.step" (decimal).
using NamedState = train::NamedState;

/// The base of every optimizer. Not copyable by accident: state is per instance.
class Optimizer {
 public:
  using Loc = std::source_location;

  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  /// "sgd", "adam", ... (for messages).
  const char* name() const { return name_; }
  /// The learning rate the next step uses.
  double lr() const { return lr_; }
  /// The same (the name train::Learner's NaN guard asks for).
  double learning_rate() const { return lr_; }
  /// Sets the learning rate (e.g. from a scheduler); it enters the next step as a rank-0 tensor,
  /// so changing it does not change the graph (nor a jitted step's recording). Throws on a
  /// negative or non-finite value.
  void set_lr(double lr, Loc loc = Loc::current());

  /// Updates every Float parameter of `module` (anything with KILN_MODULE's visit) that has a
  /// gradient in `grads`; parameters without one are left alone (and their state too, as in
  /// torch). Throws kiln::Error when a gradient's type differs from its parameter's.
  ///
  /// A bf16 or f16 parameter gets f32 master weights: the optimizer keeps an f32 copy (the
  /// buffer "<parameter>.master", in state() and checkpoints), applies its rule to that copy and
  /// the gradient in f32 (its other buffers are f32 too), and the parameter becomes the copy
  /// rounded to its dtype. Updates smaller than the parameter's rounding step then accumulate
  /// instead of vanishing.
  template <class Module>
  void step(Module& module, const Gradients& grads, Loc loc = Loc::current()) {
    NoGradGuard no_grad;
    begin_step(loc);
    // Checks everything first, so that an error leaves parameters and state untouched.
    module.visit([&](const std::string& param_name, const auto& param) {
      using T = std::remove_cvref_t<decltype(param)>;
      if constexpr (std::is_same_v<typename T::Kind, Float>) {
        kiln::detail::TensorRef grad = grads.get(param.ref());
        if (grad != nullptr) check(param_name, param.ref(), grad, loc);
      }
    });
    module.visit([&](const std::string& param_name, auto& param) {
      using T = std::remove_cvref_t<decltype(param)>;
      if constexpr (std::is_same_v<typename T::Kind, Float>) {
        kiln::detail::TensorRef grad = grads.get(param.ref());
        if (grad == nullptr) return;
        kiln::detail::TensorRef updated = update(param_name, param.ref(), grad, loc);
        param = T(kiln::detail::SetRequireGrad(updated, true, loc), loc);
      }
    });
    end_step();
  }

  /// The updated value of one parameter named `param_name` given its gradient, advancing that
  /// parameter's state; for code that keeps parameters outside a module. Unlike step(), this
  /// neither turns the tape off nor marks the result as requiring a gradient: call it inside a
  /// NoGradGuard, or the update is taped and the tape grows with every step.
  template <class B, int R>
  Tensor<B, R> updated(const std::string& param_name, const Tensor<B, R>& param,
                       const Tensor<B, R>& grad, Loc loc = Loc::current()) {
    begin_step(loc);
    Tensor<B, R> result(update(param_name, param.ref(), grad.ref(), loc), loc);
    end_step();
    return result;
  }

  /// The state as host values (realizes whatever is pending).
  NamedState state(Loc loc = Loc::current()) const;
  /// Replaces the state (and the learning rate) with `state` as state() returned it. Names are
  /// checked now: another optimizer's state, an unknown buffer or key, or a malformed number
  /// throws kiln::Error; shapes and dtypes are checked against each parameter at its next
  /// update, and values move to the parameter's device then.
  void load_state(const NamedState& state, Loc loc = Loc::current());
  /// The state's tensors (pending after a step), to be realized together with the parameters
  /// and the loss so that one graph computes the whole training step.
  std::vector<kiln::detail::TensorRef> state_tensors() const;
  /// Calls visitor(name, TensorRef&) for every tensor of the state: the buffers and step counts
  /// by name ("fc.weight.exp_avg", "fc.weight.step"), then the learning rate of each device
  /// ("lr@cpu:0"). kiln::jit reads and replaces them through it (JitState).
  template <class Visitor>
  void visit_state(Visitor&& visitor) {
    for (auto& [key, ref] : state_) visitor(key, ref);
    for (LearningRate& lr : lr_values_) visitor(lr.name, lr.ref);
  }
  /// Drops all state (buffers and step counts).
  void reset();

 protected:
  Optimizer(const char* name, double lr, std::vector<std::string> buffers);

  /// The optimizer's rule: param's new value given its gradient (both of one type, checked).
  /// `step` is the parameter's step count including this step (i64, rank 0).
  virtual kiln::detail::TensorRef compute(const std::string& param,
                                          const kiln::detail::TensorRef& value,
                                          const kiln::detail::TensorRef& grad,
                                          const kiln::detail::TensorRef& step, const Loc& loc) = 0;

  /// The learning rate as an f64 rank-0 tensor on `like`'s device (realized; set_lr replaces
  /// its value). Per-step numbers are computed from it in f64 and rounded once (InDType).
  kiln::detail::TensorRef lr_f64(const kiln::detail::TensorRef& like);
  /// `x` (f64, rank 0) rounded to `like`'s dtype.
  static kiln::detail::TensorRef InDType(const kiln::detail::TensorRef& x,
                                         const kiln::detail::TensorRef& like, const Loc& loc);
  /// The buffer `buffer` of `param`, or null when it does not exist yet (loaded state counts).
  kiln::detail::TensorRef find(const std::string& param, const char* buffer,
                               const kiln::detail::TensorRef& like);
  /// The buffer, created realized and filled with `init` when absent.
  kiln::detail::TensorRef get_or_fill(const std::string& param, const char* buffer,
                                      const kiln::detail::TensorRef& like, double init);
  void set(const std::string& param, const char* buffer, kiln::detail::TensorRef value);

 private:
  /// Starts and ends one step() / updated(): within it, parameters whose counts are one tensor
  /// advance together (and nothing of it is held afterwards).
  void begin_step(const Loc& loc);
  void end_step() { begin_step(Loc::current()); }
  /// Throws unless `grad` fits `value` and any loaded state of `param` fits too.
  void check(const std::string& param, const kiln::detail::TensorRef& value,
             const kiln::detail::TensorRef& grad, const Loc& loc) const;
  kiln::detail::TensorRef update(const std::string& param, const kiln::detail::TensorRef& value,
                                 const kiln::detail::TensorRef& grad, const Loc& loc);
  /// `param`'s step count after this step (advancing it in the state).
  kiln::detail::TensorRef advance_step(const std::string& param,
                                       const kiln::detail::TensorRef& like, const Loc& loc);

  const char* name_;
  double lr_;
  /// The f32 copy of a bf16/f16 parameter (see step()).
  static constexpr const char* kMasterBuffer = "master";
  /// The step count's buffer name ("<param>.step"): in state() it is a value, not a tensor.
  static constexpr const char* kStepBuffer = "step";
  /// The buffer names this optimizer keeps (for load_state's checks).
  std::vector<std::string> buffers_;
  /// "<param>.<buffer>" -> value.
  std::map<std::string, kiln::detail::TensorRef> state_;
  /// Loaded values not yet placed on a parameter's device.
  std::map<std::string, ir::TensorData> loaded_;
  /// Loaded step counts not yet placed ("<param>" -> count).
  std::map<std::string, int64_t> loaded_steps_;
  struct LearningRate {
    Device device;
    std::string name;  // "lr@cpu:0"
    kiln::detail::TensorRef ref;
  };
  std::vector<LearningRate> lr_values_;
  /// Within one step: a step count before -> after it, so parameters that shared a count share
  /// the next one (one increment in the graph); loaded counts by (value, device) likewise.
  std::vector<std::pair<kiln::detail::TensorRef, kiln::detail::TensorRef>> advanced_;
  std::vector<std::tuple<int64_t, Device, kiln::detail::TensorRef>> placed_steps_;
};

/// What one training step leaves to realize: every parameter and buffer (BatchNorm's running
/// statistics) of `module` and the optimizer's state (state_tensors(), when the optimizer type
/// has it: train::Learner also takes optimizers of its own).
template <class Module, class Opt>
std::vector<kiln::detail::TensorRef> step_tensors(const Module& module, const Opt& optimizer) {
  std::vector<kiln::detail::TensorRef> refs;
  if constexpr (requires { optimizer.state_tensors(); }) refs = optimizer.state_tensors();
  const auto add = [&refs](const std::string&, const auto& tensor) {
    refs.push_back(tensor.ref());
  };
  module.visit(add);
  if constexpr (requires { module.visit_buffers(add); }) module.visit_buffers(add);
  return refs;
}

/// realize_step's optimizer with the caller's line (see kiln::detail::FirstToRealize).
struct OptimizerAt {
  OptimizerAt(const Optimizer& optimizer,
              std::source_location loc = std::source_location::current())
      : optimizer(optimizer), loc(loc) {}
  const Optimizer& optimizer;
  std::source_location loc;
};

/// Realizes one training step as one graph: step_tensors(module, optimizer) and `extra` tensors
/// (the loss, metrics).
template <class Module, class... Ts>
void realize_step(const Module& module, OptimizerAt optimizer, const Ts&... extra) {
  std::vector<kiln::detail::TensorRef> refs = step_tensors(module, optimizer.optimizer);
  (refs.push_back(extra.ref()), ...);
  kiln::detail::Realize(refs, optimizer.loc);
}

// ---- SGD ----------------------------------------------------------------------------------------

/// torch.optim.SGD: d = g + wd p; with momentum, buf = momentum buf + (1 - dampening) d (buf = d
/// at the first step) and d = buf, or d = d + momentum buf with Nesterov; p -= lr d.
class Sgd final : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double momentum = 0.0;
    double dampening = 0.0;
    bool nesterov = false;
    double weight_decay = 0.0;
  };
  Sgd(const Options& options, const Loc& loc);
  const Options& options() const { return options_; }

 private:
  kiln::detail::TensorRef compute(const std::string& param, const kiln::detail::TensorRef& value,
                                  const kiln::detail::TensorRef& grad,
                                  const kiln::detail::TensorRef& step, const Loc& loc) override;
  Options options_;
};

struct SgdConfig {
  SgdConfig with_lr(double v) const { return with(&Sgd::Options::lr, v); }
  SgdConfig with_momentum(double v) const { return with(&Sgd::Options::momentum, v); }
  SgdConfig with_dampening(double v) const { return with(&Sgd::Options::dampening, v); }
  /// Needs momentum > 0 and dampening 0 (checked by init()).
  SgdConfig with_nesterov(bool v) const { return with(&Sgd::Options::nesterov, v); }
  /// L2 penalty added to the gradient.
  SgdConfig with_weight_decay(double v) const { return with(&Sgd::Options::weight_decay, v); }
  /// Checks the options (kiln::Error naming the bad one).
  Sgd init(std::source_location loc = std::source_location::current()) const {
    return Sgd(options, loc);
  }
  Sgd::Options options;

 private:
  template <class T>
  SgdConfig with(T Sgd::Options::*field, T v) const {
    SgdConfig c = *this;
    c.options.*field = v;
    return c;
  }
};

// ---- Adam and AdamW -----------------------------------------------------------------------------

/// torch.optim.Adam / AdamW: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 (v_max = max(v_max,
/// v) with amsgrad), p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). Adam adds wd p
/// to g; AdamW (decoupled) first scales p by 1 - lr wd.
class Adam final : public Optimizer {
 public:
  struct Options {
    double lr = 0.001;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    bool amsgrad = false;
    bool decoupled = false;  // AdamW
  };
  Adam(const Options& options, const Loc& loc);
  const Options& options() const { return options_; }

 private:
  kiln::detail::TensorRef compute(const std::string& param, const kiln::detail::TensorRef& value,
                                  const kiln::detail::TensorRef& grad,
                                  const kiln::detail::TensorRef& step, const Loc& loc) override;
  Options options_;
};

/// Adam (weight decay coupled to the gradient: L2 regularization).
struct AdamConfig {
  AdamConfig with_lr(double v) const { return with(&Adam::Options::lr, v); }
  AdamConfig with_betas(double beta1, double beta2) const {
    return with(&Adam::Options::beta1, beta1).with(&Adam::Options::beta2, beta2);
  }
  AdamConfig with_eps(double v) const { return with(&Adam::Options::eps, v); }
  AdamConfig with_weight_decay(double v) const { return with(&Adam::Options::weight_decay, v); }
  AdamConfig with_amsgrad(bool v) const { return with(&Adam::Options::amsgrad, v); }
  Adam init(std::source_location loc = std::source_location::current()) const {
    return Adam(options, loc);
  }
  Adam::Options options;

 protected:
  template <class T>
  AdamConfig with(T Adam::Options::*field, T v) const {
    AdamConfig c = *this;
    c.options.*field = v;
    return c;
  }
};

/// AdamW: decoupled weight decay, default 0.01 as in torch.
struct AdamWConfig {
  AdamWConfig() {
    options.weight_decay = 0.01;
    options.decoupled = true;
  }
  AdamWConfig with_lr(double v) const { return with(&Adam::Options::lr, v); }
  AdamWConfig with_betas(double beta1, double beta2) const {
    return with(&Adam::Options::beta1, beta1).with(&Adam::Options::beta2, beta2);
  }
  AdamWConfig with_eps(double v) const { return with(&Adam::Options::eps, v); }
  AdamWConfig with_weight_decay(double v) const { return with(&Adam::Options::weight_decay, v); }
  AdamWConfig with_amsgrad(bool v) const { return with(&Adam::Options::amsgrad, v); }
  Adam init(std::source_location loc = std::source_location::current()) const {
    return Adam(options, loc);
  }
  Adam::Options options;

 private:
  template <class T>
  AdamWConfig with(T Adam::Options::*field, T v) const {
    AdamWConfig c = *this;
    c.options.*field = v;
    return c;
  }
};

// ---- RMSprop ------------------------------------------------------------------------------------

/// torch.optim.RMSprop: s = alpha s + (1 - alpha) g^2; centered: a = alpha a + (1 - alpha) g and
/// the denominator is sqrt(s - a^2) + eps, else sqrt(s) + eps; with momentum, buf = momentum buf
/// + g / denom and p -= lr buf, else p -= lr g / denom. Weight decay adds wd p to g.
class RmsProp final : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double alpha = 0.99;
    double eps = 1e-8;
    double weight_decay = 0.0;
    double momentum = 0.0;
    bool centered = false;
  };
  RmsProp(const Options& options, const Loc& loc);
  const Options& options() const { return options_; }

 private:
  kiln::detail::TensorRef compute(const std::string& param, const kiln::detail::TensorRef& value,
                                  const kiln::detail::TensorRef& grad,
                                  const kiln::detail::TensorRef& step, const Loc& loc) override;
  Options options_;
};

struct RmsPropConfig {
  RmsPropConfig with_lr(double v) const { return with(&RmsProp::Options::lr, v); }
  RmsPropConfig with_alpha(double v) const { return with(&RmsProp::Options::alpha, v); }
  RmsPropConfig with_eps(double v) const { return with(&RmsProp::Options::eps, v); }
  RmsPropConfig with_weight_decay(double v) const {
    return with(&RmsProp::Options::weight_decay, v);
  }
  RmsPropConfig with_momentum(double v) const { return with(&RmsProp::Options::momentum, v); }
  RmsPropConfig with_centered(bool v) const { return with(&RmsProp::Options::centered, v); }
  RmsProp init(std::source_location loc = std::source_location::current()) const {
    return RmsProp(options, loc);
  }
  RmsProp::Options options;

 private:
  template <class T>
  RmsPropConfig with(T RmsProp::Options::*field, T v) const {
    RmsPropConfig c = *this;
    c.options.*field = v;
    return c;
  }
};

// ---- AdaGrad ------------------------------------------------------------------------------------

/// torch.optim.Adagrad: g += wd p; sum += g^2 (starting at initial_accumulator_value);
/// p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(sum) + eps).
class AdaGrad final : public Optimizer {
 public:
  struct Options {
    double lr = 0.01;
    double lr_decay = 0.0;
    double weight_decay = 0.0;
    double initial_accumulator_value = 0.0;
    double eps = 1e-10;
  };
  AdaGrad(const Options& options, const Loc& loc);
  const Options& options() const { return options_; }

 private:
  kiln::detail::TensorRef compute(const std::string& param, const kiln::detail::TensorRef& value,
                                  const kiln::detail::TensorRef& grad,
                                  const kiln::detail::TensorRef& step, const Loc& loc) override;
  Options options_;
};

struct AdaGradConfig {
  AdaGradConfig with_lr(double v) const { return with(&AdaGrad::Options::lr, v); }
  AdaGradConfig with_lr_decay(double v) const { return with(&AdaGrad::Options::lr_decay, v); }
  AdaGradConfig with_weight_decay(double v) const {
    return with(&AdaGrad::Options::weight_decay, v);
  }
  AdaGradConfig with_initial_accumulator_value(double v) const {
    return with(&AdaGrad::Options::initial_accumulator_value, v);
  }
  AdaGradConfig with_eps(double v) const { return with(&AdaGrad::Options::eps, v); }
  AdaGrad init(std::source_location loc = std::source_location::current()) const {
    return AdaGrad(options, loc);
  }
  AdaGrad::Options options;

 private:
  template <class T>
  AdaGradConfig with(T AdaGrad::Options::*field, T v) const {
    AdaGradConfig c = *this;
    c.options.*field = v;
    return c;
  }
};

}  // namespace kiln::optim
