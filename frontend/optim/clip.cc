#include "frontend/optim/clip.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::optim::detail {

namespace kd = kiln::detail;

namespace {

/// The norm_type-norm of all elements of `x` as rank 0 (torch.norm).
TensorRef Norm(const TensorRef& x, double p, const Loc& loc) {
  const char* n = "clip_grad_norm";
  TensorRef a = kd::Unary(ir::Op::kAbs, x, loc);
  if (std::isinf(p)) return kd::Reduce(kd::Reduction::kMax, a, {}, true, false, false, loc);
  if (p == 1.0) return kd::Reduce(kd::Reduction::kSum, a, {}, true, false, false, loc);
  if (p == 2.0) {
    return kd::Unary(
        ir::Op::kSqrt,
        kd::Reduce(kd::Reduction::kSum, kd::Square(x, loc), {}, true, false, false, loc), loc);
  }
  TensorRef powered = kd::BinaryScalar(ir::Op::kPow, a, p, false, n, loc);
  return kd::BinaryScalar(ir::Op::kPow,
                          kd::Reduce(kd::Reduction::kSum, powered, {}, true, false, false, loc),
                          1.0 / p, false, n, loc);
}

}  // namespace

TensorRef ClipGradNorm(std::vector<TensorRef>& grads, double max_norm, double norm_type,
                       const TensorRef& device_of, const Loc& loc) {
  const char* n = "clip_grad_norm";
  if (!(norm_type >= 1.0)) {
    kd::ThrowOpError(n, absl::StrCat("norm_type ", norm_type, " must be >= 1 (or kInfNorm)"), {},
                     loc);
  }
  if (!(max_norm >= 0.0) || std::isinf(max_norm)) {
    kd::ThrowOpError(n, absl::StrCat("max_norm ", max_norm, " must be finite and >= 0"), {}, loc);
  }
  if (grads.empty()) {
    if (device_of == nullptr) {
      kd::ThrowOpError(n, "the module has no floating-point parameter", {}, loc);
    }
    return kd::FromTensorData(ir::TensorData(kd::TypeOf(device_of).dtype, {}),
                              kd::DeviceOf(device_of));
  }
  // As torch: the norm of the per-tensor norms.
  std::vector<TensorRef> norms;
  norms.reserve(grads.size());
  for (const TensorRef& g : grads) {
    if (!ir::IsFloat(kd::TypeOf(g).dtype)) {
      kd::ThrowOpError(n, "gradients must be floating-point", {kd::TypeOf(g)}, loc);
    }
    norms.push_back(kd::CastTo(Norm(g, norm_type, loc), kd::TypeOf(grads[0]).dtype, n, loc));
  }
  TensorRef total = norms.size() == 1 ? norms[0] : Norm(kd::Stack(norms, 0, loc), norm_type, loc);
  // clip = min(max_norm / (total + 1e-6), 1): gradients are only ever scaled down.
  TensorRef coef = kd::Clamp(
      kd::BinaryScalar(ir::Op::kDiv, kd::BinaryScalar(ir::Op::kAdd, total, 1e-6, false, n, loc),
                       max_norm, true, n, loc),
      std::nullopt, 1.0, n, loc);
  for (TensorRef& g : grads) {
    g = kd::Binary(ir::Op::kMul, g, kd::CastTo(coef, kd::TypeOf(g).dtype, n, loc), n, loc);
  }
  return total;
}

void ClipGradValue(std::vector<TensorRef>& grads, double clip_value, const Loc& loc) {
  if (!(clip_value >= 0.0)) {
    kd::ThrowOpError("clip_grad_value", absl::StrCat("clip_value ", clip_value, " must be >= 0"),
                     {}, loc);
  }
  for (TensorRef& g : grads) g = kd::Clamp(g, -clip_value, clip_value, "clip_grad_value", loc);
}

}  // namespace kiln::optim::detail
