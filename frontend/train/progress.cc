#include "frontend/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::train {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

ProgressBar::ProgressBar(int64_t total, std::ostream& out, bool terminal, ProgressBarConfig config)
    : total_(total), out_(&out), terminal_(terminal), config_(std::move(config)) {
  start_ = now();
}

ProgressBar ProgressBar::ForStderr(int64_t total, ProgressBarConfig config) {
  return ProgressBar(total, std::cerr, ::isatty(STDERR_FILENO) != 0, std::move(config));
}

double ProgressBar::now() const {
  if (config_.clock) return config_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ProgressBar::render() const {
  const double elapsed = now() - start_;
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  std::string eta;
  if (total_ > 0) {
    const double left = static_cast<double>(std::max<int64_t>(0, total_ - done_));
    eta = rate > 0 ? FormatDuration(left / rate) : "?";
  }
  const std::string loss = loss_ ? absl::StrFormat("loss %.4g", *loss_) : "";
  const std::string rate_text = absl::StrFormat("%.1f it/s", rate);
  const std::string count = total_ > 0 ? absl::StrCat(done_, "/", total_) : absl::StrCat(done_);
  if (terminal_) {
    std::string bar;
    if (total_ > 0 && config_.width > 0) {
      const int64_t filled =
          std::min<int64_t>(config_.width, done_ * config_.width / std::max<int64_t>(1, total_));
      bar = "[" + std::string(static_cast<size_t>(filled), '=');
      if (filled < config_.width) {
        bar += '>';
        bar += std::string(static_cast<size_t>(config_.width - filled - 1), ' ');
      }
      bar += "] ";
    }
    std::string line = config_.label.empty() ? "" : config_.label + " ";
    absl::StrAppend(&line, bar, count, "  ", rate_text);
    if (!eta.empty()) absl::StrAppend(&line, "  ETA ", eta);
    if (!loss.empty()) absl::StrAppend(&line, "  ", loss);
    return line;
  }
  std::string line = config_.label.empty() ? "" : config_.label + ": ";
  absl::StrAppend(&line, count);
  if (total_ > 0) absl::StrAppend(&line, " (", done_ * 100 / total_, "%)");
  absl::StrAppend(&line, " ", rate_text);
  if (!eta.empty()) absl::StrAppend(&line, " ETA ", eta);
  if (!loss.empty()) absl::StrAppend(&line, " ", loss);
  return line;
}

void ProgressBar::draw() {
  const std::string line = render();
  if (terminal_) {
    // Blank out leftovers of a longer previous line.
    std::string padded = line;
    if (padded.size() < last_width_) padded.append(last_width_ - padded.size(), ' ');
    last_width_ = line.size();
    *out_ << '\r' << padded << std::flush;
  } else {
    *out_ << line << '\n' << std::flush;
  }
  last_draw_ = now();
}

void ProgressBar::update(int64_t steps, std::optional<double> loss) {
  if (finished_) return;
  done_ += steps;
  if (loss) loss_ = loss;
  const double interval = terminal_ ? config_.refresh_s : config_.plain_every_s;
  if (now() - last_draw_ >= interval || (terminal_ && total_ > 0 && done_ >= total_)) draw();
}

void ProgressBar::finish() {
  if (finished_) return;
  draw();
  if (terminal_) *out_ << '\n' << std::flush;
  finished_ = true;
}

}  // namespace kiln::train
