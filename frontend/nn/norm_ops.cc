#include "frontend/nn/norm_ops.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "frontend/amp/autocast.h"
#include "frontend/autograd.h"
#include "frontend/error.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn::detail {

namespace {

using kiln::detail::Binary;
using kiln::detail::BinaryScalar;
using kiln::detail::Reduce;
using kiln::detail::Reduction;
using kiln::detail::ThrowOpError;
using kiln::detail::TypeOf;

TensorRef Mul(const TensorRef& a, const TensorRef& b, const char* name, const Loc& loc) {
  return Binary(ir::Op::kMul, a, b, name, loc);
}
TensorRef Add(const TensorRef& a, const TensorRef& b, const char* name, const Loc& loc) {
  return Binary(ir::Op::kAdd, a, b, name, loc);
}
TensorRef Sub(const TensorRef& a, const TensorRef& b, const char* name, const Loc& loc) {
  return Binary(ir::Op::kSub, a, b, name, loc);
}

/// (x - mean) * rsqrt(var + eps).
TensorRef Normalize(const TensorRef& x, const TensorRef& mean, const TensorRef& var, double eps,
                    const char* name, const Loc& loc) {
  TensorRef inv = kiln::detail::Unary(ir::Op::kRsqrt,
                                      BinaryScalar(ir::Op::kAdd, var, eps, false, name, loc), loc);
  return Mul(Sub(x, mean, name, loc), inv, name, loc);
}

/// A per-channel [C] tensor shaped to broadcast against [N, C, ...] of `rank`.
TensorRef Channel(const TensorRef& v, int64_t rank, const char* name, const Loc& loc) {
  ir::Shape shape(static_cast<size_t>(rank - 1), 1);
  shape[0] = TypeOf(v).shape[0];
  return kiln::detail::ReshapeTo(v, std::move(shape), name, loc);
}

void CheckChannelVector(const TensorRef& v, int64_t channels, const char* what,
                        const ir::TensorType& tx, const char* name, const Loc& loc) {
  if (v == nullptr) return;
  const ir::TensorType& tv = TypeOf(v);
  if (tv.rank() != 1 || tv.shape[0] != channels) {
    ThrowOpError(name, absl::StrCat(what, " must have shape [", channels, "]"), {tx, tv}, loc);
  }
}

void CheckTrailing(const TensorRef& v, const ir::TensorType& tx, int64_t dims, const char* what,
                   const char* name, const Loc& loc) {
  if (v == nullptr) return;
  const ir::TensorType& tv = TypeOf(v);
  const ir::Shape want(tx.shape.end() - dims, tx.shape.end());
  if (tv.shape != want) {
    ThrowOpError(name,
                 absl::StrCat(what, " must have the normalized shape ", ir::ShapeToString(want)),
                 {tx, tv}, loc);
  }
}

std::vector<int64_t> LastDims(int64_t rank, int64_t count) {
  std::vector<int64_t> dims;
  for (int64_t d = rank - count; d < rank; ++d) dims.push_back(d);
  return dims;
}

}  // namespace

TensorRef StopGradient(const TensorRef& x, const Loc& loc) { return kiln::detail::Detach(x, loc); }

TensorRef BatchNormForward(const TensorRef& x_in, const TensorRef& weight, const TensorRef& bias,
                           const TensorRef& running_mean, const TensorRef& running_var,
                           bool training, double momentum, double eps, TensorRef* new_mean,
                           TensorRef* new_var, const char* name, const Loc& loc) {
  const TensorRef x = kiln::detail::AutocastToF32(x_in, name, loc);
  const ir::TensorType& tx = TypeOf(x);
  if (tx.rank() < 2 || !ir::IsFloat(tx.dtype)) {
    ThrowOpError(name, "needs a float input [N, C, ...] of rank >= 2", {tx}, loc);
  }
  const int64_t channels = tx.shape[1];
  CheckChannelVector(weight, channels, "weight", tx, name, loc);
  CheckChannelVector(bias, channels, "bias", tx, name, loc);
  CheckChannelVector(running_mean, channels, "running_mean", tx, name, loc);
  CheckChannelVector(running_var, channels, "running_var", tx, name, loc);
  std::vector<int64_t> axes = {0};
  int64_t count = tx.shape[0];
  for (int64_t d = 2; d < tx.rank(); ++d) {
    axes.push_back(d);
    count *= tx.shape[static_cast<size_t>(d)];
  }
  TensorRef y;
  if (training) {
    if (count <= 1) {
      ThrowOpError(name,
                   absl::StrCat("training needs more than one value per channel (got ", count, ")"),
                   {tx}, loc);
    }
    TensorRef mean = Reduce(Reduction::kMean, x, axes, false, true, false, loc);
    TensorRef var = Reduce(Reduction::kVar, x, axes, false, true, false, loc);
    y = Normalize(x, mean, var, eps, name, loc);
    if (running_mean != nullptr && running_var != nullptr && new_mean && new_var) {
      const ir::Shape c_shape = {channels};
      TensorRef batch_mean = kiln::detail::ReshapeTo(StopGradient(mean, loc), c_shape, name, loc);
      TensorRef batch_var = kiln::detail::ReshapeTo(
          BinaryScalar(ir::Op::kMul, StopGradient(var, loc),
                       static_cast<double>(count) / static_cast<double>(count - 1), false, name,
                       loc),
          c_shape, name, loc);
      *new_mean =
          Add(BinaryScalar(ir::Op::kMul, running_mean, 1.0 - momentum, false, name, loc),
              BinaryScalar(ir::Op::kMul, batch_mean, momentum, false, name, loc), name, loc);
      *new_var = Add(BinaryScalar(ir::Op::kMul, running_var, 1.0 - momentum, false, name, loc),
                     BinaryScalar(ir::Op::kMul, batch_var, momentum, false, name, loc), name, loc);
    }
  } else {
    if (running_mean == nullptr || running_var == nullptr) {
      ThrowOpError(name, "evaluation mode needs running statistics", {tx}, loc);
    }
    y = Normalize(x, Channel(running_mean, tx.rank(), name, loc),
                  Channel(running_var, tx.rank(), name, loc), eps, name, loc);
  }
  if (weight != nullptr) y = Mul(y, Channel(weight, tx.rank(), name, loc), name, loc);
  if (bias != nullptr) y = Add(y, Channel(bias, tx.rank(), name, loc), name, loc);
  return y;
}

TensorRef LayerNormForward(const TensorRef& x_in, int64_t normalized_dims, const TensorRef& weight,
                           const TensorRef& bias, double eps, const char* name, const Loc& loc) {
  const TensorRef x = kiln::detail::AutocastToF32(x_in, name, loc);
  const ir::TensorType& tx = TypeOf(x);
  if (normalized_dims < 1 || normalized_dims > tx.rank() || !ir::IsFloat(tx.dtype)) {
    ThrowOpError(name,
                 absl::StrCat("needs a float input with at least ", normalized_dims,
                              " dims (the normalized shape's)"),
                 {tx}, loc);
  }
  CheckTrailing(weight, tx, normalized_dims, "weight", name, loc);
  CheckTrailing(bias, tx, normalized_dims, "bias", name, loc);
  const std::vector<int64_t> dims = LastDims(tx.rank(), normalized_dims);
  TensorRef mean = Reduce(Reduction::kMean, x, dims, false, true, false, loc);
  TensorRef var = Reduce(Reduction::kVar, x, dims, false, true, false, loc);
  TensorRef y = Normalize(x, mean, var, eps, name, loc);
  if (weight != nullptr) y = Mul(y, weight, name, loc);
  if (bias != nullptr) y = Add(y, bias, name, loc);
  return y;
}

TensorRef GroupNormForward(const TensorRef& x_in, int64_t groups, const TensorRef& weight,
                           const TensorRef& bias, double eps, const char* name, const Loc& loc) {
  const TensorRef x = kiln::detail::AutocastToF32(x_in, name, loc);
  const ir::TensorType& tx = TypeOf(x);
  if (tx.rank() < 2 || !ir::IsFloat(tx.dtype)) {
    ThrowOpError(name, "needs a float input [N, C, ...] of rank >= 2", {tx}, loc);
  }
  const int64_t channels = tx.shape[1];
  if (groups < 1 || channels % groups != 0) {
    ThrowOpError(name,
                 absl::StrCat("groups (", groups, ") must divide the channels (", channels, ")"),
                 {tx}, loc);
  }
  CheckChannelVector(weight, channels, "weight", tx, name, loc);
  CheckChannelVector(bias, channels, "bias", tx, name, loc);
  TensorRef grouped = kiln::detail::Reshape(x, {tx.shape[0], groups, -1}, loc);
  TensorRef mean = Reduce(Reduction::kMean, grouped, {2}, false, true, false, loc);
  TensorRef var = Reduce(Reduction::kVar, grouped, {2}, false, true, false, loc);
  TensorRef y =
      kiln::detail::ReshapeTo(Normalize(grouped, mean, var, eps, name, loc), tx.shape, name, loc);
  if (weight != nullptr) y = Mul(y, Channel(weight, tx.rank(), name, loc), name, loc);
  if (bias != nullptr) y = Add(y, Channel(bias, tx.rank(), name, loc), name, loc);
  return y;
}

TensorRef RmsNormForward(const TensorRef& x_in, int64_t normalized_dims, const TensorRef& weight,
                         double eps, const char* name, const Loc& loc) {
  const TensorRef x = kiln::detail::AutocastToF32(x_in, name, loc);
  const ir::TensorType& tx = TypeOf(x);
  if (normalized_dims < 1 || normalized_dims > tx.rank() || !ir::IsFloat(tx.dtype)) {
    ThrowOpError(name,
                 absl::StrCat("needs a float input with at least ", normalized_dims,
                              " dims (the normalized shape's)"),
                 {tx}, loc);
  }
  CheckTrailing(weight, tx, normalized_dims, "weight", name, loc);
  TensorRef ms = Reduce(Reduction::kMean, kiln::detail::Square(x, loc),
                        LastDims(tx.rank(), normalized_dims), false, true, false, loc);
  TensorRef y = Mul(x,
                    kiln::detail::Unary(ir::Op::kRsqrt,
                                        BinaryScalar(ir::Op::kAdd, ms, eps, false, name, loc), loc),
                    name, loc);
  if (weight != nullptr) y = Mul(y, weight, name, loc);
  return y;
}

}  // namespace kiln::nn::detail
