#include "frontend/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/error.h"
#include "frontend/nn/linear.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::quant::detail {

using kiln::detail::Loc;
using kiln::detail::TensorRef;
using kiln::detail::ThrowOpError;
using kiln::detail::TypeOf;

// The values a layer's inputs took during calibration: their extremes, and (for percentiles) a
// sample of at most kSample values, every stride-th one (the stride doubles when it fills up, so
// the sample stays spread over all batches).
class Observer {
 public:
  explicit Observer(const QuantConfig& config) : config_(config) {}

  void Record(const ir::TensorData& x) {
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const double v = x.GetDouble(i);
      if (std::isnan(v)) continue;
      low_ = std::min(low_, v);
      high_ = std::max(high_, v);
      if (config_.calibration != Calibration::kPercentile || seen_++ % stride_ != 0) continue;
      sample_.push_back(static_cast<float>(v));
      if (sample_.size() >= kSample) {
        for (size_t j = 0; 2 * j < sample_.size(); ++j) sample_[j] = sample_[2 * j];
        sample_.resize((sample_.size() + 1) / 2);
        stride_ *= 2;
      }
    }
  }

  struct Range {
    double low = 0, high = 0;  // low > high: nothing was seen
  };
  Range Finish() const {
    if (config_.calibration != Calibration::kPercentile || sample_.empty()) return {low_, high_};
    std::vector<float> sorted = sample_;
    std::sort(sorted.begin(), sorted.end());
    const double last = static_cast<double>(sorted.size() - 1);
    const auto at = [&](double fraction) {
      return static_cast<double>(sorted[static_cast<size_t>(std::lround(fraction * last))]);
    };
    const double p = config_.percentile / 100.0;
    // Inputs that were never negative keep their minimum: they stay u8.
    return {low_ >= 0 ? low_ : at(1.0 - p), at(p)};
  }

 private:
  static constexpr size_t kSample = size_t{1} << 22;
  QuantConfig config_;
  double low_ = std::numeric_limits<double>::infinity();
  double high_ = -std::numeric_limits<double>::infinity();
  std::vector<float> sample_;
  int64_t seen_ = 0, stride_ = 1;
};

std::shared_ptr<Observer> NewObserver(const QuantConfig& config, const Loc& loc) {
  if (config.calibration == Calibration::kPercentile &&
      !(config.percentile > 50 && config.percentile <= 100)) {
    ThrowOpError("quantize", absl::StrCat("percentile ", config.percentile, " is not in (50, 100]"),
                 {}, loc);
  }
  if (config.batches < 0) {
    ThrowOpError("quantize", absl::StrCat("batches ", config.batches, " is negative"), {}, loc);
  }
  return std::make_shared<Observer>(config);
}

QuantizedLayer QuantizeLayer(const ir::TensorData& w, const Observer& observer,
                             const QuantConfig& config, const Loc& loc) {
  const Observer::Range range = observer.Finish();
  if (range.low > range.high) {
    ThrowOpError("quantize",
                 "a layer saw no input during calibration (does `run` call every layer?)", {}, loc);
  }
  QuantizedLayer q;
  q.unsigned_input = range.low >= 0;
  const double bound =
      q.unsigned_input ? range.high : std::max(std::abs(range.low), std::abs(range.high));
  q.input_scale = bound > 0 ? static_cast<float>(bound / (q.unsigned_input ? 255.0 : 127.0)) : 1.0f;
  if (w.rank() < 1 || !ir::IsFloat(w.dtype())) {
    ThrowOpError("quantize", "a layer's weight must be a float tensor of rank >= 1",
                 {ir::TensorType{w.dtype(), w.shape()}}, loc);
  }
  const int64_t channels = w.shape()[0];
  const int64_t per_channel = channels == 0 ? 0 : w.num_elements() / channels;
  q.weight = ir::TensorData(ir::DType::kI8, w.shape());
  q.dequant_scale = ir::TensorData(ir::DType::kF32, {channels});
  const double levels = config.reduce_range ? 64.0 : 127.0;
  for (int64_t o = 0; o < channels; ++o) {
    double largest = 0;
    for (int64_t i = 0; i < per_channel; ++i) {
      largest = std::max(largest, std::abs(w.GetDouble(o * per_channel + i)));
    }
    const double scale = largest > 0 ? static_cast<float>(largest / levels) : 1.0f;
    for (int64_t i = 0; i < per_channel; ++i) {
      const double v = std::nearbyint(w.GetDouble(o * per_channel + i) / scale);
      q.weight.SetInt64(o * per_channel + i, static_cast<int64_t>(std::clamp(v, -levels, levels)));
    }
    q.dequant_scale.SetDouble(o, static_cast<double>(q.input_scale) * scale);
  }
  return q;
}

namespace {

// cast(clamp(round(x / input_scale), lo, hi), u8 or i8): the layer's input in int8.
TensorRef QuantizeInput(const TensorRef& x_in, const Int8State& state, const char* name,
                        const Loc& loc) {
  const TensorRef x = kiln::detail::CastTo(x_in, ir::DType::kF32, name, loc);
  TensorRef y = kiln::detail::BinaryScalar(ir::Op::kDiv, x, state.input_scale, false, name, loc);
  y = kiln::detail::Unary(ir::Op::kRound, y, loc);
  y = kiln::detail::Clamp(y, state.unsigned_input ? 0.0 : -128.0,
                          state.unsigned_input ? 255.0 : 127.0, name, loc);
  return kiln::detail::CastTo(y, state.unsigned_input ? ir::DType::kU8 : ir::DType::kI8, name, loc);
}

// cast(acc, f32) * scale + bias, the vectors laid along `axis` of acc (a Linear's last axis, a
// convolution's channel axis): per output channel.
TensorRef Dequantize(const TensorRef& acc, const TensorRef& scale, const TensorRef& bias,
                     size_t axis, const char* name, const Loc& loc) {
  const ir::TensorType& type = TypeOf(acc);
  ir::Shape along(type.shape.size(), 1);
  along[axis] = type.shape[axis];
  const auto vector = [&](const TensorRef& v) {
    return kiln::detail::ReshapeTo(kiln::detail::CastTo(v, ir::DType::kF32, name, loc), along, name,
                                   loc);
  };
  TensorRef y = kiln::detail::CastTo(acc, ir::DType::kF32, name, loc);
  y = kiln::detail::Binary(ir::Op::kMul, y, vector(scale), name, loc);
  if (bias != nullptr) y = kiln::detail::Binary(ir::Op::kAdd, y, vector(bias), name, loc);
  return y;
}

void CheckFloatInput(const TensorRef& x, const char* name, const Loc& loc) {
  if (!ir::IsFloat(TypeOf(x).dtype)) {
    ThrowOpError(name, "needs a float input (it quantizes it)", {TypeOf(x)}, loc);
  }
}

}  // namespace

TensorRef Int8LinearForward(const TensorRef& x, const TensorRef& float_weight,
                            const TensorRef& bias, const Int8State& state, const Loc& loc) {
  if (state.observer != nullptr) {
    state.observer->Record(kiln::detail::Data(x, loc));
    return nn::detail::LinearForward(x, float_weight, bias, loc);
  }
  constexpr const char* kName = "linear int8";
  CheckFloatInput(x, kName, loc);
  const ir::TensorType& tx = TypeOf(x);
  const ir::TensorType& tw = TypeOf(state.weight);
  const int64_t d_input = tw.shape[1];
  if (tx.rank() < 1 || tx.shape.back() != d_input) {
    ThrowOpError(kName,
                 absl::StrCat("the input's last dim must be ", d_input, " (the layer's d_input)"),
                 {tx, tw}, loc);
  }
  // One [rows, in] x [in, out] product over every leading dim (as LinearForward), dequantised
  // before the reshape back, so that the scale and bias stay in the GEMM's epilogue.
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < tx.shape.size(); ++i) rows *= tx.shape[i];
  TensorRef xq = QuantizeInput(x, state, kName, loc);
  if (tx.rank() != 2) xq = kiln::detail::ReshapeTo(xq, {rows, d_input}, kName, loc);
  ir::Attrs attrs;
  attrs.accumulate = ir::DType::kI32;
  const TensorRef acc = kiln::detail::Prim(
      ir::Op::kMatMul, {xq, kiln::detail::SwapDims(state.weight, 0, 1, kName, loc)}, kName, loc,
      std::move(attrs));
  TensorRef y = Dequantize(acc, state.dequant_scale, bias, 1, kName, loc);
  if (tx.rank() != 2) {
    ir::Shape out(tx.shape.begin(), tx.shape.end() - 1);
    out.push_back(tw.shape[0]);
    y = kiln::detail::ReshapeTo(y, out, kName, loc);
  }
  return y;
}

TensorRef Int8ConvForward(const TensorRef& x, const TensorRef& float_weight, const TensorRef& bias,
                          const nn::detail::ConvArgs& args, const Int8State& state,
                          const char* name, const Loc& loc) {
  if (state.observer != nullptr) {
    state.observer->Record(kiln::detail::Data(x, loc));
    return nn::detail::ConvForward(x, float_weight, bias, args, name, loc);
  }
  CheckFloatInput(x, name, loc);
  ir::Attrs attrs = nn::detail::ConvAttrs(TypeOf(x), TypeOf(float_weight), args, name, loc);
  attrs.accumulate = ir::DType::kI32;
  const TensorRef acc =
      kiln::detail::Prim(ir::Op::kConv, {QuantizeInput(x, state, name, loc), state.weight}, name,
                         loc, std::move(attrs));
  return Dequantize(acc, state.dequant_scale, bias, 1, name, loc);
}

}  // namespace kiln::quant::detail
