#include "frontend/optim/optimizer.h"

#include <cmath>
#include <cstring>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::optim {

namespace kd = kiln::detail;
using kd::TensorRef;

namespace {

// Short names for the update formulas; `name` is the optimizer (for messages).
TensorRef Add(const TensorRef& a, const TensorRef& b, const char* name, const kd::Loc& loc) {
  return kd::Binary(ir::Op::kAdd, a, b, name, loc);
}
TensorRef Sub(const TensorRef& a, const TensorRef& b, const char* name, const kd::Loc& loc) {
  return kd::Binary(ir::Op::kSub, a, b, name, loc);
}
TensorRef Mul(const TensorRef& a, const TensorRef& b, const char* name, const kd::Loc& loc) {
  return kd::Binary(ir::Op::kMul, a, b, name, loc);
}
TensorRef Div(const TensorRef& a, const TensorRef& b, const char* name, const kd::Loc& loc) {
  return kd::Binary(ir::Op::kDiv, a, b, name, loc);
}
/// x * s for a constant of the run (a hyperparameter): part of the graph's structure.
TensorRef Scale(const TensorRef& x, double s, const char* name, const kd::Loc& loc) {
  return kd::BinaryScalar(ir::Op::kMul, x, s, false, name, loc);
}
TensorRef AddScalar(const TensorRef& x, double s, const char* name, const kd::Loc& loc) {
  return kd::BinaryScalar(ir::Op::kAdd, x, s, false, name, loc);
}
TensorRef Sqrt(const TensorRef& x, const kd::Loc& loc) { return kd::Unary(ir::Op::kSqrt, x, loc); }

// A realized f64 rank-0 tensor holding `value`.
TensorRef F64Scalar(double value, const Device& device) {
  ir::TensorData data(ir::DType::kF64, {});
  data.SetDouble(0, value);
  return kd::FromTensorData(std::move(data), device);
}

[[noreturn]] void ThrowConfig(const char* name, const std::string& message, const kd::Loc& loc) {
  kd::ThrowOpError(name, message, {}, loc);
}
void CheckNonNegative(const char* name, const char* option, double value, const kd::Loc& loc) {
  if (!(value >= 0.0) || std::isinf(value)) {
    ThrowConfig(name, absl::StrCat(option, " ", value, " must be finite and >= 0"), loc);
  }
}
void CheckUnitInterval(const char* name, const char* option, double value, const kd::Loc& loc) {
  if (!(value >= 0.0 && value < 1.0)) {
    ThrowConfig(name, absl::StrCat(option, " ", value, " must be in [0, 1)"), loc);
  }
}

}  // namespace

// ---- Optimizer ----------------------------------------------------------------------------------

Optimizer::Optimizer(const char* name, double lr, std::vector<std::string> buffers)
    : name_(name), lr_(lr), buffers_(std::move(buffers)) {}

Optimizer::~Optimizer() = default;

void Optimizer::set_lr(double lr, Loc loc) {
  CheckNonNegative(name_, "lr", lr, loc);
  lr_ = lr;
  // A new value in the same place: a jitted step binds it, and no graph changes.
  for (LearningRate& entry : lr_values_) entry.ref = F64Scalar(lr, entry.device);
}

void Optimizer::check(const std::string& param, const TensorRef& value, const TensorRef& grad,
                      const Loc& loc) const {
  const ir::TensorType& tp = kd::TypeOf(value);
  const ir::TensorType& tg = kd::TypeOf(grad);
  if (tp != tg) {
    kd::ThrowOpError(name_,
                     absl::StrCat("the gradient of parameter '", param,
                                  "' does not match its type (parameter first)"),
                     {tp, tg}, loc);
  }
  if (!ir::IsFloat(tp.dtype)) {
    kd::ThrowOpError(name_, absl::StrCat("parameter '", param, "' is not floating-point"), {tp},
                     loc);
  }
  if (kd::DeviceOf(value) != kd::DeviceOf(grad)) {
    kd::ThrowOpError(name_,
                     absl::StrCat("the gradient of parameter '", param, "' is on ",
                                  kd::DeviceOf(grad).ToString(), ", the parameter on ",
                                  kd::DeviceOf(value).ToString()),
                     {tp, tg}, loc);
  }
  // A bf16/f16 parameter's state is f32, as its master copy is (update()).
  ir::TensorType state_type = tp;
  if (tp.dtype == ir::DType::kBF16 || tp.dtype == ir::DType::kF16)
    state_type.dtype = ir::DType::kF32;
  std::vector<std::string> buffers = buffers_;
  buffers.push_back(kMasterBuffer);
  for (const std::string& buffer : buffers) {
    const std::string key = absl::StrCat(param, ".", buffer);
    auto loaded = loaded_.find(key);
    if (loaded == loaded_.end()) continue;
    const ir::TensorType have{loaded->second.dtype(), loaded->second.shape()};
    if (have != state_type) {
      kd::ThrowOpError(name_,
                       absl::StrCat("loaded state '", key, "' does not match parameter '", param,
                                    "' (state first)"),
                       {have, state_type}, loc);
    }
  }
}

TensorRef Optimizer::update(const std::string& param, const TensorRef& value, const TensorRef& grad,
                            const Loc& loc) {
  check(param, value, grad, loc);
  const ir::DType dtype = kd::TypeOf(value).dtype;
  if (dtype == ir::DType::kBF16 || dtype == ir::DType::kF16) {
    // An update much smaller than the weight vanishes when rounded to 8 or 11 significant bits;
    // the rule runs on an f32 copy, and the parameter is that copy rounded.
    TensorRef master = find(param, kMasterBuffer, value);
    if (master == nullptr) {
      const ir::TensorData& half = kd::Data(value, loc);
      ir::TensorData wide(ir::DType::kF32, half.shape());
      for (int64_t i = 0; i < half.num_elements(); ++i) wide.SetDouble(i, half.GetDouble(i));
      master = kd::FromTensorData(std::move(wide), kd::DeviceOf(value));
    }
    const TensorRef step = advance_step(param, master, loc);
    TensorRef updated = compute(param, master, kd::Cast(grad, ir::DType::kF32, loc), step, loc);
    set(param, kMasterBuffer, updated);
    return kd::Cast(updated, dtype, loc);
  }
  return compute(param, value, grad, advance_step(param, value, loc), loc);
}

TensorRef Optimizer::lr_f64(const TensorRef& like) {
  const Device device = kd::DeviceOf(like);
  for (const LearningRate& entry : lr_values_) {
    if (entry.device == device) return entry.ref;
  }
  lr_values_.push_back({device, absl::StrCat("lr@", device.ToString()), F64Scalar(lr_, device)});
  return lr_values_.back().ref;
}

TensorRef Optimizer::InDType(const TensorRef& x, const TensorRef& like, const Loc& loc) {
  const ir::DType dtype = kd::TypeOf(like).dtype;
  return dtype == ir::DType::kF64 ? x : kd::Cast(x, dtype, loc);
}

void Optimizer::begin_step(const Loc&) {
  advanced_.clear();
  placed_steps_.clear();
}

TensorRef Optimizer::advance_step(const std::string& param, const TensorRef& like, const Loc& loc) {
  const std::string key = absl::StrCat(param, ".", kStepBuffer);
  TensorRef count;
  if (auto it = state_.find(key); it != state_.end()) {
    count = it->second;
  } else {
    // A loaded count, or 0: realized (as get_or_fill's buffers are), so the first step's graph
    // has the structure of the later ones. One tensor per (count, device).
    int64_t value = 0;
    if (auto loaded = loaded_steps_.find(param); loaded != loaded_steps_.end()) {
      value = loaded->second;
      loaded_steps_.erase(loaded);
    }
    const Device device = kd::DeviceOf(like);
    for (const auto& [placed_value, placed_device, ref] : placed_steps_) {
      if (placed_value == value && placed_device == device) count = ref;
    }
    if (count == nullptr) {
      ir::TensorData data(ir::DType::kI64, {});
      data.SetInt64(0, value);
      count = kd::FromTensorData(std::move(data), device);
      placed_steps_.emplace_back(value, device, count);
    }
  }
  TensorRef next;
  for (const auto& [from, to] : advanced_) {
    if (from == count) next = to;
  }
  if (next == nullptr) {
    next = AddScalar(count, 1.0, name_, loc);
    advanced_.emplace_back(count, next);
  }
  state_[key] = next;
  return next;
}

TensorRef Optimizer::find(const std::string& param, const char* buffer, const TensorRef& like) {
  const std::string key = absl::StrCat(param, ".", buffer);
  if (auto it = state_.find(key); it != state_.end()) return it->second;
  auto loaded = loaded_.find(key);
  if (loaded == loaded_.end()) return nullptr;
  // check() compared its type with the parameter's before compute() ran.
  TensorRef ref = kd::FromTensorData(std::move(loaded->second), kd::DeviceOf(like));
  loaded_.erase(loaded);
  state_[key] = ref;
  return ref;
}

TensorRef Optimizer::get_or_fill(const std::string& param, const char* buffer,
                                 const TensorRef& like, double init) {
  if (TensorRef found = find(param, buffer, like)) return found;
  // Realized, not a pending fill: the first step's graph then has the same structure as the
  // following ones (the buffer is a parameter either way), so step 2 reuses step 1's compilation.
  const ir::TensorType& type = kd::TypeOf(like);
  ir::TensorData data(type.dtype, type.shape);
  if (init != 0.0) {
    for (int64_t i = 0; i < data.num_elements(); ++i) data.SetDouble(i, init);
  }
  TensorRef ref = kd::FromTensorData(std::move(data), kd::DeviceOf(like));
  state_[absl::StrCat(param, ".", buffer)] = ref;
  return ref;
}

void Optimizer::set(const std::string& param, const char* buffer, TensorRef value) {
  state_[absl::StrCat(param, ".", buffer)] = std::move(value);
}

NamedState Optimizer::state(Loc loc) const {
  const std::vector<TensorRef> refs = state_tensors();
  kd::Realize(refs, loc);
  NamedState out;
  const std::string step_suffix = absl::StrCat(".", kStepBuffer);
  for (const auto& [key, ref] : state_) {
    // Step counts are values in a checkpoint (torch's "step"), the rest tensors.
    if (key.ends_with(step_suffix)) {
      out.values[key] = absl::StrCat(kd::Data(ref, loc).GetInt64(0));
    } else {
      out.tensors.emplace(key, kd::Data(ref, loc));
    }
  }
  for (const auto& [key, data] : loaded_) out.tensors.emplace(key, data);
  for (const auto& [param, step] : loaded_steps_)
    out.values[param + step_suffix] = absl::StrCat(step);
  out.values["optimizer"] = name_;
  out.values["lr"] = absl::StrFormat("%.17g", lr_);
  return out;
}

void Optimizer::load_state(const NamedState& state, Loc loc) {
  const std::string prefix = absl::StrCat("load_state: ");
  double lr = lr_;
  std::map<std::string, int64_t> steps;
  for (const auto& [key, value] : state.values) {
    if (key == "optimizer") {
      if (value != name_) {
        ThrowConfig(name_,
                    absl::StrCat(prefix, "the state is of optimizer '", value, "', not ", name_),
                    loc);
      }
    } else if (key == "lr") {
      if (!absl::SimpleAtod(value, &lr) || !(lr >= 0.0) || std::isinf(lr)) {
        ThrowConfig(name_, absl::StrCat(prefix, "lr '", value, "' is not a finite number >= 0"),
                    loc);
      }
    } else if (key.size() > 5 && key.ends_with(".step")) {
      int64_t step = 0;
      if (!absl::SimpleAtoi(value, &step) || step < 0) {
        ThrowConfig(name_,
                    absl::StrCat(prefix, "'", key, "' = '", value, "' is not a step count >= 0"),
                    loc);
      }
      steps[key.substr(0, key.size() - 5)] = step;
    } else {
      ThrowConfig(name_,
                  absl::StrCat(prefix, "unknown value '", key,
                               "' (expected optimizer, lr, <parameter>.step)"),
                  loc);
    }
  }
  std::map<std::string, ir::TensorData> loaded;
  for (const auto& [key, data] : state.tensors) {
    const size_t dot = key.rfind('.');
    const std::string_view suffix =
        dot == std::string::npos ? std::string_view() : std::string_view(key).substr(dot + 1);
    bool known = dot != std::string::npos && dot > 0;
    if (known) {
      known = suffix == kMasterBuffer;
      for (const std::string& b : buffers_) known = known || b == suffix;
    }
    if (!known) {
      std::vector<std::string> expected;
      for (const std::string& b : buffers_) expected.push_back("<parameter>." + b);
      ThrowConfig(
          name_,
          absl::StrCat(prefix, "unknown tensor '", key, "'; ", name_, " (as configured) keeps ",
                       expected.empty() ? "no tensors" : absl::StrJoin(expected, ", ")),
          loc);
    }
    loaded.emplace(key, data);
  }
  state_.clear();
  loaded_ = std::move(loaded);
  loaded_steps_ = std::move(steps);
  lr_ = lr;
  for (LearningRate& entry : lr_values_) entry.ref = F64Scalar(lr, entry.device);
}

std::vector<TensorRef> Optimizer::state_tensors() const {
  std::vector<TensorRef> refs;
  refs.reserve(state_.size() + lr_values_.size());
  for (const auto& [key, ref] : state_) refs.push_back(ref);
  for (const LearningRate& entry : lr_values_) refs.push_back(entry.ref);
  return refs;
}

void Optimizer::reset() {
  state_.clear();
  loaded_.clear();
  loaded_steps_.clear();
}

// ---- SGD ----------------------------------------------------------------------------------------

namespace {
std::vector<std::string> SgdBuffers(const Sgd::Options& o) {
  if (o.momentum == 0.0) return {};
  return {"momentum_buffer"};
}
}  // namespace

Sgd::Sgd(const Options& options, const Loc& loc)
    : Optimizer("sgd", options.lr, SgdBuffers(options)), options_(options) {
  CheckNonNegative("sgd", "lr", options.lr, loc);
  CheckNonNegative("sgd", "momentum", options.momentum, loc);
  CheckNonNegative("sgd", "dampening", options.dampening, loc);
  CheckNonNegative("sgd", "weight_decay", options.weight_decay, loc);
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    ThrowConfig("sgd", "Nesterov momentum requires a momentum > 0 and zero dampening", loc);
  }
}

TensorRef Sgd::compute(const std::string& param, const TensorRef& value, const TensorRef& grad,
                       const TensorRef&, const Loc& loc) {
  const char* n = "sgd";
  TensorRef d = grad;
  if (options_.weight_decay != 0.0) d = Add(d, Scale(value, options_.weight_decay, n, loc), n, loc);
  if (options_.momentum != 0.0) {
    TensorRef buf = find(param, "momentum_buffer", value);
    // torch starts the buffer at the first gradient itself (no dampening on step 1).
    buf = buf == nullptr ? d
                         : Add(Scale(buf, options_.momentum, n, loc),
                               Scale(d, 1.0 - options_.dampening, n, loc), n, loc);
    set(param, "momentum_buffer", buf);
    d = options_.nesterov ? Add(d, Scale(buf, options_.momentum, n, loc), n, loc) : buf;
  }
  return Sub(value, Mul(d, InDType(lr_f64(value), value, loc), n, loc), n, loc);
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

namespace {
std::vector<std::string> AdamBuffers(const Adam::Options& o) {
  std::vector<std::string> b = {"exp_avg", "exp_avg_sq"};
  if (o.amsgrad) b.push_back("max_exp_avg_sq");
  return b;
}
}  // namespace

Adam::Adam(const Options& options, const Loc& loc)
    : Optimizer(options.decoupled ? "adamw" : "adam", options.lr, AdamBuffers(options)),
      options_(options) {
  const char* n = name();
  CheckNonNegative(n, "lr", options.lr, loc);
  CheckUnitInterval(n, "beta1", options.beta1, loc);
  CheckUnitInterval(n, "beta2", options.beta2, loc);
  CheckNonNegative(n, "eps", options.eps, loc);
  CheckNonNegative(n, "weight_decay", options.weight_decay, loc);
}

TensorRef Adam::compute(const std::string& param, const TensorRef& value, const TensorRef& grad,
                        const TensorRef& step, const Loc& loc) {
  const char* n = name();
  const Options& o = options_;
  TensorRef p = value;
  TensorRef g = grad;
  if (o.weight_decay != 0.0) {
    if (o.decoupled) {
      // 1 - lr * wd changes with the learning rate: computed per step.
      const TensorRef decay =
          kd::BinaryScalar(ir::Op::kSub, Scale(lr_f64(value), o.weight_decay, n, loc), 1.0,
                           /*scalar_first=*/true, n, loc);
      p = Mul(p, InDType(decay, value, loc), n, loc);
    } else {
      g = Add(g, Scale(value, o.weight_decay, n, loc), n, loc);
    }
  }
  TensorRef m = Add(Scale(get_or_fill(param, "exp_avg", value, 0.0), o.beta1, n, loc),
                    Scale(g, 1.0 - o.beta1, n, loc), n, loc);
  TensorRef v = Add(Scale(get_or_fill(param, "exp_avg_sq", value, 0.0), o.beta2, n, loc),
                    Scale(kd::Square(g, loc), 1.0 - o.beta2, n, loc), n, loc);
  set(param, "exp_avg", m);
  set(param, "exp_avg_sq", v);
  TensorRef second = v;
  if (o.amsgrad) {
    second = kd::Binary(ir::Op::kMax, get_or_fill(param, "max_exp_avg_sq", value, 0.0), v, n, loc);
    set(param, "max_exp_avg_sq", second);
  }
  // The bias corrections 1 - beta^t in f64, as torch computes them on the host.
  const TensorRef t = kd::Cast(step, ir::DType::kF64, loc);
  const auto one_minus_power = [&](double beta) {
    return kd::BinaryScalar(
        ir::Op::kSub, kd::BinaryScalar(ir::Op::kPow, t, beta, /*scalar_first=*/true, n, loc), 1.0,
        /*scalar_first=*/true, n, loc);
  };
  const TensorRef bias_correction2_sqrt = Sqrt(one_minus_power(o.beta2), loc);
  const TensorRef step_size = Div(lr_f64(value), one_minus_power(o.beta1), n, loc);
  // As torch: denom = sqrt(v) / sqrt(bc2) + eps; p -= (lr / bc1) * m / denom.
  TensorRef denom = AddScalar(
      Div(Sqrt(second, loc), InDType(bias_correction2_sqrt, value, loc), n, loc), o.eps, n, loc);
  TensorRef delta = Mul(Div(m, denom, n, loc), InDType(step_size, value, loc), n, loc);
  return Sub(p, delta, n, loc);
}

// ---- RMSprop ------------------------------------------------------------------------------------

namespace {
std::vector<std::string> RmsPropBuffers(const RmsProp::Options& o) {
  std::vector<std::string> b = {"square_avg"};
  if (o.momentum > 0.0) b.push_back("momentum_buffer");
  if (o.centered) b.push_back("grad_avg");
  return b;
}
}  // namespace

RmsProp::RmsProp(const Options& options, const Loc& loc)
    : Optimizer("rmsprop", options.lr, RmsPropBuffers(options)), options_(options) {
  CheckNonNegative("rmsprop", "lr", options.lr, loc);
  CheckUnitInterval("rmsprop", "alpha", options.alpha, loc);
  CheckNonNegative("rmsprop", "eps", options.eps, loc);
  CheckNonNegative("rmsprop", "weight_decay", options.weight_decay, loc);
  CheckNonNegative("rmsprop", "momentum", options.momentum, loc);
}

TensorRef RmsProp::compute(const std::string& param, const TensorRef& value, const TensorRef& grad,
                           const TensorRef&, const Loc& loc) {
  const char* n = "rmsprop";
  const Options& o = options_;
  TensorRef g = grad;
  if (o.weight_decay != 0.0) g = Add(g, Scale(value, o.weight_decay, n, loc), n, loc);
  TensorRef square_avg = Add(Scale(get_or_fill(param, "square_avg", value, 0.0), o.alpha, n, loc),
                             Scale(kd::Square(g, loc), 1.0 - o.alpha, n, loc), n, loc);
  set(param, "square_avg", square_avg);
  TensorRef avg;
  if (o.centered) {
    TensorRef grad_avg = Add(Scale(get_or_fill(param, "grad_avg", value, 0.0), o.alpha, n, loc),
                             Scale(g, 1.0 - o.alpha, n, loc), n, loc);
    set(param, "grad_avg", grad_avg);
    avg = Sqrt(Sub(square_avg, kd::Square(grad_avg, loc), n, loc), loc);
  } else {
    avg = Sqrt(square_avg, loc);
  }
  avg = AddScalar(avg, o.eps, n, loc);
  TensorRef direction = Div(g, avg, n, loc);
  if (o.momentum > 0.0) {
    direction = Add(Scale(get_or_fill(param, "momentum_buffer", value, 0.0), o.momentum, n, loc),
                    direction, n, loc);
    set(param, "momentum_buffer", direction);
  }
  return Sub(value, Mul(direction, InDType(lr_f64(value), value, loc), n, loc), n, loc);
}

// ---- AdaGrad ------------------------------------------------------------------------------------

AdaGrad::AdaGrad(const Options& options, const Loc& loc)
    : Optimizer("adagrad", options.lr, {"sum"}), options_(options) {
  CheckNonNegative("adagrad", "lr", options.lr, loc);
  CheckNonNegative("adagrad", "lr_decay", options.lr_decay, loc);
  CheckNonNegative("adagrad", "weight_decay", options.weight_decay, loc);
  CheckNonNegative("adagrad", "initial_accumulator_value", options.initial_accumulator_value, loc);
  CheckNonNegative("adagrad", "eps", options.eps, loc);
}

TensorRef AdaGrad::compute(const std::string& param, const TensorRef& value, const TensorRef& grad,
                           const TensorRef& step, const Loc& loc) {
  const char* n = "adagrad";
  const Options& o = options_;
  TensorRef g = grad;
  if (o.weight_decay != 0.0) g = Add(g, Scale(value, o.weight_decay, n, loc), n, loc);
  TensorRef sum = Add(get_or_fill(param, "sum", value, o.initial_accumulator_value),
                      kd::Square(g, loc), n, loc);
  set(param, "sum", sum);
  // clr = lr / (1 + (t - 1) lr_decay), in f64.
  const TensorRef t = kd::Cast(step, ir::DType::kF64, loc);
  const TensorRef clr =
      Div(lr_f64(value),
          AddScalar(Scale(AddScalar(t, -1.0, n, loc), o.lr_decay, n, loc), 1.0, n, loc), n, loc);
  TensorRef denom = AddScalar(Sqrt(sum, loc), o.eps, n, loc);
  return Sub(value, Mul(Div(g, denom, n, loc), InDType(clr, value, loc), n, loc), n, loc);
}

}  // namespace kiln::optim
