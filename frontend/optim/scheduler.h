// Learning-rate schedulers with torch.optim.lr_scheduler's values.
//
//   auto schedule = kiln::optim::SequentialLr(
//       {kiln::optim::LinearLr(0.1, 0.01, 1.0, 5), kiln::optim::CosineAnnealingLr(0.1, 95)}, {5});
//   for (int64_t step = 0; step < 100; ++step) {
//     optimizer.set_lr(schedule.current());
//     ... optimizer.step(model, grads) ...
//     schedule.step();
//   }
//
// Each scheduler is a pure function lr(t) of the step (or epoch) count t = 0, 1, ... plus a
// counter: current() is lr(t), step() advances t and returns the new lr, state() / load_state()
// save and restore t for checkpoints (as a train::NamedState, like optimizers). Schedulers are
// values (copyable); composites hold copies.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <vector>

#include "frontend/train/checkpoint.h"

namespace kiln::optim {

/// A schedule: lr(t) for t >= 0, and the step counter.
class LrScheduler {
 public:
  using Loc = std::source_location;
  /// Wraps a schedule function (what the factories below return).
  explicit LrScheduler(std::function<double(int64_t)> schedule, double base_lr)
      : schedule_(std::move(schedule)), base_lr_(base_lr) {}

  /// The learning rate at step `t` (>= 0; throws kiln::Error for a negative t).
  double lr(int64_t t, Loc loc = Loc::current()) const;
  /// lr(last_step()).
  double current() const { return schedule_(step_); }
  /// Advances the counter by one and returns the new learning rate.
  double step() { return schedule_(++step_); }
  /// The counter: how many times step() ran (since construction or load_state).
  int64_t last_step() const { return step_; }
  /// The lr at step 0 before any schedule factor (for composition).
  double base_lr() const { return base_lr_; }

  /// Sets the counter (>= 0).
  void set_last_step(int64_t step, Loc loc = Loc::current());
  /// For checkpoints (train::Checkpoint::scheduler): values {"last_step": "<decimal>"}.
  train::NamedState state() const;
  /// Restores the counter from state(); a missing, malformed or negative entry throws.
  void load_state(const train::NamedState& state, Loc loc = Loc::current());

 private:
  std::function<double(int64_t)> schedule_;
  double base_lr_;
  int64_t step_ = 0;
};

/// base_lr * gamma^floor(t / step_size) (torch StepLR).
LrScheduler StepLr(double base_lr, int64_t step_size, double gamma = 0.1,
                   std::source_location loc = std::source_location::current());
/// base_lr * gamma^t (torch ExponentialLR).
LrScheduler ExponentialLr(double base_lr, double gamma,
                          std::source_location loc = std::source_location::current());
/// eta_min + (base_lr - eta_min) (1 + cos(pi t / t_max)) / 2 (torch CosineAnnealingLR's closed
/// form; periodic past t_max like torch's).
LrScheduler CosineAnnealingLr(double base_lr, int64_t t_max, double eta_min = 0.0,
                              std::source_location loc = std::source_location::current());
/// Linear warm-up (torch LinearLR): base_lr times a factor going linearly from start_factor to
/// end_factor over total_iters steps, then constant.
LrScheduler LinearLr(double base_lr, double start_factor = 1.0 / 3, double end_factor = 1.0,
                     int64_t total_iters = 5,
                     std::source_location loc = std::source_location::current());
/// One schedule after another (torch SequentialLR): schedulers[i] runs from milestones[i - 1],
/// restarted at its own step 0. milestones: one fewer than schedulers, increasing, > 0.
LrScheduler SequentialLr(std::vector<LrScheduler> schedulers, std::vector<int64_t> milestones,
                         std::source_location loc = std::source_location::current());
/// The product of the schedules' factors (torch ChainedScheduler of multiplicative schedules
/// such as StepLr and ExponentialLr): base_lr of the first times prod_i lr_i(t) / base_lr_i.
LrScheduler ChainedLr(std::vector<LrScheduler> schedulers,
                      std::source_location loc = std::source_location::current());

}  // namespace kiln::optim
