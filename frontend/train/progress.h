// A progress bar for training loops: rate (it/s), ETA and the current loss.
//
//   auto bar = kiln::train::ProgressBar::ForStderr(steps, ProgressBarConfig().with_label("epoch
//   1")); for (...) { ...; bar.update(1, loss); } bar.finish();
//
// On a terminal it redraws one line with '\r' (at most every `refresh_s`):
//   epoch 1 [===========>        ]  60/100  12.3 it/s  ETA 0:03  loss 0.4123
// Elsewhere (a log file, CI) it prints a plain line every `plain_every_s` seconds and at finish,
// so logs stay readable:
//   epoch 1: 60/100 (60%) 12.3 it/s ETA 0:03 loss 0.4123
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

namespace kiln::train {

struct ProgressBarConfig {
  std::string label;
  /// Characters of the bar itself (terminal mode).
  int width = 30;
  /// Terminal mode: minimum seconds between redraws.
  double refresh_s = 0.1;
  /// Plain mode: seconds between lines.
  double plain_every_s = 10;
  /// The clock in seconds (a steady clock by default; tests pass a fake one).
  std::function<double()> clock;

  ProgressBarConfig with_label(std::string l) const {
    auto c = *this;
    c.label = std::move(l);
    return c;
  }
  ProgressBarConfig with_width(int w) const {
    auto c = *this;
    c.width = w;
    return c;
  }
  ProgressBarConfig with_refresh(double s) const {
    auto c = *this;
    c.refresh_s = s;
    return c;
  }
  ProgressBarConfig with_plain_every(double s) const {
    auto c = *this;
    c.plain_every_s = s;
    return c;
  }
  ProgressBarConfig with_clock(std::function<double()> f) const {
    auto c = *this;
    c.clock = std::move(f);
    return c;
  }
};

class ProgressBar {
 public:
  /// `total` steps (0 or less: unknown, no ETA); `terminal` picks '\r' redraws or plain lines.
  ProgressBar(int64_t total, std::ostream& out, bool terminal, ProgressBarConfig config = {});
  /// Writes to std::cerr, in terminal mode when stderr is a terminal (isatty).
  static ProgressBar ForStderr(int64_t total, ProgressBarConfig config = {});

  /// Advances by `steps`; `loss` (when given) becomes the shown loss.
  void update(int64_t steps = 1, std::optional<double> loss = {});
  /// Draws the final state (a newline ends the terminal line). Idempotent.
  void finish();

  /// The status text for the current state (without '\r' or newline).
  std::string render() const;
  int64_t done() const { return done_; }
  bool terminal() const { return terminal_; }

 private:
  double now() const;
  void draw();

  int64_t total_;
  std::ostream* out_;
  bool terminal_;
  ProgressBarConfig config_;
  double start_;
  double last_draw_ = -1e300;
  int64_t done_ = 0;
  std::optional<double> loss_;
  bool finished_ = false;
  size_t last_width_ = 0;
};

/// "1:02:03" / "2:03" for a duration in seconds ("?" when not finite).
std::string FormatDuration(double seconds);

}  // namespace kiln::train
