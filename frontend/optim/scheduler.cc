#include "frontend/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "frontend/error.h"

namespace kiln::optim {

namespace {

[[noreturn]] void Fail(const char* name, const std::string& message,
                       const std::source_location& loc) {
  kiln::detail::ThrowOpError(name, message, {}, loc);
}
void CheckLr(const char* name, double lr, const std::source_location& loc) {
  if (!(lr >= 0.0) || std::isinf(lr)) {
    Fail(name, absl::StrCat("base_lr ", lr, " must be finite and >= 0"), loc);
  }
}

}  // namespace

double LrScheduler::lr(int64_t t, Loc loc) const {
  if (t < 0) Fail("lr_scheduler", absl::StrCat("step ", t, " must be >= 0"), loc);
  return schedule_(t);
}

void LrScheduler::set_last_step(int64_t step, Loc loc) {
  if (step < 0) Fail("lr_scheduler", absl::StrCat("step ", step, " is negative"), loc);
  step_ = step;
}

train::NamedState LrScheduler::state() const {
  train::NamedState state;
  state.values["last_step"] = absl::StrCat(step_);
  return state;
}

void LrScheduler::load_state(const train::NamedState& state, Loc loc) {
  auto it = state.values.find("last_step");
  int64_t step = 0;
  if (it == state.values.end() || !absl::SimpleAtoi(it->second, &step) || step < 0) {
    Fail("lr_scheduler",
         it == state.values.end()
             ? std::string("load_state: no 'last_step' value")
             : absl::StrCat("load_state: last_step '", it->second, "' is not a step count >= 0"),
         loc);
  }
  step_ = step;
}

LrScheduler StepLr(double base_lr, int64_t step_size, double gamma, std::source_location loc) {
  CheckLr("step_lr", base_lr, loc);
  if (step_size < 1) Fail("step_lr", absl::StrCat("step_size ", step_size, " must be >= 1"), loc);
  return LrScheduler(
      [=](int64_t t) { return base_lr * std::pow(gamma, static_cast<double>(t / step_size)); },
      base_lr);
}

LrScheduler ExponentialLr(double base_lr, double gamma, std::source_location loc) {
  CheckLr("exponential_lr", base_lr, loc);
  if (!(gamma > 0.0)) Fail("exponential_lr", absl::StrCat("gamma ", gamma, " must be > 0"), loc);
  return LrScheduler([=](int64_t t) { return base_lr * std::pow(gamma, static_cast<double>(t)); },
                     base_lr);
}

LrScheduler CosineAnnealingLr(double base_lr, int64_t t_max, double eta_min,
                              std::source_location loc) {
  CheckLr("cosine_annealing_lr", base_lr, loc);
  if (t_max < 1) {
    Fail("cosine_annealing_lr", absl::StrCat("t_max ", t_max, " must be >= 1"), loc);
  }
  return LrScheduler(
      [=](int64_t t) {
        const double phase = std::numbers::pi * static_cast<double>(t) / static_cast<double>(t_max);
        return eta_min + (base_lr - eta_min) * (1.0 + std::cos(phase)) / 2.0;
      },
      base_lr);
}

LrScheduler LinearLr(double base_lr, double start_factor, double end_factor, int64_t total_iters,
                     std::source_location loc) {
  CheckLr("linear_lr", base_lr, loc);
  if (!(start_factor > 0.0 && start_factor <= 1.0) || !(end_factor >= 0.0 && end_factor <= 1.0)) {
    Fail("linear_lr",
         absl::StrCat("start_factor ", start_factor, " must be in (0, 1] and end_factor ",
                      end_factor, " in [0, 1]"),
         loc);
  }
  if (total_iters < 1) {
    Fail("linear_lr", absl::StrCat("total_iters ", total_iters, " must be >= 1"), loc);
  }
  return LrScheduler(
      [=](int64_t t) {
        const double progress =
            static_cast<double>(std::min(t, total_iters)) / static_cast<double>(total_iters);
        return base_lr * (start_factor + (end_factor - start_factor) * progress);
      },
      base_lr);
}

LrScheduler SequentialLr(std::vector<LrScheduler> schedulers, std::vector<int64_t> milestones,
                         std::source_location loc) {
  if (schedulers.empty()) Fail("sequential_lr", "needs at least one scheduler", loc);
  if (milestones.size() + 1 != schedulers.size()) {
    Fail("sequential_lr",
         absl::StrCat("needs one milestone fewer than schedulers (", schedulers.size(),
                      " schedulers, ", milestones.size(), " milestones)"),
         loc);
  }
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 1 || (i > 0 && milestones[i] <= milestones[i - 1])) {
      Fail("sequential_lr", "milestones must be increasing and >= 1", loc);
    }
  }
  const double base = schedulers.front().base_lr();
  return LrScheduler(
      [schedulers = std::move(schedulers), milestones = std::move(milestones)](int64_t t) {
        size_t i = 0;
        while (i < milestones.size() && t >= milestones[i]) ++i;
        const int64_t start = i == 0 ? 0 : milestones[i - 1];
        return schedulers[i].lr(t - start);
      },
      base);
}

LrScheduler ChainedLr(std::vector<LrScheduler> schedulers, std::source_location loc) {
  if (schedulers.empty()) Fail("chained_lr", "needs at least one scheduler", loc);
  for (const LrScheduler& s : schedulers) {
    if (!(s.base_lr() > 0.0)) {
      Fail("chained_lr", "every scheduler needs base_lr > 0 (its factor is lr(t) / base_lr)", loc);
    }
  }
  const double base = schedulers.front().base_lr();
  return LrScheduler(
      [schedulers = std::move(schedulers), base](int64_t t) {
        double lr = base;
        for (const LrScheduler& s : schedulers) lr *= s.lr(t) / s.base_lr();
        return lr;
      },
      base);
}

}  // namespace kiln::optim
