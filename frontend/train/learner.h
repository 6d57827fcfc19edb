// Learner: the training loop around a model, an optimizer and a user step function, with
// metrics (CSV + SVG), a progress bar, checkpoints (last and best), resume, early stopping and
// a NaN/Inf guard. docs/training.md ("Learner and checkpoints") describes the design.
//
//   auto step = [](Mlp<Cpu>& model, const Batch& batch) {
//     auto logits = model.forward(batch.images);
//     return kiln::train::StepOutput<Cpu>{cross_entropy(logits, batch.labels), logits,
//                                         batch.labels};
//   };
//   kiln::train::Learner learner(model, optimizer, step,
//                                kiln::train::LearnerConfig()
//                                    .with_epochs(10)
//                                    .with_checkpoint_dir("runs/mnist")
//                                    .with_early_stopping(kiln::train::EarlyStoppingConfig()
//                                                             .with_patience(3)));
//   learner.resume();                     // continues runs/mnist/last.safetensors if present
//   kiln::train::FitResult result = learner.fit(train_loader, valid_loader);
//
// Requirements:
//   step       (Model&, const Batch&) -> StepOutput<B>: the loss (a scalar) and, for accuracy,
//              optional logits [N, C] and labels [N].
//   optimizer  step(model, gradients) applies one update; state() -> NamedState and
//              load_state(const NamedState&) for checkpoints; optionally learning_rate() -> double
//              (named by the NaN guard's message).
//   loaders    anything a range-for walks that yields batches (size() when it has one sizes the
//              progress bar); walked once per epoch.
//   Policy     how gradients are made: AutogradPolicy (loss.backward() via frontend/autograd.h,
//              evaluation under NoGradGuard) by default; tests substitute their own.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <ostream>
#include <source_location>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/optim/optimizer.h"
#include "frontend/optim/scheduler.h"
#include "frontend/random.h"
#include "frontend/tensor.h"
#include "frontend/train/checkpoint.h"
#include "frontend/train/metrics.h"
#include "frontend/train/progress.h"

namespace kiln::train {

/// What the user's step function returns for one batch.
template <class B>
struct StepOutput {
  Tensor<B, 0> loss;
  std::optional<Tensor<B, 2>> logits;
  std::optional<Tensor<B, 1, Int>> labels;
};

/// Gradients through frontend/autograd.h (the default Learner policy).
struct AutogradPolicy {
  template <class B>
  static Gradients backward(const Tensor<B, 0>& loss, const std::source_location& loc) {
    return loss.backward(loc);
  }
  /// Alive during validation: nothing is taped.
  using NoGrad = NoGradGuard;
};

struct LearnerConfig {
  int64_t epochs = 1;
  /// Where last.safetensors, best.safetensors, metrics.csv and metrics.svg go; empty keeps
  /// metrics in memory and saves nothing.
  std::string checkpoint_dir;
  std::optional<EarlyStoppingConfig> early_stopping;
  /// The value early stopping and best.safetensors follow: (split, metric) of the epoch records.
  std::string monitor_split = "valid";
  std::string monitor_metric = "loss";
  Mode monitor_mode = Mode::kMin;
  /// Extra top-k accuracies ("top5_accuracy") besides "accuracy", when the step gives logits.
  std::vector<int64_t> top_k;
  /// Progress bars on `progress_stream` (terminal mode when it is std::cerr on a terminal).
  bool progress = true;
  std::ostream* progress_stream = &std::cerr;
  bool nan_guard = true;
  /// One line per epoch ("epoch 1/5  train loss 0.5123 accuracy 0.8234 | valid ...  12.3 s");
  /// null prints nothing.
  std::ostream* summary_stream = &std::cout;

  LearnerConfig with_epochs(int64_t n) const {
    auto c = *this;
    c.epochs = n;
    return c;
  }
  LearnerConfig with_checkpoint_dir(std::string dir) const {
    auto c = *this;
    c.checkpoint_dir = std::move(dir);
    return c;
  }
  /// Stops when (split, metric) has not improved for config.patience epochs; the config's mode
  /// also decides what "best" means for best.safetensors.
  LearnerConfig with_early_stopping(EarlyStoppingConfig config, std::string split = "valid",
                                    std::string metric = "loss") const {
    auto c = *this;
    c.early_stopping = config;
    c.monitor_split = std::move(split);
    c.monitor_metric = std::move(metric);
    c.monitor_mode = config.mode;
    return c;
  }
  LearnerConfig with_top_k(std::vector<int64_t> ks) const {
    auto c = *this;
    c.top_k = std::move(ks);
    return c;
  }
  LearnerConfig with_progress(bool on, std::ostream* stream = &std::cerr) const {
    auto c = *this;
    c.progress = on;
    c.progress_stream = stream;
    return c;
  }
  LearnerConfig with_summary(std::ostream* stream) const {
    auto c = *this;
    c.summary_stream = stream;
    return c;
  }
  LearnerConfig with_nan_guard(bool on) const {
    auto c = *this;
    c.nan_guard = on;
    return c;
  }
};

struct FitResult {
  /// The last completed epoch (1-based; counts epochs of a resumed run before this fit too).
  int64_t last_epoch = 0;
  int64_t epochs_run = 0;
  bool stopped_early = false;
  std::optional<double> best;
  int64_t best_epoch = 0;
};

template <class Model, class Optimizer, class StepFn, class Policy = AutogradPolicy>
class Learner {
 public:
  Learner(Model& model, Optimizer& optimizer, StepFn step, LearnerConfig config = {})
      : model_(model),
        optimizer_(optimizer),
        step_fn_(std::move(step)),
        config_(std::move(config)),
        monitor_(config_.early_stopping.value_or(
            EarlyStoppingConfig().with_mode(config_.monitor_mode).with_patience(INT64_MAX))) {}

  /// Trains up to `epochs` (total, counting epochs before a resume; default config.epochs).
  /// After each epoch: logs train and valid loss/accuracy, writes metrics.csv/svg, saves
  /// last.safetensors and, when the monitored value improved, best.safetensors. Throws
  /// kiln::Error from the NaN guard (naming the step) and from the step function.
  template <class TrainLoader, class ValidLoader>
  FitResult fit(TrainLoader& train, ValidLoader& valid, std::optional<int64_t> epochs = {},
                std::source_location loc = std::source_location::current()) {
    const int64_t total = epochs.value_or(config_.epochs);
    if (!config_.checkpoint_dir.empty())
      std::filesystem::create_directories(config_.checkpoint_dir);
    if (!metrics_) metrics_.emplace(path("metrics.csv"), loc);
    FitResult result;
    while (epoch_ < total && !monitor_.stopped()) {
      const int64_t epoch = epoch_ + 1;
      const auto started = std::chrono::steady_clock::now();
      run_epoch(train, epoch, total, /*training=*/true, loc);
      {
        [[maybe_unused]] typename Policy::NoGrad no_grad;
        run_epoch(valid, epoch, total, /*training=*/false, loc);
      }
      epoch_ = epoch;
      ++result.epochs_run;
      if (config_.summary_stream != nullptr) {
        print_summary(
            *config_.summary_stream, total,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      }
      if (scheduler_ != nullptr && !scheduler_per_step_) set_lr(scheduler_->step());
      const std::optional<double> monitored =
          epoch_value(config_.monitor_split, config_.monitor_metric);
      if (monitored) monitor_.update(*monitored);
      if (!config_.checkpoint_dir.empty()) {
        metrics_->write_svg(path("metrics.svg"), loc);
        save(path("last.safetensors"), loc);
        if (monitored && monitor_.improved()) save(path("best.safetensors"), loc);
      }
    }
    result.last_epoch = epoch_;
    result.stopped_early = config_.early_stopping.has_value() && monitor_.stopped();
    result.best = monitor_.best();
    result.best_epoch = monitor_.best_index() + 1;
    return result;
  }

  /// Continues from a checkpoint: `checkpoint` or else <checkpoint_dir>/last.safetensors. Loads
  /// the model, the optimizer state, the RNG stream, the epoch and step counters, early
  /// stopping's counters and the metrics log. Returns false (changing nothing) when there is no
  /// such file; throws kiln::Error when it does not match the model.
  bool resume(std::string checkpoint = "",
              std::source_location loc = std::source_location::current()) {
    if (checkpoint.empty()) checkpoint = path("last.safetensors");
    if (checkpoint.empty() || !std::filesystem::exists(checkpoint)) return false;
    Checkpoint ckpt = load_checkpoint(checkpoint, model_, loc);
    optimizer_.load_state(ckpt.optimizer);
    if (scheduler_ != nullptr && !ckpt.scheduler.empty()) {
      scheduler_->load_state(ckpt.scheduler, loc);
      set_lr(scheduler_->current());
    }
    if (ckpt.rng_state) manual_seed(*ckpt.rng_state);
    epoch_ = ckpt.epoch.value_or(0);
    step_ = ckpt.step.value_or(0);
    std::map<std::string, std::string> stop_state;
    for (const auto& [key, value] : ckpt.user) {
      if (key.starts_with(kStopPrefix)) stop_state[key.substr(kStopPrefix.size())] = value;
    }
    if (!stop_state.empty()) monitor_.load_state(stop_state, loc);
    if (!config_.checkpoint_dir.empty()) {
      metrics_ = MetricsLogger::Resume(path("metrics.csv"), epoch_, loc);
    }
    return true;
  }

  /// Drives the optimizer's learning rate from `scheduler` (which must outlive the learner):
  /// the optimizer starts at scheduler.current() and the scheduler steps after every epoch, or
  /// after every optimizer step when `per_step`. Its counter is saved in checkpoints and restored
  /// by resume().
  Learner& with_scheduler(optim::LrScheduler& scheduler, bool per_step = false) {
    scheduler_ = &scheduler;
    scheduler_per_step_ = per_step;
    set_lr(scheduler.current());
    return *this;
  }

  /// Records so far (also in <checkpoint_dir>/metrics.csv).
  const std::vector<MetricRecord>& records() const {
    static const std::vector<MetricRecord> kEmpty;
    return metrics_ ? metrics_->records() : kEmpty;
  }
  int64_t epoch() const { return epoch_; }
  int64_t step() const { return step_; }
  const LearnerConfig& config() const { return config_; }

 private:
  static constexpr std::string_view kStopPrefix = "early_stopping.";

  std::string path(const std::string& file) const {
    return config_.checkpoint_dir.empty() ? "" : config_.checkpoint_dir + "/" + file;
  }

  template <class Loader>
  static int64_t size_of(const Loader& loader) {
    if constexpr (requires { loader.num_batches(); }) {
      return static_cast<int64_t>(loader.num_batches());
    } else if constexpr (requires { loader.size(); }) {
      return static_cast<int64_t>(loader.size());
    } else {
      return 0;
    }
  }

  std::optional<double> learning_rate() const {
    if constexpr (requires { optimizer_.lr(); }) {
      return static_cast<double>(optimizer_.lr());
    } else if constexpr (requires { optimizer_.learning_rate(); }) {
      return static_cast<double>(optimizer_.learning_rate());
    } else {
      return std::nullopt;
    }
  }

  // The mean of this epoch's records of (split, metric).
  std::optional<double> epoch_value(const std::string& split, const std::string& metric) const {
    for (auto it = metrics_->records().rbegin(); it != metrics_->records().rend(); ++it) {
      if (it->epoch != epoch_) break;
      if (it->split == split && it->metric == metric) return it->value;
    }
    return std::nullopt;
  }

  template <class Loader>
  void run_epoch(Loader& loader, int64_t epoch, int64_t total_epochs, bool training,
                 const std::source_location& loc) {
    const char* split = training ? "train" : "valid";
    Mean loss_mean;
    Accuracy accuracy;
    std::vector<TopKAccuracy> top_k;
    for (int64_t k : config_.top_k) top_k.emplace_back(k);
    std::optional<ProgressBar> bar;
    if (config_.progress && config_.progress_stream != nullptr) {
      const bool terminal = config_.progress_stream == &std::cerr && ::isatty(STDERR_FILENO) != 0;
      bar.emplace(size_of(loader), *config_.progress_stream, terminal,
                  ProgressBarConfig().with_label(EpochLabel(split, epoch, total_epochs)));
    }
    // A data::DataLoader walks epoch(e): its shuffle depends on (seed, epoch), so a resumed run
    // sees the same batches as an uninterrupted one. Other loaders are plain ranges.
    auto&& batches = [&]() -> decltype(auto) {
      if constexpr (requires { loader.epoch(epoch); }) {
        return loader.epoch(epoch - 1);
      } else {
        return (loader);
      }
    }();
    for (auto&& batch : batches) {
      auto out = step_fn_(model_, batch);
      double loss = 0;
      if (training) {
        ++step_;
        {
          auto gradients = Policy::backward(out.loss, loc);
          optimizer_.step(model_, gradients);
        }
        // Neither the gradients (which hold the old parameters) nor the loss's and logits' tapes
        // outlive the update, so the old parameters and optimizer state are observable by nothing
        // once the step is realized and the engine donates their buffers to the new values
        // (frontend/engine.h, DonatingExecutor).
        out.loss = out.loss.detach(loc);
        if (out.logits) *out.logits = out.logits->detach(loc);
        realize_step(out, loc);
        loss = static_cast<double>(out.loss.item(loc));
        if (scheduler_ != nullptr && scheduler_per_step_) set_lr(scheduler_->step());
        if (config_.nan_guard) CheckFiniteLoss(loss, epoch, step_, learning_rate(), loc);
      } else {
        std::vector<detail::TensorRef> refs{out.loss.ref()};
        if (out.logits) refs.push_back(out.logits->ref());
        detail::Realize(refs, loc);
        loss = static_cast<double>(out.loss.item(loc));
      }
      int64_t weight = 1;
      if (out.logits && out.labels) {
        const ir::TensorData logits = out.logits->into_data(loc);
        const ir::TensorData labels = out.labels->into_data(loc);
        accuracy.update(logits, labels, loc);
        for (TopKAccuracy& acc : top_k) acc.update(logits, labels, loc);
        weight = labels.num_elements();
      }
      loss_mean.update(loss, weight);
      if (bar) bar->update(1, loss);
    }
    if (bar) bar->finish();
    if (loss_mean.count() > 0) metrics_->log(epoch, step_, split, "loss", loss_mean.value());
    if (accuracy.total() > 0) metrics_->log(epoch, step_, split, "accuracy", accuracy.value());
    for (const TopKAccuracy& acc : top_k) {
      if (acc.total() > 0) {
        metrics_->log(epoch, step_, split, "top" + std::to_string(acc.k()) + "_accuracy",
                      acc.value());
      }
    }
  }

  void set_lr(double lr) {
    if constexpr (requires { optimizer_.set_lr(lr); }) {
      optimizer_.set_lr(lr);
    } else {
      throw Error("Learner: this optimizer has no set_lr(double), so a scheduler cannot drive it");
    }
  }

  // One graph per training step: the parameters, the buffers (BatchNorm statistics), the
  // optimizer's state, the loss and the logits are realized together, so the forward pass, the
  // backward pass and the update compile to one executable (a cache hit from the next step on).
  template <class Out>
  void realize_step(const Out& out, const std::source_location& loc) {
    std::vector<detail::TensorRef> refs = optim::step_tensors(model_, optimizer_);
    refs.push_back(out.loss.ref());
    if (out.logits) refs.push_back(out.logits->ref());
    detail::Realize(refs, loc);
  }

  // "epoch 2/5  train loss 0.4123 accuracy 0.8512 | valid loss 0.4410 accuracy 0.8420  3.1 s".
  void print_summary(std::ostream& os, int64_t total, double seconds) const {
    std::ostringstream line;
    line << "epoch " << epoch_ << "/" << total << " ";
    const char* separator = " ";
    for (const char* split : {"train", "valid"}) {
      bool any = false;
      for (const MetricRecord& r : metrics_->records()) {
        if (r.epoch != epoch_ || r.split != split) continue;
        if (!any) line << separator << split;
        any = true;
        line << " " << r.metric << " " << std::fixed << std::setprecision(4) << r.value;
      }
      if (any) separator = " | ";
    }
    line << "  " << std::fixed << std::setprecision(1) << seconds << " s\n";
    os << line.str() << std::flush;
  }

  static std::string EpochLabel(const char* split, int64_t epoch, int64_t total) {
    return std::string(split) + " " + std::to_string(epoch) + "/" + std::to_string(total);
  }

  void save(const std::string& file, const std::source_location& loc) {
    Checkpoint ckpt;
    ckpt.epoch = epoch_;
    ckpt.step = step_;
    ckpt.rng_state = detail::RandomStreamState();
    ckpt.optimizer = optimizer_.state();
    if (scheduler_ != nullptr) ckpt.scheduler = scheduler_->state();
    for (const auto& [key, value] : monitor_.state()) {
      ckpt.user[std::string(kStopPrefix) + key] = value;
    }
    save_checkpoint(file, model_, ckpt, loc);
  }

  Model& model_;
  Optimizer& optimizer_;
  optim::LrScheduler* scheduler_ = nullptr;
  bool scheduler_per_step_ = false;
  StepFn step_fn_;
  LearnerConfig config_;
  // Follows the monitored value: early stopping when configured, otherwise only "best".
  EarlyStopping monitor_;
  std::optional<MetricsLogger> metrics_;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
};

}  // namespace kiln::train
