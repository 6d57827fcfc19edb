#include "frontend/nn/loss.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "frontend/amp/autocast.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn::detail {

namespace kd = kiln::detail;

namespace {

void CheckFloat(const TensorRef& x, const char* loss, const char* what, const Loc& loc) {
  const ir::TensorType& t = kd::TypeOf(x);
  if (!ir::IsFloat(t.dtype)) {
    kd::ThrowOpError(loss, absl::StrCat("the ", what, " must be floating-point"), {t}, loc);
  }
}

/// input and target of one type (shape and dtype): torch would broadcast with a warning, which
/// almost always hides a bug (e.g. [N] against [N, 1]).
void CheckSameType(const TensorRef& input, const TensorRef& target, const char* loss,
                   const Loc& loc) {
  const ir::TensorType& ti = kd::TypeOf(input);
  const ir::TensorType& tt = kd::TypeOf(target);
  CheckFloat(input, loss, "input", loc);
  if (ti.shape != tt.shape) {
    kd::ThrowOpError(loss,
                     absl::StrCat("input ", ir::ShapeToString(ti.shape), " and target ",
                                  ir::ShapeToString(tt.shape), " must have the same shape"),
                     {ti, tt}, loc);
  }
  if (ti.dtype != tt.dtype) {
    kd::ThrowOpError(loss, "input and target must have the same dtype", {ti, tt}, loc);
  }
}

/// The shared checks of cross-entropy and NLL: scores [N, C], integer targets [N], and the
/// target values when they are known without running anything.
void CheckClassification(const TensorRef& scores, const TensorRef& targets, const char* loss,
                         const Loc& loc) {
  const ir::TensorType& ts = kd::TypeOf(scores);
  const ir::TensorType& tt = kd::TypeOf(targets);
  CheckFloat(scores, loss, "input", loc);
  if (ts.rank() != 2 || tt.rank() != 1 || !ir::IsInteger(tt.dtype)) {
    kd::ThrowOpError(loss, "needs input [N, C] and integer class indices [N]", {ts, tt}, loc);
  }
  if (ts.shape[0] != tt.shape[0]) {
    kd::ThrowOpError(loss,
                     absl::StrCat("input has N = ", ts.shape[0], " rows but targets has ",
                                  tt.shape[0], " entries"),
                     {ts, tt}, loc);
  }
  if (kd::DeviceOf(scores) != kd::DeviceOf(targets)) {
    kd::ThrowOpError(
        loss,
        absl::StrCat("input and targets on different devices (", kd::DeviceOf(scores).ToString(),
                     " vs ", kd::DeviceOf(targets).ToString(), ")"),
        {ts, tt}, loc);
  }
  // A pending target cannot be checked without running it, nor one in device memory without
  // reading it back; host ones (a loaded batch) can.
  if (targets->data != nullptr) {
    const int64_t classes = ts.shape[1];
    for (int64_t i = 0; i < targets->data->num_elements(); ++i) {
      const int64_t c = targets->data->GetInt64(i);
      if (c < 0 || c >= classes) {
        kd::ThrowOpError(loss,
                         absl::StrCat("target ", c, " at index ", i,
                                      " is not a class index in [0, ", classes, ")"),
                         {ts, tt}, loc);
      }
    }
  }
}

/// -scores[i, targets[i]] as [N].
TensorRef PickNegated(const TensorRef& scores, const TensorRef& targets, const char* loss,
                      const Loc& loc) {
  const int64_t n = kd::TypeOf(scores).shape[0];
  TensorRef index = kd::CastTo(kd::Unsqueeze(targets, 1, loc), ir::DType::kI64, loss, loc);
  TensorRef picked = kd::Gather(scores, 1, index, loc);
  return kd::Unary(ir::Op::kNeg, kd::ReshapeTo(picked, {n}, loss, loc), loc);
}

}  // namespace

void CheckLabelSmoothing(double label_smoothing, const Loc& loc) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    kd::ThrowOpError("cross_entropy",
                     absl::StrCat("label_smoothing ", label_smoothing, " must be in [0, 1]"), {},
                     loc);
  }
}

void CheckHuberDelta(double delta, const Loc& loc) {
  if (!(delta > 0.0) || std::isinf(delta)) {
    kd::ThrowOpError("huber_loss", absl::StrCat("delta ", delta, " must be positive and finite"),
                     {}, loc);
  }
}

TensorRef CrossEntropy(const TensorRef& logits_in, const TensorRef& targets, double label_smoothing,
                       const Loc& loc) {
  const TensorRef logits = kd::AutocastToF32(logits_in, "cross_entropy", loc);
  CheckClassification(logits, targets, "cross_entropy", loc);
  CheckLabelSmoothing(label_smoothing, loc);
  TensorRef log_probs = kd::LogSoftmax(logits, 1, loc);
  TensorRef nll = PickNegated(log_probs, targets, "cross_entropy", loc);
  if (label_smoothing == 0.0) return nll;
  // torch: (1 - s) * nll + s * (sum_c -log p_c) / C.
  TensorRef uniform =
      kd::Unary(ir::Op::kNeg,
                kd::Reduce(kd::Reduction::kMean, log_probs, {1}, false, false, false, loc), loc);
  return kd::Binary(
      ir::Op::kAdd,
      kd::BinaryScalar(ir::Op::kMul, nll, 1.0 - label_smoothing, false, "cross_entropy", loc),
      kd::BinaryScalar(ir::Op::kMul, uniform, label_smoothing, false, "cross_entropy", loc),
      "cross_entropy", loc);
}

TensorRef Nll(const TensorRef& log_probs_in, const TensorRef& targets, const Loc& loc) {
  const TensorRef log_probs = kd::AutocastToF32(log_probs_in, "nll_loss", loc);
  CheckClassification(log_probs, targets, "nll_loss", loc);
  return PickNegated(log_probs, targets, "nll_loss", loc);
}

TensorRef SquaredError(const TensorRef& input_in, const TensorRef& target_in, const Loc& loc) {
  const TensorRef input = kd::AutocastToF32(input_in, "mse_loss", loc);
  const TensorRef target = kd::AutocastToF32(target_in, "mse_loss", loc);
  CheckSameType(input, target, "mse_loss", loc);
  return kd::Square(kd::Binary(ir::Op::kSub, input, target, "mse_loss", loc), loc);
}

TensorRef AbsoluteError(const TensorRef& input_in, const TensorRef& target_in, const Loc& loc) {
  const TensorRef input = kd::AutocastToF32(input_in, "l1_loss", loc);
  const TensorRef target = kd::AutocastToF32(target_in, "l1_loss", loc);
  CheckSameType(input, target, "l1_loss", loc);
  return kd::Unary(ir::Op::kAbs, kd::Binary(ir::Op::kSub, input, target, "l1_loss", loc), loc);
}

TensorRef Huber(const TensorRef& input_in, const TensorRef& target_in, double delta,
                const Loc& loc) {
  const TensorRef input = kd::AutocastToF32(input_in, "huber_loss", loc);
  const TensorRef target = kd::AutocastToF32(target_in, "huber_loss", loc);
  CheckSameType(input, target, "huber_loss", loc);
  CheckHuberDelta(delta, loc);
  const char* name = "huber_loss";
  TensorRef diff = kd::Unary(ir::Op::kAbs, kd::Binary(ir::Op::kSub, input, target, name, loc), loc);
  TensorRef quadratic =
      kd::BinaryScalar(ir::Op::kMul, kd::Square(diff, loc), 0.5, false, name, loc);
  TensorRef linear = kd::BinaryScalar(
      ir::Op::kMul, kd::BinaryScalar(ir::Op::kSub, diff, 0.5 * delta, false, name, loc), delta,
      false, name, loc);
  TensorRef small = kd::BinaryScalar(ir::Op::kLt, diff, delta, false, name, loc);
  return kd::Where(small, quadratic, linear, name, loc);
}

TensorRef BceWithLogits(const TensorRef& logits_in, const TensorRef& targets_in, const Loc& loc) {
  const TensorRef logits = kd::AutocastToF32(logits_in, "bce_with_logits", loc);
  const TensorRef targets = kd::AutocastToF32(targets_in, "bce_with_logits", loc);
  const char* name = "bce_with_logits";
  CheckSameType(logits, targets, name, loc);
  TensorRef positive = kd::Clamp(logits, 0.0, std::nullopt, name, loc);
  TensorRef xt = kd::Binary(ir::Op::kMul, logits, targets, name, loc);
  // log(1 + exp(-|x|)): the exponent is never positive, so nothing overflows.
  TensorRef softplus_tail = kd::Unary(
      ir::Op::kLog,
      kd::BinaryScalar(
          ir::Op::kAdd,
          kd::Unary(ir::Op::kExp,
                    kd::Unary(ir::Op::kNeg, kd::Unary(ir::Op::kAbs, logits, loc), loc), loc),
          1.0, false, name, loc),
      loc);
  return kd::Binary(ir::Op::kAdd, kd::Binary(ir::Op::kSub, positive, xt, name, loc), softplus_tail,
                    name, loc);
}

TensorRef Reduce(const TensorRef& terms, Reduction reduction, const Loc& loc) {
  return kd::Reduce(reduction == Reduction::kMean ? kd::Reduction::kMean : kd::Reduction::kSum,
                    terms, {}, true, false, false, loc);
}

}  // namespace kiln::nn::detail
