// Learner: the training loop around a model, an optimizer and a user step function, with
// metrics (CSV + SVG), a progress bar, checkpoints (last and best), resume, early stopping,
// a NaN/Inf guard and mixed precision (LearnerConfig::with_precision). docs/training.md ("Learner
// and checkpoints") describes the design.
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
//
// Data-parallel mode (LearnerConfig::with_data_parallel, docs/training.md "Data-parallel
// training"): every rank of the job runs the same Learner on its shard of the data. fit() starts
// from rank 0's parameters and buffers, every training step averages the gradients over the ranks
// before the optimizer step (kiln::Gradients, so the default policy), and the loss the NaN guard
// and the progress bar see is the mean over the ranks. The epoch's metrics are reduced across the
// ranks (sums of loss x examples and of correct and total counts), so records() is the global
// figure on every rank. Only rank 0 prints and writes files (progress, summary, metrics.csv/svg,
// checkpoints); a failure to write fails every rank with rank 0's message. resume() reads the
// checkpoint on rank 0 and broadcasts its bytes, so the other ranks need no access to the file
// and a checkpoint of any world size resumes on any other. An error only one rank sees (its step
// function threw, say) ends the whole job through DataParallel::abort instead of leaving the
// other ranks waiting for it.
#pragma once

#include <unistd.h>

#include <any>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <source_location>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frontend/amp/autocast.h"
#include "frontend/amp/grad_scaler.h"
#include "frontend/autograd.h"
#include "frontend/jit.h"
#include "frontend/optim/optimizer.h"
#include "frontend/optim/scheduler.h"
#include "frontend/random.h"
#include "frontend/tensor.h"
#include "frontend/train/checkpoint.h"
#include "frontend/train/data_parallel.h"
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

}  // namespace kiln::train

namespace kiln {
/// A StepOutput crosses a jitted function's boundary (the Learner's jitted steps).
template <class B>
struct JitValue<train::StepOutput<B>> {
  static void Flatten(const train::StepOutput<B>& out, detail::JitFlat& flat) {
    JitValue<Tensor<B, 0>>::Flatten(out.loss, flat);
    JitValue<std::optional<Tensor<B, 2>>>::Flatten(out.logits, flat);
    JitValue<std::optional<Tensor<B, 1, Int>>>::Flatten(out.labels, flat);
  }
  static train::StepOutput<B> Unflatten(detail::JitReader& in) {
    train::StepOutput<B> out{JitValue<Tensor<B, 0>>::Unflatten(in), std::nullopt, std::nullopt};
    out.logits = JitValue<std::optional<Tensor<B, 2>>>::Unflatten(in);
    out.labels = JitValue<std::optional<Tensor<B, 1, Int>>>::Unflatten(in);
    return out;
  }
};
}  // namespace kiln

namespace kiln::train {

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
  /// Data-parallel training over these collectives (null: one process).
  std::shared_ptr<const DataParallel> data_parallel;
  /// What the step function computes in (with_precision).
  amp::Precision precision = amp::Precision::kF32;
  /// The loss scaling of amp::Precision::kF16.
  amp::GradScalerConfig grad_scaler;
  /// Runs the training and validation steps through kiln::jit (frontend/jit.h) where it can.
  bool jit = true;

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
  /// Trains data-parallel over `collectives` (kiln::dist::data_parallel(pg, DdpConfig) in
  /// frontend/dist/ddp.h). The train loader must then read this rank's shard
  /// (DataLoaderConfig::with_sampler(data::DistributedSampler(world_size, rank)), one shuffle seed
  /// on every rank): fit() checks a data::DataLoader's sampler. The valid loader may be sharded
  /// or read everything on every rank; its metrics are reduced either way.
  LearnerConfig with_data_parallel(std::shared_ptr<const DataParallel> collectives) const {
    auto c = *this;
    c.data_parallel = std::move(collectives);
    return c;
  }
  /// Mixed precision (docs/training.md, "Mixed precision"): kBF16 and kF16 run the step
  /// function, in training and validation, under amp::AutocastGuard of that dtype, with the
  /// parameters kept f32; kF16 also scales the loss dynamically (amp::GradScaler with `scaler`,
  /// its state kept in checkpoints), skips the steps whose gradients overflow, and logs the
  /// epoch's "loss_scale" and "skipped_steps" with the train metrics.
  LearnerConfig with_precision(amp::Precision p, amp::GradScalerConfig scaler = {}) const {
    auto c = *this;
    c.precision = p;
    c.grad_scaler = scaler;
    return c;
  }
  /// Whether the training step (the step function, the backward pass and the optimizer step)
  /// and the validation step run through kiln::jit: recorded once per batch shape, then replayed
  /// without running the step function (so it must not count calls or print). On by default;
  /// used where it applies: the default AutogradPolicy, one process, no f16 loss scaling, a
  /// batch type kiln::jit takes (data::Batch) and an optimizer with visit_state (kiln's).
  LearnerConfig with_jit(bool on) const {
    auto c = *this;
    c.jit = on;
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
            EarlyStoppingConfig().with_mode(config_.monitor_mode).with_patience(INT64_MAX))) {
    if (config_.precision == amp::Precision::kF16) scaler_ = config_.grad_scaler.init();
  }

  /// Trains up to `epochs` (total, counting epochs before a resume; default config.epochs).
  /// After each epoch: logs train and valid loss/accuracy, writes metrics.csv/svg, saves
  /// last.safetensors and, when the monitored value improved, best.safetensors. Throws
  /// kiln::Error from the NaN guard (naming the step) and from the step function.
  template <class TrainLoader, class ValidLoader>
  FitResult fit(TrainLoader& train, ValidLoader& valid, std::optional<int64_t> epochs = {},
                std::source_location loc = std::source_location::current()) {
    const int64_t total = epochs.value_or(config_.epochs);
    return collectively([&] { return fit_epochs(train, valid, total, loc); });
  }

  /// Continues from a checkpoint: `checkpoint` or else <checkpoint_dir>/last.safetensors. Loads
  /// the model, the optimizer state, the RNG stream, the epoch and step counters, early
  /// stopping's counters and the metrics log. Returns false (changing nothing) when there is no
  /// such file; throws kiln::Error when it does not match the model. Data-parallel: rank 0 reads
  /// the file (its `checkpoint` argument and checkpoint_dir count) and sends it to the others.
  bool resume(std::string checkpoint = "",
              std::source_location loc = std::source_location::current()) {
    return collectively([&] { return resume_from(std::move(checkpoint), loc); });
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

  /// Records so far (also in <checkpoint_dir>/metrics.csv). Data-parallel: the global figures,
  /// the same on every rank.
  const std::vector<MetricRecord>& records() const {
    static const std::vector<MetricRecord> kEmpty;
    return metrics_ ? metrics_->records() : kEmpty;
  }
  int64_t epoch() const { return epoch_; }
  int64_t step() const { return step_; }
  /// The loss scaler of amp::Precision::kF16 (its scale and skipped steps); null otherwise.
  const amp::GradScaler* grad_scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  const LearnerConfig& config() const { return config_; }

 private:
  static constexpr std::string_view kStopPrefix = "early_stopping.";
  static constexpr std::string_view kScalerPrefix = "grad_scaler.";

  const DataParallel* dp() const { return config_.data_parallel.get(); }
  // Rank 0 (or the only process) prints and writes files.
  bool lead() const { return dp() == nullptr || dp()->rank() == 0; }

  // Runs `body`. Data-parallel on more than one rank, an exception that not every rank is known
  // to throw (agreed_ unset) ends the job: the other ranks would wait in a collective forever.
  template <class Body>
  auto collectively(Body body) -> decltype(body()) {
    if (dp() == nullptr || dp()->world_size() == 1) return body();
    agreed_ = false;
    std::string what;
    try {
      return body();
    } catch (const std::exception& e) {
      if (agreed_) throw;
      what = e.what();
    } catch (...) {
      if (agreed_) throw;
      what = "an exception that is not a std::exception";
    }
    dp()->abort("kiln::train::Learner: " + what +
                "\nThe other ranks cannot learn of this error, so the job is ended "
                "(MPI_Abort) rather than left waiting for this rank.");
    std::abort();  // DataParallel::abort does not return; the compiler cannot see it through
                   // virtual
  }

  // Throws on every rank when `problem` is set on any: the first such rank's message, which the
  // other ranks name. Collective.
  void agree(const std::optional<std::string>& problem, const std::source_location& loc) {
    if (dp() == nullptr) {
      if (problem) detail::ThrowStatus(absl::FailedPreconditionError(*problem), loc);
      return;
    }
    std::vector<double> failed(static_cast<size_t>(dp()->world_size()), 0.0);
    failed[static_cast<size_t>(dp()->rank())] = problem ? 1 : 0;
    dp()->all_reduce_sum(failed, loc);
    int root = 0;
    while (root < dp()->world_size() && failed[static_cast<size_t>(root)] == 0) ++root;
    if (root == dp()->world_size()) return;
    std::string message = problem.value_or("");
    dp()->broadcast_bytes(message, root, loc);
    agreed_ = true;
    if (root != dp()->rank()) message = "rank " + std::to_string(root) + " failed: " + message;
    detail::ThrowStatus(absl::FailedPreconditionError(message), loc);
  }

  // Runs `body` (rank 0's file writes) and turns an error in it into agree()'s error on every
  // rank.
  template <class Body>
  void agree_on(Body body, const std::source_location& loc) {
    std::optional<std::string> problem;
    try {
      body();
    } catch (const std::exception& e) {
      if (dp() == nullptr) throw;
      problem = e.what();
    }
    agree(problem, loc);
  }

  template <class Loader>
  std::optional<std::string> sampler_problem(const Loader& loader) const {
    if constexpr (requires { loader.config().sampler; }) {
      const auto& sampler = loader.config().sampler;
      const std::string want = "DataLoaderConfig::with_sampler(data::DistributedSampler(" +
                               std::to_string(dp()->world_size()) + ", " +
                               std::to_string(dp()->rank()) + "))";
      if (!sampler) {
        if (dp()->world_size() == 1) return std::nullopt;
        return "Learner (data-parallel, rank " + std::to_string(dp()->rank()) + " of " +
               std::to_string(dp()->world_size()) +
               "): the train loader has no DistributedSampler, so every rank would train on the "
               "whole dataset; give it " +
               want;
      }
      if (sampler->num_replicas != dp()->world_size() || sampler->rank != dp()->rank()) {
        return "Learner (data-parallel, rank " + std::to_string(dp()->rank()) + " of " +
               std::to_string(dp()->world_size()) + "): the train loader's DistributedSampler(" +
               std::to_string(sampler->num_replicas) + ", " + std::to_string(sampler->rank) +
               ") is not this rank's; give it " + want;
      }
    }
    return std::nullopt;
  }

  // Every parameter and buffer of the model becomes rank 0's.
  void broadcast_model(const std::source_location& loc) {
    std::vector<detail::TensorRef> refs;
    const auto collect = [&refs](const std::string&, const auto& t) { refs.push_back(t.ref()); };
    model_.visit(collect);
    if constexpr (requires { model_.visit_buffers(collect); }) model_.visit_buffers(collect);
    std::vector<detail::TensorRef> values = dp()->broadcast(refs, 0, loc);
    size_t i = 0;
    const auto replace = [&](const std::string&, auto& t) {
      t = std::decay_t<decltype(t)>(values[i++], loc);
    };
    model_.visit(replace);
    if constexpr (requires { model_.visit_buffers(replace); }) model_.visit_buffers(replace);
  }

  template <class TrainLoader, class ValidLoader>
  FitResult fit_epochs(TrainLoader& train, ValidLoader& valid, int64_t total,
                       const std::source_location& loc) {
    if (dp() != nullptr) {
      agree(sampler_problem(train), loc);
      broadcast_model(loc);
    }
    if (lead()) {
      agree_on(
          [&] {
            if (!config_.checkpoint_dir.empty())
              std::filesystem::create_directories(config_.checkpoint_dir);
            if (!metrics_) metrics_.emplace(path("metrics.csv"), loc);
          },
          loc);
    } else {
      agree(std::nullopt, loc);
      if (!metrics_) metrics_.emplace("", loc);  // the records, in memory only
    }
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
      if (config_.summary_stream != nullptr && lead()) {
        print_summary(
            *config_.summary_stream, total,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      }
      if (scheduler_ != nullptr && !scheduler_per_step_) set_lr(scheduler_->step());
      const std::optional<double> monitored =
          epoch_value(config_.monitor_split, config_.monitor_metric);
      if (monitored) monitor_.update(*monitored);
      if (lead()) {
        agree_on(
            [&] {
              if (config_.checkpoint_dir.empty()) return;
              metrics_->write_svg(path("metrics.svg"), loc);
              save(path("last.safetensors"), loc);
              if (monitored && monitor_.improved()) save(path("best.safetensors"), loc);
            },
            loc);
      } else {
        agree(std::nullopt, loc);
      }
    }
    result.last_epoch = epoch_;
    result.stopped_early = config_.early_stopping.has_value() && monitor_.stopped();
    result.best = monitor_.best();
    result.best_epoch = monitor_.best_index() + 1;
    return result;
  }

  bool resume_from(std::string checkpoint, const std::source_location& loc) {
    if (checkpoint.empty()) checkpoint = path("last.safetensors");
    Checkpoint ckpt;
    if (dp() == nullptr) {
      if (checkpoint.empty() || !std::filesystem::exists(checkpoint)) return false;
      ckpt = load_checkpoint(checkpoint, model_, loc);
    } else {
      // Rank 0 reads the file and sends "<found><path>\0<bytes>" to every rank.
      std::string payload;
      std::optional<std::string> problem;
      if (lead()) {
        payload = "0";
        if (!checkpoint.empty() && std::filesystem::exists(checkpoint)) {
          std::ifstream in(checkpoint, std::ios::binary);
          if (!in) {
            problem = "Learner.resume: cannot open " + checkpoint;
          } else {
            std::ostringstream bytes;
            bytes << in.rdbuf();  // an empty file sets bytes' failbit: ParseCheckpoint names it
            payload = "1" + checkpoint + std::string(1, '\0') + std::move(bytes).str();
          }
        }
      }
      agree(problem, loc);
      dp()->broadcast_bytes(payload, 0, loc);
      if (payload.empty() || payload[0] != '1') return false;
      const size_t end = payload.find('\0');
      const std::string source = "rank 0's " + payload.substr(1, end - 1);
      const std::span<const std::byte> file(
          reinterpret_cast<const std::byte*>(payload.data()) + end + 1, payload.size() - end - 1);
      agree_on(
          [&] {
            ckpt = ParseCheckpoint(file, source, loc);
            detail_ckpt::Assign(model_,
                                ApplyState(module_state(model_), ckpt.model, true, source, loc));
          },
          loc);
    }
    optimizer_.load_state(ckpt.optimizer);
    if (scheduler_ != nullptr && !ckpt.scheduler.empty()) {
      scheduler_->load_state(ckpt.scheduler, loc);
      set_lr(scheduler_->current());
    }
    if (ckpt.rng_state) manual_seed(*ckpt.rng_state);
    epoch_ = ckpt.epoch.value_or(0);
    step_ = ckpt.step.value_or(0);
    std::map<std::string, std::string> stop_state, scaler_state;
    for (const auto& [key, value] : ckpt.user) {
      if (key.starts_with(kStopPrefix)) stop_state[key.substr(kStopPrefix.size())] = value;
      if (key.starts_with(kScalerPrefix)) scaler_state[key.substr(kScalerPrefix.size())] = value;
    }
    if (!stop_state.empty()) monitor_.load_state(stop_state, loc);
    if (scaler_ && !scaler_state.empty()) scaler_->load_state(scaler_state, loc);
    if (dp() == nullptr) {
      if (!config_.checkpoint_dir.empty()) {
        metrics_ = MetricsLogger::Resume(path("metrics.csv"), epoch_, loc);
      }
      return true;
    }
    // Rank 0 continues its metrics log; the other ranks get its records.
    std::string csv;
    if (lead()) {
      agree_on(
          [&] {
            if (!config_.checkpoint_dir.empty()) {
              metrics_ = MetricsLogger::Resume(path("metrics.csv"), epoch_, loc);
            }
            if (metrics_) csv = MetricsCsv(metrics_->records());
          },
          loc);
    } else {
      agree(std::nullopt, loc);
    }
    dp()->broadcast_bytes(csv, 0, loc);
    if (!lead()) {
      metrics_.emplace("", loc);
      if (!csv.empty()) {
        absl::StatusOr<std::vector<MetricRecord>> records = ParseMetricsCsv(csv);
        if (!records.ok()) detail::ThrowStatus(records.status(), loc);
        for (const MetricRecord& r : *records) {
          metrics_->log(r.epoch, r.step, r.split, r.metric, r.value);
        }
      }
    }
    return true;
  }

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
    // The loss's mean over the examples (weighted by batch size when there are labels).
    double loss_sum = 0;
    int64_t loss_count = 0;
    Accuracy accuracy;
    std::vector<TopKAccuracy> top_k;
    for (int64_t k : config_.top_k) top_k.emplace_back(k);
    std::optional<ProgressBar> bar;
    if (config_.progress && config_.progress_stream != nullptr && lead()) {
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
    const int64_t skipped_before = scaler_ ? scaler_->skipped_steps() : 0;
    for (auto&& batch : batches) {
      using BatchT = std::remove_cvref_t<decltype(batch)>;
      bool jitted = false;
      auto out = [&] {
        if constexpr (kJittable<BatchT>) {
          if (use_jit()) {
            jitted = true;
            return training ? jitted_step<JitTrainStep<BatchT>>(jit_train_)(batch)
                            : jitted_step<JitValidStep<BatchT>>(jit_valid_)(batch);
          }
        }
        amp::AutocastGuard autocast(amp::AutocastDTypeOf(config_.precision));
        return step_fn_(model_, batch);
      }();
      double loss = 0;   // this rank's
      double shown = 0;  // what the progress bar shows
      if (training && jitted) {
        // The jitted step ran the backward pass and the optimizer step too.
        ++step_;
        loss = static_cast<double>(out.loss.item(loc));
        if (scheduler_ != nullptr && scheduler_per_step_) set_lr(scheduler_->step());
        shown = loss;
        if (config_.nan_guard) {
          agreed_ = true;
          CheckFiniteLoss(shown, epoch, step_, learning_rate(), loc);
          agreed_ = false;
        }
      } else if (training) {
        ++step_;
        {
          auto gradients =
              Policy::backward(scaler_ ? scaler_->scale(out.loss, loc) : out.loss, loc);
          if (dp() != nullptr) all_reduce_gradients(gradients, out, loc);
          if (scaler_) {
            scaled_step(gradients, out, loc);
          } else {
            optimizer_.step(model_, gradients);
          }
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
        // Data-parallel, the guard and the bar follow the mean over the ranks, so a NaN on one
        // rank stops every rank at the same step with the same message.
        shown = loss;
        if (dp() != nullptr) {
          std::vector<double> sum{loss};
          dp()->all_reduce_sum(sum, loc);
          shown = sum[0] / dp()->world_size();
        }
        if (config_.nan_guard) {
          agreed_ = true;
          CheckFiniteLoss(shown, epoch, step_, learning_rate(), loc);
          agreed_ = false;
        }
      } else {
        detail::Realize(LossAndLogits(out), loc);
        loss = static_cast<double>(out.loss.item(loc));
        shown = loss;
      }
      int64_t weight = 1;
      if (out.logits && out.labels) {
        const ir::TensorData logits = out.logits->into_data(loc);
        const ir::TensorData labels = out.labels->into_data(loc);
        accuracy.update(logits, labels, loc);
        for (TopKAccuracy& acc : top_k) acc.update(logits, labels, loc);
        weight = labels.num_elements();
      }
      loss_sum += loss * static_cast<double>(weight);
      loss_count += weight;
      if (bar) bar->update(1, shown);
    }
    if (bar) bar->finish();
    // [loss sum, loss count, then (correct, total) of accuracy and of each top-k].
    std::vector<double> sums{loss_sum, static_cast<double>(loss_count),
                             static_cast<double>(accuracy.correct()),
                             static_cast<double>(accuracy.total())};
    for (const TopKAccuracy& acc : top_k) {
      sums.push_back(static_cast<double>(acc.correct()));
      sums.push_back(static_cast<double>(acc.total()));
    }
    if (dp() != nullptr) dp()->all_reduce_sum(sums, loc);
    if (sums[1] > 0) metrics_->log(epoch, step_, split, "loss", sums[0] / sums[1]);
    if (sums[3] > 0) metrics_->log(epoch, step_, split, "accuracy", sums[2] / sums[3]);
    if (training && scaler_) {
      // Every rank skips the same steps (the gradients are averaged before the check).
      metrics_->log(epoch, step_, split, "loss_scale", scaler_->scale());
      metrics_->log(epoch, step_, split, "skipped_steps",
                    static_cast<double>(scaler_->skipped_steps() - skipped_before));
    }
    for (size_t i = 0; i < top_k.size(); ++i) {
      const double correct = sums[4 + 2 * i], count = sums[5 + 2 * i];
      if (count > 0) {
        metrics_->log(epoch, step_, split, "top" + std::to_string(top_k[i].k()) + "_accuracy",
                      correct / count);
      }
    }
  }

  template <class Grads, class Out>
  void all_reduce_gradients(Grads& grads, const Out& out, const std::source_location& loc) {
    if constexpr (std::is_same_v<Grads, Gradients>) {
      std::vector<detail::TensorRef> params;
      model_.visit([&params](const std::string&, const auto& t) { params.push_back(t.ref()); });
      // The loss and logits are realized with the gradients: the forward pass runs once.
      dp()->all_reduce_gradients(params, grads, LossAndLogits(out), loc);
    } else {
      agreed_ = true;
      detail::ThrowStatus(absl::FailedPreconditionError(
                              "Learner: data-parallel training averages kiln::Gradients; this "
                              "Policy's backward() returns another type"),
                          loc);
    }
  }

  // The kF16 optimizer step: unscale, check, then step or skip (amp::GradScaler::step).
  template <class Grads, class Out>
  void scaled_step(Grads& grads, const Out& out, const std::source_location& loc) {
    if constexpr (std::is_same_v<Grads, Gradients>) {
      scaler_->step(optimizer_, model_, grads, LossAndLogits(out), loc);
    } else {
      detail::ThrowStatus(absl::FailedPreconditionError(
                              "Learner: f16 loss scaling unscales kiln::Gradients; this Policy's "
                              "backward() returns another type"),
                          loc);
    }
  }

  void set_lr(double lr) {
    if constexpr (requires { optimizer_.set_lr(lr); }) {
      optimizer_.set_lr(lr);
    } else {
      throw Error("Learner: this optimizer has no set_lr(double), so a scheduler cannot drive it");
    }
  }

  // The training step kiln::jit records and replays: the step function, the backward pass and
  // the optimizer step; the loss and logits come back realized, without their tapes.
  template <class BatchT>
  struct JitTrainStep {
    Learner* self;
    auto operator()(const BatchT& batch) const {
      auto out = [&] {
        amp::AutocastGuard autocast(amp::AutocastDTypeOf(self->config_.precision));
        return self->step_fn_(self->model_, batch);
      }();
      {
        auto gradients = Policy::backward(out.loss, out.loss.ref()->loc);
        self->optimizer_.step(self->model_, gradients);
      }
      out.loss = out.loss.detach();
      if (out.logits) *out.logits = out.logits->detach();
      return out;
    }
  };
  // The validation step (fit() runs it under Policy::NoGrad).
  template <class BatchT>
  struct JitValidStep {
    Learner* self;
    auto operator()(const BatchT& batch) const {
      amp::AutocastGuard autocast(amp::AutocastDTypeOf(self->config_.precision));
      return self->step_fn_(self->model_, batch);
    }
  };
  // Whether the steps on batches of type BatchT can be jitted at all (the rest of the
  // conditions, use_jit(), are run-time).
  template <class BatchT>
  static constexpr bool kJittable = std::is_same_v<Policy, AutogradPolicy>&& JitArgument<BatchT>&&
      JitResult<std::invoke_result_t<StepFn&, Model&, const BatchT&>>&& requires(Optimizer& o) {
    o.visit_state([](const std::string&, detail::TensorRef&) {});
  };
  bool use_jit() const { return config_.jit && dp() == nullptr && !scaler_; }
  // The Jitted function of `Step` kept in `holder` (made on first use; remade when the batch type
  // changes).
  template <class Step>
  auto& jitted_step(std::any& holder) {
    using J = Jitted<Step, Model, Optimizer>;
    if (auto* held = std::any_cast<std::shared_ptr<J>>(&holder)) return **held;
    holder = std::make_shared<J>(Step{this}, model_, optimizer_);
    return *std::any_cast<std::shared_ptr<J>&>(holder);
  }

  // One graph per training step: the parameters, the buffers (BatchNorm statistics), the
  // optimizer's state, the loss and the logits are realized together, so the forward pass, the
  // backward pass and the update compile to one executable (a cache hit from the next step on).
  template <class Out>
  void realize_step(const Out& out, const std::source_location& loc) {
    std::vector<detail::TensorRef> refs = optim::step_tensors(model_, optimizer_);
    for (detail::TensorRef& ref : LossAndLogits(out)) refs.push_back(std::move(ref));
    detail::Realize(refs, loc);
  }

  // The step's loss and, when it gave them, its logits.
  template <class Out>
  static std::vector<detail::TensorRef> LossAndLogits(const Out& out) {
    std::vector<detail::TensorRef> refs{out.loss.ref()};
    if (out.logits) refs.push_back(out.logits->ref());
    return refs;
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
    if (scaler_) {
      for (const auto& [key, value] : scaler_->state()) {
        ckpt.user[std::string(kScalerPrefix) + key] = value;
      }
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
  // Set for amp::Precision::kF16.
  std::optional<amp::GradScaler> scaler_;
  // The jitted training and validation steps (Jitted<JitTrainStep<BatchT>, ...>), when used.
  std::any jit_train_;
  std::any jit_valid_;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
  // Set just before throwing an error that every rank throws (see collectively()).
  bool agreed_ = false;
};

}  // namespace kiln::train
