// Loss functions, as in torch.nn.functional: compositions of ir primitives (so autodiff needs no
// rules for them), numerically stable where it matters (cross-entropy goes through log_softmax,
// BCE-with-logits never exponentiates a positive number).
//
//   auto loss = kiln::nn::cross_entropy(logits, labels);            // logits [N, C], labels [N]
//   auto smooth = kiln::nn::cross_entropy(logits, labels, kiln::nn::Reduction::kMean, 0.1);
//   auto per_sample = kiln::nn::mse_loss_unreduced(pred, target);   // torch's reduction="none"
//
// `Reduction::kMean` / `kSum` give a rank-0 tensor; the `*_unreduced` variants are torch's
// reduction="none" (their rank is the input's, so they are separate functions). Shape
// mismatches throw kiln::Error naming the loss, the operand types and the caller's line.
#pragma once

#include <source_location>

#include "frontend/tensor.h"

namespace kiln::nn {

/// How a loss combines its per-element terms.
enum class Reduction { kMean, kSum };

namespace detail {
using kiln::detail::Loc;
using kiln::detail::TensorRef;
/// Per-sample cross-entropy [N] of logits [N, C] against class indices [N] in [0, C):
/// (1 - s) * nll + s * mean_c(-log_softmax), s = label_smoothing in [0, 1] (torch's definition).
TensorRef CrossEntropy(const TensorRef& logits, const TensorRef& targets, double label_smoothing,
                       const Loc& loc);
/// Per-sample -log_probs[i, targets[i]] of log-probabilities [N, C].
TensorRef Nll(const TensorRef& log_probs, const TensorRef& targets, const Loc& loc);
/// Elementwise terms; input and target must have one type.
TensorRef SquaredError(const TensorRef& input, const TensorRef& target, const Loc& loc);
TensorRef AbsoluteError(const TensorRef& input, const TensorRef& target, const Loc& loc);
/// 0.5 d^2 where |d| < delta, delta (|d| - delta / 2) elsewhere; delta > 0.
TensorRef Huber(const TensorRef& input, const TensorRef& target, double delta, const Loc& loc);
/// max(x, 0) - x t + log(1 + exp(-|x|)) for logits x and targets t in [0, 1].
TensorRef BceWithLogits(const TensorRef& logits, const TensorRef& targets, const Loc& loc);
/// Throw kiln::Error for label_smoothing outside [0, 1] / a delta that is not positive and finite.
void CheckLabelSmoothing(double label_smoothing, const Loc& loc);
void CheckHuberDelta(double delta, const Loc& loc);
/// Mean or sum over every element, as a rank-0 tensor.
TensorRef Reduce(const TensorRef& terms, Reduction reduction, const Loc& loc);
}  // namespace detail

// ---- Classification ---------------------------------------------------------------------------

/// Cross-entropy of unnormalized `logits` [N, C] against class indices `targets` [N] (each in
/// [0, C); checked when the targets are already realized, as data loaded from a batch is).
/// `label_smoothing` in [0, 1] mixes in the uniform distribution like torch's.
template <class B>
Tensor<B, 0> cross_entropy(const Tensor<B, 2>& logits, const Tensor<B, 1, Int>& targets,
                           Reduction reduction = Reduction::kMean, double label_smoothing = 0.0,
                           std::source_location loc = std::source_location::current()) {
  return Tensor<B, 0>(detail::Reduce(
      detail::CrossEntropy(logits.ref(), targets.ref(), label_smoothing, loc), reduction, loc));
}
/// Per-sample cross-entropy [N] (torch's reduction="none").
template <class B>
Tensor<B, 1> cross_entropy_unreduced(const Tensor<B, 2>& logits, const Tensor<B, 1, Int>& targets,
                                     double label_smoothing = 0.0,
                                     std::source_location loc = std::source_location::current()) {
  return Tensor<B, 1>(detail::CrossEntropy(logits.ref(), targets.ref(), label_smoothing, loc));
}
/// Negative log-likelihood of `log_probs` [N, C] (e.g. log_softmax output) at `targets` [N].
template <class B>
Tensor<B, 0> nll_loss(const Tensor<B, 2>& log_probs, const Tensor<B, 1, Int>& targets,
                      Reduction reduction = Reduction::kMean,
                      std::source_location loc = std::source_location::current()) {
  return Tensor<B, 0>(
      detail::Reduce(detail::Nll(log_probs.ref(), targets.ref(), loc), reduction, loc));
}
template <class B>
Tensor<B, 1> nll_loss_unreduced(const Tensor<B, 2>& log_probs, const Tensor<B, 1, Int>& targets,
                                std::source_location loc = std::source_location::current()) {
  return Tensor<B, 1>(detail::Nll(log_probs.ref(), targets.ref(), loc));
}
/// Binary cross-entropy of `logits` against probabilities `targets` (same shape), computed
/// stably from the logits (torch's binary_cross_entropy_with_logits).
template <class B, int R>
Tensor<B, 0> bce_with_logits(const Tensor<B, R>& logits, const Tensor<B, R>& targets,
                             Reduction reduction = Reduction::kMean,
                             std::source_location loc = std::source_location::current()) {
  return Tensor<B, 0>(
      detail::Reduce(detail::BceWithLogits(logits.ref(), targets.ref(), loc), reduction, loc));
}
template <class B, int R>
Tensor<B, R> bce_with_logits_unreduced(const Tensor<B, R>& logits, const Tensor<B, R>& targets,
                                       std::source_location loc = std::source_location::current()) {
  return Tensor<B, R>(detail::BceWithLogits(logits.ref(), targets.ref(), loc));
}

// ---- Regression (input and target of one shape) -----------------------------------------------

/// Mean (or sum) of (input - target)^2.
template <class B, int R>
Tensor<B, 0> mse_loss(const Tensor<B, R>& input, const Tensor<B, R>& target,
                      Reduction reduction = Reduction::kMean,
                      std::source_location loc = std::source_location::current()) {
  return Tensor<B, 0>(
      detail::Reduce(detail::SquaredError(input.ref(), target.ref(), loc), reduction, loc));
}
template <class B, int R>
Tensor<B, R> mse_loss_unreduced(const Tensor<B, R>& input, const Tensor<B, R>& target,
                                std::source_location loc = std::source_location::current()) {
  return Tensor<B, R>(detail::SquaredError(input.ref(), target.ref(), loc));
}
/// Mean (or sum) of |input - target|.
template <class B, int R>
Tensor<B, 0> l1_loss(const Tensor<B, R>& input, const Tensor<B, R>& target,
                     Reduction reduction = Reduction::kMean,
                     std::source_location loc = std::source_location::current()) {
  return Tensor<B, 0>(
      detail::Reduce(detail::AbsoluteError(input.ref(), target.ref(), loc), reduction, loc));
}
template <class B, int R>
Tensor<B, R> l1_loss_unreduced(const Tensor<B, R>& input, const Tensor<B, R>& target,
                               std::source_location loc = std::source_location::current()) {
  return Tensor<B, R>(detail::AbsoluteError(input.ref(), target.ref(), loc));
}
/// Huber loss (torch.nn.functional.huber_loss): quadratic below `delta`, linear above.
template <class B, int R>
Tensor<B, 0> huber_loss(const Tensor<B, R>& input, const Tensor<B, R>& target, double delta = 1.0,
                        Reduction reduction = Reduction::kMean,
                        std::source_location loc = std::source_location::current()) {
  return Tensor<B, 0>(
      detail::Reduce(detail::Huber(input.ref(), target.ref(), delta, loc), reduction, loc));
}
template <class B, int R>
Tensor<B, R> huber_loss_unreduced(const Tensor<B, R>& input, const Tensor<B, R>& target,
                                  double delta = 1.0,
                                  std::source_location loc = std::source_location::current()) {
  return Tensor<B, R>(detail::Huber(input.ref(), target.ref(), delta, loc));
}

// ---- Loss modules (burn-style configs around the functions above) -------------------------------

/// `CrossEntropyLossConfig().with_label_smoothing(0.1).init().forward(logits, targets)`.
struct CrossEntropyLoss {
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;

  template <class B>
  Tensor<B, 0> forward(const Tensor<B, 2>& logits, const Tensor<B, 1, Int>& targets,
                       std::source_location loc = std::source_location::current()) const {
    return cross_entropy(logits, targets, reduction, label_smoothing, loc);
  }
};

struct CrossEntropyLossConfig {
  CrossEntropyLossConfig with_label_smoothing(double v) const {
    CrossEntropyLossConfig c = *this;
    c.label_smoothing = v;
    return c;
  }
  CrossEntropyLossConfig with_reduction(Reduction v) const {
    CrossEntropyLossConfig c = *this;
    c.reduction = v;
    return c;
  }
  /// Throws kiln::Error unless label_smoothing is in [0, 1].
  CrossEntropyLoss init(std::source_location loc = std::source_location::current()) const {
    detail::CheckLabelSmoothing(label_smoothing, loc);
    return CrossEntropyLoss{label_smoothing, reduction};
  }
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
};

/// `HuberLossConfig().with_delta(0.5).init().forward(input, target)`.
struct HuberLoss {
  double delta = 1.0;
  Reduction reduction = Reduction::kMean;

  template <class B, int R>
  Tensor<B, 0> forward(const Tensor<B, R>& input, const Tensor<B, R>& target,
                       std::source_location loc = std::source_location::current()) const {
    return huber_loss(input, target, delta, reduction, loc);
  }
};

struct HuberLossConfig {
  HuberLossConfig with_delta(double v) const {
    HuberLossConfig c = *this;
    c.delta = v;
    return c;
  }
  HuberLossConfig with_reduction(Reduction v) const {
    HuberLossConfig c = *this;
    c.reduction = v;
    return c;
  }
  /// Throws kiln::Error unless delta is positive and finite.
  HuberLoss init(std::source_location loc = std::source_location::current()) const {
    detail::CheckHuberDelta(delta, loc);
    return HuberLoss{delta, reduction};
  }
  double delta = 1.0;
  Reduction reduction = Reduction::kMean;
};

/// Parameterless losses as modules: `MseLoss{}.forward(input, target)`.
struct MseLoss {
  Reduction reduction = Reduction::kMean;
  template <class B, int R>
  Tensor<B, 0> forward(const Tensor<B, R>& input, const Tensor<B, R>& target,
                       std::source_location loc = std::source_location::current()) const {
    return mse_loss(input, target, reduction, loc);
  }
};
struct L1Loss {
  Reduction reduction = Reduction::kMean;
  template <class B, int R>
  Tensor<B, 0> forward(const Tensor<B, R>& input, const Tensor<B, R>& target,
                       std::source_location loc = std::source_location::current()) const {
    return l1_loss(input, target, reduction, loc);
  }
};
struct BceWithLogitsLoss {
  Reduction reduction = Reduction::kMean;
  template <class B, int R>
  Tensor<B, 0> forward(const Tensor<B, R>& logits, const Tensor<B, R>& targets,
                       std::source_location loc = std::source_location::current()) const {
    return bce_with_logits(logits, targets, reduction, loc);
  }
};

}  // namespace kiln::nn
