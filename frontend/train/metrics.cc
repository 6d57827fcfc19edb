#include "frontend/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "frontend/error.h"
#include "frontend/train/safetensors.h"

namespace kiln::train {
namespace {

[[noreturn]] void Fail(const std::string& message, const std::source_location& loc) {
  detail::ThrowStatus(absl::InvalidArgumentError(message), loc);
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string CsvLine(const MetricRecord& r) {
  return absl::StrCat(r.epoch, ",", r.step, ",", CsvField(r.split), ",", CsvField(r.metric), ",",
                      absl::StrFormat("%.17g", r.value), "\n");
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Colour-blind-safe (Okabe-Ito) colours for the splits.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000"};

template <class T>
size_t IndexOf(std::vector<T>& list, const T& value) {
  const auto it = std::find(list.begin(), list.end(), value);
  if (it != list.end()) return static_cast<size_t>(it - list.begin());
  list.push_back(value);
  return list.size() - 1;
}

std::string Num(double v) { return absl::StrFormat("%.2f", v); }

}  // namespace

std::string MetricsCsv(const std::vector<MetricRecord>& records) {
  std::string out = "epoch,step,split,metric,value\n";
  for (const MetricRecord& r : records) out += CsvLine(r);
  return out;
}

MetricsLogger::MetricsLogger(std::string csv_path, std::source_location loc)
    : csv_path_(std::move(csv_path)) {
  if (csv_path_.empty()) return;
  csv_.open(csv_path_, std::ios::out | std::ios::trunc);
  if (!csv_) Fail(absl::StrCat("MetricsLogger: cannot create ", csv_path_), loc);
  csv_ << "epoch,step,split,metric,value\n";
  csv_.flush();
}

void MetricsLogger::log(int64_t epoch, int64_t step, std::string_view split,
                        std::string_view metric, double value) {
  records_.push_back(MetricRecord{epoch, step, std::string(split), std::string(metric), value});
  if (csv_.is_open()) {
    csv_ << CsvLine(records_.back());
    csv_.flush();
  }
}

MetricsLogger MetricsLogger::Resume(const std::string& csv_path, int64_t last_epoch,
                                    std::source_location loc) {
  std::vector<MetricRecord> kept;
  std::ifstream in(csv_path, std::ios::binary);
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<MetricRecord>> records = ParseMetricsCsv(text.str());
    if (!records.ok()) Fail(absl::StrCat(csv_path, ": ", records.status().message()), loc);
    for (MetricRecord& r : *records) {
      if (r.epoch <= last_epoch) kept.push_back(std::move(r));
    }
  }
  const absl::Status status = WriteFileAtomically(csv_path, MetricsCsv(kept));
  if (!status.ok()) Fail(absl::StrCat("MetricsLogger::Resume: ", status.message()), loc);
  MetricsLogger logger;
  logger.csv_path_ = csv_path;
  logger.records_ = std::move(kept);
  logger.csv_.open(csv_path, std::ios::out | std::ios::app);
  if (!logger.csv_) Fail(absl::StrCat("MetricsLogger: cannot append to ", csv_path), loc);
  return logger;
}

absl::StatusOr<std::vector<MetricRecord>> ParseMetricsCsv(const std::string& text) {
  std::vector<MetricRecord> records;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    // One record; quoted fields may hold commas, quotes ("") and newlines.
    std::vector<std::string> fields(1);
    bool quoted = false;
    for (; pos < text.size(); ++pos) {
      const char c = text[pos];
      if (quoted) {
        if (c == '"' && pos + 1 < text.size() && text[pos + 1] == '"') {
          fields.back() += '"';
          ++pos;
        } else if (c == '"') {
          quoted = false;
        } else {
          fields.back() += c;
        }
      } else if (c == '"') {
        quoted = true;
      } else if (c == ',') {
        fields.emplace_back();
      } else if (c == '\n') {
        ++pos;
        break;
      } else {
        fields.back() += c;
      }
    }
    ++line_no;
    if (line_no == 1) {
      if (fields != std::vector<std::string>{"epoch", "step", "split", "metric", "value"}) {
        return absl::InvalidArgumentError("line 1: not the header epoch,step,split,metric,value");
      }
      continue;
    }
    MetricRecord r;
    char* end = nullptr;
    bool ok = fields.size() == 5 && !fields[0].empty() && !fields[1].empty() && !fields[4].empty();
    if (ok) {
      r.epoch = std::strtoll(fields[0].c_str(), &end, 10);
      ok = *end == 0;
      r.step = std::strtoll(fields[1].c_str(), &end, 10);
      ok = ok && *end == 0;
      r.value = std::strtod(fields[4].c_str(), &end);
      ok = ok && *end == 0;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": expected epoch,step,split,metric,value"));
    }
    r.split = fields[2];
    r.metric = fields[3];
    records.push_back(std::move(r));
  }
  return records;
}

std::string MetricsLogger::svg() const { return RenderMetricsSvg(records_); }

void MetricsLogger::write_svg(const std::string& path, std::source_location loc) const {
  const absl::Status status = WriteFileAtomically(path, svg());
  if (!status.ok()) Fail(absl::StrCat("MetricsLogger::write_svg: ", status.message()), loc);
}

std::string RenderMetricsSvg(const std::vector<MetricRecord>& records, int width,
                             int panel_height) {
  // metric -> split -> epoch -> (sum, count) of finite values.
  std::vector<std::string> metrics;
  std::vector<std::string> splits;
  std::map<size_t, std::map<size_t, std::map<int64_t, std::pair<double, int64_t>>>> curves;
  for (const MetricRecord& r : records) {
    const size_t m = IndexOf(metrics, r.metric);
    const size_t s = IndexOf(splits, r.split);
    if (!std::isfinite(r.value)) continue;
    auto& cell = curves[m][s][r.epoch];
    cell.first += r.value;
    cell.second += 1;
  }

  constexpr double kLeft = 70, kRight = 120, kTop = 34, kBottom = 44;
  const double plot_w = std::max(10.0, width - kLeft - kRight);
  const double plot_h = std::max(10.0, panel_height - kTop - kBottom);
  const int height = panel_height * static_cast<int>(std::max<size_t>(1, metrics.size()));

  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
      width, height, width, height, width, height);
  if (metrics.empty()) {
    absl::StrAppend(&svg, "<text x=\"", width / 2, "\" y=\"", height / 2,
                    "\" text-anchor=\"middle\">no metrics logged</text>\n</svg>\n");
    return svg;
  }

  for (size_t m = 0; m < metrics.size(); ++m) {
    const double y0 = static_cast<double>(m) * panel_height;
    // Ranges over every split of this metric.
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (const auto& [s, by_epoch] : curves[m]) {
      for (const auto& [epoch, cell] : by_epoch) {
        const double v = cell.first / static_cast<double>(cell.second);
        xmin = std::min(xmin, static_cast<double>(epoch));
        xmax = std::max(xmax, static_cast<double>(epoch));
        ymin = std::min(ymin, v);
        ymax = std::max(ymax, v);
      }
    }
    const bool empty = !(xmin <= xmax);
    if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmin == xmax) xmin -= 1, xmax += 1;
    if (ymin == ymax) {
      const double pad = std::abs(ymin) > 0 ? std::abs(ymin) * 0.1 : 1.0;
      ymin -= pad, ymax += pad;
    }
    auto px = [&](double x) { return kLeft + (x - xmin) / (xmax - xmin) * plot_w; };
    auto py = [&](double y) { return y0 + kTop + (ymax - y) / (ymax - ymin) * plot_h; };

    absl::StrAppend(&svg, "<g class=\"panel\" id=\"panel-", m, "\">\n");
    absl::StrAppend(&svg, "<text x=\"", Num(kLeft + plot_w / 2), "\" y=\"", Num(y0 + 20),
                    "\" text-anchor=\"middle\" font-size=\"14\">", XmlEscape(metrics[m]),
                    "</text>\n");
    // Y ticks: 5 evenly spaced values with grid lines.
    for (int i = 0; i <= 4; ++i) {
      const double v = ymin + (ymax - ymin) * i / 4.0;
      const double y = py(v);
      absl::StrAppend(&svg, "<line class=\"tick\" x1=\"", Num(kLeft - 4), "\" y1=\"", Num(y),
                      "\" x2=\"", Num(kLeft + plot_w), "\" y2=\"", Num(y),
                      "\" stroke=\"#dddddd\"/>\n");
      absl::StrAppend(&svg, "<text class=\"ytick\" x=\"", Num(kLeft - 6), "\" y=\"", Num(y + 4),
                      "\" text-anchor=\"end\">", absl::StrFormat("%.4g", v), "</text>\n");
    }
    // Axes.
    absl::StrAppend(&svg, "<line class=\"axis\" x1=\"", Num(kLeft), "\" y1=\"", Num(y0 + kTop),
                    "\" x2=\"", Num(kLeft), "\" y2=\"", Num(y0 + kTop + plot_h),
                    "\" stroke=\"black\"/>\n");
    absl::StrAppend(&svg, "<line class=\"axis\" x1=\"", Num(kLeft), "\" y1=\"",
                    Num(y0 + kTop + plot_h), "\" x2=\"", Num(kLeft + plot_w), "\" y2=\"",
                    Num(y0 + kTop + plot_h), "\" stroke=\"black\"/>\n");
    // X ticks: integer epochs, at most ~10 labels.
    const int64_t first = static_cast<int64_t>(std::ceil(xmin));
    const int64_t last = static_cast<int64_t>(std::floor(xmax));
    const int64_t stride = std::max<int64_t>(1, (last - first + 9) / 10);
    for (int64_t e = first; e <= last; e += stride) {
      const double x = px(static_cast<double>(e));
      absl::StrAppend(&svg, "<line class=\"tick\" x1=\"", Num(x), "\" y1=\"",
                      Num(y0 + kTop + plot_h), "\" x2=\"", Num(x), "\" y2=\"",
                      Num(y0 + kTop + plot_h + 4), "\" stroke=\"black\"/>\n");
      absl::StrAppend(&svg, "<text class=\"xtick\" x=\"", Num(x), "\" y=\"",
                      Num(y0 + kTop + plot_h + 16), "\" text-anchor=\"middle\">", e, "</text>\n");
    }
    absl::StrAppend(&svg, "<text x=\"", Num(kLeft + plot_w / 2), "\" y=\"",
                    Num(y0 + kTop + plot_h + 34), "\" text-anchor=\"middle\">epoch</text>\n");
    // Curves and legend.
    int legend_row = 0;
    for (const auto& [s, by_epoch] : curves[m]) {
      const char* color = kColors[s % std::size(kColors)];
      std::string points;
      for (const auto& [epoch, cell] : by_epoch) {
        const double v = cell.first / static_cast<double>(cell.second);
        absl::StrAppend(&points, points.empty() ? "" : " ", Num(px(static_cast<double>(epoch))),
                        ",", Num(py(v)));
      }
      absl::StrAppend(&svg, "<polyline class=\"curve\" data-split=\"", XmlEscape(splits[s]),
                      "\" fill=\"none\" stroke=\"", color, "\" stroke-width=\"2\" points=\"",
                      points, "\"/>\n");
      for (const auto& [epoch, cell] : by_epoch) {
        const double v = cell.first / static_cast<double>(cell.second);
        absl::StrAppend(&svg, "<circle cx=\"", Num(px(static_cast<double>(epoch))), "\" cy=\"",
                        Num(py(v)), "\" r=\"2.5\" fill=\"", color, "\"/>\n");
      }
      const double ly = y0 + kTop + 8 + 16 * legend_row++;
      const double lx = kLeft + plot_w + 12;
      absl::StrAppend(&svg, "<line class=\"legend\" x1=\"", Num(lx), "\" y1=\"", Num(ly),
                      "\" x2=\"", Num(lx + 18), "\" y2=\"", Num(ly), "\" stroke=\"", color,
                      "\" stroke-width=\"2\"/>\n");
      absl::StrAppend(&svg, "<text class=\"legend\" x=\"", Num(lx + 24), "\" y=\"", Num(ly + 4),
                      "\">", XmlEscape(splits[s]), "</text>\n");
    }
    absl::StrAppend(&svg, "</g>\n");
  }
  svg += "</svg>\n";
  return svg;
}

void TopKAccuracy::update(const ir::TensorData& logits, const ir::TensorData& labels,
                          std::source_location loc) {
  const std::string types =
      absl::StrCat("; operands ", ir::DTypeName(logits.dtype()), ir::ShapeToString(logits.shape()),
                   ", ", ir::DTypeName(labels.dtype()), ir::ShapeToString(labels.shape()));
  if (k_ < 1) Fail(absl::StrCat("accuracy: k must be >= 1, got ", k_), loc);
  if (logits.rank() != 2 || !ir::IsFloat(logits.dtype())) {
    Fail(absl::StrCat("accuracy: logits must be a float [N, C] tensor", types), loc);
  }
  if (labels.rank() != 1 || !ir::IsInteger(labels.dtype()) ||
      labels.shape()[0] != logits.shape()[0]) {
    Fail(absl::StrCat("accuracy: labels must be an integer [N] tensor matching logits' N", types),
         loc);
  }
  const int64_t n = logits.shape()[0];
  const int64_t c = logits.shape()[1];
  const std::vector<double> values = logits.ToDoubles();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = labels.GetInt64(i);
    if (y < 0 || y >= c) {
      Fail(absl::StrCat("accuracy: label ", y, " of sample ", i, " is outside [0, ", c, ")", types),
           loc);
    }
    const double* row = values.data() + i * c;
    const double target = row[y];
    // The label's rank: classes that beat it (larger, or equal with a smaller index).
    int64_t above = 0;
    for (int64_t j = 0; j < c && above < k_; ++j) {
      if (row[j] > target || (row[j] == target && j < y)) ++above;
    }
    if (above < k_) ++correct_;
  }
  total_ += n;
}

EarlyStopping::EarlyStopping(EarlyStoppingConfig config) : config_(config) {}

bool EarlyStopping::update(double value) {
  const int64_t index = updates_++;
  improved_ = false;
  if (!std::isnan(value)) {
    if (!best_) {
      improved_ = true;
    } else if (config_.mode == Mode::kMin) {
      improved_ = value < *best_ - config_.min_delta;
    } else {
      improved_ = value > *best_ + config_.min_delta;
    }
  }
  if (improved_) {
    best_ = value;
    best_index_ = index;
    bad_updates_ = 0;
  } else {
    ++bad_updates_;
  }
  if (bad_updates_ >= config_.patience) stopped_ = true;
  return stopped_;
}

std::map<std::string, std::string> EarlyStopping::state() const {
  std::map<std::string, std::string> out{{"updates", std::to_string(updates_)},
                                         {"bad_updates", std::to_string(bad_updates_)},
                                         {"best_index", std::to_string(best_index_)},
                                         {"stopped", stopped_ ? "1" : "0"}};
  if (best_) out["best"] = absl::StrFormat("%.17g", *best_);
  return out;
}

void EarlyStopping::load_state(const std::map<std::string, std::string>& state,
                               std::source_location loc) {
  auto integer = [&](const char* key) -> int64_t {
    const auto it = state.find(key);
    char* end = nullptr;
    const int64_t v = it == state.end() ? 0 : std::strtoll(it->second.c_str(), &end, 10);
    if (it == state.end() || it->second.empty() || *end != 0) {
      Fail(absl::StrCat("EarlyStopping::load_state: missing or malformed '", key, "'"), loc);
    }
    return v;
  };
  updates_ = integer("updates");
  bad_updates_ = integer("bad_updates");
  best_index_ = integer("best_index");
  stopped_ = integer("stopped") != 0;
  improved_ = false;
  best_.reset();
  if (const auto it = state.find("best"); it != state.end()) {
    char* end = nullptr;
    best_ = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != 0) Fail("EarlyStopping::load_state: malformed 'best'", loc);
  }
}

std::optional<std::string> NonFiniteLossMessage(double loss, int64_t epoch, int64_t step,
                                                std::optional<double> learning_rate) {
  if (std::isfinite(loss)) return std::nullopt;
  const std::string lr =
      learning_rate ? absl::StrFormat(" (now %g)", *learning_rate) : std::string();
  return absl::StrFormat(
      "the loss is %s at step %d (epoch %d): training diverged. Try a lower learning rate%s, "
      "gradient clipping, or check the inputs for NaN/Inf",
      std::isnan(loss) ? "NaN" : (loss > 0 ? "+Inf" : "-Inf"), step, epoch, lr);
}

void CheckFiniteLoss(double loss, int64_t epoch, int64_t step, std::optional<double> learning_rate,
                     std::source_location loc) {
  if (auto message = NonFiniteLossMessage(loss, epoch, step, learning_rate)) Fail(*message, loc);
}

std::optional<int64_t> FirstNonFinite(const ir::TensorData& data) {
  if (!ir::IsFloat(data.dtype())) return std::nullopt;
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    if (!std::isfinite(data.GetDouble(i))) return i;
  }
  return std::nullopt;
}

}  // namespace kiln::train
