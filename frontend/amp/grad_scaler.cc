#include "frontend/amp/grad_scaler.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/float_limits.h"
#include "frontend/error.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::amp {
namespace {

namespace kd = kiln::detail;

[[noreturn]] void ThrowConfig(const std::string& message, const std::source_location& loc) {
  kd::ThrowOpError("GradScaler", message, {}, loc);
}

}  // namespace

GradScaler GradScalerConfig::init(std::source_location loc) const {
  if (!(init_scale > 0.0) || std::isinf(init_scale)) {
    ThrowConfig(absl::StrCat("init_scale ", init_scale, " must be positive and finite"), loc);
  }
  if (!(growth_factor > 1.0) || std::isinf(growth_factor)) {
    ThrowConfig(absl::StrCat("growth_factor ", growth_factor, " must be finite and > 1"), loc);
  }
  if (!(backoff_factor > 0.0 && backoff_factor < 1.0)) {
    ThrowConfig(absl::StrCat("backoff_factor ", backoff_factor, " must be in (0, 1)"), loc);
  }
  if (growth_interval < 1) {
    ThrowConfig(absl::StrCat("growth_interval ", growth_interval, " must be >= 1"), loc);
  }
  return GradScaler(*this);
}

kd::TensorRef GradScaler::factor(bool inverse, ir::DType dtype, const kd::TensorRef& like) {
  const double value = inverse ? 1.0 / scale_ : scale_;
  const Device device = kd::DeviceOf(like);
  for (const Factor& f : factors_) {
    if (f.inverse == inverse && f.value == value && f.dtype == dtype && f.device == device) {
      return f.ref;
    }
  }
  ir::TensorData data(dtype, {});
  data.SetDouble(0, value);
  kd::TensorRef ref = kd::FromTensorData(std::move(data), device);
  factors_.push_back(Factor{inverse, value, dtype, device, ref});
  return ref;
}

kd::TensorRef GradScaler::scaled(const kd::TensorRef& loss, const std::source_location& loc) {
  if (!ir::IsFloat(kd::TypeOf(loss).dtype)) {
    kd::ThrowOpError("GradScaler.scale", "the loss must be floating-point", {kd::TypeOf(loss)},
                     loc);
  }
  // An f32 factor: a bf16/f16 loss is promoted (65536 is no f16 number), as in torch.
  return kd::Binary(ir::Op::kMul, loss, factor(/*inverse=*/false, ir::DType::kF32, loss),
                    "GradScaler.scale", loc);
}

bool GradScaler::unscale(const std::vector<std::string>& names,
                         std::vector<kd::TensorRef>& gradients,
                         const std::vector<kd::TensorRef>& also, const std::source_location& loc) {
  NoGradGuard no_grad;
  const char* op = "GradScaler.step";
  kd::TensorRef all_finite;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const ir::TensorType& type = kd::TypeOf(gradients[i]);
    if (type.dtype == ir::DType::kF16) {
      kd::ThrowOpError(op,
                       absl::StrCat("parameter '", names[i],
                                    "' has an f16 gradient: unscaling it in f16 loses what the "
                                    "scale kept. Keep the parameters f32 and autocast the "
                                    "forward pass (amp::AutocastGuard, or "
                                    "LearnerConfig::with_precision(amp::Precision::kF16))"),
                       {type}, loc);
    }
    gradients[i] = kd::Binary(ir::Op::kMul, gradients[i],
                              factor(/*inverse=*/true, type.dtype, gradients[i]), op, loc);
    const kd::TensorRef finite =
        kd::Reduce(kd::Reduction::kAll,
                   kd::BinaryScalar(ir::Op::kLe, kd::Unary(ir::Op::kAbs, gradients[i], loc),
                                    base::LargestFinite(type.dtype), false, op, loc),
                   {}, true, false, false, loc);
    all_finite =
        all_finite == nullptr ? finite : kd::Binary(ir::Op::kAnd, all_finite, finite, op, loc);
  }
  if (all_finite == nullptr) return true;  // no gradients: nothing can overflow
  std::vector<kd::TensorRef> refs = gradients;
  refs.insert(refs.end(), also.begin(), also.end());
  refs.push_back(all_finite);
  kd::Realize(refs, loc);
  return kd::Data(all_finite, loc).GetDouble(0) != 0.0;
}

void GradScaler::update(bool finite) {
  if (!finite) {
    scale_ *= config_.backoff_factor;
    factors_.clear();
    tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++tracker_ == config_.growth_interval) {
    scale_ *= config_.growth_factor;
    factors_.clear();
    tracker_ = 0;
  }
}

std::map<std::string, std::string> GradScaler::state() const {
  return {{"scale", absl::StrFormat("%.17g", scale_)},
          {"growth_tracker", absl::StrCat(tracker_)},
          {"skipped_steps", absl::StrCat(skipped_)}};
}

void GradScaler::load_state(const std::map<std::string, std::string>& state,
                            std::source_location loc) {
  double scale = scale_;
  int64_t tracker = tracker_, skipped = skipped_;
  for (const auto& [key, value] : state) {
    bool ok = false;
    if (key == "scale") {
      ok = absl::SimpleAtod(value, &scale) && scale > 0.0 && !std::isinf(scale);
    } else if (key == "growth_tracker") {
      ok = absl::SimpleAtoi(value, &tracker) && tracker >= 0;
    } else if (key == "skipped_steps") {
      ok = absl::SimpleAtoi(value, &skipped) && skipped >= 0;
    } else {
      ThrowConfig(absl::StrCat("load_state: unknown key '", key,
                               "' (expected scale, growth_tracker, skipped_steps)"),
                  loc);
    }
    if (!ok) ThrowConfig(absl::StrCat("load_state: '", key, "' = '", value, "' is malformed"), loc);
  }
  scale_ = scale;
  tracker_ = tracker;
  skipped_ = skipped;
  factors_.clear();
}

}  // namespace kiln::amp
