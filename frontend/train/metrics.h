// Training metrics: a CSV log with an SVG plot of its curves, accuracy accumulators, early
// stopping and a guard against NaN/Inf losses. Host-side pieces the Learner (docs/training.md)
// glues together; each also works alone.
//
//   kiln::train::MetricsLogger log("run/metrics.csv");
//   log.log(epoch, step, "train", "loss", loss);
//   log.write_svg("run/metrics.svg");            // one panel per metric, one curve per split
//
//   kiln::train::TopKAccuracy top5(5);
//   top5.update(logits.into_data(), labels.into_data());   // [N, C] floats, [N] integers
//   double acc = top5.value();
//
//   kiln::train::EarlyStopping stop(kiln::train::EarlyStoppingConfig()
//                                       .with_patience(3).with_min_delta(1e-4)
//                                       .with_mode(kiln::train::Mode::kMin));
//   if (stop.update(valid_loss)) break;
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/tensor_data.h"

namespace kiln::train {

/// One logged value.
struct MetricRecord {
  int64_t epoch = 0;
  int64_t step = 0;
  std::string split;   // "train", "valid", ...
  std::string metric;  // "loss", "accuracy", ...
  double value = 0;
};

/// Appends records to a CSV file (header "epoch,step,split,metric,value"; fields with commas or
/// quotes are quoted; values printed with 17 significant digits so they read back exactly) and
/// keeps them for the plot. Each log() is flushed, so a crashed run keeps its log.
class MetricsLogger {
 public:
  /// Creates (truncates) `csv_path`; an empty path keeps the records in memory only. Throws
  /// kiln::Error when the file cannot be created.
  explicit MetricsLogger(std::string csv_path = "",
                         std::source_location loc = std::source_location::current());
  /// Continues the log of a resumed run: keeps the rows of `csv_path` up to `last_epoch` (rows of
  /// later, unfinished epochs are dropped), rewrites the file with them and appends from there.
  /// A missing file starts a new log. Throws kiln::Error on a malformed file.
  static MetricsLogger Resume(const std::string& csv_path, int64_t last_epoch,
                              std::source_location loc = std::source_location::current());

  void log(int64_t epoch, int64_t step, std::string_view split, std::string_view metric,
           double value);

  const std::vector<MetricRecord>& records() const { return records_; }
  const std::string& csv_path() const { return csv_path_; }

  /// The plot of the records (see RenderMetricsSvg).
  std::string svg() const;
  /// Writes svg() to `path` atomically. Throws kiln::Error.
  void write_svg(const std::string& path,
                 std::source_location loc = std::source_location::current()) const;

 private:
  std::string csv_path_;
  std::ofstream csv_;
  std::vector<MetricRecord> records_;
};

/// An SVG document with one panel per metric (in first-logged order): the per-epoch mean of each
/// split's values as a polyline with markers, x axis = epoch, y axis with 5 ticks, and a legend
/// naming the splits. Non-finite values are left out of the curves.
std::string RenderMetricsSvg(const std::vector<MetricRecord>& records, int width = 640,
                             int panel_height = 260);

/// "epoch,step,split,metric,value" lines for `records` (the logger's file format).
std::string MetricsCsv(const std::vector<MetricRecord>& records);
/// The inverse of MetricsCsv; errors name the line.
absl::StatusOr<std::vector<MetricRecord>> ParseMetricsCsv(const std::string& text);

/// Running mean of scalar values (e.g. the loss over an epoch).
class Mean {
 public:
  void update(double value, int64_t weight = 1) {
    sum_ += value * static_cast<double>(weight);
    count_ += weight;
  }
  double value() const {
    return count_ == 0 ? std::numeric_limits<double>::quiet_NaN()
                       : sum_ / static_cast<double>(count_);
  }
  int64_t count() const { return count_; }
  void reset() { *this = Mean(); }

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

/// The fraction of samples whose label is among the k largest logits. Ties rank the smaller
/// class index first (so a row of equal logits predicts class 0, like argmax).
class TopKAccuracy {
 public:
  explicit TopKAccuracy(int64_t k = 1) : k_(k) {}
  /// `logits` [N, C] of a float dtype, `labels` [N] of an integer dtype with values in [0, C).
  /// Throws kiln::Error naming the shapes or the bad label.
  void update(const ir::TensorData& logits, const ir::TensorData& labels,
              std::source_location loc = std::source_location::current());
  /// NaN before any update.
  double value() const {
    return total_ == 0 ? std::numeric_limits<double>::quiet_NaN()
                       : static_cast<double>(correct_) / static_cast<double>(total_);
  }
  int64_t correct() const { return correct_; }
  int64_t total() const { return total_; }
  int64_t k() const { return k_; }
  void reset() {
    correct_ = 0;
    total_ = 0;
  }

 private:
  int64_t k_;
  int64_t correct_ = 0;
  int64_t total_ = 0;
};

/// Top-1 accuracy.
class Accuracy : public TopKAccuracy {
 public:
  Accuracy() : TopKAccuracy(1) {}
};

enum class Mode { kMin, kMax };

struct EarlyStoppingConfig {
  /// Epochs without improvement tolerated before stopping.
  int64_t patience = 3;
  /// An improvement must beat the best value by more than this.
  double min_delta = 0;
  /// kMin for losses, kMax for accuracies.
  Mode mode = Mode::kMin;

  EarlyStoppingConfig with_patience(int64_t p) const {
    auto c = *this;
    c.patience = p;
    return c;
  }
  EarlyStoppingConfig with_min_delta(double d) const {
    auto c = *this;
    c.min_delta = d;
    return c;
  }
  EarlyStoppingConfig with_mode(Mode m) const {
    auto c = *this;
    c.mode = m;
    return c;
  }
};

/// Stops training when the monitored value has not improved for `patience` updates. A NaN value
/// never improves.
class EarlyStopping {
 public:
  explicit EarlyStopping(EarlyStoppingConfig config = {});
  /// Records one value (one per epoch); true when training should stop now.
  bool update(double value);
  /// Whether the last update improved on the best value (e.g. to save the best checkpoint).
  bool improved() const { return improved_; }
  std::optional<double> best() const { return best_; }
  /// The index (0-based count of updates) of the best value.
  int64_t best_index() const { return best_index_; }
  int64_t bad_updates() const { return bad_updates_; }
  bool stopped() const { return stopped_; }
  const EarlyStoppingConfig& config() const { return config_; }

  /// The counters as strings (saved in checkpoints so a resumed run keeps its patience).
  std::map<std::string, std::string> state() const;
  /// Restores state(); throws kiln::Error on malformed values.
  void load_state(const std::map<std::string, std::string>& state,
                  std::source_location loc = std::source_location::current());

 private:
  EarlyStoppingConfig config_;
  std::optional<double> best_;
  int64_t best_index_ = -1;
  int64_t updates_ = 0;
  int64_t bad_updates_ = 0;
  bool improved_ = false;
  bool stopped_ = false;
};

/// The message for a non-finite loss, or nullopt when `loss` is finite: it names the value, the
/// step and epoch, and suggests a lower learning rate (naming the current one when given) or
/// gradient clipping.
std::optional<std::string> NonFiniteLossMessage(double loss, int64_t epoch, int64_t step,
                                                std::optional<double> learning_rate = {});
/// Throws kiln::Error with NonFiniteLossMessage when `loss` is NaN or Inf.
void CheckFiniteLoss(double loss, int64_t epoch, int64_t step,
                     std::optional<double> learning_rate = {},
                     std::source_location loc = std::source_location::current());
/// Index of the first NaN/Inf element of a float tensor (nullopt for none or a non-float dtype):
/// to name the first parameter whose gradient went bad.
std::optional<int64_t> FirstNonFinite(const ir::TensorData& data);

}  // namespace kiln::train
