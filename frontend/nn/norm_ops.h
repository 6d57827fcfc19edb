// Normalisation layers on type-erased handles: the non-template part of frontend/nn/norm.h.
// Compositions of reductions and elementwise primitives (no new IR ops).
#pragma once

#include <cstdint>
#include <vector>

#include "frontend/engine.h"

namespace kiln::nn::detail {

using kiln::detail::Loc;
using kiln::detail::TensorRef;

/// torch.nn.functional.batch_norm on x [N, C, ...]. `weight`, `bias` [C] may be null. Training:
/// normalises with the batch mean and biased variance over every dim but 1, and when the running
/// stats are given sets *new_mean / *new_var to (1 - momentum) * running + momentum * batch (the
/// variance unbiased, like torch). Evaluation: normalises with the running stats (required).
TensorRef BatchNormForward(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                           const TensorRef& running_mean, const TensorRef& running_var,
                           bool training, double momentum, double eps, TensorRef* new_mean,
                           TensorRef* new_var, const char* name, const Loc& loc);

/// torch.nn.functional.layer_norm over the last `normalized_dims` dims; weight/bias have those
/// dims' shape (or are null).
TensorRef LayerNormForward(const TensorRef& x, int64_t normalized_dims, const TensorRef& weight,
                           const TensorRef& bias, double eps, const char* name, const Loc& loc);

/// torch.nn.functional.group_norm: x [N, C, ...] in `groups` groups of C / groups channels;
/// weight/bias [C] or null.
TensorRef GroupNormForward(const TensorRef& x, int64_t groups, const TensorRef& weight,
                           const TensorRef& bias, double eps, const char* name, const Loc& loc);

/// torch.nn.functional.rms_norm: x / sqrt(mean(x^2 over the last dims) + eps) * weight.
TensorRef RmsNormForward(const TensorRef& x, int64_t normalized_dims, const TensorRef& weight,
                         double eps, const char* name, const Loc& loc);

/// The value of `x` cut off from gradient tracking (running statistics are state, not part of
/// the loss).
TensorRef StopGradient(const TensorRef& x, const Loc& loc);

}  // namespace kiln::nn::detail
